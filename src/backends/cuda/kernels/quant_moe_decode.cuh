// Decode-sized routed MoE steps whose experts are in block formats (GGUF
// blocks, u4_g128; not FP8) on 8-bit activation blocks: two launches for the
// expert half of a layer instead of five (quantize, gate/up, SiLU product,
// quantize, down, combine). At a few tokens these steps are launch- and
// latency-bound (Qwen3-30B-A3B Q4_K_M batch 1: ~100 us a layer for 21 MB of
// expert weights), so fewer, wider launches are the lever. Both kernels keep
// the numerics of the unfused path bitwise: the same per-lane block
// partition, warp sums and summation orders (routed_swiglu_moe.cc picks
// them under Tuning::cuda_moe_fused_tokens).
// Host-side launchers (defined in the .cu beside this header); C++17.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/kernels/moe.cuh"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Whether the fused decode experts take these weights: block formats with
// 8-bit activation products (not FP8), hidden and intermediate whole blocks
// of their formats and multiples of 32.
bool quant_moe_decode_supported(DType gate_up_dt, DType down_dt, int64_t hidden,
                                int64_t intermediate);

// Routing and sorting inside the gate/up launch instead of a launch of
// their own (Tuning::cuda_moe_route_in_experts): at one token the routing
// launch cost ~5 us a MoE layer (H100 timeline, Qwen3-30B-A3B Q4_K_M b1),
// nearly all of it launch and dependent-load latency around ~1 us of one
// warp's work. Every block of the gate/up launch routes the router's
// logits itself (warp 0, route_sort_warp: launch_moe_route_sort's one-warp
// form, so the same experts, weights and tiles) into its shared memory;
// block (0, 0) writes them to `sort`'s buffers for the launches after it
// (down + combine). sort.counter is unused; sort.top_k is the launch's.
struct MoeExpertRoute {
  const float* logits = nullptr;  // [tokens, experts] f32, the router's
  int64_t tokens = 0;
  int64_t experts = 0;
  MoeRouteSortArgs sort;
};
// Whether the gate/up launch can route: the one-warp sort (tokens * top_k
// <= 32).
bool moe_expert_route_supported(int64_t tokens, int64_t experts, int64_t top_k);

// gate_up [E, 2I, H] in blocks (rows [0, I) gate, [I, 2I) up), over the
// tile table of launch_moe_sort: for every gathered row r of a tile of
// expert e, h = silu(g) * u of g = x(r) . gate[e, i], u = x(r) . up[e, i],
// stored as 8-bit blocks of 32: hq [rows, I], hd [rows, I / 32] (exactly as
// quantizing the f32 h). x(r) = token row_pair[r] / top_k of xq [tokens, H]
// / xd [tokens, H / 32] (the 8-bit normalised tokens). warp_outputs (1, 2
// or 4; Tuning::cuda_moe_gate_up_warp_outputs): outputs i a warp, blocks of
// 1,024 / warp_outputs threads; the same bits for every value.
// route (optional, where moe_expert_route_supported): the launch routes and
// sorts first (MoeExpertRoute); row_pair, tiles and tile_count must then be
// its sort's buffers, which the launch writes.
Status launch_quant_moe_gate_up(cudaStream_t s, const int8_t* xq, const float* xd, int64_t H,
                                const int32_t* row_pair, int64_t top_k, const void* gate_up,
                                DType w_dt, int64_t I, const int32_t* tiles,
                                const int32_t* tile_count, int64_t max_tiles, int8_t* hq,
                                float* hd, int warp_outputs = 1,
                                const MoeExpertRoute* route = nullptr);

// down [E, H, I] in blocks, then the combine: for every token t and output
// j, hidden[t, j] += sum_k weights[t, k] * (h(slot_of[t, k]) . down[ids[t,
// k], j]) over k in order (ids increasing), + sigmoid(shared_gate[t]) *
// shared_out[t, j] when shared_out; f32 sums, as launch_moe_combine.
Status launch_quant_moe_down_combine(cudaStream_t s, const int8_t* hq, const float* hd,
                                     int64_t I, const void* down, DType w_dt, int64_t H,
                                     int64_t tokens, int64_t top_k, const int32_t* ids,
                                     const int32_t* slot_of, const float* weights,
                                     const float* shared_gate, const float* shared_out,
                                     void* hidden, DType act);

}  // namespace ferrite::cuda
