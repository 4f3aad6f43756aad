// last_token_masked_argmax 1.2: greedy choice per sequence.
//   logits     [sequences, vocab_size] f32, read only: never modified
//   valid_mask [vocab_size] u8, optional: ids with 0 are never chosen
//   tokens     [sequences] u32 out
//   allowed    [sequences, vocab_words] u32, optional (1.1): per-sequence
//              allowed-id bitmap (vocab_words = ceil(vocab_size / 32)): id i
//              of sequence s may be chosen only when bit i % 32 of
//              allowed[s, i / 32] is set (TokenConstraint::fill_mask);
//              combined with valid_mask (both must allow an id). A row
//              with no allowed id chooses 0.
//   logprobs     [sequences] f32 out, optional (1.2): log-probability of the
//                chosen id under the model's distribution (raw logits, no
//                penalty, mask or temperature): l[id] - lse, with
//                lse = max + (float) log(sum_i exp((double) (l[i] - max))).
//   top_ids      [sequences, top_n] u32 out, optional (1.2): the top_n ids of
//   top_logprobs [sequences, top_n] f32 out   the raw logits (value
//                descending, id ascending) and their log-probabilities
//                (l[id] - lse); top_n <= 20 (binding width).
// SamplingBatch::logprobs, when not empty, says per row how many top entries
// it needs (-1: none, and no logprob): providers may leave the logprob
// outputs of such rows and the entries past a row's count unwritten.
// Per sequence (SamplingBatch): repetition_penalty r and the ids seen so far;
// a seen id's logit l is judged as l / r when l > 0 and l * r otherwise
// (Hugging Face's RepetitionPenaltyLogitsProcessor). Ties go to the lowest id.
#pragma once

#include "contracts/contract.h"

namespace ferrite::last_token_masked_argmax {

enum Binding { kLogits, kValidMask, kTokens, kAllowed, kLogprobs, kTopIds, kTopLogprobs };

inline constexpr int64_t kMaxTopLogprobs = 20;

struct Params {
  uint64_t vocab_size;
  static Params from(const Attributes& a) { return {a.u("vocab_size")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "last_token_masked_argmax", 1, 2, {{"vocab_size", AttrType::kUnsigned}},
      {{"logits", BindingKind::kActivation, Access::kRead, {"sequences", "vocab_size"}},
       {"valid_mask", BindingKind::kWeight, Access::kRead, {"vocab_size"}, true},
       {"tokens", BindingKind::kActivation, Access::kWrite, {"sequences"}},
       {"allowed", BindingKind::kActivation, Access::kRead, {"sequences", "vocab_words"}, true},
       {"logprobs", BindingKind::kActivation, Access::kWrite, {"sequences"}, true},
       {"top_ids", BindingKind::kActivation, Access::kWrite, {"sequences", "top_n"}, true},
       {"top_logprobs", BindingKind::kActivation, Access::kWrite, {"sequences", "top_n"}, true}},
      OracleSpec{.exact = true}, "Masked argmax with repetition penalty.").with_params<Params>();
  return s;
}

}  // namespace ferrite::last_token_masked_argmax
