// Tensor-core flash prefill over the paged KV cache.
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/kernels/attention.cuh"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Flash-style prefill over paged KV on tensor cores (mma.sync; bf16 / f16,
// head_dim 64, 128 or 256): query tiles of up to kPrefillTileQ consecutive
// rows of one sequence (tile_seq / tile_row) against its cached keys.
// short_tiles (Tuning::cuda_prefill_short_tiles, head_dim 128): 32-key tiles
// with Q re-read from shared memory, 3 blocks an SM instead of 2.
bool attention_prefill_supported(const AttentionShape& a, DType act);
Status launch_attention_prefill(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                                int32_t page_size, const int32_t* tile_seq, const int32_t* tile_row, int64_t tiles,
                                int64_t tokens, const void* q, DType act, const void* k_cache,
                                const void* v_cache, void* out, bool short_tiles = false);
constexpr int kPrefillTileQ = 64;

}  // namespace ferrite::cuda
