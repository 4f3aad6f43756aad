// The row a warp holds in the fused decode kernels' first phase
// (attention_decode.cu, attention_decode_cluster.cu): of a block's ng q
// heads (the first h0) of KV head kvh, warp i < ng takes q head h0 + i,
// warp ng the token's new K row and warp ng + 1 its new V row; warps past
// them hold none. Device code (C++17; only the .cu files include it).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/attention_decode.cuh"

namespace ferrite::cuda {

struct DecodeRowRole {
  bool has_row;         // the warp holds a row
  int kind;             // 0 q, 1 k, 2 v
  const void* bias;     // the row's bias vector (null: none), bias_dt
  int64_t bias_off;     // its first element (q: the head's row of q_stride)
  const void* norm_w;   // the RMS norm weights (q / k with qk_norm; else unused), norm_dt
  bool norm, rope;      // RMS norm (q, k with qk_norm); RoPE (q, k with a rotary part)
};

__device__ __forceinline__ DecodeRowRole decode_row_role(const AttentionShape& a,
                                                         const DecodeWeights& w, int warp, int ng,
                                                         int h0, int kvh, int head_dim) {
  DecodeRowRole r;
  r.has_row = warp < ng + 2;
  r.kind = warp < ng ? 0 : warp - ng + 1;
  r.bias = r.kind == 0 ? w.q_bias : r.kind == 1 ? w.k_bias : w.v_bias;
  r.bias_off = r.kind == 0 ? static_cast<int64_t>(h0 + warp) * a.q_stride
                           : static_cast<int64_t>(kvh) * head_dim;
  r.norm_w = r.kind == 0 ? w.q_norm : w.k_norm;
  r.norm = r.kind < 2 && a.qk_norm;
  r.rope = r.kind < 2 && a.rope_dim / 2 > 0;  // a rotated pair at least
  return r;
}

}  // namespace ferrite::cuda
