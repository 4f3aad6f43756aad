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
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Whether the fused decode experts take these weights: block formats with
// 8-bit activation products (not FP8), hidden and intermediate whole blocks
// of their formats and multiples of 32.
bool quant_moe_decode_supported(DType gate_up_dt, DType down_dt, int64_t hidden,
                                int64_t intermediate);

// gate_up [E, 2I, H] in blocks (rows [0, I) gate, [I, 2I) up), over the
// tile table of launch_moe_sort (16-byte aligned, room for max_tiles
// entries, the first *tile_count valid): for every gathered row r of a tile of
// expert e, h = silu(g) * u of g = x(r) . gate[e, i], u = x(r) . up[e, i],
// stored as 8-bit blocks of 32: hq [rows, I], hd [rows, I / 32] (exactly as
// quantizing the f32 h). x(r) = token row_pair[r] / top_k of xq [tokens, H]
// / xd [tokens, H / 32] (the 8-bit normalised tokens). warp_outputs (1, 2
// or 4; Tuning::cuda_moe_gate_up_warp_outputs): outputs i a warp, blocks of
// 1,024 / warp_outputs threads; the same bits for every value.
//
// route (Tuning::cuda_moe_route_in_experts; logits null: off): a one-token
// step routes inside this launch instead of reading a routing launch's
// table (row_pair, tiles and tile_count are then unused and may be null):
// every block routes the token's f32 logits [experts] by its threads
// (moe_route_block.cuh: the bits of launch_moe_route_sort), block y takes
// the y-th selected expert (in id order), and block (0, 0) leaves ids,
// weights and slot_of [top_k] for down + combine. max_tiles >= top_k,
// warp_outputs 4.
// shared_gate / shared_up (Tuning::cuda_moe_shared_in_experts; null: none):
// the shared expert's gate and up [I, H] in gate_up's format (its
// intermediate size I), computed by the grid's row top_k (the launch has at
// least top_k + 1 rows then) from the same 8-bit token into h row top_k.
struct MoeRouteInExperts {
  const float* logits = nullptr;
  int64_t experts = 0;
  bool normalize = false;
  int32_t* ids = nullptr;
  float* weights = nullptr;
  int32_t* slot_of = nullptr;
  const void* shared_gate = nullptr;
  const void* shared_up = nullptr;
};
// Whether the shared expert can be computed in the fused launches
// (MoeRouteInExperts::shared_gate, launch_quant_moe_down_combine's
// shared_down): a one-token step routed in the experts' launch, the shared
// expert's intermediate size the routed one's, its gate / up in the routed
// gate_up's format and its down in the routed down's, 16-byte aligned.
bool quant_moe_shared_in_experts_supported(int64_t tokens, int64_t I, int64_t shared_I,
                                           DType gate_up_dt, DType down_dt, const void* shared_gate,
                                           DType shared_gate_dt, const void* shared_up,
                                           DType shared_up_dt, const void* shared_down,
                                           DType shared_down_dt);
// Whether a step of `tokens` takes it: one token, top_k <= 32, at most 512
// experts, 4 outputs a warp and a grid of at least top_k tiles.
bool quant_moe_route_in_experts_supported(int64_t tokens, int64_t experts, int64_t top_k,
                                          int warp_outputs, int64_t max_tiles);
Status launch_quant_moe_gate_up(cudaStream_t s, const int8_t* xq, const float* xd, int64_t H,
                                const int32_t* row_pair, int64_t top_k, const void* gate_up,
                                DType w_dt, int64_t I, const int32_t* tiles,
                                const int32_t* tile_count, int64_t max_tiles, int8_t* hq,
                                float* hd, int warp_outputs = 1,
                                const MoeRouteInExperts& route = {});

// down [E, H, I] in blocks, then the combine: for every token t and output
// j, hidden[t, j] += sum_k weights[t, k] * (h(slot_of[t, k]) . down[ids[t,
// k], j]) over k in order (ids increasing), + sigmoid(shared_gate[t]) *
// shared_out[t, j] when shared_out; f32 sums, as launch_moe_combine.
// form (Tuning::cuda_moe_down_form, 0..2): how many experts' blocks a warp
// fetches at once and at how many blocks an SM; the same bits in each.
// shared_down (Tuning::cuda_moe_shared_in_experts; null: none; one token):
// the shared expert's down [H, I] in down's format; its product with h row
// top_k (gate / up's shared row) takes the place of shared_out (which is
// then ignored), warp-summed and added after the routed experts as
// sigmoid(shared_gate[t]) times it.
// pdl_trigger (Tuning::cuda_moe_down_pdl_trigger): every block calls
// griddepcontrol.launch_dependents first, so a programmatic dependent (the
// next weight-streaming GEMV) is scheduled onto SMs as these blocks leave;
// it still waits for this grid's completion before reading its outputs.
Status launch_quant_moe_down_combine(cudaStream_t s, const int8_t* hq, const float* hd,
                                     int64_t I, const void* down, DType w_dt, int64_t H,
                                     int64_t tokens, int64_t top_k, const int32_t* ids,
                                     const int32_t* slot_of, const float* weights,
                                     const float* shared_gate, const float* shared_out,
                                     const void* shared_down, void* hidden, DType act, int form,
                                     bool pdl_trigger);

}  // namespace ferrite::cuda
