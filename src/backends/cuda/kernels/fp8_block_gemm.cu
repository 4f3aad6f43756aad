// Operands of cuBLASLt's block-scaled FP8 GEMM: fp8_block_gemm.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/fp8_block_gemm.cuh"

namespace ferrite::cuda {
namespace {

constexpr int kBlockBytes = 132;  // f8_e4m3_b128: f32 d, 128 codes

// Each warp of these kernels takes kBatch consecutive items (row, 128-element
// group) of an [rows, kb] grid, 8 warps a block, and loads all of its items
// before it stores any: one item a warp kept a few hundred bytes in flight
// per warp (the H200's profile of a 4,096-token Qwen3-8B FP8 prefill left
// ~270 us a layer of gate / up beyond the GEMM, the SiLU product and the
// norm, where this repack and quantization run). warp_items gives the first
// item and the number to take.
constexpr int kWarps = 8;
template <int kBatch>
__device__ __forceinline__ int warp_items(int64_t rows, int64_t kb, int64_t* first) {
  *first = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kBatch;
  const int64_t left = rows * kb - *first;
  return left <= 0 ? 0 : left < kBatch ? static_cast<int>(left) : kBatch;
}
template <int kBatch>
unsigned item_blocks(int64_t items) {
  return static_cast<unsigned>((items + kWarps * kBatch - 1) / (kWarps * kBatch));
}

// One warp per (token, 128-element group): 4 elements a lane.
constexpr int kActBatch = 4;
template <typename TX>
__global__ void __launch_bounds__(256)
    fp8_quantize_act_kernel(const TX* __restrict__ x, int64_t m, int64_t k,
                            uint8_t* __restrict__ codes, float* __restrict__ scales) {
  const int lane = threadIdx.x & 31;
  const int64_t kb = k / 128;
  int64_t first;
  const int n = warp_items<kActBatch>(m, kb, &first);
  float f[kActBatch][4];
#pragma unroll
  for (int i = 0; i < kActBatch; ++i) {
    if (i >= n) break;
    const int64_t item = first + i, t = item / kb, g = item % kb;
    const TX* src = x + t * k + g * 128 + lane * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) f[i][j] = to_f(src[j]);
  }
#pragma unroll
  for (int i = 0; i < kActBatch; ++i) {
    if (i >= n) break;
    const int64_t item = first + i, t = item / kb, g = item % kb;
    float am = fmaxf(fmaxf(fabsf(f[i][0]), fabsf(f[i][1])), fmaxf(fabsf(f[i][2]), fabsf(f[i][3])));
    am = warp_max(am);
    const float scale = am / 448.0f;
    uint32_t word = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float a = scale > 0.0f ? __fdiv_rn(f[i][2 * h], scale) : 0.0f;
      const float b = scale > 0.0f ? __fdiv_rn(f[i][2 * h + 1], scale) : 0.0f;
      const uint32_t two = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
      word |= two << (16 * h);
    }
    *reinterpret_cast<uint32_t*>(codes + t * k + g * 128 + lane * 4) = word;
    if (lane == 0) scales[g * m + t] = scale;
  }
}

// One warp per stored block (row r of the slice, group j): 4 codes a lane.
constexpr int kRepackBatch = 8;
__global__ void __launch_bounds__(256)
    fp8_repack_rows_kernel(const uint8_t* __restrict__ w, int64_t k, int64_t rows, bool blk,
                           uint8_t* __restrict__ codes, float* __restrict__ scales) {
  const int lane = threadIdx.x & 31;
  const int64_t kb = k / 128;
  int64_t first;
  const int n = warp_items<kRepackBatch>(rows, kb, &first);
  uint32_t word[kRepackBatch];
  float d[kRepackBatch];
#pragma unroll
  for (int i = 0; i < kRepackBatch; ++i) {
    if (i >= n) break;
    const uint8_t* b = w + (first + i) * kBlockBytes;  // the slice's blocks are consecutive
    word[i] = *reinterpret_cast<const uint32_t*>(b + 4 + lane * 4);
    d[i] = lane == 0 ? *reinterpret_cast<const float*>(b) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kRepackBatch; ++i) {
    if (i >= n) break;
    const int64_t item = first + i, r = item / kb, j = item % kb;
    *reinterpret_cast<uint32_t*>(codes + r * k + j * 128 + lane * 4) = word[i];
    if (lane == 0) {
      if (!blk)
        scales[j * rows + r] = d[i];
      else if (r % 128 == 0)
        scales[(r / 128) * fp8_blk_kpad(k) + j] = d[i];
    }
  }
}

__global__ void fp8_blk_uniform_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t kb,
                                       int32_t* mismatch) {
  const int64_t total = n * kb;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / kb, j = i % kb;
    const int64_t first = (r / 128 * 128) * kb + j;
    const uint32_t d = *reinterpret_cast<const uint32_t*>(w + i * kBlockBytes);
    const uint32_t d0 = *reinterpret_cast<const uint32_t*>(w + first * kBlockBytes);
    if (d != d0) *mismatch = 1;  // any writer: the same value
  }
}

}  // namespace

Status launch_fp8_quantize_act(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                               uint8_t* codes, float* scales) {
  if (m == 0) return Status::ok();
  if (k % 128 != 0) return unsupported("fp8 activations: k is not a multiple of 128");
  const unsigned blocks = item_blocks<kActBatch>(m * (k / 128));
  if (x_dt == DType::kBF16)
    fp8_quantize_act_kernel<__nv_bfloat16>
        <<<blocks, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(x), m, k, codes, scales);
  else if (x_dt == DType::kF16)
    fp8_quantize_act_kernel<__half>
        <<<blocks, 256, 0, s>>>(static_cast<const __half*>(x), m, k, codes, scales);
  else
    return bad_dtype("fp8 activations", x_dt);
  return check_launch("fp8_quantize_act");
}

Status launch_fp8_repack_rows(cudaStream_t s, const void* w, int64_t k, int64_t row0, int64_t rows,
                              bool blk, uint8_t* codes, float* scales) {
  if (rows == 0) return Status::ok();
  if (k % 128 != 0) return unsupported("fp8 repack: k is not a multiple of 128");
  if (blk && row0 % 128 != 0)
    return unsupported("fp8 repack: 128x128 scales from row " + std::to_string(row0));
  const int64_t row_bytes = k / 128 * kBlockBytes;
  const auto* wb = static_cast<const uint8_t*>(w) + row0 * row_bytes;
  const unsigned blocks = item_blocks<kRepackBatch>(rows * (k / 128));
  fp8_repack_rows_kernel<<<blocks, 256, 0, s>>>(wb, k, rows, blk, codes, scales);
  return check_launch("fp8_repack_rows");
}

Status launch_fp8_blk_uniform(cudaStream_t s, const void* w, int64_t n, int64_t k,
                              int32_t* mismatch) {
  if (k % 128 != 0) return unsupported("fp8 scales check: k is not a multiple of 128");
  FERRITE_CUDA_RETURN(cudaMemsetAsync(mismatch, 0, sizeof(int32_t), s));
  if (n == 0) return Status::ok();
  fp8_blk_uniform_kernel<<<grid_for(n * (k / 128), 256), 256, 0, s>>>(
      static_cast<const uint8_t*>(w), n, k / 128, mismatch);
  return check_launch("fp8_blk_uniform");
}

}  // namespace ferrite::cuda
