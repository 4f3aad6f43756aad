// residual_add 1.0: out = a + b.
//   a, b [tokens, hidden_size] activations; out may alias a.
#pragma once

#include "contracts/contract.h"

namespace ferrite::residual_add {

enum Binding { kA, kB, kOut };

struct Params {
  uint64_t hidden_size;
  static Params from(const Attributes& a) { return {a.u("hidden_size")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "residual_add", 1, 0, {{"hidden_size", AttrType::kUnsigned}},
      {{"a", BindingKind::kActivation, Access::kRead, {"tokens", "hidden_size"}},
       {"b", BindingKind::kActivation, Access::kRead, {"tokens", "hidden_size"}},
       {"out", BindingKind::kActivation, Access::kWrite, {"tokens", "hidden_size"}, false, 0}},
      OracleSpec{.abs_tol = 1e-6, .rel_tol = 1e-6}, "Element-wise sum.").with_params<Params>();
  return s;
}

}  // namespace ferrite::residual_add
