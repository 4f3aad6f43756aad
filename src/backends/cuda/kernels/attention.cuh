// Attention over the paged KV cache: qk_rope_kv, split-KV decode, combine.
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

struct AttentionShape {
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0, rope_dim = 0;
  int32_t q_stride = 0;  // elements between heads in a q row (head_dim, or 2*head_dim with a gate)
  int32_t q_row = 0;     // elements per token of q (num_heads * q_stride)
  bool qk_norm = false, zero_centred = false, output_gate = false;
  float eps = 1e-6f;
  float scale = 1.0f;
  float inv_freq[128] = {};  // rope_dim / 2 entries
};

// Per token: bias, q/k rms norm over head_dim, RoPE on q and k, K/V written
// to the paged cache at the token's slot; q is updated in place.
// token_warps (Tuning::cuda_rope_token_warps): a warp per token over all its
// heads instead of a warp per (token, head), where the shape allows.
Status launch_qk_rope_kv(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                         int32_t page_size, int64_t tokens, void* q, void* k, void* v, DType act, const void* q_norm,
                         const void* k_norm, DType norm_dt, const void* q_bias,
                         const void* k_bias, const void* v_bias, DType bias_dt, void* k_cache,
                         void* v_cache, bool token_warps = false);
// Attention of every token over its sequence's cached positions <= its own,
// split over `splits` KV ranges (combined through `partials`, f32,
// tokens * num_heads * splits * (head_dim + 2) floats when splits > 1).
// out [tokens, num_heads * head_dim] of act.
Status launch_attention_decode(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                               int32_t page_size, int64_t tokens, const void* q, DType act, const void* k_cache,
                               const void* v_cache, void* out, int splits, float* partials);
// Merges the split-KV partials of launch_attention_decode(_fused) into out
// (and applies the output gate, read from q).
Status launch_attention_combine(cudaStream_t s, const AttentionShape& a, int64_t tokens,
                                const void* q, DType act, void* out, int splits,
                                const float* partials);

}  // namespace ferrite::cuda
