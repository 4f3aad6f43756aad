// routed_swiglu_moe 1.1: the sparse MoE block (Qwen3-MoE) with its pre-norm
// and its residual add.
//
//   n = rms_norm(hidden, norm)                     (zero_centred: 1 + w)
//   p = softmax(n Wr^T) over all experts, in f32
//   top_k experts by p (ties: the lower expert id); normalize_topk: p /= sum
//   hidden += sum_{e in top_k, increasing e} p_e * down_e(silu(gate_e n) * up_e n)
//
// Bindings:
//   hidden  [tokens, hidden_size] activation, read-write
//   norm    [hidden_size]
//   router  [num_experts, hidden_size]
//   gate_up [num_experts, 2, intermediate_size, hidden_size] (gate first)
//   down    [num_experts, hidden_size, intermediate_size]
//   partial_out [tokens, hidden_size] activation, write, optional (1.1): when
//     bound (tensor-parallel ranks, runtime/tensor_parallel.h), hidden is only
//     read and the block's contribution (what it would add to hidden) is
//     written here instead; the plan's tp_all_reduce_sum + residual_add nodes
//     then add the ranks' sum to hidden.
//     (routed_shared_swiglu_moe: the last binding, after the shared expert's)
#pragma once

#include "contracts/contract.h"

namespace ferrite::routed_swiglu_moe {

enum Binding { kHidden, kNorm, kRouter, kGateUp, kDown, kPartialOut };

struct Params {
  uint64_t hidden_size, num_experts, top_k, intermediate_size;
  bool normalize_topk;
  double eps;
  bool zero_centred;
  uint64_t shared_intermediate_size;  // routed_shared_swiglu_moe only
  static Params from(const Attributes& a) {
    return {a.u("hidden_size"),    a.u("num_experts"),
            a.u("top_k"),          a.u("intermediate_size"),
            a.b("normalize_topk"), a.f("eps"),
            a.b("zero_centred"),   a.u("shared_intermediate_size")};
  }
};

inline std::vector<AttrSpec> attr_specs() {
  return {{"hidden_size", AttrType::kUnsigned},
          {"num_experts", AttrType::kUnsigned},
          {"top_k", AttrType::kUnsigned},
          {"intermediate_size", AttrType::kUnsigned},
          {"normalize_topk", AttrType::kBool, false},
          {"eps", AttrType::kFloat},
          {"zero_centred", AttrType::kBool, false}};
}

// The bindings both MoE contracts share (partial_out comes last: partial_out_spec()).
inline std::vector<BindingSpec> binding_specs() {
  using K = BindingKind;
  using A = Access;
  return {
      {"hidden", K::kActivation, A::kReadWrite, {"tokens", "hidden_size"}},
      {"norm", K::kWeight, A::kRead, {"hidden_size"}},
      {"router", K::kWeight, A::kRead, {"num_experts", "hidden_size"}},
      {"gate_up", K::kWeight, A::kRead, {"num_experts", "2", "intermediate_size", "hidden_size"}},
      {"down", K::kWeight, A::kRead, {"num_experts", "hidden_size", "intermediate_size"}}};
}

inline BindingSpec partial_out_spec() {
  return {"partial_out", BindingKind::kActivation, Access::kWrite, {"tokens", "hidden_size"}, true};
}

inline std::vector<BindingSpec> routed_binding_specs() {
  std::vector<BindingSpec> b = binding_specs();
  b.push_back(partial_out_spec());
  return b;
}

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema("routed_swiglu_moe", 1, 1, attr_specs(), routed_binding_specs(),
                                OracleSpec{.abs_tol = 3e-4, .rel_tol = 3e-4},
                                "Pre-norm top-k routed SwiGLU experts with residual add.").with_params<Params>();
  return s;
}

}  // namespace ferrite::routed_swiglu_moe
