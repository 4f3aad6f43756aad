#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/quant_gemm.cuh"

namespace ferrite::cuda {
namespace {

enum QFmt : int {
  kFmtQ8_0 = 0,
  kFmtQ4_0 = 1,
  kFmtQ4_K = 2,
  kFmtQ5_K = 3,
  kFmtQ6_K = 4,
  kFmtF8B128 = 5,  // Hugging Face FP8 (tensor/dtype.h: f32 d + 128 x e4m3)
  kFmtU4G128 = 6,  // GPTQ / AWQ / W4A16 (f32 d, u8 z, 64 bytes of nibbles)
};

int qfmt(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return kFmtQ8_0;
    case DType::kQ4_0:
      return kFmtQ4_0;
    case DType::kQ4_K:
      return kFmtQ4_K;
    case DType::kQ5_K:
      return kFmtQ5_K;
    case DType::kQ6_K:
      return kFmtQ6_K;
    case DType::kF8B128:
      return kFmtF8B128;
    case DType::kU4G128:
      return kFmtU4G128;
    default:
      return -1;
  }
}

// Calls f(std::integral_constant<int, F>{}) for the format code of t.
template <typename Fn>
bool dispatch_fmt(DType t, Fn&& f) {
  switch (qfmt(t)) {
    case kFmtQ8_0:
      f(std::integral_constant<int, kFmtQ8_0>{});
      return true;
    case kFmtQ4_0:
      f(std::integral_constant<int, kFmtQ4_0>{});
      return true;
    case kFmtQ4_K:
      f(std::integral_constant<int, kFmtQ4_K>{});
      return true;
    case kFmtQ5_K:
      f(std::integral_constant<int, kFmtQ5_K>{});
      return true;
    case kFmtQ6_K:
      f(std::integral_constant<int, kFmtQ6_K>{});
      return true;
    case kFmtF8B128:
      f(std::integral_constant<int, kFmtF8B128>{});
      return true;
    case kFmtU4G128:
      f(std::integral_constant<int, kFmtU4G128>{});
      return true;
    default:
      return false;
  }
}

__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ uint32_t ldb(const uint8_t* p) { return __ldg(p); }
// Eight bytes at a 2-byte aligned address (blocks of 34, 18 and 210 bytes
// keep only that alignment), as four 16-bit loads.
__device__ __forceinline__ void ld8(const uint8_t* p, uint32_t (&q)[8]) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t w = __ldg(h + j);
    q[2 * j] = w & 0xFF;
    q[2 * j + 1] = w >> 8;
  }
}

// Elements e .. e + 7 (e a multiple of 8) of a weight row in format F, as
// the reference dequantization defines them (tensor/dtype.h): the same f32
// products and differences (fused multiply-add contraction off below).
template <int F>
__device__ __forceinline__ void dequant8(const uint8_t* row, int64_t e, float (&v)[8]) {
  if constexpr (F == kFmtQ8_0) {
    const uint8_t* b = row + (e >> 5) * 34;
    const int off = static_cast<int>(e & 31);
    const float d = ld_half(b);
    uint32_t q[8];
    ld8(b + 2 + off, q);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(q[i])), d);
  } else if constexpr (F == kFmtQ4_0) {
    const uint8_t* b = row + (e >> 5) * 18;
    const int off = static_cast<int>(e & 31);
    const float d = ld_half(b);
    uint32_t q[8];
    ld8(b + 2 + (off & 15), q);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int qi = off < 16 ? static_cast<int>(q[i] & 15) : static_cast<int>(q[i] >> 4);
      v[i] = __fmul_rn(static_cast<float>(qi - 8), d);
    }
  } else if constexpr (F == kFmtQ4_K || F == kFmtQ5_K) {
    constexpr bool five = F == kFmtQ5_K;
    const uint8_t* b = row + (e >> 8) * (five ? 176 : 144);
    const int j = static_cast<int>(e & 255), sub = j >> 5, c = j >> 6, l = j & 31;
    const float d = ld_half(b), dmin = ld_half(b + 2);
    const uint8_t* s = b + 4;
    uint32_t sc, mn;
    if (sub < 4) {
      sc = ldb(s + sub) & 63;
      mn = ldb(s + sub + 4) & 63;
    } else {
      sc = (ldb(s + sub + 4) & 0xF) | ((ldb(s + sub - 4) >> 6) << 4);
      mn = (ldb(s + sub + 4) >> 4) | ((ldb(s + sub) >> 6) << 4);
    }
    const float d1 = __fmul_rn(d, static_cast<float>(sc));
    const float m1 = __fmul_rn(dmin, static_cast<float>(mn));
    const uint2 qv = __ldg(reinterpret_cast<const uint2*>(b + (five ? 48 : 16) + 32 * c + l));
    uint2 hv = make_uint2(0, 0);
    if constexpr (five) hv = __ldg(reinterpret_cast<const uint2*>(b + 16 + l));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t byte = ((i < 4 ? qv.x : qv.y) >> (8 * (i & 3))) & 0xFF;
      int q = (sub & 1) ? static_cast<int>(byte >> 4) : static_cast<int>(byte & 15);
      if constexpr (five) {
        const uint32_t hb = ((i < 4 ? hv.x : hv.y) >> (8 * (i & 3))) & 0xFF;
        q += static_cast<int>((hb >> sub) & 1) << 4;
      }
      v[i] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
  } else if constexpr (F == kFmtF8B128) {
    const uint8_t* b = row + (e >> 7) * 132;
    const float d = __ldg(reinterpret_cast<const float*>(b));
    // 132-byte blocks keep 4-byte alignment only: two word loads.
    const uint2 q = make_uint2(__ldg(reinterpret_cast<const uint32_t*>(b + 4 + (e & 127))),
                               __ldg(reinterpret_cast<const uint32_t*>(b + 8 + (e & 127))));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const auto byte = static_cast<__nv_fp8_storage_t>(((i < 4 ? q.x : q.y) >> (8 * (i & 3))) & 0xFF);
      // e4m3fn -> f16 is exact (every e4m3 value is an f16 value).
      const float f = __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3)));
      v[i] = __fmul_rn(f, d);
    }
  } else if constexpr (F == kFmtU4G128) {
    const uint8_t* b = row + (e >> 7) * 72;
    const float d = __ldg(reinterpret_cast<const float*>(b));
    const int z = __ldg(b + 4);
    const uint32_t q = __ldg(reinterpret_cast<const uint32_t*>(b + 8 + ((e & 127) >> 1)));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int qi = static_cast<int>((q >> (4 * i)) & 15);  // element 2j: low nibble of byte j
      v[i] = __fmul_rn(d, static_cast<float>(qi - z));
    }
  } else {  // q6_k
    const uint8_t* b = row + (e >> 8) * 210;
    const int j = static_cast<int>(e & 255), half = j >> 7, r = j & 127, qt = r >> 5, l = r & 31;
    const uint8_t* ql = b + 64 * half + (qt & 1) * 32 + l;
    const uint8_t* qh = b + 128 + 32 * half + l;
    const float d = ld_half(b + 208);
    const int sc = static_cast<int8_t>(ldb(b + 192 + 8 * half + (l >> 4) + 2 * qt));
    const float ds = __fmul_rn(d, static_cast<float>(sc));
    uint32_t lq[8], hq[8];
    ld8(ql, lq);
    ld8(qh, hq);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t nib = qt < 2 ? (lq[i] & 15) : (lq[i] >> 4);
      const uint32_t hi = (hq[i] >> (2 * qt)) & 3;
      v[i] = __fmul_rn(ds, static_cast<float>(static_cast<int>(nib | (hi << 4)) - 32));
    }
  }
}

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
  const float v = to_f(x[row * ldx + col + lane]);
  const float amax = warp_max(fabsf(v));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  xq[g * 32 + lane] = static_cast<int8_t>(__float2int_rn(v * id));
  if (lane == 0) xd[g] = amax / 127.0f;
}

__device__ __forceinline__ uint4 ld128(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
// Four bytes at a 2-byte aligned address.
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  return static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16);
}
__device__ __forceinline__ int dp4(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}
__device__ __forceinline__ int sum4x4(const uint4& x) {  // sum of 16 signed bytes
  return dp4(x.w, 0x01010101u, dp4(x.z, 0x01010101u, dp4(x.y, 0x01010101u, dp4(x.x, 0x01010101u, 0))));
}
__device__ __forceinline__ int dot4x4(const uint32_t (&w)[4], const uint4& x) {
  return dp4(w[3], x.w, dp4(w[2], x.z, dp4(w[1], x.y, dp4(w[0], x.x, 0))));
}

// The 6-bit scale and min of K-quant sub-block j (ggml's get_scale_min_k4)
// from the 12 scale bytes as three little-endian words.
__device__ __forceinline__ void kquant_scale_min(const uint32_t (&sw)[3], int j, uint32_t* sc,
                                                 uint32_t* mn) {
  auto byte = [&](int i) { return (sw[i >> 2] >> (8 * (i & 3))) & 0xFF; };
  if (j < 4) {
    *sc = byte(j) & 63;
    *mn = byte(j + 4) & 63;
  } else {
    *sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
    *mn = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

// Per format: a weight block's share of one lane (`part` of kLanes lanes per
// block) unpacked into registers once (load), then dotted with each token's
// 8-bit activations of that block (dot: xq, xd point at the block's first
// element and first 32-scale).
template <int F>
struct Q8Dot;

template <>
struct Q8Dot<kFmtQ8_0> {  // 34 bytes: d, 32 x int8; 2 lanes x 16 values
  static constexpr int kElems = 32, kBytes = 34, kLanes = 2;
  uint32_t q[4];
  float d;
  int part;
  __device__ void load(const uint8_t* b, int p) {
    part = p;
    d = ld_half(b);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = ld32_a2(b + 2 + 16 * p + 4 * i);
  }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const uint4 x = *reinterpret_cast<const uint4*>(xq + 16 * part);
    return d * xd[0] * static_cast<float>(dot4x4(q, x));
  }
};

template <>
struct Q8Dot<kFmtQ4_0> {  // 18 bytes: d, 16 bytes of nibbles (lo: 0..15, hi: 16..31)
  static constexpr int kElems = 32, kBytes = 18, kLanes = 2;
  uint32_t lo[2], hi[2];
  float d;
  int part;
  __device__ void load(const uint8_t* b, int p) {
    part = p;
    d = ld_half(b);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t w = ld32_a2(b + 2 + 8 * p + 4 * i);
      lo[i] = __vsubss4(w & 0x0F0F0F0Fu, 0x08080808u);
      hi[i] = __vsubss4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    }
  }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const uint2 a = *reinterpret_cast<const uint2*>(xq + 8 * part);
    const uint2 b = *reinterpret_cast<const uint2*>(xq + 16 + 8 * part);
    const int s = dp4(lo[1], a.y, dp4(lo[0], a.x, dp4(hi[1], b.y, dp4(hi[0], b.x, 0))));
    return d * xd[0] * static_cast<float>(s);
  }
};

// q4_k (144 bytes: d, dmin, 12 scale bytes, 128 bytes of nibbles) and q5_k
// (176 bytes: the same + 32 bytes of fifth bits before the nibbles). Lane
// `part` of 8 takes 16 bytes of chunk c = part / 2: 16 values of sub-block
// 2c (low nibbles) and 16 of sub-block 2c + 1 (high nibbles).
template <bool kFive>
struct Q8DotK {
  static constexpr int kElems = 256, kBytes = kFive ? 176 : 144, kLanes = 8;
  uint32_t lo[4], hi[4];
  float dl, dh, ml, mh;
  int part;
  __device__ void load(const uint8_t* b, int p) {
    part = p;
    const int c = p >> 1, h = p & 1;
    const float d = ld_half(b), dmin = ld_half(b + 2);
    const uint32_t sw[3] = {__ldg(reinterpret_cast<const uint32_t*>(b + 4)),
                            __ldg(reinterpret_cast<const uint32_t*>(b + 8)),
                            __ldg(reinterpret_cast<const uint32_t*>(b + 12))};
    uint32_t sc0, m0, sc1, m1;
    kquant_scale_min(sw, 2 * c, &sc0, &m0);
    kquant_scale_min(sw, 2 * c + 1, &sc1, &m1);
    dl = __fmul_rn(d, static_cast<float>(sc0));
    dh = __fmul_rn(d, static_cast<float>(sc1));
    ml = __fmul_rn(dmin, static_cast<float>(m0));
    mh = __fmul_rn(dmin, static_cast<float>(m1));
    const uint4 q = ld128(b + (kFive ? 48 : 16) + 32 * c + 16 * h);
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
    uint32_t hw[4] = {0, 0, 0, 0};
    if constexpr (kFive) {
      const uint4 qh = ld128(b + 16 + 16 * h);
      hw[0] = qh.x, hw[1] = qh.y, hw[2] = qh.z, hw[3] = qh.w;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = qw[i] & 0x0F0F0F0Fu;
      hi[i] = (qw[i] >> 4) & 0x0F0F0F0Fu;
      if constexpr (kFive) {
        lo[i] |= ((hw[i] >> (2 * c)) & 0x01010101u) << 4;
        hi[i] |= ((hw[i] >> (2 * c + 1)) & 0x01010101u) << 4;
      }
    }
  }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const int c = part >> 1, h = part & 1;
    const uint4 xl = *reinterpret_cast<const uint4*>(xq + 64 * c + 16 * h);
    const uint4 xh = *reinterpret_cast<const uint4*>(xq + 64 * c + 32 + 16 * h);
    const float sl = static_cast<float>(dot4x4(lo, xl)), sxl = static_cast<float>(sum4x4(xl));
    const float sh = static_cast<float>(dot4x4(hi, xh)), sxh = static_cast<float>(sum4x4(xh));
    return xd[2 * c] * (dl * sl - ml * sxl) + xd[2 * c + 1] * (dh * sh - mh * sxh);
  }
};
template <>
struct Q8Dot<kFmtQ4_K> : Q8DotK<false> {};
template <>
struct Q8Dot<kFmtQ5_K> : Q8DotK<true> {};

// q6_k (210 bytes: 128 low-nibble bytes, 64 bytes of 2-bit highs, 16 int8
// scales of 16 values, d). Lane `part` of 8: half = part / 4, l0 = 8 (part
// % 4): the 8 values at l0.. of each quarter qt of that half (elements
// 128 half + 32 qt + l0 ..), as signed bytes value - 32.
template <>
struct Q8Dot<kFmtQ6_K> {
  static constexpr int kElems = 256, kBytes = 210, kLanes = 8;
  uint32_t v[4][2];
  float ds[4];
  int part;
  __device__ void load(const uint8_t* b, int p) {
    part = p;
    const int half = p >> 2, l0 = 8 * (p & 3);
    const float d = ld_half(b + 208);
#pragma unroll
    for (int qt = 0; qt < 4; ++qt) {
      const int sc = static_cast<int8_t>(__ldg(b + 192 + 8 * half + (l0 >> 4) + 2 * qt));
      ds[qt] = __fmul_rn(d, static_cast<float>(sc));
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t qa = ld32_a2(b + 64 * half + l0 + 4 * i);
      const uint32_t qb = ld32_a2(b + 64 * half + 32 + l0 + 4 * i);
      const uint32_t qh = ld32_a2(b + 128 + 32 * half + l0 + 4 * i);
      v[0][i] = __vsubss4((qa & 0x0F0F0F0Fu) | ((qh & 0x03030303u) << 4), 0x20202020u);
      v[1][i] = __vsubss4((qb & 0x0F0F0F0Fu) | (((qh >> 2) & 0x03030303u) << 4), 0x20202020u);
      v[2][i] = __vsubss4(((qa >> 4) & 0x0F0F0F0Fu) | (((qh >> 4) & 0x03030303u) << 4), 0x20202020u);
      v[3][i] = __vsubss4(((qb >> 4) & 0x0F0F0F0Fu) | (((qh >> 6) & 0x03030303u) << 4), 0x20202020u);
    }
  }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const int half = part >> 2, l0 = 8 * (part & 3);
    float acc = 0.0f;
#pragma unroll
    for (int qt = 0; qt < 4; ++qt) {
      const uint2 x = *reinterpret_cast<const uint2*>(xq + 128 * half + 32 * qt + l0);
      const int s = dp4(v[qt][1], x.y, dp4(v[qt][0], x.x, 0));
      acc = fmaf(xd[4 * half + qt] * ds[qt], static_cast<float>(s), acc);
    }
    return acc;
  }
};

// u4_g128 (72 bytes: f32 d, u8 z, 3 pad, 64 bytes of nibbles; element 2j is
// the low nibble of byte j). Lane `part` of 4: bytes 16 part .. + 16, i.e.
// elements 32 part .. + 32, one 32-block of the activations.
template <>
struct Q8Dot<kFmtU4G128> {
  static constexpr int kElems = 128, kBytes = 72, kLanes = 4;
  uint32_t v[8];
  float d;
  int part;
  __device__ void load(const uint8_t* b, int p) {
    part = p;
    d = __ldg(reinterpret_cast<const float*>(b));
    const uint32_t z4 = 0x01010101u * __ldg(b + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(b + 8 + 16 * p + 4 * i));
      const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
      v[2 * i] = __vsubss4(__byte_perm(lo, hi, 0x5140), z4);      // elements 8i .. 8i + 3
      v[2 * i + 1] = __vsubss4(__byte_perm(lo, hi, 0x7362), z4);  // 8i + 4 .. 8i + 7
    }
  }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const uint4 a = *reinterpret_cast<const uint4*>(xq + 32 * part);
    const uint4 c = *reinterpret_cast<const uint4*>(xq + 32 * part + 16);
    int s = dp4(v[0], a.x, dp4(v[1], a.y, dp4(v[2], a.z, dp4(v[3], a.w, 0))));
    s = dp4(v[4], c.x, dp4(v[5], c.y, dp4(v[6], c.z, dp4(v[7], c.w, s))));
    return d * xd[part] * static_cast<float>(s);
  }
};

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

// Rows of a block weight dequantized to T, 8 elements per thread.
template <int F, typename T>
__global__ void quant_dequant_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t k,
                                     int64_t elems, T* __restrict__ out) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= elems) return;
  const int64_t r = i / k, e = i - r * k;
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
  // others (34, 18, 210 bytes) keep 2-byte alignment and are read by halves.
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
  const int64_t elems = rows * k;
  const unsigned blocks = static_cast<unsigned>((elems / 8 + 255) / 256);
  bool ok = dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    dispatch_float(out_dt, [&](auto to) {
      using TO = decltype(to);
      quant_dequant_kernel<F, TO><<<blocks, 256, 0, s>>>(wb, row_bytes, k, elems,
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
