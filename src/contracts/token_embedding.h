// token_embedding 1.0: out[t] = table[ids[t]] (converted to the activation dtype).
//   ids   [tokens] u32 (every id < vocab_size; checked by the engine at admission)
//   table [vocab_size, hidden_size] weight
//   out   [tokens, hidden_size] activation
#pragma once

#include "contracts/contract.h"

namespace ferrite::token_embedding {

enum Binding { kIds, kTable, kOut };

struct Params {
  uint64_t vocab_size, hidden_size;
  static Params from(const Attributes& a) { return {a.u("vocab_size"), a.u("hidden_size")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "token_embedding", 1, 0,
      {{"vocab_size", AttrType::kUnsigned}, {"hidden_size", AttrType::kUnsigned}},
      {{"ids", BindingKind::kActivation, Access::kRead, {"tokens"}},
       {"table", BindingKind::kWeight, Access::kRead, {"vocab_size", "hidden_size"}},
       {"out", BindingKind::kActivation, Access::kWrite, {"tokens", "hidden_size"}}},
      OracleSpec{.exact = true}, "Row gather from the embedding table.").with_params<Params>();
  return s;
}

}  // namespace ferrite::token_embedding
