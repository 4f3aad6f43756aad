// SIMT tiled GEMM and its small-m GEMV (any mix of f32 / bf16 / f16, f32
// accumulation: the f32 activation path and fallbacks) and the decode GEMV
// (m <= 8 rows, 16-byte streaming loads of W, one warp per output column).
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/kernels/occupancy.cuh"

#include <algorithm>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

namespace ferrite::cuda {
namespace {

constexpr int kTile = 64, kTileK = 16;

template <typename TX, typename TW, typename TO>
__global__ void __launch_bounds__(256) gemm_simt_kernel(const TX* __restrict__ x,
                                                        const TW* __restrict__ w, TO* out,
                                                        const TW* __restrict__ bias, int64_t m,
                                                        int64_t n, int64_t k, bool accumulate) {
  __shared__ float as[kTileK][kTile + 4];
  __shared__ float bs[kTileK][kTile + 4];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = threadIdx.x + i * 256;
      const int r = idx / kTileK, c = idx % kTileK;
      const int64_t kk = k0 + c;
      as[c][r] = (m0 + r < m && kk < k) ? to_f(x[(m0 + r) * k + kk]) : 0.0f;
      bs[c][r] = (n0 + r < n && kk < k) ? to_f(w[(n0 + r) * k + kk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = as[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = bs[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = m0 + ty * 4 + i;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = n0 + tx * 4 + j;
      if (c >= n) continue;
      float v = acc[i][j];
      if (bias) v += to_f(bias[c]);
      if (accumulate) v += to_f(out[r * n + c]);
      out[r * n + c] = from_f<TO>(v);
    }
  }
}

__device__ __forceinline__ void unpack8(const uint4& v, float* f, __nv_bfloat16) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ void unpack8(const uint4& v, float* f, __half) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 p = __half22float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// 16 bytes of W as floats: 8 bf16 / f16 or 4 f32 values.
__device__ __forceinline__ void unpack16(const uint4& v, float* f, float) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}
__device__ __forceinline__ void unpack16(const uint4& v, float* f, __nv_bfloat16 t) {
  unpack8(v, f, t);
}
__device__ __forceinline__ void unpack16(const uint4& v, float* f, __half t) { unpack8(v, f, t); }

// Small-m products outside the same-type GEMV (x and W of different types,
// a bias, f32 accumulation into a 16-bit output): one warp per output
// column, any mix of f32 / bf16 / f16, f32 accumulation. The tile kernel
// above gives such a product one block per 64 columns, so a 1-output
// product (a shared expert gate) streamed all of W through one block:
// 120 us for a 4 KB row. W goes in 16-byte loads when every row starts
// 16-byte aligned (`vec`), else one element per lane per step.
constexpr int kMixedGemvMaxRows = 8;
constexpr int kMixedGemvWarps = 8;

template <int MAXM, typename TX, typename TW, typename TO>
__global__ void __launch_bounds__(kMixedGemvWarps * 32)
    gemv_mixed_kernel(const TX* __restrict__ x, const TW* __restrict__ w, TO* out,
                      const TW* __restrict__ bias, int m, int64_t n, int64_t k, bool accumulate,
                      bool vec) {
  constexpr int kPer = 16 / sizeof(TW);  // W elements in one 16-byte load
  const int lane = threadIdx.x % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kMixedGemvWarps + threadIdx.x / 32;
  if (col >= n) return;
  const TW* wr = w + col * k;
  float acc[MAXM];
#pragma unroll
  for (int r = 0; r < MAXM; ++r) acc[r] = 0.0f;
  int64_t tail = 0;
  if (vec) {
    const int64_t kv = k / kPer;
    const uint4* wv = reinterpret_cast<const uint4*>(wr);
    for (int64_t i = lane; i < kv; i += 32) {
      float wf[kPer];
      unpack16(__ldg(wv + i), wf, TW{});
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) {
          const TX* xr = x + r * k + i * kPer;
#pragma unroll
          for (int j = 0; j < kPer; ++j) acc[r] = fmaf(to_f(xr[j]), wf[j], acc[r]);
        }
      }
    }
    tail = kv * kPer;
  }
  for (int64_t i = tail + lane; i < k; i += 32) {
    const float wf = to_f(wr[i]);
#pragma unroll
    for (int r = 0; r < MAXM; ++r)
      if (r < m) acc[r] = fmaf(to_f(x[r * k + i]), wf, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < MAXM; ++r) acc[r] = warp_sum(acc[r]);
  if (lane == 0) {
    const float b = bias ? to_f(bias[col]) : 0.0f;
#pragma unroll
    for (int r = 0; r < MAXM; ++r) {
      if (r < m) {
        float v = acc[r] + b;
        if (accumulate) v += to_f(out[r * n + col]);
        out[r * n + col] = from_f<TO>(v);
      }
    }
  }
}

// 8 floats rounded to T and packed into 16 bytes (bit operations only: no
// local array whose address is taken, which would live on the stack).
__device__ __forceinline__ uint32_t bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint32_t bits_of(__half v) { return __half_as_ushort(v); }
template <typename T>
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = bits_of(from_f<T>(f[2 * i])) | (bits_of(from_f<T>(f[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The first 4 x 16 bytes of a lane's share of one W row, loaded before
// pdl_wait(): weights do not depend on the previous kernel, so a GEMV
// launched with launch_pdl() has its first loads in flight while the
// previous kernel drains.
struct RowHead {
  uint4 w[4];
};
__device__ __forceinline__ RowHead load_row_head(const uint4* wr, int64_t kv, int lane) {
  RowHead h;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    h.w[j] = lane + 32 * j < kv ? load_stream(wr + lane + 32 * j) : make_uint4(0, 0, 0, 0);
  return h;
}

// Dot products of one W row (16-byte vectors, 4 in flight per lane) with
// MAXM rows of x, starting from the prefetched head; `xload(r, i, xf)`
// fills the 8 x values of vector i of row r.
template <int MAXM, typename T, typename XLoad>
__device__ __forceinline__ void row_dots(const uint4* wr, int64_t kv, int lane, int m,
                                         float* acc, const RowHead& head, XLoad&& xload) {
  auto consume = [&](const uint4& wv, int64_t i) {
    float wf[8];
    unpack8(wv, wf, T{});
#pragma unroll
    for (int r = 0; r < MAXM; ++r) {
      if (r < m) {
        float xf[8];
        xload(r, i, xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(wf[j], xf[j], acc[r]);
      }
    }
  };
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (lane + 32 * j < kv) consume(head.w[j], lane + 32 * j);
  int64_t i = lane + 128;
  for (; i + 96 < kv; i += 128) {
    const uint4 w0 = load_stream(wr + i), w1 = load_stream(wr + i + 32);
    const uint4 w2 = load_stream(wr + i + 64), w3 = load_stream(wr + i + 96);
    consume(w0, i);
    consume(w1, i + 32);
    consume(w2, i + 64);
    consume(w3, i + 96);
  }
  for (; i < kv; i += 32) consume(load_stream(wr + i), i);
}

// row_dots over two W rows at once (gate and up): eight 16-byte loads in
// flight per lane instead of four, and one pass over x. Each accumulator
// sees the same sequence of FMAs as row_dots gives it (bitwise equal).
template <int MAXM, typename T, typename XLoad>
__device__ __forceinline__ void row_dots2(const uint4* wa, const uint4* wb, int64_t kv, int lane,
                                          int m, float* acc_a, float* acc_b, const RowHead& ha,
                                          const RowHead& hb, XLoad&& xload) {
  auto consume2 = [&](const uint4& va, const uint4& vb, int64_t i) {
    float fa[8], fb[8];
    unpack8(va, fa, T{});
    unpack8(vb, fb, T{});
#pragma unroll
    for (int r = 0; r < MAXM; ++r) {
      if (r < m) {
        float xf[8];
        xload(r, i, xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc_a[r] = fmaf(fa[j], xf[j], acc_a[r]);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc_b[r] = fmaf(fb[j], xf[j], acc_b[r]);
      }
    }
  };
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (lane + 32 * j < kv) consume2(ha.w[j], hb.w[j], lane + 32 * j);
  int64_t i = lane + 128;
  for (; i + 96 < kv; i += 128) {
    const uint4 a0 = load_stream(wa + i), a1 = load_stream(wa + i + 32);
    const uint4 a2 = load_stream(wa + i + 64), a3 = load_stream(wa + i + 96);
    const uint4 b0 = load_stream(wb + i), b1 = load_stream(wb + i + 32);
    const uint4 b2 = load_stream(wb + i + 64), b3 = load_stream(wb + i + 96);
    consume2(a0, b0, i);
    consume2(a1, b1, i + 32);
    consume2(a2, b2, i + 64);
    consume2(a3, b3, i + 96);
  }
  for (; i < kv; i += 32) consume2(load_stream(wa + i), load_stream(wb + i), i);
}

template <typename T>
__device__ __forceinline__ void load_x8(const T* x, int64_t k, int r, int64_t i, float* xf) {
  unpack8(__ldg(reinterpret_cast<const uint4*>(x + r * k) + i), xf, T{});
}

// One warp per output column; MAXM rows of x (m <= MAXM).
template <int MAXM, typename T, typename TO>
__global__ void __launch_bounds__(256) gemv_kernel(const T* __restrict__ x, int m, int64_t k,
                                                   const T* __restrict__ w, int64_t n, TO* out,
                                                   bool accumulate) {
  pdl_launch_dependents();
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  const uint4* wr = reinterpret_cast<const uint4*>(w + (col < n ? col : 0) * k);
  const RowHead head = col < n ? load_row_head(wr, k / 8, lane) : RowHead{};
  pdl_wait();
  if (col >= n) return;
  float acc[MAXM];
#pragma unroll
  for (int r = 0; r < MAXM; ++r) acc[r] = 0.0f;
  row_dots<MAXM, T>(wr, k / 8, lane, m, acc, head,
                    [&](int r, int64_t i, float* xf) { load_x8(x, k, r, i, xf); });
#pragma unroll
  for (int r = 0; r < MAXM; ++r) acc[r] = warp_sum(acc[r]);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < MAXM; ++r) {
      if (r < m) {
        float v = acc[r];
        if (accumulate) v += to_f(out[r * n + col]);
        out[r * n + col] = from_f<TO>(v);
      }
    }
  }
}

// Up to four products sharing x in one launch (Q/K/V; the gated delta's
// qkv / z / b / a, written in f32), or, with `swiglu`,
// out0 = silu(x W0^T) * (x W1^T) for W0, W1 of n0 rows (gate / up). x is
// RMS-normalised on the fly with `norm` (rounded to T as the unfused path
// stores it).
struct GemvSegs {
  const void* w[4];
  void* out[4];
  int64_t n[4];
  int count;
  const void* norm;
  float eps;
  bool zero_centred;
};

template <int MAXM, typename T, bool SWIGLU, typename OutT>
__global__ void __launch_bounds__(256, 1) gemv_multi_kernel(const T* __restrict__ x, int m, int64_t k,
                                                         GemvSegs segs) {
  // The normalised x rows, rounded to T as the unfused path stores them.
  extern __shared__ __align__(16) unsigned char xs_raw[];
  T* xs = reinterpret_cast<T*>(xs_raw);  // [m, k]
  __shared__ float red[8][MAXM];
  __shared__ float inv[MAXM];
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int64_t kv = k / 8;
  // Output column of this warp in column group `cg` (8 columns per group):
  // its segment, weight rows (W, and W1 for swiglu) and output.
  struct Col {
    const uint4* wr;
    const uint4* wu;
    OutT* out;
    int64_t n, col;
    bool active;
  };
  auto resolve = [&](int64_t cg) {
    Col c;
    int64_t col = cg * (blockDim.x / 32) + warp;
    int seg = 0;
    if (!SWIGLU) {
      if (col >= segs.n[0]) {
        col -= segs.n[0];
        seg = 1;
        if (col >= segs.n[1]) {
          col -= segs.n[1];
          seg = 2;
          if (col >= segs.n[2]) {
            col -= segs.n[2];
            seg = 3;
          }
        }
      }
      c.active = seg < segs.count &&
                 col < (seg == 0 ? segs.n[0] : seg == 1 ? segs.n[1] : seg == 2 ? segs.n[2] : segs.n[3]);
    } else {
      c.active = col < segs.n[0];
    }
    // Constant indices only: a run-time index would put segs in local memory.
    const void* wseg = seg == 0 ? segs.w[0] : seg == 1 ? segs.w[1] : seg == 2 ? segs.w[2] : segs.w[3];
    c.out = static_cast<OutT*>(seg == 0   ? segs.out[0]
                               : seg == 1 ? segs.out[1]
                               : seg == 2 ? segs.out[2]
                                          : segs.out[3]);
    c.n = seg == 0 ? segs.n[0] : seg == 1 ? segs.n[1] : seg == 2 ? segs.n[2] : segs.n[3];
    c.col = col;
    const int64_t wcol = c.active ? col : 0;
    c.wr = reinterpret_cast<const uint4*>(static_cast<const T*>(wseg) + wcol * k);
    c.wu = reinterpret_cast<const uint4*>(static_cast<const T*>(segs.w[1]) + wcol * k);
    return c;
  };
  // The block's first columns: weights first (see RowHead), then wait for x.
  const Col first = resolve(blockIdx.x);
  const RowHead head = first.active ? load_row_head(first.wr, kv, lane) : RowHead{};
  RowHead head_u{};
  if (SWIGLU && first.active) head_u = load_row_head(first.wu, kv, lane);
  pdl_wait();

  // x rows into shared memory and their sums of squares in one pass over
  // x (every block recomputes them: x is small and in L2), then normalised
  // in place, rounded to T as the unfused path stores them; each warp then
  // reads them with conflict-free 16-byte loads.
  {
    float ss[MAXM];
#pragma unroll
    for (int r = 0; r < MAXM; ++r) ss[r] = 0.0f;
    for (int64_t i = threadIdx.x; i < kv; i += blockDim.x) {
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) {
          const uint4 raw = __ldg(reinterpret_cast<const uint4*>(x + r * k) + i);
          reinterpret_cast<uint4*>(xs + r * k)[i] = raw;
          float xf[8];
          unpack8(raw, xf, T{});
#pragma unroll
          for (int j = 0; j < 8; ++j) ss[r] = fmaf(xf[j], xf[j], ss[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < MAXM; ++r) {
      const float v = warp_sum(ss[r]);
      if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
    if (threadIdx.x < MAXM) {
      float tot = 0.0f;
      for (int wi = 0; wi < (int)(blockDim.x / 32); ++wi) tot += red[wi][threadIdx.x];
      inv[threadIdx.x] = rsqrtf(tot / static_cast<float>(k) + segs.eps);
    }
    __syncthreads();
    const T* nw = static_cast<const T*>(segs.norm);
    const bool zc = segs.zero_centred;
    // Each thread normalises the vectors it stored: no barrier needed
    // between the two passes beyond the one for `inv`.
    for (int64_t i = threadIdx.x; i < kv; i += blockDim.x) {
      float wf[8];
      unpack8(__ldg(reinterpret_cast<const uint4*>(nw) + i), wf, T{});
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) {
          uint4* slot = reinterpret_cast<uint4*>(xs + r * k) + i;
          float xf[8];
          unpack8(*slot, xf, T{});
#pragma unroll
          for (int j = 0; j < 8; ++j) xf[j] = xf[j] * inv[r] * (zc ? 1.0f + wf[j] : wf[j]);
          *slot = pack8<T>(xf);
        }
      }
    }
    __syncthreads();
  }
  auto xload = [&](int r, int64_t i, float* xf) {
    unpack8(reinterpret_cast<const uint4*>(xs + r * k)[i], xf, T{});
  };
  // Column groups blockIdx.x, + gridDim.x, ...: the grid is at most what
  // fits on the GPU at once, so the x prologue above runs once per block
  // rather than once per 8 columns (it was half of a QKV block's time).
  const int64_t total = SWIGLU ? segs.n[0] : segs.n[0] + segs.n[1] + segs.n[2] + segs.n[3];
  const int64_t groups = (total + (blockDim.x / 32) - 1) / (blockDim.x / 32);
  for (int64_t cg = blockIdx.x; cg < groups; cg += gridDim.x) {
    const bool is_first = cg == static_cast<int64_t>(blockIdx.x);
    const Col c = is_first ? first : resolve(cg);
    if (!c.active) continue;
    RowHead h = head, hu = head_u;
    if (!is_first) {
      h = load_row_head(c.wr, kv, lane);
      if (SWIGLU) hu = load_row_head(c.wu, kv, lane);
    }
    float acc[MAXM], acc_u[MAXM];
#pragma unroll
    for (int r = 0; r < MAXM; ++r) acc[r] = acc_u[r] = 0.0f;
    if (SWIGLU)
      row_dots2<MAXM, T>(c.wr, c.wu, kv, lane, m, acc, acc_u, h, hu, xload);
    else
      row_dots<MAXM, T>(c.wr, kv, lane, m, acc, h, xload);
#pragma unroll
    for (int r = 0; r < MAXM; ++r) acc[r] = warp_sum(acc[r]);
    if (SWIGLU) {
#pragma unroll
      for (int r = 0; r < MAXM; ++r) acc_u[r] = warp_sum(acc_u[r]);
    }
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) {
          float v = acc[r];
          if (SWIGLU) {
            // Round the two products to T as the unfused path does.
            const float g = to_f(from_f<T>(v)), u = to_f(from_f<T>(acc_u[r]));
            v = g / (1.0f + expf(-g)) * u;
          }
          c.out[r * c.n + c.col] = from_f<OutT>(v);
        }
      }
    }
  }
}

template <int MAXM, typename T>
void gemv_launch(cudaStream_t s, const void* x, int m, int64_t k, const void* w, int64_t n,
                 void* out, DType out_dt, bool accumulate) {
  const int blocks = static_cast<int>((n + 7) / 8);
  if (out_dt == DType::kF32)
    (void)launch_pdl_weights(gemv_kernel<MAXM, T, float>, blocks, 256, 0, s, static_cast<const T*>(x), m,
                     k, static_cast<const T*>(w), n, static_cast<float*>(out), accumulate);
  else
    (void)launch_pdl_weights(gemv_kernel<MAXM, T, T>, blocks, 256, 0, s, static_cast<const T*>(x), m, k,
                     static_cast<const T*>(w), n, static_cast<T*>(out), accumulate);
}

// 2, measured on the H200 (bench, batch 1 / 2 / 4 / 8): at 2 rows the GEMV
// beats cuBLASLt + the unfused norm (Qwen3-0.6B batch 2: 1,042 -> 1,601
// tok/s; Qwen3-8B: 322 -> 367); at 4 it is worse for 8B (642 -> 615) and
// at 8 worse for both.
constexpr int64_t kGemvMaxRows = 2;

}  // namespace

Status launch_gemm_simt(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                        const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                        bool accumulate, const void* bias, DType bias_dt) {
  if (m == 0 || n == 0) return Status::ok();
  if (w_dt != DType::kF32 && w_dt != DType::kBF16 && w_dt != DType::kF16)
    return bad_dtype("gemm weight", w_dt);
  if (bias && bias_dt != w_dt) return unsupported("gemm: bias dtype must match the weight");
  if (out_dt != DType::kF32 && out_dt != x_dt)
    return unsupported("gemm: output must be f32 or the activation dtype");
  if (m <= kMixedGemvMaxRows) {
    const bool vec = k % (16 / dtype_bytes(w_dt, 1)) == 0 &&
                     reinterpret_cast<uintptr_t>(w) % 16 == 0;
    const unsigned blocks = static_cast<unsigned>((n + kMixedGemvWarps - 1) / kMixedGemvWarps);
    const int mi = static_cast<int>(m);
    const bool ok = dispatch_float(x_dt, [&](auto tx) {
      using TX = decltype(tx);
      dispatch_float(w_dt, [&](auto tw) {
        using TW = decltype(tw);
        auto go = [&](auto maxm) {
          constexpr int M = decltype(maxm)::value;
          if (out_dt == DType::kF32)
            gemv_mixed_kernel<M, TX, TW, float><<<blocks, kMixedGemvWarps * 32, 0, s>>>(
                static_cast<const TX*>(x), static_cast<const TW*>(w), static_cast<float*>(out),
                static_cast<const TW*>(bias), mi, n, k, accumulate, vec);
          else
            gemv_mixed_kernel<M, TX, TW, TX><<<blocks, kMixedGemvWarps * 32, 0, s>>>(
                static_cast<const TX*>(x), static_cast<const TW*>(w), static_cast<TX*>(out),
                static_cast<const TW*>(bias), mi, n, k, accumulate, vec);
        };
        if (mi <= 2) go(std::integral_constant<int, 2>{});
        else go(std::integral_constant<int, kMixedGemvMaxRows>{});
      });
    });
    if (!ok) return bad_dtype("gemm", x_dt);
    return check_launch("gemv_mixed");
  }
  dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile),
            static_cast<unsigned>((m + kTile - 1) / kTile));
  bool ok = dispatch_float(x_dt, [&](auto tx) {
    using TX = decltype(tx);
    dispatch_float(w_dt, [&](auto tw) {
      using TW = decltype(tw);
      if (out_dt == DType::kF32)
        gemm_simt_kernel<TX, TW, float><<<grid, 256, 0, s>>>(
            static_cast<const TX*>(x), static_cast<const TW*>(w), static_cast<float*>(out),
            static_cast<const TW*>(bias), m, n, k, accumulate);
      else
        gemm_simt_kernel<TX, TW, TX><<<grid, 256, 0, s>>>(
            static_cast<const TX*>(x), static_cast<const TW*>(w), static_cast<TX*>(out),
            static_cast<const TW*>(bias), m, n, k, accumulate);
    });
  });
  if (!ok) return bad_dtype("gemm", x_dt);
  return check_launch("gemm_simt");
}

constexpr int64_t kGemvMultiSmem = 48 * 1024;  // normalised x rows, no opt-in needed

bool gemv_multi_supported(int64_t m, int64_t k, DType act) {
  return m * k * dtype_bytes(act, 1) <= kGemvMultiSmem;
}

Status launch_gemv_multi(cudaStream_t s, const void* x, int64_t m, int64_t k,
                         const GemvSegment* segs, int count, DType act, bool swiglu,
                         const void* norm, DType norm_dt, float eps, bool zero_centred,
                         DType out_dt) {
  const bool f32_out = out_dt == DType::kF32;
  if (!gemv_supported(m, k, act, act, act) || !gemv_multi_supported(m, k, act) || count < 1 ||
      count > 4 || (swiglu && (count != 2 || f32_out)) || norm_dt != act ||
      (out_dt != act && !f32_out))
    return unsupported("gemv_multi: shape or dtype");
  GemvSegs g{};
  g.norm = norm;
  g.eps = eps;
  g.zero_centred = zero_centred;
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    g.w[i] = segs[i].w;
    g.out[i] = segs[i].out;
    g.n[i] = segs[i].n;
    total += segs[i].n;
  }
  g.count = count;
  if (swiglu) total = segs[0].n;
  const int groups = static_cast<int>((total + 7) / 8);
  const int mi = static_cast<int>(m);
  auto go = [&](auto t) {
    using T = decltype(t);
    auto run = [&](auto maxm) {
      constexpr int M = decltype(maxm)::value;
      const size_t smem = static_cast<size_t>(mi) * k * sizeof(T);
      auto kern = swiglu    ? gemv_multi_kernel<M, T, true, T>
                  : f32_out ? gemv_multi_kernel<M, T, false, float>
                            : gemv_multi_kernel<M, T, false, T>;
      (void)launch_pdl_weights(kern, resident_grid(kern, groups, smem), 256, smem, s,
                               static_cast<const T*>(x), mi, k, g);
    };
    if (mi == 1) run(std::integral_constant<int, 1>{});
    else if (mi == 2) run(std::integral_constant<int, 2>{});
    else if (mi <= 4) run(std::integral_constant<int, 4>{});
    else run(std::integral_constant<int, 8>{});
  };
  if (act == DType::kBF16) go(__nv_bfloat16{});
  else go(__half{});
  return check_launch("gemv_multi");
}

bool gemv_supported(int64_t m, int64_t k, DType act, DType w_dt, DType out_dt) {
  return m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && act == w_dt &&
         (act == DType::kBF16 || act == DType::kF16) && (out_dt == act || out_dt == DType::kF32);
}

Status launch_gemv(cudaStream_t s, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                   void* out, DType act, DType out_dt, bool accumulate) {
  if (!gemv_supported(m, k, act, act, out_dt)) return unsupported("gemv: shape or dtype");
  const int mi = static_cast<int>(m);
  auto go = [&](auto t) {
    using T = decltype(t);
    if (mi == 1) gemv_launch<1, T>(s, x, mi, k, w, n, out, out_dt, accumulate);
    else if (mi == 2) gemv_launch<2, T>(s, x, mi, k, w, n, out, out_dt, accumulate);
    else if (mi <= 4) gemv_launch<4, T>(s, x, mi, k, w, n, out, out_dt, accumulate);
    else gemv_launch<8, T>(s, x, mi, k, w, n, out, out_dt, accumulate);
  };
  if (act == DType::kBF16) go(__nv_bfloat16{});
  else go(__half{});
  return check_launch("gemv");
}

}  // namespace ferrite::cuda
