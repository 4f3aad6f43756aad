#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"
#include "backends/cuda/kernels/quant_gemm.cuh"

namespace ferrite::cuda {
namespace {

using namespace qblocks;

// Eight consecutive activations as f32 (16-byte loads when `vec`).
template <typename TX>
__device__ __forceinline__ void load_x8(const TX* p, bool vec, float (&f)[8]) {
  if constexpr (sizeof(TX) == 2) {
    if (vec) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      const TX* h = reinterpret_cast<const TX*>(&u);
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = to_f(h[i]);
      return;
    }
  } else {
    if (vec) {
      const float4 a = *reinterpret_cast<const float4*>(p);
      const float4 b = *reinterpret_cast<const float4*>(p + 4);
      f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z,
      f[7] = b.w;
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f(p[i]);
}

// The GEMVs' epilogue: each warp's per-lane partial sums of R weight rows x
// M tokens reduced, then lane 0 writes out[t, row] (+ bias, + the old value
// when accumulating) for the rows and tokens that exist.
template <typename TO, int R, int M>
__device__ __forceinline__ void store_gemv_sums(float (&acc)[R][M], int lane, int64_t row0,
                                                int64_t t0, int64_t m, int64_t n, TO* out,
                                                bool accumulate, const void* bias, int bias_dt) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const float sum = warp_sum(acc[r][t]);
      if (lane == 0 && t0 + t < m && row < n) {
        float val = sum + (bias ? load_any(bias, bias_dt, row) : 0.0f);
        TO* o = out + (t0 + t) * n + row;
        if (accumulate) val += to_f(*o);
        *o = from_f<TO>(val);
      }
    }
  }
}

constexpr int kGemvWarps = 4;  // warps per block
constexpr int kGemvRows = 2;   // weight rows per warp (independent streams)

// One warp per kGemvRows weight rows, tokens [blockIdx.y * M, + M).
template <int F, typename TX, typename TO, int M>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_gemv_kernel(const TX* __restrict__ x, int64_t m, int64_t k, bool xvec,
                      const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n,
                      TO* __restrict__ out, bool accumulate, const void* bias, int bias_dt) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp) * kGemvRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * M;
  if (row0 >= n) return;
  const uint8_t* wr[kGemvRows];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) wr[r] = w + (row0 + r < n ? row0 + r : row0) * row_bytes;
  float acc[kGemvRows][M];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
#pragma unroll 4
  for (int64_t base = 0; base < k; base += 256) {
    const int64_t e = base + lane * 8;
    if (e >= k) break;
    float v[kGemvRows][8];
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) dequant8<F>(wr[r], e, v[r]);
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if (t0 + t < m) {
        float xf[8];
        load_x8(x + (t0 + t) * k + e, xvec, xf);
#pragma unroll
        for (int r = 0; r < kGemvRows; ++r)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r][t] = fmaf(v[r][i], xf[i], acc[r][t]);
      }
    }
  }
  store_gemv_sums(acc, lane, row0, t0, m, n, out, accumulate, bias, bias_dt);
}

// Tensor-core tiles: 128 tokens x 64 weight rows per block of 4 warps (each
// warp 32 tokens x 64 rows), k steps of 32; W dequantized into shared memory
// in the activation type.
constexpr int kMmaBM = 128, kMmaBN = 64, kMmaBK = 32, kMmaLds = kMmaBK + 8;

template <int F, typename T, typename TO>
__global__ void __launch_bounds__(128)
    quant_mma_kernel(const T* __restrict__ x, int64_t m, int64_t k, bool xvec,
                     const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n,
                     TO* __restrict__ out, bool accumulate, const void* bias, int bias_dt) {
  __shared__ __align__(16) T xs[kMmaBM][kMmaLds];
  __shared__ __align__(16) T ws[kMmaBN][kMmaLds];
  // bf16 keeps 8 bits of a dequantized weight: the remainder goes in a
  // second tile (w = hi + lo, two mma), so the product carries the weights
  // to about 16 bits, as the f16 tile does in one.
  constexpr bool kSplit = std::is_same_v<T, __nv_bfloat16>;
  __shared__ __align__(16) T ws_lo[kSplit ? kMmaBN : 1][kMmaLds];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kMmaBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kMmaBN;
  float acc[2][8][4];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[a][j][q] = 0.0f;

  for (int64_t k0 = 0; k0 < k; k0 += kMmaBK) {
    // x tile: 128 rows x 32, one row per thread.
    {
      const int64_t gm = m0 + tid;
      T* dst = &xs[tid][0];
      if (gm < m) {
        const T* src = x + gm * k + k0;
        if (xvec) {
#pragma unroll
          for (int c = 0; c < kMmaBK; c += 8)
            *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(src + c);
        } else {
#pragma unroll
          for (int c = 0; c < kMmaBK; ++c) dst[c] = src[c];
        }
      } else {
#pragma unroll
        for (int c = 0; c < kMmaBK; c += 8)
          *reinterpret_cast<uint4*>(dst + c) = make_uint4(0, 0, 0, 0);
      }
    }
    // W tile: 64 rows x 32, half a row (16 elements) per thread.
    {
      const int r = tid >> 1, c = (tid & 1) * 16;
      const int64_t gn = n0 + r;
      T* dst = &ws[r][c];
      if (gn < n) {
        const uint8_t* wr = w + gn * row_bytes;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v[8];
          dequant8<F>(wr, k0 + c + 8 * h, v);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const T hi = from_f<T>(v[i]);
            dst[8 * h + i] = hi;
            if constexpr (kSplit) ws_lo[r][c + 8 * h + i] = from_f<T>(v[i] - to_f(hi));
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          dst[i] = from_f<T>(0.0f);
          if constexpr (kSplit) ws_lo[r][c + i] = from_f<T>(0.0f);
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kMmaBK; kk += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int ar = warp * 32 + s * 16 + g;
        a[s][0] = *reinterpret_cast<const uint32_t*>(&xs[ar][kk + 2 * tq]);
        a[s][1] = *reinterpret_cast<const uint32_t*>(&xs[ar + 8][kk + 2 * tq]);
        a[s][2] = *reinterpret_cast<const uint32_t*>(&xs[ar][kk + 2 * tq + 8]);
        a[s][3] = *reinterpret_cast<const uint32_t*>(&xs[ar + 8][kk + 2 * tq + 8]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int br = j * 8 + g;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&ws[br][kk + 2 * tq]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&ws[br][kk + 2 * tq + 8]);
        mma16816<T>(acc[0][j], a[0], b0, b1);
        mma16816<T>(acc[1][j], a[1], b0, b1);
        if constexpr (kSplit) {
          const uint32_t l0 = *reinterpret_cast<const uint32_t*>(&ws_lo[br][kk + 2 * tq]);
          const uint32_t l1 = *reinterpret_cast<const uint32_t*>(&ws_lo[br][kk + 2 * tq + 8]);
          mma16816<T>(acc[0][j], a[0], l0, l1);
          mma16816<T>(acc[1][j], a[1], l0, l1);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int s = 0; s < 2; ++s) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t gm = m0 + warp * 32 + s * 16 + g + (q >> 1) * 8;
        const int64_t gn = n0 + j * 8 + 2 * tq + (q & 1);
        if (gm < m && gn < n) {
          float val = acc[s][j][q] + (bias ? load_any(bias, bias_dt, gn) : 0.0f);
          TO* o = out + gm * n + gn;
          if (accumulate) val += to_f(*o);
          *o = from_f<TO>(val);
        }
      }
    }
  }
}

// --- 8-bit activation blocks and integer dot products ----------------------

// x [m, k] -> int8 blocks of 32 (q = round(x * 127 / amax)) + f32 scales
// amax / 127; one warp per block, lane i quantizes element i.
// Rows of x have stride ldx; xq rows are packed (stride k).
template <typename TX>
__global__ void __launch_bounds__(256)
    quantize_q8_kernel(const TX* __restrict__ x, int64_t ldx, int64_t k, int64_t groups,
                       int8_t* __restrict__ xq, float* __restrict__ xd) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (g >= groups) return;
  const int64_t row = g / (k / 32), col = (g - row * (k / 32)) * 32;
  quantize_q8_lane(to_f(x[row * ldx + col + lane]), lane, xq + g * 32 + lane, xd + g);
}


// One warp per R weight rows, tokens [blockIdx.y * M, + M); lanes split each
// block (kLanes per block), a warp covers 32 / kLanes blocks per iteration.
template <int F, typename TO, int M, int R>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_gemv_q8_kernel(const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t m,
                         int64_t k, const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n,
                         TO* __restrict__ out, bool accumulate, const void* bias, int bias_dt) {
  using Fmt = Q8Dot<F>;
  constexpr int kPerIter = 32 / Fmt::kLanes;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Token tiles vary fastest over the grid, so the blocks of one weight row
  // group run together and all but the first read it from L2.
  const int64_t row0 = (static_cast<int64_t>(blockIdx.y) * kGemvWarps + warp) * R;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * M;
  if (row0 >= n) return;
  const int nb = static_cast<int>(k / Fmt::kElems);
  const int bl = lane / Fmt::kLanes, part = lane % Fmt::kLanes;
  const uint8_t* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = w + (row0 + r < n ? row0 + r : row0) * row_bytes;
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
  const int64_t xs = k / 32;
  // One block per lane and row, then its products. (Preloading 4 blocks per
  // lane before the products was measured slower on the H200: Q4_K_M Qwen3-8B
  // batch 1 168 -> 128 tok/s, 156 registers and fewer warps per SM.)
#pragma unroll 2
  for (int b = bl; b < nb; b += kPerIter) {
    Fmt wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r].load(wr[r] + static_cast<int64_t>(b) * Fmt::kBytes, part);
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if (t0 + t < m) {
        const int8_t* xb = xq + (t0 + t) * k + static_cast<int64_t>(b) * Fmt::kElems;
        const float* db = xd + (t0 + t) * xs + static_cast<int64_t>(b) * (Fmt::kElems / 32);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] += wv[r].dot(xb, db);
      }
    }
  }
  store_gemv_sums(acc, lane, row0, t0, m, n, out, accumulate, bias, bias_dt);
}

// --- MoE experts in block formats --------------------------------------------
// Over the tile table of the expert sort (moe.cuh: per tile its expert, first
// gathered row and row count; blocks past *tile_count exit): one warp per
// expert weight row j, the tile's rows M at a time. Row r's input is token
// row_pair[r] / top_k (by_token) or gathered row r; out[r, j] f32.
struct MoeTiles {
  const int32_t* row_pair;
  int top_k;
  bool by_token;
  const int32_t* tiles;
  const int32_t* tile_count;
};
constexpr int kMoeQuantM = 4;

template <int F>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_moe_q8_kernel(const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t k,
                        MoeTiles mt, const uint8_t* __restrict__ w, int64_t row_bytes,
                        int64_t nout, float* __restrict__ out, int64_t ldo) {
  using Fmt = Q8Dot<F>;
  constexpr int kPerIter = 32 / Fmt::kLanes, M = kMoeQuantM;
  const int tile = blockIdx.y;
  if (tile >= *mt.tile_count) return;
  const int e = mt.tiles[4 * tile], r0 = mt.tiles[4 * tile + 1], nr = mt.tiles[4 * tile + 2];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (j >= nout) return;
  const uint8_t* wr = w + (static_cast<int64_t>(e) * nout + j) * row_bytes;
  const int nb = static_cast<int>(k / Fmt::kElems);
  const int bl = lane / Fmt::kLanes, part = lane % Fmt::kLanes;
  const int64_t xs = k / 32;
  for (int c0 = 0; c0 < nr; c0 += M) {
    int64_t xrow[M];
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const int r = r0 + c0 + t;
      xrow[t] = c0 + t < nr ? (mt.by_token ? mt.row_pair[r] / mt.top_k : r) : -1;
      acc[t] = 0.0f;
    }
#pragma unroll 2
    for (int b = bl; b < nb; b += kPerIter) {
      Fmt wv;
      wv.load(wr + static_cast<int64_t>(b) * Fmt::kBytes, part);
#pragma unroll
      for (int t = 0; t < M; ++t)
        if (xrow[t] >= 0)
          acc[t] += wv.dot(xq + xrow[t] * k + static_cast<int64_t>(b) * Fmt::kElems,
                           xd + xrow[t] * xs + static_cast<int64_t>(b) * (Fmt::kElems / 32));
    }
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const float sum = warp_sum(acc[t]);
      if (lane == 0 && xrow[t] >= 0) out[static_cast<int64_t>(r0 + c0 + t) * ldo + j] = sum;
    }
  }
}

// The same on f32 inputs (row stride ldx) and the dequantized blocks (the
// reference numerics: Tuning::cuda_quant_dot off).
template <int F>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_moe_f32_kernel(const float* __restrict__ x, int64_t ldx, int64_t k, MoeTiles mt,
                         const uint8_t* __restrict__ w, int64_t row_bytes, int64_t nout,
                         float* __restrict__ out, int64_t ldo) {
  constexpr int M = kMoeQuantM;
  const int tile = blockIdx.y;
  if (tile >= *mt.tile_count) return;
  const int e = mt.tiles[4 * tile], r0 = mt.tiles[4 * tile + 1], nr = mt.tiles[4 * tile + 2];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (j >= nout) return;
  const uint8_t* wr = w + (static_cast<int64_t>(e) * nout + j) * row_bytes;
  for (int c0 = 0; c0 < nr; c0 += M) {
    int64_t xrow[M];
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const int r = r0 + c0 + t;
      xrow[t] = c0 + t < nr ? (mt.by_token ? mt.row_pair[r] / mt.top_k : r) : -1;
      acc[t] = 0.0f;
    }
    for (int64_t base = 0; base < k; base += 256) {
      const int64_t el = base + lane * 8;
      if (el >= k) break;
      float v[8];
      dequant8<F>(wr, el, v);
#pragma unroll
      for (int t = 0; t < M; ++t) {
        if (xrow[t] < 0) continue;
        const float* xr = x + xrow[t] * ldx + el;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[t] = fmaf(v[i], xr[i], acc[t]);
      }
    }
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const float sum = warp_sum(acc[t]);
      if (lane == 0 && xrow[t] >= 0) out[static_cast<int64_t>(r0 + c0 + t) * ldo + j] = sum;
    }
  }
}

// Rows of a block weight dequantized to T, 8 elements per thread: block
// (x, y) takes row x's elements [y * kDequantChunk, + kDequantChunk). The
// row comes from the grid, not from a 64-bit division of a flat index: the
// kernel is issue-bound (ncu on the H200: ~160 instructions a thread, the
// division a third of them, 68 % issue at 2.7 TB/s for 24576 x 4096 q4_k).
constexpr int kDequantThreads = 256;
constexpr int64_t kDequantChunk = 8 * kDequantThreads;
template <int F, typename T>
__global__ void __launch_bounds__(kDequantThreads)
    quant_dequant_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t k,
                         T* __restrict__ out) {
  const int64_t e = blockIdx.y * kDequantChunk + threadIdx.x * 8;
  if (e >= k) return;
  const int64_t r = blockIdx.x;
  const int64_t i = r * k + e;
  float v[8];
  dequant8<F>(w + r * row_bytes, e, v);
  if constexpr (sizeof(T) == 2) {
    uint4 u;
    T* h = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = from_f<T>(v[j]);
    *reinterpret_cast<uint4*>(out + i) = u;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) out[i + j] = v[j];
  }
}

template <typename TO>
__global__ void add_bias_kernel(TO* __restrict__ out, int64_t m, int64_t n, int64_t ld,
                                const void* bias, int bias_dt) {
  const int64_t total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / n, c = i - t * n;
    TO* o = out + t * ld + c;
    *o = from_f<TO>(to_f(*o) + load_any(bias, bias_dt, c));
  }
}

template <int F, typename TO>
__global__ void quant_embedding_kernel(const uint32_t* __restrict__ ids, const uint8_t* table,
                                       int64_t row_bytes, int64_t vocab, int64_t hidden,
                                       TO* __restrict__ out) {
  pdl_wait();
  const int64_t t = blockIdx.x;
  uint32_t id = ids[t];
  if (id >= vocab) id = static_cast<uint32_t>(vocab - 1);
  const uint8_t* row = table + static_cast<int64_t>(id) * row_bytes;
  for (int64_t e = static_cast<int64_t>(threadIdx.x) * 8; e < hidden; e += blockDim.x * 8) {
    float v[8];
    dequant8<F>(row, e, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[t * hidden + e + i] = from_f<TO>(v[i]);
  }
}

bool aligned16(const void* p, int64_t k, int64_t elem) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (k * elem) % 16 == 0;
}

}  // namespace

bool quant_gemm_supported(DType x_dt, DType w_dt, DType out_dt) {
  return qfmt(w_dt) >= 0 && small_ok(x_dt) && (out_dt == DType::kF32 || out_dt == x_dt);
}

Status launch_quant_gemm(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                         const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                         bool accumulate, const void* bias, DType bias_dt) {
  if (m == 0 || n == 0) return Status::ok();
  if (!quant_gemm_supported(x_dt, w_dt, out_dt))
    return unsupported(std::string("quant gemm: ") + std::string(dtype_name(x_dt)) + " x " +
                       std::string(dtype_name(w_dt)) + " -> " + std::string(dtype_name(out_dt)));
  if (k % dtype_block_elems(w_dt) != 0) return unsupported("quant gemm: k is not whole blocks");
  if (bias && !small_ok(bias_dt)) return bad_dtype("quant gemm bias", bias_dt);
  const int64_t row_bytes = dtype_bytes(w_dt, k);
  const bool xvec = aligned16(x, k, dtype_bytes(x_dt, 1));
  const auto* wb = static_cast<const uint8_t*>(w);
  const int bdt = dt_code(bias_dt);
  const bool mma = x_dt != DType::kF32 && m > 8;
  bool ok = dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    dispatch_float(x_dt, [&](auto tx) {
      using TX = decltype(tx);
      auto run = [&](auto to) {
        using TO = decltype(to);
        TO* o = static_cast<TO*>(out);
        const TX* xp = static_cast<const TX*>(x);
        if constexpr (!std::is_same_v<TX, float>) {
          if (mma) {
            dim3 grid(static_cast<unsigned>((n + kMmaBN - 1) / kMmaBN),
                      static_cast<unsigned>((m + kMmaBM - 1) / kMmaBM));
            quant_mma_kernel<F, TX, TO>
                <<<grid, 128, 0, s>>>(xp, m, k, xvec, wb, row_bytes, n, o, accumulate, bias, bdt);
            return;
          }
        }
        const unsigned rows =
            static_cast<unsigned>((n + kGemvWarps * kGemvRows - 1) / (kGemvWarps * kGemvRows));
        if (m == 1) {
          quant_gemv_kernel<F, TX, TO, 1><<<dim3(rows, 1), kGemvWarps * 32, 0, s>>>(
              xp, m, k, xvec, wb, row_bytes, n, o, accumulate, bias, bdt);
        } else {
          quant_gemv_kernel<F, TX, TO, 8>
              <<<dim3(rows, static_cast<unsigned>((m + 7) / 8)), kGemvWarps * 32, 0, s>>>(
                  xp, m, k, xvec, wb, row_bytes, n, o, accumulate, bias, bdt);
        }
      };
      if (out_dt == DType::kF32) {
        run(float{});
      } else if constexpr (!std::is_same_v<TX, float>) {
        run(TX{});
      }
    });
  });
  if (!ok) return bad_dtype("quant gemm", w_dt);
  return check_launch("quant_gemm");
}

bool quant_gemv_q8_supported(DType w_dt, const void* w, int64_t k, DType out_dt) {
  const int f = qfmt(w_dt);
  if (f < 0 || !small_ok(out_dt) || k % dtype_block_elems(w_dt) != 0) return false;
  // q4_k / q5_k blocks (144 / 176 bytes) are read with 16-byte loads; the
  // others (34, 18, 210 bytes) keep 2-byte alignment and are read as the
  // aligned words around them (Q8Dot<F>::fetch).
  if (f == kFmtF8B128) return false;  // e4m3 codes are not integers
  const uintptr_t a = reinterpret_cast<uintptr_t>(w);
  if (f == kFmtU4G128) return a % 4 == 0;
  return (f == kFmtQ4_K || f == kFmtQ5_K) ? a % 16 == 0 : a % 2 == 0;
}

Status launch_quant_gemv_q8(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                            const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                            bool accumulate, const void* bias, DType bias_dt, int8_t* xq,
                            float* xd) {
  if (m == 0 || n == 0) return Status::ok();
  if (m > kQuantGemvMaxTokens || !quant_gemv_q8_supported(w_dt, w, k, out_dt) || !small_ok(x_dt))
    return unsupported("quant gemv (8-bit activations): unsupported shape, format or alignment");
  if (bias && !small_ok(bias_dt)) return bad_dtype("quant gemv bias", bias_dt);
  const int64_t groups = m * (k / 32);
  bool xok = dispatch_float(x_dt, [&](auto tx) {
    using TX = decltype(tx);
    quantize_q8_kernel<TX><<<static_cast<unsigned>((groups + 7) / 8), 256, 0, s>>>(
        static_cast<const TX*>(x), k, k, groups, xq, xd);
  });
  if (!xok) return bad_dtype("quant gemv activations", x_dt);
  const int64_t row_bytes = dtype_bytes(w_dt, k);
  const auto* wb = static_cast<const uint8_t*>(w);
  const int bdt = dt_code(bias_dt);
  bool ok = dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    if constexpr (F != kFmtF8B128) dispatch_float(out_dt, [&](auto to) {
      using TO = decltype(to);
      TO* o = static_cast<TO*>(out);
      auto go = [&](auto mc, auto rc) {
        constexpr int M = decltype(mc)::value, R = decltype(rc)::value;
        const unsigned blocks = static_cast<unsigned>((n + kGemvWarps * R - 1) / (kGemvWarps * R));
        quant_gemv_q8_kernel<F, TO, M, R>
            <<<dim3(static_cast<unsigned>((m + M - 1) / M), blocks), kGemvWarps * 32, 0, s>>>(
                xq, xd, m, k, wb, row_bytes, n, o, accumulate, bias, bdt);
      };
      if (m == 1) {
        go(std::integral_constant<int, 1>{}, std::integral_constant<int, 2>{});
      } else if (m <= 4) {
        go(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{});
      } else {
        go(std::integral_constant<int, 8>{}, std::integral_constant<int, 1>{});
      }
    });
  });
  if (!ok) return bad_dtype("quant gemv", w_dt);
  return check_launch("quant_gemv_q8");
}

Status launch_quant_moe_experts(cudaStream_t s, const float* x, int64_t ldx, int64_t rows,
                                int64_t k, bool by_token, int64_t top_k, const int32_t* row_pair,
                                const void* w, DType w_dt, int64_t nout, const int32_t* tiles,
                                const int32_t* tile_count, int64_t max_tiles, float* out,
                                int64_t ldo, int8_t* xq, float* xd) {
  if (nout == 0 || max_tiles == 0 || rows == 0) return Status::ok();
  if (qfmt(w_dt) < 0) return bad_dtype("quant moe experts", w_dt);
  if (k % dtype_block_elems(w_dt) != 0 || k % 32 != 0)
    return unsupported("quant moe experts: k is not whole blocks");
  const int64_t row_bytes = dtype_bytes(w_dt, k);
  const MoeTiles mt{row_pair, static_cast<int>(top_k), by_token, tiles, tile_count};
  const dim3 grid(static_cast<unsigned>((nout + kGemvWarps - 1) / kGemvWarps),
                  static_cast<unsigned>(max_tiles));
  const auto* wb = static_cast<const uint8_t*>(w);
  if (w_dt == DType::kF8B128) xq = nullptr;  // e4m3 codes are not integers: f32 products
  if (xq) {
    const int64_t groups = rows * (k / 32);
    quantize_q8_kernel<float><<<static_cast<unsigned>((groups + 7) / 8), 256, 0, s>>>(
        x, ldx, k, groups, xq, xd);
  }
  dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    if constexpr (F != kFmtF8B128) {
      if (xq) {
        quant_moe_q8_kernel<F><<<grid, kGemvWarps * 32, 0, s>>>(xq, xd, k, mt, wb, row_bytes,
                                                                nout, out, ldo);
        return;
      }
    }
    quant_moe_f32_kernel<F><<<grid, kGemvWarps * 32, 0, s>>>(x, ldx, k, mt, wb, row_bytes, nout,
                                                             out, ldo);
  });
  return check_launch("quant_moe_experts");
}

Status launch_quant_dequant_rows(cudaStream_t s, const void* w, DType w_dt, int64_t k,
                                 int64_t row0, int64_t rows, void* out, DType out_dt) {
  if (rows == 0) return Status::ok();
  if (k % dtype_block_elems(w_dt) != 0) return unsupported("quant dequant: k is not whole blocks");
  const int64_t row_bytes = dtype_bytes(w_dt, k);
  const auto* wb = static_cast<const uint8_t*>(w) + row0 * row_bytes;
  if (rows > INT32_MAX) return unsupported("quant dequant: more than 2^31 rows");
  // Rows shorter than a chunk take fewer threads (whole warps).
  const int threads = static_cast<int>(std::min<int64_t>(kDequantThreads, (k / 8 + 31) / 32 * 32));
  const dim3 grid(static_cast<unsigned>(rows),
                  static_cast<unsigned>((k + kDequantChunk - 1) / kDequantChunk));
  bool ok = dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    dispatch_float(out_dt, [&](auto to) {
      using TO = decltype(to);
      quant_dequant_kernel<F, TO><<<grid, threads, 0, s>>>(wb, row_bytes, k,
                                                           static_cast<TO*>(out));
    });
  });
  if (!ok) return bad_dtype("quant dequant", w_dt);
  return check_launch("quant_dequant_rows");
}

Status launch_add_bias(cudaStream_t s, void* out, DType out_dt, int64_t m, int64_t n, int64_t ld,
                       const void* bias, DType bias_dt) {
  if (m == 0 || n == 0 || !bias) return Status::ok();
  if (!small_ok(bias_dt)) return bad_dtype("add bias", bias_dt);
  bool ok = dispatch_float(out_dt, [&](auto to) {
    using TO = decltype(to);
    add_bias_kernel<TO><<<grid_for(m * n, 256), 256, 0, s>>>(static_cast<TO*>(out), m, n, ld, bias,
                                                            dt_code(bias_dt));
  });
  if (!ok) return bad_dtype("add bias", out_dt);
  return check_launch("add_bias");
}

Status launch_quant_embedding(cudaStream_t s, const uint32_t* ids, int64_t tokens,
                              const void* table, DType table_dt, int64_t vocab, int64_t hidden,
                              void* out, DType out_dt) {
  if (tokens == 0) return Status::ok();
  if (hidden % dtype_block_elems(table_dt) != 0)
    return unsupported("quant embedding: rows are not whole blocks");
  const int64_t row_bytes = dtype_bytes(table_dt, hidden);
  bool ok = dispatch_fmt(table_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    dispatch_float(out_dt, [&](auto to) {
      using TO = decltype(to);
      (void)launch_pdl(quant_embedding_kernel<F, TO>, static_cast<unsigned>(tokens), 128, 0, s, ids,
                       static_cast<const uint8_t*>(table), row_bytes, vocab, hidden,
                       static_cast<TO*>(out));
    });
  });
  if (!ok) return bad_dtype("quant embedding", table_dt);
  return check_launch("quant_embedding");
}

}  // namespace ferrite::cuda
