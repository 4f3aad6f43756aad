// gated_delta_recurrent_attention 1.2: the Gated DeltaNet linear-attention
// block (Qwen3-Next / Qwen3.5) with its pre-norm and its residual add, over
// per-sequence recurrent state (a conv state and a delta-rule state).
//
//   n = rms_norm(hidden, input_norm)              (zero_centred: 1 + w)
//   x = n Wqkv^T: [Q (Hk dk) | K (Hk dk) | V (Hv dv)], conv_dim channels
//   z = n Wz^T [Hv dv], b = n Wb^T [Hv], a = n Wa^T [Hv]
//   c[ch, t] = silu(sum_{j<K} conv[ch, j] * x[ch, t-K+1+j]), where inputs
//     before the sequence's first position are zero and earlier steps' inputs
//     come from the conv state (the last K-1 inputs of every channel);
//   per value head h (key head h / (Hv/Hk); with tiled_value_heads, h % Hk), in f32:
//     beta = sigmoid(b_h), g = -exp(A_log_h) * softplus(a_h + dt_bias_h)
//     q = q * rsqrt(sum q^2 + 1e-6) / sqrt(dk),  k = k * rsqrt(sum k^2 + 1e-6)
//     S = exp(g) S; d = beta (v - S^T k); S = S + k d^T; o = S^T q
//   y_h = norm * o * rsqrt(mean(o^2) + eps) * silu(z_h)   (gated norm, no +1)
//   hidden += y Wout^T
//
// The weights are in the separate layout of Qwen3.5 (in_proj_qkv, in_proj_z,
// in_proj_b, in_proj_a); Qwen3-Next's grouped in_proj_qkvz / in_proj_ba are
// regrouped into it by the loader's weight materializer (models/qwen3_next.cc).
// Value heads are numbered grouped by key head (Hugging Face: head g r + i
// belongs to key head g) or, with tiled_value_heads (1.1; llama.cpp's
// Qwen3.5 GGUF files store them so), tiled (head i Hk + g belongs to key head
// g); every per-value-head tensor (V rows and channels, z, b, a, A_log,
// dt_bias, out_proj columns, the delta state) uses that one numbering.
//
// Bindings:
//   hidden      [tokens, hidden_size] activation, read-write
//   input_norm  [hidden_size]
//   in_proj_qkv [conv_dim, hidden_size], conv_dim = 2 Hk dk + Hv dv
//   in_proj_z   [Hv dv, hidden_size]
//   in_proj_b   [Hv, hidden_size]
//   in_proj_a   [Hv, hidden_size]
//   conv_weight [conv_dim, conv_kernel]
//   a_log       [Hv]
//   dt_bias     [Hv]
//   norm        [dv] (the gated norm's weight)
//   out_proj    [hidden_size, Hv dv]
//   conv_state  [slots, conv_kernel - 1, conv_dim] state, f32, read-write: row
//               j holds the input at position (next - (K-1) + j)
//   delta_state [slots, Hv, dk, dv] state, f32, read-write
//   partial_out [tokens, hidden_size] activation, write, optional (1.2): when
//     bound (tensor-parallel ranks, runtime/tensor_parallel.h), hidden is only
//     read and the block's contribution (what it would add to hidden) is
//     written here instead; the plan's tp_all_reduce_sum + residual_add nodes
//     then add the ranks' sum to hidden.
// A sequence's slot must be zeroed before its first token (position 0).
#pragma once

#include "contracts/contract.h"

namespace ferrite::gated_delta_recurrent_attention {

enum Binding {
  kHidden,
  kInputNorm,
  kInProjQkv,
  kInProjZ,
  kInProjB,
  kInProjA,
  kConvWeight,
  kALog,
  kDtBias,
  kNorm,
  kOutProj,
  kConvState,
  kDeltaState,
  kPartialOut
};

struct Params {
  uint64_t hidden_size, num_k_heads, num_v_heads, k_head_dim, v_head_dim, conv_kernel;
  double eps;
  bool zero_centred;
  bool tiled_value_heads;
  uint64_t key_head_of(uint64_t v_head) const {
    return tiled_value_heads ? v_head % num_k_heads : v_head / (num_v_heads / num_k_heads);
  }
  uint64_t key_dim() const { return num_k_heads * k_head_dim; }
  uint64_t value_dim() const { return num_v_heads * v_head_dim; }
  uint64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  static Params from(const Attributes& a) {
    return {a.u("hidden_size"), a.u("num_k_heads"), a.u("num_v_heads"), a.u("k_head_dim"),
            a.u("v_head_dim"),  a.u("conv_kernel"), a.f("eps"),         a.b("zero_centred"),
            a.b("tiled_value_heads")};
  }
};

inline const ContractSchema& contract() {
  using K = BindingKind;
  using A = Access;
  static const ContractSchema s = ContractSchema(
      "gated_delta_recurrent_attention", 1, 2,
      {{"hidden_size", AttrType::kUnsigned},
       {"num_k_heads", AttrType::kUnsigned},
       {"num_v_heads", AttrType::kUnsigned},
       {"k_head_dim", AttrType::kUnsigned},
       {"v_head_dim", AttrType::kUnsigned},
       {"conv_kernel", AttrType::kUnsigned},
       {"eps", AttrType::kFloat},
       {"zero_centred", AttrType::kBool, false},
       {"tiled_value_heads", AttrType::kBool, false}},
      {{"hidden", K::kActivation, A::kReadWrite, {"tokens", "hidden_size"}},
       {"input_norm", K::kWeight, A::kRead, {"hidden_size"}},
       {"in_proj_qkv", K::kWeight, A::kRead, {"conv_dim", "hidden_size"}},
       {"in_proj_z", K::kWeight, A::kRead, {"value_dim", "hidden_size"}},
       {"in_proj_b", K::kWeight, A::kRead, {"num_v_heads", "hidden_size"}},
       {"in_proj_a", K::kWeight, A::kRead, {"num_v_heads", "hidden_size"}},
       {"conv_weight", K::kWeight, A::kRead, {"conv_dim", "conv_kernel"}},
       {"a_log", K::kWeight, A::kRead, {"num_v_heads"}},
       {"dt_bias", K::kWeight, A::kRead, {"num_v_heads"}},
       {"norm", K::kWeight, A::kRead, {"v_head_dim"}},
       {"out_proj", K::kWeight, A::kRead, {"hidden_size", "value_dim"}},
       {"conv_state", K::kState, A::kReadWrite, {"slots", "conv_kernel-1", "conv_dim"}},
       {"delta_state",
        K::kState,
        A::kReadWrite,
        {"slots", "num_v_heads", "k_head_dim", "v_head_dim"}},
       {"partial_out", K::kActivation, A::kWrite, {"tokens", "hidden_size"}, true}},
      OracleSpec{.abs_tol = 5e-4, .rel_tol = 5e-4},
      "Pre-norm Gated DeltaNet (conv + gated delta rule + gated norm) with residual add.").with_params<Params>();
  return s;
}

}  // namespace ferrite::gated_delta_recurrent_attention
