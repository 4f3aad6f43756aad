// Internal to the CUDA backend (host C++20 code): the backend state behind
// ExecContext::backend, provider helpers.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/cuda_status.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "backends/cuda/kernels/attention_decode.cuh"
#include "backends/cuda/kernels/quant_mmq.cuh"
#include "base/status.h"
#include "runtime/provider.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// State behind ExecContext::backend (defined in cuda_exec.cc).
class CudaExec;
struct BackendState {
  cudaStream_t stream = nullptr;
  void* lt_handle = nullptr;       // cublasLtHandle_t
  void* lt_workspace = nullptr;    // cuBLASLt scratch
  size_t lt_workspace_bytes = 0;
  int num_sms = 132;
  CudaExec* exec = nullptr;
  // Metadata of the step being recorded (padded to the bucket when replayed).
  StepMeta meta;
  const StepBatch* prepared = nullptr;  // the batch `meta` describes
  uint64_t prepared_key = 0;            // and its fingerprint
  bool capturing = false;
  // Zeroed arrival counters of the fused decode attention's split merge
  // (kSplitCounters ints; each merging block sets its counter back to 0).
  int32_t* split_counters = nullptr;
  // Products on GGUF block weights (gemm.cc, kernels/quant_gemm.cuh).
  // Tuning::cuda_quant_dot: decode GEMVs on 8-bit activation blocks, which
  // live in q8_x (int8, q8_capacity elements) and q8_d (one f32 per 32).
  bool quant_dot = true;
  // Tuning::cuda_quant_fused: ... and they stage their 8-bit activations
  // themselves, fused with the block's norm and up to four products
  // (kernels/quant_gemv.cuh; q8_x / q8_d then serve only the fallbacks).
  bool quant_fused = true;
  bool quant_fused_fp8 = true;  // Tuning::cuda_quant_fused_fp8: e4m3 weights too
  // Tuning::cuda_quant_stream_tokens: ... with their weight rows bulk-copied
  // into shared memory for steps of up to this many tokens (QuantGemvArgs::
  // stream).
  int64_t quant_stream_tokens = 8;
  int64_t quant_stream_blocks = 1;  // Tuning::cuda_quant_stream_blocks
  int64_t quant_stream_item_steps = 4;  // Tuning::cuda_quant_stream_item_steps
  bool quant_stream_mixed = true;       // Tuning::cuda_quant_stream_mixed
  // Tuning::cuda_quant_mma_fp8 / _u4: ... on the tensor cores for
  // f8_e4m3_b128 / u4_g128 weights from this many tokens (QuantGemvArgs::mma;
  // 0: off).
  int64_t quant_mma_fp8 = 1;
  int64_t quant_mma_u4 = 5;
  int64_t quant_mma_smem_kib = 0;  // Tuning::cuda_quant_mma_smem_kib (QuantGemvArgs::mma_smem_kib)
  bool quant_mma_fp8_act = false;  // Tuning::cuda_quant_mma_fp8_act (QuantGemvArgs::mma_a8)
  // Tuning::cuda_moe_dequant (routed_swiglu_moe.cc).
  int64_t moe_dequant = 512;  // minimum step tokens; 0: off
  bool moe_mma_fp8 = true;   // Tuning::cuda_moe_mma_fp8 (routed_swiglu_moe.cc)
  int64_t moe_mma_u4 = 9;    // Tuning::cuda_moe_mma_u4 (routed_swiglu_moe.cc); 0: off
  // Tuning::cuda_moe_fused_tokens (routed_swiglu_moe.cc): fused decode
  // launches for MoE steps of up to this many tokens; 0: off.
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
  // One int at zero between launches: the arrival counter of the norm +
  // router launch that also routes (launch_moe_norm_router's `route`).
  int32_t* moe_route_counter = nullptr;
  // Tuning::cuda_decode_split_positions (causal_paged_attention.cc).
  int64_t decode_split_positions = 64;
  bool decode_reduce_scatter = false;  // Tuning::cuda_decode_reduce_scatter
  bool decode_cluster = true;          // Tuning::cuda_decode_cluster
  DecodeClusterKnobs decode_cluster_knobs;  // Tuning::cuda_decode_cluster_* (the switches)
  // Tuning::cuda_cluster_trace: the cluster attention's ring of per-block
  // stamps (open_cluster_trace in cuda_exec.cc); records null when off.
  ClusterTrace cluster_trace;
  int64_t decode_colocate = 2;         // Tuning::cuda_decode_colocate (0-2)
  int64_t decode_colocate_min_mib = 8;  // Tuning::cuda_decode_colocate_min_mib
  // Set by the attention provider around its Q/K/V and output projections
  // when the cluster kernel takes the one-token step and its blocks fit
  // beside a GEMV block that leaves attention_decode_cluster_room()
  // (head_dim up to 128; decode_colocate 2).
  bool gemv_beside_attention = false;
  int64_t decode_mma_tokens = 9;       // Tuning::cuda_decode_mma_tokens (0: off)
  bool rope_token_warps = false;       // Tuning::cuda_rope_token_warps (launch_qk_rope_kv)
  bool prefill_short_tiles = false;    // Tuning::cuda_prefill_short_tiles (attention_prefill)
  // Tuning::cuda_dequant_slice_mib (gemm.cc, quant_product).
  int64_t dequant_slice_mib = 512;
  // Tuning::cuda_quant_tile_tokens (gemm.cc, quant_product): products of 9
  // .. this many tokens on block weights through kernels/quant_tile.cuh,
  // whose split-k partial sums and arrival counters live in tile_partials /
  // tile_counters (allocated at init, so decode graphs can point into them).
  int64_t quant_tile_tokens = 32;
  // Tuning::cuda_quant_mmq_tokens and cuda_quant_mmq_min_tokens (gemm.cc,
  // quant_product, mmq_takes): products of quant_mmq_min_tokens .. this many
  // tokens on q4_k / q6_k / q8_0 weights through kernels/quant_mmq.cuh,
  // whose fixed buffers are mmq (allocated at init when it is on).
  int64_t quant_mmq_tokens = 0;
  int64_t quant_mmq_min_tokens = 5;
  bool quant_mmq_waves = true;      // Tuning::cuda_quant_mmq_waves (mmq_splits)
  QuantMmqScratch mmq;
  // What mmq's scratch holds: x (m x k) quantized per mmq_group, as the last
  // product left it. Reused while fp8_act_same_x says x is unchanged (the
  // products of one gemm_projections call: Q, K and V; gate and up).
  bool quant_mmq_share_act = true;   // Tuning::cuda_quant_mmq_share_act
  const void* mmq_x = nullptr;
  int64_t mmq_m = 0, mmq_k = 0;
  int mmq_group = 0;
  int64_t mmq_quantized = 0;  // quantizations launched (tests)
  // Tuning::cuda_u4_tile_tokens (gemm.cc, quant_product): products of 9 ..
  // this many tokens on u4_g128 weights through kernels/u4_tile.cuh (its
  // split-k scratch is tile_partials / tile_counters).
  int64_t u4_tile_tokens = 0;
  bool u4_tile_wgmma = false;  // Tuning::cuda_u4_tile_wgmma: its warpgroup-MMA form
  // k steps a pipeline stage of its mma.sync form: 0 the kernel's choice
  // (u4_tile.cu default_stage_steps), 1 or 2 forced by quant_gemm_bench
  // (--paths u4s1 / u4s2) and cuda_test to measure and test both.
  int u4_tile_stage_steps = 0;
  int64_t u4_tile_products = 0;  // products that took it (tests)
  float* tile_partials = nullptr;
  int64_t tile_partial_floats = 0;
  int32_t* tile_counters = nullptr;
  int64_t tile_counter_count = 0;
  int8_t* q8_x = nullptr;
  float* q8_d = nullptr;
  int64_t q8_capacity = 0;
  // The prefill / batch path dequantizes weight rows into this buffer (in
  // the activation type) for cuBLASLt; grown on eager steps, never while a
  // graph is captured.
  void* dequant = nullptr;
  int64_t dequant_bytes = 0;
  // Tuning::cuda_fp8_lt_tokens (gemm.cc, fp8_lt_product): products of at
  // least this many tokens on f8_e4m3_b128 weights run cuBLASLt's
  // block-scaled FP8 GEMM (kernels/fp8_block_gemm.cuh) on e4m3 activations
  // (fp8_act: codes, then scales; grown on eager steps) and weight slices
  // repacked into `dequant`; 0: off.
  int64_t fp8_lt_tokens = 128;
  uint8_t* fp8_act = nullptr;
  int64_t fp8_act_bytes = 0;
  int32_t* fp8_check = nullptr;  // launch_fp8_blk_uniform's answer
  // What fp8_act holds: the e4m3 codes of (x, m, k) as the last product
  // quantized them. A product reuses them only while fp8_act_same_x is set,
  // which gemm_projections sets for its second and later products of one
  // unchanged x (Q, K and V; gate and up): one quantization instead of 2-3.
  const void* fp8_act_x = nullptr;
  int64_t fp8_act_m = 0, fp8_act_k = 0;
  bool fp8_act_same_x = false;
  int64_t fp8_act_quantized = 0;  // quantizations launched (tests)
  int64_t fp8_lt_products = 0;    // products that took it (tests)
  std::string fp8_lt_why;        // why the last one that did not, did not
  // Per weight (pointer, rows): whether its 128-row groups share their
  // scales (128x128 scales) or not (per-row scales); checked once, on an
  // eager step (a weight first met while capturing takes per-row scales).
  std::map<std::pair<const void*, int64_t>, bool> fp8_blk;
};
constexpr int64_t kSplitCounters = 1 << 16;

BackendState& state(const Invocation& inv);
// Destroys the captured decode graphs (they are captured again on their
// next step): a scratch buffer they point into is being reallocated.
void drop_captured_graphs(BackendState& st);
// Makes sure `meta` describes inv.batch (the executor normally prepared it;
// direct callers such as the conformance suite may not have).
Status ensure_prepared(const Invocation& inv);

inline cudaStream_t stream_of(const Invocation& inv) { return state(inv).stream; }

inline int64_t i64(uint64_t v) { return static_cast<int64_t>(v); }

// Colocation 2 (Tuning::cuda_decode_colocate): whether a layer's one-token
// Q/K/V and output projections leave room for the cluster attention's
// blocks, by its Q/K/V weight bytes. The room costs each of those GEMVs
// warps and ring; it pays only where they stream long enough for the
// attention's blocks to start and copy their K/V rows beside them
// (Qwen3-8B Q4_K_M, 14 MB of Q/K/V: +7 % b1 on the H200; Qwen3-30B-A3B,
// 5.9 MB: -1.4 to -2.3 % in three runs), so below min_mib MiB it is left out.
inline bool colocation_pays(int64_t qkv_bytes, int64_t min_mib) {
  return qkv_bytes >= min_mib * (int64_t{1} << 20);
}

// The kernels find a sequence's rows from the binding buffer's last rows:
// the gated-delta and MoE providers need sequences packed in order.
inline Status check_packed(const StepBatch& batch, const char* what) {
  int32_t next = 0;
  for (const SequenceSlice& s : batch.sequences) {
    if (s.token_begin != next || s.token_count < 1)
      return unsupported(std::string(what) + ": sequences must be packed in order");
    next += s.token_count;
  }
  if (next != batch.num_tokens())
    return unsupported(std::string(what) + ": sequences must cover the packed tokens");
  return Status::ok();
}

// Provider descriptor boilerplate.
ProviderDescriptor cuda_descriptor(std::string name, const ContractSchema& contract,
                                   std::string summary, bool paged_kv = false);

// The descriptor of a provider whose matrix weights go through gemm() (or
// the block-format embedding gather): it also takes the GGUF block formats
// (q8_0, q4_0, q4_k, q5_k, q6_k) and the repacked Hugging Face ones
// (f8_e4m3_b128, u4_g128; kernels/quant_gemm.cuh).
inline ProviderDescriptor with_block_formats(ProviderDescriptor d) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kF8B128, DType::kU4G128})
    d.weight_dtypes.push_back(t);
  return d;
}

// The descriptor of a provider whose products read act-order 4-bit weights
// through their input permutation (gemm.h InputPerm; block_stages.h).
inline ProviderDescriptor with_input_permutation(ProviderDescriptor d) {
  d.input_permutation = true;
  return d;
}
// Whether a weight of the node is act-order (NodeSignature::
// binding_permuted): its provider then takes a gather buffer for the
// permuted activations from its workspace.
inline bool any_permuted(const NodeSignature& node) {
  for (bool b : node.binding_permuted)
    if (b) return true;
  return false;
}

// Workspace pieces: runtime/workspace.h (the one bump allocator of every backend).

}  // namespace ferrite::cuda
