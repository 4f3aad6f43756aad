// Host-side launchers of the CUDA kernels (defined in kernels_*.cu). Element
// types are passed as DType and dispatched inside; activations and KV are
// f32, bf16 or f16; weights f32, bf16 or f16. Every launcher records on
// `stream` and returns the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// --- kernels_elementwise.cu -------------------------------------------------
// out[t] = table[min(ids[t], vocab-1)] for t < tokens.
Status launch_embedding(cudaStream_t s, const uint32_t* ids, int64_t tokens, const void* table,
                        DType table_dt, int64_t vocab, int64_t hidden, void* out, DType out_dt);
// y = rms_norm(x) * (w or 1 + w); x, y of `act`; may alias.
Status launch_rms_norm(cudaStream_t s, const void* x, void* y, DType act, const void* w,
                       DType w_dt, int64_t rows, int64_t width, float eps, bool zero_centred);
// out = a + b, n elements.
Status launch_add(cudaStream_t s, const void* a, const void* b, void* out, DType act, int64_t n);
// out = silu(gate) * up, n elements (out may alias gate).
Status launch_silu_mul(cudaStream_t s, const void* gate, const void* up, void* out, DType act,
                       int64_t n);
// dst[s] = src[rows[s]] (rows from device memory), width elements each.
Status launch_gather_rows(cudaStream_t s, const void* src, const int32_t* rows, void* dst,
                          DType act, int64_t count, int64_t width);

// --- kernels_gemm.cu ----------------------------------------------------------
// out[m, n] (= or +=) sum_k x[m, k] w[n, k] (+ bias[n]) with f32 accumulation,
// any mix of the supported types (SIMT tiles: the f32 path and fallbacks).
Status launch_gemm_simt(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                        const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                        bool accumulate, const void* bias, DType bias_dt);
// Decode-shaped product for m <= 8 rows: one pass over W with 16-byte loads,
// x held in shared memory (bf16 / f16 weights and activations of one type,
// out of that type or f32).
Status launch_gemv(cudaStream_t s, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                   void* out, DType act, DType out_dt, bool accumulate);
bool gemv_supported(int64_t m, int64_t k, DType act, DType w_dt, DType out_dt);
// Several decode products over one RMS-normalised x in one launch:
// out_i = rms_norm(x, norm) W_i^T for up to 3 segments (Q/K/V), or with
// `swiglu` (2 segments, gate then up, equal n) out_0 = silu(n Wg^T) * (n Wu^T).
// Weights, norm and outputs of `act`. Rows up to FERRITE_GEMV_MAX_M (default
// 1) take the GEMV path; more go to cuBLASLt.
struct GemvSegment {
  const void* w;
  void* out;
  int64_t n;
};
bool gemv_multi_enabled();  // FERRITE_FUSED_NORM=0 turns the fused path off
Status launch_gemv_multi(cudaStream_t s, const void* x, int64_t m, int64_t k,
                         const GemvSegment* segs, int count, DType act, bool swiglu,
                         const void* norm, DType norm_dt, float eps, bool zero_centred);

// --- kernels_attention.cu -------------------------------------------------------
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
Status launch_qk_rope_kv(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                         int32_t page_size, int64_t tokens, void* q, void* k, void* v, DType act, const void* q_norm,
                         const void* k_norm, DType norm_dt, const void* q_bias,
                         const void* k_bias, const void* v_bias, DType bias_dt, void* k_cache,
                         void* v_cache);
// Attention of every token over its sequence's cached positions <= its own,
// split over `splits` KV ranges (combined through `partials`, f32,
// tokens * num_heads * splits * (head_dim + 2) floats when splits > 1).
// out [tokens, num_heads * head_dim] of act.
Status launch_attention_decode(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                               int32_t page_size, int64_t tokens, const void* q, DType act, const void* k_cache,
                               const void* v_cache, void* out, int splits, float* partials);
// Flash-style prefill over paged KV on tensor cores (bf16 / f16, head_dim 64
// or 128): query tiles of one sequence against its cached keys.
bool attention_prefill_supported(const AttentionShape& a, DType act);
Status launch_attention_prefill(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                                int32_t page_size, const int32_t* tile_seq, const int32_t* tile_row, int64_t tiles,
                                int64_t tokens, const void* q, DType act, const void* k_cache,
                                const void* v_cache, void* out);
constexpr int kPrefillTileQ = 64;

// --- kernels_sampling.cu --------------------------------------------------------
// Penalised copies of logits rows: dst = logits, then entries applied
// (row, id, repetition flag, generated count) with per-row parameters.
Status launch_apply_penalties(cudaStream_t s, const float* logits, float* dst, int64_t rows,
                              int64_t vocab, const int32_t* entry_row, const int32_t* entry_id,
                              const int32_t* entry_rep, const int32_t* entry_count,
                              int64_t entries, const float* rep_penalty, const float* presence,
                              const float* frequency);
// tokens[r] = argmax over valid ids (mask may be null); ties to the lowest id.
Status launch_masked_argmax(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                            const uint8_t* mask, uint32_t* tokens);

}  // namespace ferrite::cuda
