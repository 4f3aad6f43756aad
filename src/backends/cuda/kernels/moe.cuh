// routed_swiglu_moe / routed_shared_swiglu_moe: norm, router, routing, sort,
// grouped expert GEMMs, combine.
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// routed_swiglu_moe / routed_shared_swiglu_moe. Nothing synchronises and no
// launch depends on device data on the host: grids are sized by upper
// bounds, blocks past the device-side counts exit at once (graph-safe).
constexpr int kMaxTopK = 32;
constexpr int kMoeMaxExperts = 4096;
constexpr int kMoeRouterGemvRows = 8;    // rows per warp of launch_moe_router
constexpr int kMoeRouterMaxRows = 512;   // launch_moe_router handles up to this many rows
constexpr int kMoeSortSmallPairs = 256;  // up to this many pairs: one-block sort
constexpr int kMoeSortChunk = 1024;      // pairs per chunk of the multi-block sort
constexpr int kMoeFusedMaxRows = 32;     // launch_moe_norm_router handles up to this many rows
// y32 [rows, width] f32 = rms_norm(x of act) * (w or 1 + w); y (optional,
// may be null) the same values rounded to act.
Status launch_moe_norm(cudaStream_t s, const void* x, DType act, float* y32, void* y,
                       const void* w, DType w_dt, int64_t rows, int64_t width, float eps,
                       bool zero_centred);
// logits [rows, experts] f32 = x [rows, hidden] (f32) . w[e] for rows <=
// kMoeRouterMaxRows (blocks of 2 experts x a chunk of rows staged in shared
// memory, 4 warps an expert; a warp per expert and group of
// kMoeRouterGemvRows rows when the hidden size does not fit that); more
// rows go through gemm().
Status launch_moe_router(cudaStream_t s, const float* x, int64_t rows, int64_t hidden,
                         const void* w, DType w_dt, int64_t experts, float* logits);
// launch_moe_norm + launch_moe_router in one launch for 1 .. kMoeFusedMaxRows
// rows (f32 / bf16 / f16 router weights), bitwise the same y32, y and
// logits; with xq / xd (hidden % 32 == 0) also y32 as 8-bit blocks of 32 (xq
// [rows, hidden], xd [rows, hidden / 32]: q = round(y * 127 / amax), d =
// amax / 127, as the block-format expert products quantize their inputs).
// Whether launch_moe_norm_router takes this router (f32 / bf16 / f16, 16-byte
// aligned, hidden a multiple of 8 up to 8192).
bool moe_norm_router_supported(int64_t hidden, const void* router_w, DType router_dt);
// extra_w / extra_out (both or neither): one more product of the
// normalised rows, with extra_w [hidden] of the router's type, into
// extra_out [rows]: the shared expert gate (a one-output router), bitwise
// launch_moe_router's value on y32, in the same launch.
//
// route (optional): launch_moe_route_sort's work in the same launch, by the
// last block to finish (an arrival counter; the logits it routes are copied
// to its shared memory first), and the launch a programmatic dependent (the
// router weights are loaded before it waits on the previous kernel): one
// launch a MoE layer fewer. Bitwise launch_moe_route_sort's outputs. Only
// where moe_norm_router_route_supported (else unsupported, nothing launched).
//
// pdl_trigger (Tuning::cuda_pdl_trigger_small): every block calls
// griddepcontrol.launch_dependents first, so a programmatic dependent after
// it (the shared expert's gate / up GEMV) copies its weights meanwhile; a
// no-op before a launch that is not one.
struct MoeRouteSortArgs {
  int64_t top_k = 0;
  bool normalize = false;
  int row_tile = 0;
  int32_t* ids = nullptr;
  float* weights = nullptr;
  int32_t* offsets = nullptr;  // may be null: left unwritten (the tile table's readers)
  int32_t* slot_of = nullptr;
  int32_t* row_pair = nullptr;
  int32_t* tiles = nullptr;
  int32_t* tile_count = nullptr;
  // One int, zero between launches (the last block resets it): the
  // backend's moe_route_counter.
  int32_t* counter = nullptr;
};
// Whether launch_moe_norm_router can route and sort as well: the one-warp
// sort (tokens * top_k <= 32) and the rows' logits fitting in the shared
// memory the launch stages its inputs in (rows * experts <= chunk * hidden).
bool moe_norm_router_route_supported(int64_t rows, int64_t hidden, int64_t experts,
                                     int64_t top_k);
Status launch_moe_norm_router(cudaStream_t s, const void* x, DType act, float* y32, void* y,
                              const void* norm_w, DType norm_dt, int64_t rows, int64_t hidden,
                              float eps, bool zero_centred, int8_t* xq, float* xd,
                              const void* router_w, DType router_dt, int64_t experts,
                              float* logits, const void* extra_w, float* extra_out,
                              const MoeRouteSortArgs* route, bool pdl_trigger);
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
// launch_moe_route + launch_moe_sort in one launch for 1 .. 32 tokens and at
// most kMoeSortSmallPairs pairs (one warp up to 32 pairs, else one block):
// the same ids, weights and sort outputs. offsets may be null up to 32 pairs
// (left unwritten: for callers that read only the tile table).
// block_route (Tuning::cuda_moe_route_block): one token with up to 512
// experts routes and sorts by a block of 512 threads (moe_route_one_kernel:
// the first top_k of each group of 32 experts ranked against each other in
// parallel, moe_route_block.cuh) instead of one warp; the same bits.
Status launch_moe_route_sort(cudaStream_t s, const float* logits, int64_t tokens,
                             int64_t experts, int64_t top_k, bool normalize, int32_t* ids,
                             float* weights, int row_tile, int32_t* offsets, int32_t* slot_of,
                             int32_t* row_pair, int32_t* tiles, int32_t* tile_count,
                             bool block_route = false);
// The tensor-core expert GEMM applies: bf16 / f16 activations, weights of
// the same type, hidden and intermediate multiples of 8.
bool moe_mma_supported(DType act, DType gate_up_dt, DType down_dt, int64_t hidden,
                       int64_t intermediate);
// ... and for block-format experts converted in shared memory (gate/up and
// down both f8_e4m3_b128 or both u4_g128, hidden and intermediate multiples
// of 128) at row_tile 16 (moe_row_tile).
bool moe_mma_blocks_supported(DType act, DType gate_up_dt, DType down_dt, int64_t hidden,
                              int64_t intermediate, int row_tile);
// Grouped expert GEMM on tensor cores over the tile table (grid: column
// tiles x max_tiles). gated: x = normalised tokens [tokens, ldx] of act,
// row r of a tile reads token row_pair[r] / top_k, w = gate_up [E, 2, nout,
// kdim]; out [rows, ldo] of act = silu(g) * u (g, u rounded to act first).
// Not gated: x = [rows, ldx] of act (gathered rows), w = down [E, nout,
// kdim]; out [rows, ldo] f32.
// w_dt: act, or f8_e4m3_b128 / u4_g128 (block experts of `experts` experts,
// 16-row tiles, kdim a multiple of 128; see moe_mma_blocks_supported): the
// blocks are converted to act in shared memory, bitwise as dequantizing
// them first.
Status launch_moe_expert_mma(cudaStream_t s, bool gated, const void* x, int64_t ldx,
                             const int32_t* row_pair, int64_t top_k, const void* w, int64_t kdim,
                             int64_t nout, DType act, int row_tile, const int32_t* tiles,
                             const int32_t* tile_count, int64_t max_tiles, void* out,
                             int64_t ldo, DType w_dt, int64_t experts);
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
