// The CUDA backend's public face (no CUDA headers): the device, the provider
// registry and the execution context (stream, cuBLASLt, per-step binding
// buffer, graph replay of decode steps per batch-size bucket).
//
// Compiled only when CMake found nvcc (FERRITE_HAVE_CUDA); every entry point
// fails cleanly with `unavailable` when the machine has no usable GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/kernels/attention_decode_cluster_knobs.h"
#include "runtime/registry.h"

namespace ferrite {

// True when a CUDA device can be used here; else `why` says why not.
bool cuda_device_present(std::string* why = nullptr);

// The device `ordinal`: cudaMalloc'd allocations, copies ordered on the
// device's stream (the stream every CUDA provider records on).
Result<std::unique_ptr<Device>> make_cuda_device(int ordinal = 0);

// Every CUDA provider (and, through them, their contracts).
void register_cuda_providers(Registry& registry);
std::unique_ptr<Registry> make_cuda_registry();

struct CudaExecOptions {
  // Capture decode steps (every sequence with one token) as CUDA graphs per
  // batch-size bucket and replay them. Off: the same padded kernels run
  // eagerly (bitwise identical results).
  bool graphs = true;
  // Tuning::cuda_quant_dot: decode products on GGUF block weights take 8-bit
  // activation blocks and integer dot products (kernels/quant_gemm.cuh).
  bool quant_dot = true;
  // Tuning::cuda_quant_fused: with quant_dot, a decode product's norm,
  // activation quantization and GEMVs in one kernel (kernels/quant_gemv.cuh).
  bool quant_fused = true;
  bool quant_fused_fp8 = true;  // Tuning::cuda_quant_fused_fp8
  // Tuning::cuda_quant_stream_tokens: fused decode products of up to this
  // many tokens bulk-copy their weight rows (kernels/quant_gemv.cuh); 0: off.
  int64_t quant_stream_tokens = 8;
  int64_t quant_stream_blocks = 1;  // Tuning::cuda_quant_stream_blocks
  int64_t quant_stream_item_steps = 4;  // Tuning::cuda_quant_stream_item_steps
  bool quant_stream_mixed = true;       // Tuning::cuda_quant_stream_mixed
  // Tuning::cuda_quant_mma_fp8 / _u4: fused decode products of at least this
  // many tokens on f8_e4m3_b128 / u4_g128 weights take the tensor-core
  // kernel (kernels/quant_gemv_mma.cu); 0: off.
  int64_t quant_mma_fp8 = 1;
  int64_t quant_mma_u4 = 5;
  int64_t quant_mma_smem_kib = 0;  // Tuning::cuda_quant_mma_smem_kib (0: all)
  bool quant_mma_fp8_act = false;  // Tuning::cuda_quant_mma_fp8_act: e4m3 activations
  // Tuning::cuda_moe_dequant: prefill steps of block-format MoE experts on
  // the grouped tensor-core path, through experts dequantized per step.
  int64_t moe_dequant = 512;  // minimum tokens; 0: off
  bool moe_mma_fp8 = true;   // Tuning::cuda_moe_mma_fp8: FP8 experts on the grouped mma
  int64_t moe_mma_u4 = 9;    // Tuning::cuda_moe_mma_u4: 4-bit experts from this many tokens
  // Tuning::cuda_moe_fused_tokens: MoE steps of up to this many tokens take
  // the fused decode launches (routed_swiglu_moe.cc); 0: off.
  int64_t moe_fused_tokens = 8;
  int64_t moe_gate_up_warp_outputs = 4;  // Tuning::cuda_moe_gate_up_warp_outputs (1, 2, 4)
  bool moe_route_in_router = false;      // Tuning::cuda_moe_route_in_router
  bool moe_route_block = true;           // Tuning::cuda_moe_route_block
  bool moe_route_in_experts = true;      // Tuning::cuda_moe_route_in_experts
  int64_t moe_down_form = 2;            // Tuning::cuda_moe_down_form (0, 1, 2)
  bool moe_down_pdl_trigger = true;      // Tuning::cuda_moe_down_pdl_trigger
  bool pdl_trigger_small = false;        // Tuning::cuda_pdl_trigger_small
  bool moe_shared_in_experts = true;     // Tuning::cuda_moe_shared_in_experts
  bool gated_delta_fused_norm = true;    // Tuning::cuda_gated_delta_fused_norm
  bool gated_delta_pdl = false;          // Tuning::cuda_gated_delta_pdl
  bool gated_delta_conv_in_projection = true;   // Tuning::cuda_gated_delta_conv_in_projection
  int64_t decode_split_positions = 64;  // Tuning::cuda_decode_split_positions
  bool decode_reduce_scatter = false;    // Tuning::cuda_decode_reduce_scatter
  bool decode_cluster = true;            // Tuning::cuda_decode_cluster
  DecodeClusterKnobs decode_cluster_knobs;  // Tuning::cuda_decode_cluster_* (the switches)
  int64_t cluster_trace = 0;             // Tuning::cuda_cluster_trace (records; 0: off)
  int64_t decode_colocate = 2;           // Tuning::cuda_decode_colocate (0-2)
  int64_t decode_colocate_min_mib = 8;   // Tuning::cuda_decode_colocate_min_mib
  int64_t decode_mma_tokens = 9;         // Tuning::cuda_decode_mma_tokens (0: off)
  bool rope_token_warps = false;         // Tuning::cuda_rope_token_warps
  bool prefill_short_tiles = false;      // Tuning::cuda_prefill_short_tiles
  int64_t dequant_slice_mib = 512;      // Tuning::cuda_dequant_slice_mib
  int64_t quant_tile_tokens = 32;       // Tuning::cuda_quant_tile_tokens (0: off)
  int64_t quant_mmq_tokens = 64;        // Tuning::cuda_quant_mmq_tokens (0: off)
  int64_t quant_mmq_min_tokens = 5;     // Tuning::cuda_quant_mmq_min_tokens
  bool quant_mmq_waves = true;          // Tuning::cuda_quant_mmq_waves
  bool quant_mmq_share_act = true;      // Tuning::cuda_quant_mmq_share_act
  int64_t u4_tile_tokens = 64;          // Tuning::cuda_u4_tile_tokens (0: off)
  bool u4_tile_wgmma = false;           // Tuning::cuda_u4_tile_wgmma
  int64_t fp8_lt_tokens = 128;          // Tuning::cuda_fp8_lt_tokens (0: off)
  // Tuning::profile: the eager-step GPU-time profiler (profiler.h).
  bool profile = false;
  // Tuning::ncu_decode_step: the K-th graph replay runs inside a profiler
  // range (cudaProfilerStart / Stop) for ncu; 0: none.
  int64_t ncu_decode_step = 0;
  // Initial capacity of the step binding buffer (grows on eager steps).
  int64_t max_tokens = 512;
  int64_t max_sequences = 64;
  int64_t max_context = 4096;
  int32_t page_size = 16;
};

// Fills `ctx` (device, stream, preparer, runner, backend) for `device`, which
// must come from make_cuda_device. The returned handle owns the state behind
// ctx and must outlive every use of it.
Result<std::shared_ptr<void>> make_cuda_exec_context(Device& device, const CudaExecOptions& options,
                                                     ExecContext* ctx);

// Graph replay statistics and control of a context made above.
struct CudaGraphStats {
  int64_t captures = 0;
  int64_t replays = 0;
  int64_t eager_steps = 0;
};
CudaGraphStats cuda_graph_stats(const ExecContext& ctx);
void cuda_set_graphs_enabled(const ExecContext& ctx, bool enabled);

// Device-to-device copy bandwidth (bytes read + written per second) over a
// buffer of `bytes`, median of a few runs.
Result<double> cuda_measure_copy_bandwidth(Device& device, int64_t bytes = 2ll << 30);

}  // namespace ferrite
