// last_token_masked_argmax 1.1: greedy choice per sequence.
//   logits     [sequences, vocab_size] f32, read only: never modified
//   valid_mask [vocab_size] u8, optional: ids with 0 are never chosen
//   tokens     [sequences] u32 out
//   allowed    [sequences, vocab_words] u32, optional (1.1): per-sequence
//              allowed-id bitmap (vocab_words = ceil(vocab_size / 32)): id i
//              of sequence s may be chosen only when bit i % 32 of
//              allowed[s, i / 32] is set (TokenConstraint::fill_mask);
//              combined with valid_mask (both must allow an id). A row
//              with no allowed id chooses 0.
// Per sequence (SamplingBatch): repetition_penalty r and the ids seen so far;
// a seen id's logit l is judged as l / r when l > 0 and l * r otherwise
// (Hugging Face's RepetitionPenaltyLogitsProcessor). Ties go to the lowest id.
#pragma once

#include "contracts/contract.h"

namespace ferrite::last_token_masked_argmax {

enum Binding { kLogits, kValidMask, kTokens, kAllowed };

struct Params {
  uint64_t vocab_size;
  static Params from(const Attributes& a) { return {a.u("vocab_size")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s(
      "last_token_masked_argmax", 1, 1, {{"vocab_size", AttrType::kUnsigned}},
      {{"logits", BindingKind::kActivation, Access::kRead, {"sequences", "vocab_size"}},
       {"valid_mask", BindingKind::kWeight, Access::kRead, {"vocab_size"}, true},
       {"tokens", BindingKind::kActivation, Access::kWrite, {"sequences"}},
       {"allowed", BindingKind::kActivation, Access::kRead, {"sequences", "vocab_words"}, true}},
      OracleSpec{.exact = true}, "Masked argmax with repetition penalty.");
  return s;
}

}  // namespace ferrite::last_token_masked_argmax
