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
// 2) take the GEMV path; more go to cuBLASLt.
struct GemvSegment {
  const void* w;
  void* out;
  int64_t n;
};
// m x k normalised rows fit the kernel's shared memory; FERRITE_FUSED_NORM=0
// turns the fused path off.
bool gemv_multi_supported(int64_t m, int64_t k, DType act);
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
// Merges the split-KV partials of launch_attention_decode(_fused) into out
// (and applies the output gate, read from q).
Status launch_attention_combine(cudaStream_t s, const AttentionShape& a, int64_t tokens,
                                const void* q, DType act, void* out, int splits,
                                const float* partials);
// kernels_attention_decode.cu. A decode step (every token its sequence's
// newest position) in one kernel: what launch_qk_rope_kv does for the
// token (bias, q/k norm, RoPE, the K/V write; q is not updated in place),
// then attention over its cached positions split over `splits` ranges
// (partials as in launch_attention_decode). bf16 / f16, head_dim 64, 128
// or 256; a block takes up to 4 query heads of a KV head's group
// (fused_decode_parts(group) blocks per KV head). With split_counters
// (zeroed ints, one per (token, KV head, part), left zeroed) the
// splits are merged in the kernel, else by launch_attention_combine.
// `pdl`: launched as a programmatic dependent (it reads the page table and
// cached K/V first).
bool attention_decode_fused_supported(const AttentionShape& a, DType act);
int fused_decode_parts(int group);
Status launch_attention_decode_fused(cudaStream_t s, const AttentionShape& a,
                                     const StepMeta& meta, int32_t page_size, int64_t tokens,
                                     void* q, const void* k, const void* v, DType act,
                                     const void* q_norm, const void* k_norm, DType norm_dt,
                                     const void* q_bias, const void* k_bias, const void* v_bias,
                                     DType bias_dt, void* k_cache, void* v_cache, void* out,
                                     int splits, float* partials, int32_t* split_counters,
                                     int64_t num_counters, bool pdl);
// Flash-style prefill over paged KV on tensor cores (mma.sync; bf16 / f16,
// head_dim 64, 128 or 256): query tiles of up to kPrefillTileQ consecutive
// rows of one sequence (tile_seq / tile_row) against its cached keys.
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
// tokens[r] = argmax over valid ids (mask, allowed may be null; allowed:
// [rows, ceil(vocab / 32)] bitmap); ties to the lowest id.
Status launch_masked_argmax(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                            const uint8_t* mask, const uint32_t* allowed, uint32_t* tokens);
// Per-row parameters of the device sampler (uploaded by the provider).
struct SampleRowParams {
  double u;           // the reference's uniform draw in [0, 1) for this row and step
  float temperature;  // <= 0: greedy (masked argmax of `logits`)
  float top_p;        // >= 1: off
  float min_p;        // <= 0: off
  int32_t top_k;      // <= 0: off
  int32_t reserved[2];
};
static_assert(sizeof(SampleRowParams) == 32, "SampleRowParams layout");
// tokens[r]: the CPU reference's last_token_sample draw over row r of
// `logits` (penalties already applied), one block per row.
Status launch_sample(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                     const uint8_t* mask, const uint32_t* allowed, const SampleRowParams* params,
                     uint32_t* tokens);
// The sampler contracts' logprob outputs from the raw logits (each may be
// null): logprobs[r] at tokens[r], top_ids / top_logprobs [rows, top_n].
Status launch_logprobs(cudaStream_t s, const float* raw_logits, int64_t rows, int64_t vocab,
                       const uint32_t* tokens, float* logprobs, uint32_t* top_ids,
                       float* top_logprobs, int64_t top_n);

// --- kernels_hybrid.cu ------------------------------------------------------------
// gated_delta_recurrent_attention. Sequences of the step are packed in
// order (sequence s: rows seq_last_row[s-1]+1 .. seq_last_row[s]); a state
// slot < 0 (graph padding) reads zero state and writes none.
struct GatedDeltaShape {
  int32_t hk = 0, hv = 0, dk = 0, dv = 0;
  float eps = 1e-6f;  // the gated norm's
};
// x [tokens, conv_dim] f32 in place: causal depthwise conv over each
// sequence's conv state rows and its tokens, then SiLU; the state keeps the
// last kernel-1 inputs. conv_state [slots, kernel-1, conv_dim] f32.
Status launch_causal_conv_silu(cudaStream_t s, const StepMeta& meta, int64_t sequences, float* x,
                               int64_t conv_dim, const void* w, DType w_dt, int64_t kernel,
                               float* conv_state);
// The gated delta rule in f32, then the gated RMSNorm times silu(z). One
// block per (sequence, value head, 32-column slice of the dk x dv state):
// the recurrent form for spans shorter than 16 tokens (decode), the chunked
// (WY) form over chunks of 64 tokens for longer spans when max_span (the
// step's longest span) is >= 16 and dk % 4 == 0 (else recurrent for all).
// x: conv output [tokens, conv_dim], its V section is overwritten with the
// rule's output o (f32); z [tokens, Hv dv]; b, a [tokens, Hv] (f32);
// y [tokens, Hv dv] of act. Never synchronises.
int64_t gated_delta_smem_bytes(const GatedDeltaShape& g);          // recurrent kernel
int64_t gated_delta_chunked_smem_bytes(const GatedDeltaShape& g);  // -1: no chunked form
Status launch_gated_delta_rule(cudaStream_t s, const StepMeta& meta, int64_t sequences,
                               int64_t tokens, int64_t max_span, const GatedDeltaShape& g,
                               float* x, const float* z, const float* b, const float* a,
                               const void* a_log, DType a_log_dt, const void* dt_bias,
                               DType dt_bias_dt, const void* norm, DType norm_dt,
                               float* delta_state, void* y, DType act);
// --- kernels_moe.cu ---------------------------------------------------------------
// routed_swiglu_moe / routed_shared_swiglu_moe. Nothing synchronises and no
// launch depends on device data on the host: grids are sized by upper
// bounds, blocks past the device-side counts exit at once (graph-safe).
constexpr int kMaxTopK = 32;
constexpr int kMoeMaxExperts = 4096;
constexpr int kMoeRouterGemvRows = 8;    // rows per warp of launch_moe_router
constexpr int kMoeRouterMaxRows = 512;   // launch_moe_router handles up to this many rows
constexpr int kMoeSortSmallPairs = 256;  // up to this many pairs: one-block sort
constexpr int kMoeSortChunk = 1024;      // pairs per chunk of the multi-block sort
// y32 [rows, width] f32 = rms_norm(x of act) * (w or 1 + w); y (optional,
// may be null) the same values rounded to act.
Status launch_moe_norm(cudaStream_t s, const void* x, DType act, float* y32, void* y,
                       const void* w, DType w_dt, int64_t rows, int64_t width, float eps,
                       bool zero_centred);
// logits [rows, experts] f32 = x [rows, hidden] (f32) . w[e] for rows <=
// kMoeRouterMaxRows (a warp per expert and group of kMoeRouterGemvRows
// rows); more rows go through gemm().
Status launch_moe_router(cudaStream_t s, const float* x, int64_t rows, int64_t hidden,
                         const void* w, DType w_dt, int64_t experts, float* logits);
// Per token (a warp each): softmax of logits [tokens, experts] (f32), top-k
// (ties to the lower id), ids in increasing order, weights optionally
// renormalised.
Status launch_moe_route(cudaStream_t s, const float* logits, int64_t tokens, int64_t experts,
                        int64_t top_k, bool normalize, int32_t* ids, float* weights);
// Rows per tile of the grouped expert GEMM for `pairs` (token, k) pairs
// over `experts` experts: 64 when the average active expert has >= 32
// rows (prefill), else 16 (decode-sized work).
int moe_row_tile(int64_t pairs, int64_t experts);
// Upper bound of the row tiles: ceil(pairs / row_tile) + min(experts, pairs).
int64_t moe_max_tiles(int64_t pairs, int64_t experts, int row_tile);
// Scratch ints `counts` of launch_moe_sort needs (0 for the one-block sort).
int64_t moe_sort_count_ints(int64_t pairs, int64_t experts);
// Stable counting sort of the (token, k) pairs by expert: offsets
// [experts + 1], slot_of[pair] = gathered row, row_pair[row] = pair (the
// pairs of one expert in increasing order); the tile table `tiles` (4 ints
// per tile: expert, first gathered row, valid rows, 0; each expert's rows
// cut into tiles of row_tile rows, experts in increasing order) and its
// length *tile_count (<= moe_max_tiles).
Status launch_moe_sort(cudaStream_t s, const int32_t* ids, int64_t pairs, int64_t experts,
                       int row_tile, int32_t* offsets, int32_t* slot_of, int32_t* row_pair,
                       int32_t* tiles, int32_t* tile_count, int32_t* counts);
// The tensor-core expert GEMM applies: bf16 / f16 activations, weights of
// the same type, hidden and intermediate multiples of 8.
bool moe_mma_supported(DType act, DType gate_up_dt, DType down_dt, int64_t hidden,
                       int64_t intermediate);
// Grouped expert GEMM on tensor cores over the tile table (grid: column
// tiles x max_tiles). gated: x = normalised tokens [tokens, ldx] of act,
// row r of a tile reads token row_pair[r] / top_k, w = gate_up [E, 2, nout,
// kdim]; out [rows, ldo] of act = silu(g) * u (g, u rounded to act first).
// Not gated: x = [rows, ldx] of act (gathered rows), w = down [E, nout,
// kdim]; out [rows, ldo] f32.
Status launch_moe_expert_mma(cudaStream_t s, bool gated, const void* x, int64_t ldx,
                             const int32_t* row_pair, int64_t top_k, const void* w, int64_t kdim,
                             int64_t nout, DType act, int row_tile, const int32_t* tiles,
                             const int32_t* tile_count, int64_t max_tiles, void* out,
                             int64_t ldo);
// SIMT fallback (f32 activations, mixed types, odd shapes): for every
// expert e and each of its gathered rows r: out[r, j] = x[row] . w[e, j, :]
// (w [experts, nout, kdim]), row = row_pair[r] / top_k when by_token, else
// r. f32 out with row stride ldo.
Status launch_moe_expert_rows(cudaStream_t s, const void* x, DType x_dt, int64_t ldx,
                              bool by_token, int64_t top_k, int64_t kdim, const void* w,
                              DType w_dt, int64_t nout, int64_t experts, const int32_t* offsets,
                              const int32_t* row_pair, float* out, int64_t ldo);
// gu [rows, 2I]: gu[r, i] = silu(gu[r, i]) * gu[r, I + i], i < I.
Status launch_moe_act(cudaStream_t s, float* gu, int64_t rows, int64_t intermediate);
// hidden[t] += sum_k weights[t,k] ys[slot_of[t,k]] (+ sigmoid(shared_gate[t]) shared_out[t]),
// summed in that order (experts in increasing id) in f32.
Status launch_moe_combine(cudaStream_t s, void* hidden, DType act, int64_t tokens,
                          int64_t hidden_size, int64_t top_k, const int32_t* slot_of,
                          const float* weights, const float* ys, const float* shared_gate,
                          const float* shared_out);

}  // namespace ferrite::cuda
