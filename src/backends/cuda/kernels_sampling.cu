// Sampler-stage kernels: penalised row copies and the masked argmax.
#include "backends/cuda/cuda_types.cuh"
#include "backends/cuda/kernels.h"

namespace ferrite::cuda {
namespace {

__global__ void copy_rows_kernel(const float* src, float* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// One thread per (row, id) entry; entries are unique per row.
__global__ void penalty_kernel(const float* logits, float* dst, int64_t vocab, const int32_t* row,
                               const int32_t* id, const int32_t* rep, const int32_t* count,
                               int64_t entries, const float* rep_penalty, const float* presence,
                               const float* frequency) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= entries) return;
  const int64_t r = row[e];
  const int64_t i = r * vocab + id[e];
  float l = logits[i];
  const float pen = rep_penalty[r];
  if (rep[e] && pen != 1.0f) l = l > 0 ? l / pen : l * pen;
  if (count[e] > 0) l -= presence[r] + frequency[r] * static_cast<float>(count[e]);
  dst[i] = l;
}

// Better: larger value, or equal value and lower id.
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
  if (bi < 0) return true;
  if (v > bv) return true;
  return v == bv && i < bi;
}

__global__ void __launch_bounds__(1024) argmax_kernel(const float* logits, int64_t vocab,
                                                       const uint8_t* mask, uint32_t* tokens) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const float* row = logits + blockIdx.x * vocab;
  float bv = -INFINITY;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (mask && !mask[i]) continue;
    const float v = row[i];
    if (bi < 0 || v > bv) {  // ascending i per thread: first max wins ties
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float best_v = -INFINITY;
    int64_t best_i = -1;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w)
      if (si[w] >= 0 && better(sv[w], si[w], best_v, best_i)) {
        best_v = sv[w];
        best_i = si[w];
      }
    tokens[blockIdx.x] = static_cast<uint32_t>(best_i < 0 ? 0 : best_i);
  }
}

}  // namespace

Status launch_apply_penalties(cudaStream_t s, const float* logits, float* dst, int64_t rows,
                              int64_t vocab, const int32_t* entry_row, const int32_t* entry_id,
                              const int32_t* entry_rep, const int32_t* entry_count,
                              int64_t entries, const float* rep_penalty, const float* presence,
                              const float* frequency) {
  const int64_t n = rows * vocab;
  if (n == 0) return Status::ok();
  int64_t blocks = (n + 255) / 256;
  copy_rows_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(logits, dst, n);
  if (entries > 0)
    penalty_kernel<<<static_cast<unsigned>((entries + 255) / 256), 256, 0, s>>>(
        logits, dst, vocab, entry_row, entry_id, entry_rep, entry_count, entries, rep_penalty,
        presence, frequency);
  return check_launch("apply_penalties");
}

Status launch_masked_argmax(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                            const uint8_t* mask, uint32_t* tokens) {
  if (rows == 0) return Status::ok();
  argmax_kernel<<<static_cast<unsigned>(rows), 1024, 0, s>>>(logits, vocab, mask, tokens);
  return check_launch("masked_argmax");
}

}  // namespace ferrite::cuda
