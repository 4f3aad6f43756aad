// Tensor-core flash attention for prompt tokens over the paged KV cache.
#include "backends/cuda/cuda_types.cuh"
#include "backends/cuda/kernels.h"

namespace ferrite::cuda {

bool attention_prefill_supported(const AttentionShape& a, DType act) { return false; }

Status launch_attention_prefill(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                                int32_t page_size, const int32_t* tile_seq,
                                const int32_t* tile_row, int64_t tiles, const void* q, DType act,
                                const void* k_cache, const void* v_cache, void* out) {
  return unsupported("attention prefill kernel");
}

}  // namespace ferrite::cuda
