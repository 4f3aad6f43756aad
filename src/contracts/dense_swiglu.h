// dense_swiglu 1.1: the MLP block with its pre-norm and its residual add:
//   n = rms_norm(hidden, norm); hidden += down(silu(gate n) * up n)
//   hidden [tokens, hidden_size] activation, read-write
//   norm   [hidden_size] weight (zero_centred: used as 1 + w)
//   gate   [intermediate_size, hidden_size] weight
//   up     [intermediate_size, hidden_size] weight
//   down   [hidden_size, intermediate_size] weight
//   partial_out [tokens, hidden_size] activation, write, optional (1.1): when
//     bound (tensor-parallel ranks, runtime/tensor_parallel.h), hidden is only
//     read and the block's contribution (what it would add to hidden) is
//     written here instead; the plan's tp_all_reduce_sum + residual_add nodes
//     then add the ranks' sum to hidden.
#pragma once

#include "contracts/contract.h"

namespace ferrite::dense_swiglu {

enum Binding { kHidden, kNorm, kGate, kUp, kDown, kPartialOut };

struct Params {
  uint64_t hidden_size, intermediate_size;
  double eps;
  bool zero_centred;
  static Params from(const Attributes& a) {
    return {a.u("hidden_size"), a.u("intermediate_size"), a.f("eps"), a.b("zero_centred")};
  }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "dense_swiglu", 1, 1,
      {{"hidden_size", AttrType::kUnsigned},
       {"intermediate_size", AttrType::kUnsigned},
       {"eps", AttrType::kFloat},
       {"zero_centred", AttrType::kBool, false}},
      {{"hidden", BindingKind::kActivation, Access::kReadWrite, {"tokens", "hidden_size"}},
       {"norm", BindingKind::kWeight, Access::kRead, {"hidden_size"}},
       {"gate", BindingKind::kWeight, Access::kRead, {"intermediate_size", "hidden_size"}},
       {"up", BindingKind::kWeight, Access::kRead, {"intermediate_size", "hidden_size"}},
       {"down", BindingKind::kWeight, Access::kRead, {"hidden_size", "intermediate_size"}},
       {"partial_out", BindingKind::kActivation, Access::kWrite, {"tokens", "hidden_size"},
        true}},
      OracleSpec{.abs_tol = 2e-4, .rel_tol = 2e-4}, "Pre-norm SwiGLU MLP with residual add.").with_params<Params>();
  return s;
}

}  // namespace ferrite::dense_swiglu
