// last_token_masked_argmax 1.0: greedy choice per sequence.
//   logits     [sequences, vocab_size] f32, read only: never modified
//   valid_mask [vocab_size] u8, optional: ids with 0 are never chosen
//   tokens     [sequences] u32 out
// Per sequence (SamplingBatch): repetition_penalty r and the ids seen so far;
// a seen id's logit l is judged as l / r when l > 0 and l * r otherwise
// (Hugging Face's RepetitionPenaltyLogitsProcessor). Ties go to the lowest id.
#pragma once

#include "contracts/contract.h"

namespace ferrite::last_token_masked_argmax {

enum Binding { kLogits, kValidMask, kTokens };

struct Params {
  uint64_t vocab_size;
  static Params from(const Attributes& a) { return {a.u("vocab_size")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s(
      "last_token_masked_argmax", 1, 0, {{"vocab_size", AttrType::kUnsigned}},
      {{"logits", BindingKind::kActivation, Access::kRead, {"sequences", "vocab_size"}},
       {"valid_mask", BindingKind::kWeight, Access::kRead, {"vocab_size"}, true},
       {"tokens", BindingKind::kActivation, Access::kWrite, {"sequences"}}},
      OracleSpec{.exact = true}, "Masked argmax with repetition penalty.");
  return s;
}

}  // namespace ferrite::last_token_masked_argmax
