// rms_norm 1.0: y = x * rsqrt(mean(x^2) + eps) * w, or * (1 + w) when
// zero_centred (Qwen3-Next / Qwen3.5). Computed in f32 whatever the
// activation dtype.
//   x      [tokens, hidden_size] activation
//   weight [hidden_size] weight
//   out    [tokens, hidden_size] activation, may alias x
#pragma once

#include "contracts/contract.h"

namespace ferrite::rms_norm {

enum Binding { kX, kWeight, kOut };

struct Params {
  uint64_t hidden_size;
  double eps;
  bool zero_centred;
  static Params from(const Attributes& a) {
    return {a.u("hidden_size"), a.f("eps"), a.b("zero_centred")};
  }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "rms_norm", 1, 0,
      {{"hidden_size", AttrType::kUnsigned},
       {"eps", AttrType::kFloat},
       {"zero_centred", AttrType::kBool, false}},
      {{"x", BindingKind::kActivation, Access::kRead, {"tokens", "hidden_size"}},
       {"weight", BindingKind::kWeight, Access::kRead, {"hidden_size"}},
       {"out", BindingKind::kActivation, Access::kWrite, {"tokens", "hidden_size"}, false, 0}},
      OracleSpec{.abs_tol = 1e-5, .rel_tol = 1e-5}, "Root-mean-square normalisation.").with_params<Params>();
  return s;
}

}  // namespace ferrite::rms_norm
