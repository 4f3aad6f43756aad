// routed_shared_swiglu_moe 1.1: routed_swiglu_moe plus a shared expert gated
// per token by a sigmoid (Qwen3-Next, Qwen3.5-MoE):
//
//   hidden += routed(n) + sigmoid(n . w_sg) * shared_down(silu(shared_gate n) * shared_up n)
//
// (routed(n) as routed_swiglu_moe; the two are summed before the residual add).
//
// Bindings: those of routed_swiglu_moe, then
//   shared_gate_weight [1, hidden_size]
//   shared_gate        [shared_intermediate_size, hidden_size]
//   shared_up          [shared_intermediate_size, hidden_size]
//   shared_down        [hidden_size, shared_intermediate_size]
//   partial_out        as routed_swiglu_moe 1.1 (optional)
#pragma once

#include "contracts/routed_swiglu_moe.h"

namespace ferrite::routed_shared_swiglu_moe {

using routed_swiglu_moe::Params;
enum Binding {
  kSharedExpertGate = routed_swiglu_moe::kDown + 1,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kPartialOut
};

inline const ContractSchema& contract() {
  using K = BindingKind;
  using A = Access;
  static const ContractSchema s = [] {
    std::vector<AttrSpec> attrs = routed_swiglu_moe::attr_specs();
    attrs.push_back({"shared_intermediate_size", AttrType::kUnsigned});
    std::vector<BindingSpec> b = routed_swiglu_moe::binding_specs();
    b.push_back({"shared_gate_weight", K::kWeight, A::kRead, {"1", "hidden_size"}});
    b.push_back({"shared_gate", K::kWeight, A::kRead, {"shared_intermediate_size", "hidden_size"}});
    b.push_back({"shared_up", K::kWeight, A::kRead, {"shared_intermediate_size", "hidden_size"}});
    b.push_back({"shared_down", K::kWeight, A::kRead, {"hidden_size", "shared_intermediate_size"}});
    b.push_back(routed_swiglu_moe::partial_out_spec());
    return ContractSchema("routed_shared_swiglu_moe", 1, 1, std::move(attrs), std::move(b),
                          OracleSpec{.abs_tol = 3e-4, .rel_tol = 3e-4},
                          "Pre-norm routed SwiGLU experts plus a sigmoid-gated shared expert, "
                          "with residual add.")
        .with_params<Params>();
  }();
  return s;
}

}  // namespace ferrite::routed_shared_swiglu_moe
