// last_token_dense_linear 1.0: logits of each sequence's last token in the step.
//   hidden  [tokens, hidden_size] activation (already final-normed)
//   lm_head [vocab_size, hidden_size] weight (the embedding when tied)
//   logits  [sequences, vocab_size] activation, f32 always: row s is
//           lm_head * hidden[token_begin(s) + token_count(s) - 1]
#pragma once

#include "contracts/contract.h"

namespace ferrite::last_token_dense_linear {

enum Binding { kHidden, kLmHead, kLogits };

struct Params {
  uint64_t hidden_size, vocab_size;
  static Params from(const Attributes& a) { return {a.u("hidden_size"), a.u("vocab_size")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "last_token_dense_linear", 1, 0,
      {{"hidden_size", AttrType::kUnsigned}, {"vocab_size", AttrType::kUnsigned}},
      {{"hidden", BindingKind::kActivation, Access::kRead, {"tokens", "hidden_size"}},
       {"lm_head", BindingKind::kWeight, Access::kRead, {"vocab_size", "hidden_size"}},
       {"logits", BindingKind::kActivation, Access::kWrite, {"sequences", "vocab_size"}}},
      OracleSpec{.abs_tol = 1e-4, .rel_tol = 1e-4}, "LM head on the last token of each sequence.").with_params<Params>();
  return s;
}

}  // namespace ferrite::last_token_dense_linear
