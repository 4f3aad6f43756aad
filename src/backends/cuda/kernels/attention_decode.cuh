// Fused decode attention (one kernel per decode step and layer).
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/attention_decode_cluster_knobs.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// What every decode attention launcher below reads and writes besides its
// split plan: a step of `tokens` tokens (each its sequence's newest
// position) with its metadata and page size, the step's new q / k / v rows
// (act: bf16 / f16; q is not updated in place), the q / k norm weights
// (null: no norm) and the q / k / v biases (null: none) with their dtypes,
// the paged K / V caches the new rows are written into, and the attention
// output.
struct DecodeAttentionIo {
  StepMeta meta;
  int32_t page_size = 0;
  int64_t tokens = 0;
  void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  DType act = DType::kBF16;
  const void* q_norm = nullptr;
  const void* k_norm = nullptr;
  DType norm_dt = DType::kBF16;
  const void* q_bias = nullptr;
  const void* k_bias = nullptr;
  const void* v_bias = nullptr;
  DType bias_dt = DType::kBF16;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  void* out = nullptr;
};

// The decode kernels' argument for the norm and bias weights of a
// DecodeAttentionIo (dtypes as cuda_types.cuh's dt_code).
struct DecodeWeights {
  const void* q_norm;
  const void* k_norm;
  int norm_dt;
  const void* q_bias;
  const void* k_bias;
  const void* v_bias;
  int bias_dt;
};
DecodeWeights decode_weights(const DecodeAttentionIo& io);

// A decode step (every token its sequence's
// newest position) in one kernel: what launch_qk_rope_kv does for the
// token (bias, q/k norm, RoPE, the K/V write; q is not updated in place),
// then attention over its cached positions split over `splits` ranges
// (partials as in launch_attention_decode). bf16 / f16, head_dim 64, 128
// or 256; a block takes up to 4 query heads of a KV head's group
// (fused_decode_parts(group) blocks per KV head). With split_counters
// (zeroed ints, one per (token, KV head, part), left zeroed) the
// splits are merged in the kernel, else by launch_attention_combine.
// `pdl`: launched as a programmatic dependent (it reads the page table and
// cached K/V first). `scatter` (Tuning::cuda_decode_reduce_scatter): the
// scores' warp sums with fewer shuffles and V unpacked once for all heads,
// bitwise the same outputs.
bool attention_decode_fused_supported(const AttentionShape& a, DType act);
int fused_decode_parts(int group);
Status launch_attention_decode_fused(cudaStream_t s, const AttentionShape& a,
                                     const DecodeAttentionIo& io, int splits, float* partials,
                                     int32_t* split_counters, int64_t num_counters, bool pdl,
                                     bool scatter = false);

// The same contract for short contexts (attention_decode_cluster.cu): the
// splits of each (token, KV head, part) are one thread-block cluster that
// merges in distributed shared memory, every cached K/V row of a split
// (up to 64 positions) copied into shared memory before the wait.
// attention_decode_cluster_splits: the splits it takes for a step of
// `tokens` tokens under the length bound kv_len_bound (StepMeta), 0 when it
// does not apply (more than 8 tokens, a bound above 512 positions, or what
// attention_decode_fused_supported rejects). No partials or counters.
int attention_decode_cluster_splits(const AttentionShape& a, DType act, int64_t tokens,
                                    int64_t kv_len_bound);
// The longest length bound the cluster kernel takes (8 splits of 64).
constexpr int64_t kAttentionClusterMaxPositions = 512;
// ClusterTrace (Tuning::cuda_cluster_trace; records null: off): every block
// leaves one ClusterTraceRecord, its phases' SM clocks, in a ring in device
// memory (a diagnostic: where the kernel's time goes inside a real decode
// step, beside the kernels PDL overlaps it with).
struct ClusterTraceRecord {
  uint64_t global_start;  // %globaltimer (ns) at the block's start
  uint64_t global_end;    // and after its last barrier
  // clock64() - its value at the start, at: 0 the PDL wait's call (the
  // prologue issued), 1 its return, 2 the token's rows done, 3 the cached
  // rows in shared memory (after __syncthreads), 4 the softmax, 5 P x V,
  // 6 after the first cluster barrier, 7 the merge's outputs stored, 8 the
  // last barrier's return; in the prologue, 9 the first copy about to be
  // issued (with staged pages or bulk copies: after the __syncthreads that
  // publishes the page ids / the mbarrier's init), 10 every copy issued.
  uint32_t clock[11];
  uint32_t block;   // blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)
  uint32_t blocks;  // gridDim.x * gridDim.y * gridDim.z
  uint32_t smid;
};
struct ClusterTrace {
  ClusterTraceRecord* records = nullptr;  // device memory, `capacity` records
  uint32_t* next = nullptr;               // the records taken so far (ring index)
  uint32_t capacity = 0;                  // a power of two
};
struct ClusterAttentionOptions {
  // The kernel prefers the largest shared-memory carveout (the bulk-copy
  // GEMVs' configuration), so that its blocks may start on SMs still
  // running theirs (Tuning::cuda_decode_colocate).
  bool max_carveout = false;
  // The switches (Tuning::cuda_decode_cluster_*); the same values with any.
  DecodeClusterKnobs knobs;
  ClusterTrace trace;
};
Status launch_attention_decode_cluster(cudaStream_t s, const AttentionShape& a,
                                       const DecodeAttentionIo& io, int splits, bool pdl,
                                       const ClusterAttentionOptions& options = {});
// The shared memory an SM must have free for one block of the cluster
// kernel with head_dim up to 128 (its dynamic shared memory and the
// runtime's reserve a block).
size_t attention_decode_cluster_room();

// The same contract on the tensor cores (attention_decode_mma.cu): one
// block of 4 warps per (token, KV head, split) with all the group's query
// heads (up to 16) as the rows of mma.sync tiles over 16 positions at a
// time; bf16 / f16, head_dim 64 or 128. Splits go through `partials` and
// launch_attention_combine. Outputs agree with the fused kernel within the
// activation type's rounding (P is rounded to it for the value product).
// Tuning::cuda_decode_mma_tokens picks it for steps of that many tokens.
bool attention_decode_mma_supported(const AttentionShape& a, DType act);
Status launch_attention_decode_mma(cudaStream_t s, const AttentionShape& a,
                                   const DecodeAttentionIo& io, int splits, float* partials,
                                   bool pdl);

}  // namespace ferrite::cuda
