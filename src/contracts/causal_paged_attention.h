// causal_paged_attention 1.1: the attention block with its pre-norm and its
// residual add, over a paged KV cache.
//
//   n = rms_norm(hidden, input_norm)
//   q = n Wq^T, k = n Wk^T, v = n Wv^T           (+ bias when attention_bias)
//   output_gate: Wq gives [heads, 2*head_dim] per token: the first head_dim
//                are the query, the next head_dim the gate (Qwen3-Next).
//   qk_norm:     q, k = rms_norm over head_dim with q_norm / k_norm (Qwen3).
//   RoPE (NeoX rotate-half) on the first rope_dim dims of each head, with
//   inv_freq[i] = rope_theta^(-2i/rope_dim), optionally rescaled (llama3).
//   k, v are written to the sequence's pages at its positions; then
//   o = softmax(q k^T * head_dim^-0.5 + causal mask) v over every cached
//   position <= the token's own; KV head of query head h is h / (heads/kv_heads).
//   output_gate: o *= sigmoid(gate).
//   hidden += o Wo^T
//
// Bindings:
//   hidden      [tokens, hidden_size] activation, read-write
//   input_norm  [hidden_size] weight
//   q_proj      [num_heads * head_dim * (output_gate ? 2 : 1), hidden_size]
//   k_proj      [num_kv_heads * head_dim, hidden_size]
//   v_proj      [num_kv_heads * head_dim, hidden_size]
//   o_proj      [hidden_size, num_heads * head_dim]
//   q_norm, k_norm [head_dim] (qk_norm only)
//   q_bias, k_bias, v_bias (attention_bias only)
//   k_cache, v_cache [pages, page_size, num_kv_heads, head_dim] state, read-write;
//     a sequence's logical position p lives in page block_table[p / page_size],
//     row p % page_size.
//   partial_out [tokens, hidden_size] activation, write, optional (1.1): when
//     bound (tensor-parallel ranks, runtime/tensor_parallel.h), hidden is only
//     read and the block's contribution (what it would add to hidden) is
//     written here instead; the plan's tp_all_reduce_sum + residual_add nodes
//     then add the ranks' sum to hidden.
#pragma once

#include "contracts/contract.h"

namespace ferrite::causal_paged_attention {

enum Binding {
  kHidden,
  kInputNorm,
  kQProj,
  kKProj,
  kVProj,
  kOProj,
  kQNorm,
  kKNorm,
  kQBias,
  kKBias,
  kVBias,
  kKCache,
  kVCache,
  kPartialOut
};

struct Params {
  uint64_t hidden_size, num_heads, num_kv_heads, head_dim, rope_dim;
  double rope_theta;
  std::string rope_scaling;  // "none" | "llama3" | "linear"
  double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  uint64_t rope_original_max_positions;
  bool qk_norm, output_gate, zero_centred, attention_bias;
  double eps;
  uint64_t max_context;

  static Params from(const Attributes& a) {
    Params p;
    p.hidden_size = a.u("hidden_size");
    p.num_heads = a.u("num_heads");
    p.num_kv_heads = a.u("num_kv_heads");
    p.head_dim = a.u("head_dim");
    p.rope_dim = a.u("rope_dim");
    p.rope_theta = a.f("rope_theta");
    p.rope_scaling = a.has("rope_scaling") ? a.e("rope_scaling") : "none";
    p.rope_factor = a.f("rope_factor");
    p.rope_low_freq_factor = a.f("rope_low_freq_factor");
    p.rope_high_freq_factor = a.f("rope_high_freq_factor");
    p.rope_original_max_positions = a.u("rope_original_max_positions");
    p.qk_norm = a.b("qk_norm");
    p.output_gate = a.b("output_gate");
    p.zero_centred = a.b("zero_centred");
    p.attention_bias = a.b("attention_bias");
    p.eps = a.f("eps");
    p.max_context = a.u("max_context");
    return p;
  }
};

inline const ContractSchema& contract() {
  using K = BindingKind;
  using A = Access;
  static const ContractSchema s = ContractSchema(
      "causal_paged_attention", 1, 1,
      {{"hidden_size", AttrType::kUnsigned},
       {"num_heads", AttrType::kUnsigned},
       {"num_kv_heads", AttrType::kUnsigned},
       {"head_dim", AttrType::kUnsigned},
       {"rope_dim", AttrType::kUnsigned},
       {"rope_theta", AttrType::kFloat},
       {"rope_scaling", AttrType::kEnum, false, {"none", "llama3", "linear"}},
       {"rope_factor", AttrType::kFloat, false},
       {"rope_low_freq_factor", AttrType::kFloat, false},
       {"rope_high_freq_factor", AttrType::kFloat, false},
       {"rope_original_max_positions", AttrType::kUnsigned, false},
       {"qk_norm", AttrType::kBool, false},
       {"output_gate", AttrType::kBool, false},
       {"zero_centred", AttrType::kBool, false},
       {"attention_bias", AttrType::kBool, false},
       {"eps", AttrType::kFloat},
       {"max_context", AttrType::kUnsigned}},
      {{"hidden", K::kActivation, A::kReadWrite, {"tokens", "hidden_size"}},
       {"input_norm", K::kWeight, A::kRead, {"hidden_size"}},
       {"q_proj", K::kWeight, A::kRead, {"q_rows", "hidden_size"}},
       {"k_proj", K::kWeight, A::kRead, {"kv_rows", "hidden_size"}},
       {"v_proj", K::kWeight, A::kRead, {"kv_rows", "hidden_size"}},
       {"o_proj", K::kWeight, A::kRead, {"hidden_size", "q_width"}},
       {"q_norm", K::kWeight, A::kRead, {"head_dim"}, true},
       {"k_norm", K::kWeight, A::kRead, {"head_dim"}, true},
       {"q_bias", K::kWeight, A::kRead, {"q_rows"}, true},
       {"k_bias", K::kWeight, A::kRead, {"kv_rows"}, true},
       {"v_bias", K::kWeight, A::kRead, {"kv_rows"}, true},
       {"k_cache", K::kState, A::kReadWrite, {"pages", "page_size", "num_kv_heads", "head_dim"}},
       {"v_cache", K::kState, A::kReadWrite, {"pages", "page_size", "num_kv_heads", "head_dim"}},
       {"partial_out", K::kActivation, A::kWrite, {"tokens", "hidden_size"}, true}},
      OracleSpec{.abs_tol = 3e-4, .rel_tol = 3e-4},
      "Pre-norm causal self-attention over paged KV, with RoPE and residual add.").with_params<Params>();
  return s;
}

}  // namespace ferrite::causal_paged_attention
