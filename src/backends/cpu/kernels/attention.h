// Causal softmax attention of a few queries over one KV head (the inner loop
// of the CPU attention providers, prefill and decode alike).
//
// Query i (nq <= kAttentionTileQueries of them, typically the heads of one
// KV group at one or two tokens) attends positions 0..last[i]:
//
//   s[p]   = scale * dot(q_i, K[p])             (the canonical dot of simd.h)
//   m      = max_f32(s), sum = exp_sub_sum_inplace(s, m)   (vec.h)
//   acc[d] = fma(s[p], V[p][d], acc[d])          in increasing p, from 0
//   out[d] = acc[d] * (1 / sum)
//
// which is, bit for bit, the per-(token, head) loop of dot_row / axpy_row
// (vec.h): a query's result does not depend on the other queries of its
// tile, the tile shape, the batch or the thread that computed it. The tile
// shares every K / V row it loads among its queries (4 x 4 score tiles, one
// V row feeds every query's accumulators).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace ferrite::cpu {

inline constexpr int kAttentionTileQueries = 4;

// Rows of a paged KV cache: position p lives in page block_table[p /
// page_size], row p % page_size; the head's elements start head_offset
// bytes into the row.
struct PagedRows {
  const char* base = nullptr;
  const int32_t* block_table = nullptr;
  int64_t page_size = 1;
  int64_t row_bytes = 0;
  int64_t head_offset = 0;
  const char* row(int64_t p) const {
    return base + (block_table[p / page_size] * page_size + p % page_size) * row_bytes + head_offset;
  }
};

// True when attention_tile handles rows of this dtype and head size (f32 /
// bf16 / f16 K and V, head_dim a multiple of 16).
bool attention_tile_supports(DType kv_dtype, int64_t head_dim);

// Scratch floats attention_tile needs for spans up to max_last + 1.
inline int64_t attention_tile_scratch_floats(int64_t max_last) {
  return kAttentionTileQueries * ((max_last + 16) / 16 * 16);
}

// k / v: the cached rows (positions 0..max last written); out[i]: head_dim
// floats.
void attention_tile(int nq, const float* const* q, const int64_t* last, float* const* out,
                    const PagedRows& k, const PagedRows& v, DType kv_dtype, int64_t head_dim,
                    float scale, float* scores);

}  // namespace ferrite::cpu
