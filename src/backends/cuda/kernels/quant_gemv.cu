#include "backends/cuda/kernels/quant_gemv.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/occupancy.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"

namespace ferrite::cuda {
namespace {

using namespace qblocks;

constexpr int kWarps = 8, kThreads = kWarps * 32;
// Weight rows per work item of a warp (gate and up of one column with swiglu).
constexpr int kRows = 2;
// The staged 8-bit rows: m * k bytes + m * k / 32 scales, at most this much
// (m = 8 x k = 14,336, Llama-3.1-8B's down projection at batch 8, fits,
// with the code sums of q4_k / q5_k: 143 KiB).
constexpr size_t kMaxSmem = 160u << 10;

// Blocks of one lane's rows in flight: at one token about 64 registers of
// raw bytes per lane (Q8Dot<F>::kRawRegs each), at least two so that a load
// is always outstanding while the previous block is multiplied; with more
// tokens two, so that two blocks of 256 threads fit an SM (measured on the
// H200, Qwen3-8B Q4_K_M: depth 4 at batch 2-8 took 148-162 registers, one
// block per SM, and ran 20-25 % slower than the unfused GEMV).
template <typename Fmt, int M>
constexpr int depth() {
  constexpr int d = M > 1 ? 2 : 64 / (kRows * Fmt::kRawRegs);
  return d < 2 ? 2 : d > 4 ? 4 : d;
}

// Formats whose blocks subtract a min per sub-block (q4_k, q5_k): their
// activations are staged with each 32-block's scale x code sum beside its
// scale (Q8DotK::dot_sums), so the min term costs one product per sub-block.
constexpr bool staged_sums(int f) { return f == kFmtQ4_K || f == kFmtQ5_K; }

// The staged rows: 8-bit blocks (m * k bytes + a scale per 32, + its code
// sum with staged_sums), or for e4m3 weights the normalised rows themselves
// in the activation type.
size_t smem_bytes(int64_t m, int64_t k, int f, int64_t x_elem) {
  if (f == kFmtF8B128) return static_cast<size_t>(m * k * x_elem);
  return static_cast<size_t>((m * k + 15) / 16 * 16 + m * (k / 32) * (staged_sums(f) ? 8 : 4));
}

// Eight staged activations from shared memory (16-byte aligned).
template <typename TX>
__device__ __forceinline__ void load8_shared(const TX* p, float (&f)[8]) {
  if constexpr (sizeof(TX) == 2) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const TX* h = reinterpret_cast<const TX*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = to_f(h[i]);
  } else {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z,
    f[7] = b.w;
  }
}

// e4m3 codes are not integers: an FP8 block (f32 d + 128 codes; 4-byte
// aligned) meets the staged activations in f32. Lane `part` of 8 takes 16
// codes; its sum of code x activation products is scaled by d once (the
// reference multiplies each code by d first: the same products up to f32
// rounding, within the bounds of the approximate decode path).
struct F8Dot {
  static constexpr int kElems = 128, kBytes = 132, kLanes = 8, kRawRegs = 5;
  using Raw = WordsRaw<4>;
  float f[16];
  float d;
  int part;
  static __device__ __forceinline__ Raw fetch(const uint8_t* b, int p) { return Raw::fetch(b, p); }
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    d = __uint_as_float(r.d);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const auto byte = static_cast<__nv_fp8_storage_t>((r.w[i >> 2] >> (8 * (i & 3))) & 0xFF);
      f[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3)));  // exact
    }
  }
  template <typename TX>
  __device__ __forceinline__ float dot(const TX* x) const {  // x: the block's first element
    float xv[16];
    load8_shared(x + 16 * part, *reinterpret_cast<float(*)[8]>(xv));
    load8_shared(x + 16 * part + 8, *reinterpret_cast<float(*)[8]>(xv + 8));
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) s = fmaf(f[i], xv[i], s);
    return s * d;
  }
};

// The per-lane block reader of format F, and whether its activations are
// staged as floats (e4m3) or as 8-bit blocks (the integer formats).
template <int F>
struct GemvFmt {
  using Dot = Q8Dot<F>;
  static constexpr bool kFloatX = false;
};
template <>
struct GemvFmt<kFmtF8B128> {
  using Dot = F8Dot;
  static constexpr bool kFloatX = true;
};

struct FusedParams {
  const uint8_t* w[4];
  void* out[4];
  int64_t n[4];      // rows per segment (0 past count)
  int64_t total;     // rows over all segments (swiglu: of one)
  int64_t groups;    // work items: pairs of rows (swiglu: columns)
  int64_t row_bytes;
  const void* norm;  // of norm_dt (dt_code), or null
  int norm_dt;
  float eps;
  bool zero_centred, swiglu, accumulate;
  const void* bias;
  int bias_dt;
};

// Row gr of the concatenated segments: its segment's weight row and output
// (constant indices only: a run-time index would put the params in local
// memory). Rows past the end read row 0 of segment 0 and are not stored.
struct RowRef {
  const uint8_t* w;
  void* out;
  int64_t n, col;
  bool active;
};
__device__ __forceinline__ RowRef locate(const FusedParams& p, int64_t gr) {
  int64_t col = gr;
  int seg = 0;
  if (col >= p.n[0]) {
    col -= p.n[0];
    seg = 1;
    if (col >= p.n[1]) {
      col -= p.n[1];
      seg = 2;
      if (col >= p.n[2]) {
        col -= p.n[2];
        seg = 3;
      }
    }
  }
  RowRef r;
  r.active = gr < p.total;
  if (!r.active) seg = 0, col = 0;
  const uint8_t* w = seg == 0 ? p.w[0] : seg == 1 ? p.w[1] : seg == 2 ? p.w[2] : p.w[3];
  r.out = seg == 0 ? p.out[0] : seg == 1 ? p.out[1] : seg == 2 ? p.out[2] : p.out[3];
  r.n = seg == 0 ? p.n[0] : seg == 1 ? p.n[1] : seg == 2 ? p.n[2] : p.n[3];
  r.col = col;
  r.w = w + col * p.row_bytes;
  return r;
}
__device__ __forceinline__ const uint8_t* row_ptr(const FusedParams& p, int64_t g, int r) {
  if (p.swiglu) return (r == 0 ? p.w[0] : p.w[1]) + (g < p.n[0] ? g : 0) * p.row_bytes;
  return locate(p, kRows * g + r).w;
}

// Eight norm weights of any float type (GGUF files keep norms in f32 beside
// bf16 activations); dt as dt_code.
__device__ __forceinline__ void load8_any(const void* p, int dt, int64_t i, float (&f)[8]);

template <typename TX>
__device__ __forceinline__ void load8(const TX* p, float (&f)[8]) {
  if constexpr (sizeof(TX) == 2) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    const TX* h = reinterpret_cast<const TX*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = to_f(h[i]);
  } else {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z,
    f[7] = b.w;
  }
}

__device__ __forceinline__ void load8_any(const void* p, int dt, int64_t i, float (&f)[8]) {
  if (dt == 1) {
    load8(static_cast<const __nv_bfloat16*>(p) + i, f);
  } else if (dt == 2) {
    load8(static_cast<const __half*>(p) + i, f);
  } else {
    load8(static_cast<const float*>(p) + i, f);
  }
}

// x [m, k] (normalised with p.norm, rounded to TX as the rms_norm kernel
// stores it) into 8-bit blocks of 32 in shared memory: xq [m, k], xd [m, k /
// 32], exactly as quantize_q8_kernel makes them (with kSums, xd [m, k / 32,
// 2]: each scale followed by scale x the sum of the block's codes). Four
// lanes per block of 32, eight elements each.
template <typename TX, int M, bool kFloatX, bool kSums>
__device__ __forceinline__ void stage_x(const TX* __restrict__ x, int m, int64_t k,
                                        const FusedParams& p, int8_t* xq, float* xd, TX* xf) {
  __shared__ float red[kWarps][M];
  __shared__ float inv[M];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const void* nw = p.norm;
  if (nw) {
    float ss[M];
#pragma unroll
    for (int t = 0; t < M; ++t) ss[t] = 0.0f;
    for (int64_t i = tid; i < k / 8; i += kThreads) {
#pragma unroll
      for (int t = 0; t < M; ++t) {
        if (t < m) {
          float v[8];
          load8(x + t * k + 8 * i, v);
#pragma unroll
          for (int j = 0; j < 8; ++j) ss[t] = fmaf(v[j], v[j], ss[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const float v = warp_sum(ss[t]);
      if (lane == 0) red[warp][t] = v;
    }
    __syncthreads();
    if (tid < M) {
      float tot = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) tot += red[w][tid];
      inv[tid] = rsqrtf(tot / static_cast<float>(k) + p.eps);
    }
    __syncthreads();
  }
  const int64_t per_row = k / 32, groups = m * per_row;
  for (int64_t base = 0; base < groups; base += kThreads / 4) {
    const int64_t g = base + tid / 4;
    const bool ok = g < groups;  // every lane takes part in the shuffles below
    const int64_t t = ok ? g / per_row : 0;
    const int64_t c = ok ? (g - t * per_row) * 32 + (lane & 3) * 8 : 0;
    float v[8];
    load8(x + t * k + c, v);
    if (nw) {
      float w8[8];
      load8_any(nw, p.norm_dt, c, w8);
      const float s = inv[t];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        v[j] = to_f(from_f<TX>(v[j] * s * (p.zero_centred ? 1.0f + w8[j] : w8[j])));
    }
    if constexpr (kFloatX) {  // e4m3 weights: the (normalised) rows as they are
      if (ok) {
        TX* dst = xf + t * k + c;
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[j] = from_f<TX>(v[j]);
      }
      continue;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    uint32_t q[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t b = static_cast<uint8_t>(static_cast<int8_t>(__float2int_rn(v[j] * id)));
      q[j >> 2] |= b << (8 * (j & 3));
    }
    int csum = 0;
    if constexpr (kSums) {
      csum = dp4(q[0], 0x01010101u, dp4(q[1], 0x01010101u, 0));
      csum += __shfl_xor_sync(0xffffffffu, csum, 1);
      csum += __shfl_xor_sync(0xffffffffu, csum, 2);
    }
    if (ok) {
      *reinterpret_cast<uint2*>(xq + t * k + c) = make_uint2(q[0], q[1]);
      if ((lane & 3) == 0) {
        const float sc = amax / 127.0f;
        if constexpr (kSums) {
          xd[2 * g] = sc;
          xd[2 * g + 1] = sc * static_cast<float>(csum);
        } else {
          xd[g] = sc;
        }
      }
    }
  }
}

// Work item g's sums (per lane) reduced over the warp and stored by lane 0.
template <typename TX, typename TO, int M>
__device__ __forceinline__ void store_item(const FusedParams& p, int64_t g, int m, int lane,
                                           float (&acc)[kRows][M]) {
  float s[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) s[r][t] = warp_sum(acc[r][t]);
  if (lane != 0) return;
  if (p.swiglu) {
    if (g >= p.n[0]) return;
    TO* o = static_cast<TO*>(p.out[0]);
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if (t < m) {
        // Each product rounded to TX, as the unfused path stores it.
        const float gt = to_f(from_f<TX>(s[0][t])), up = to_f(from_f<TX>(s[1][t]));
        o[t * p.n[0] + g] = from_f<TO>(gt / (1.0f + expf(-gt)) * up);
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const RowRef rr = locate(p, kRows * g + r);
    if (!rr.active) continue;
    TO* o = static_cast<TO*>(rr.out);
    const float b = p.bias ? load_any(p.bias, p.bias_dt, rr.col) : 0.0f;
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if (t < m) {
        TO* dst = o + t * rr.n + rr.col;
        float v = s[r][t] + b;
        if (p.accumulate) v += to_f(*dst);
        *dst = from_f<TO>(v);
      }
    }
  }
}

template <int F, typename TX, typename TO, int M>
__global__ void __launch_bounds__(kThreads, 2)
    quant_gemv_fused_kernel(const TX* __restrict__ x, int m, int64_t k, FusedParams p) {
  using Fmt = typename GemvFmt<F>::Dot;
  using Raw = typename Fmt::Raw;
  constexpr bool kFloatX = GemvFmt<F>::kFloatX;
  constexpr bool kSums = staged_sums(F);
  constexpr int kPerIter = 32 / Fmt::kLanes;  // blocks of a row per warp iteration
  constexpr int D = depth<Fmt, M>();
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int bl = lane / Fmt::kLanes, part = lane % Fmt::kLanes;
  const int nb = static_cast<int>(k / Fmt::kElems);
  const int iters = (nb + kPerIter - 1) / kPerIter;
  const int64_t wg = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t items = (wg < p.groups ? (p.groups - 1 - wg) / stride + 1 : 0) * iters;

  // The warp's items are (group, iteration) pairs, groups wg, wg + stride,
  // ...; the fetch cursor runs D items ahead of the products, across group
  // boundaries, so the loads never drain between two groups.
  int64_t fg = wg;
  int fit = 0;
  const uint8_t* fw[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) fw[r] = row_ptr(p, fg < p.groups ? fg : 0, r);
  auto fetch = [&](Raw (&dst)[kRows]) {
    int blk = fit * kPerIter + bl;
    blk = blk < nb ? blk : nb - 1;  // lanes past the row's end load its last block, unused
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      dst[r] = Fmt::fetch(fw[r] + static_cast<int64_t>(blk) * Fmt::kBytes, part);
    if (++fit == iters) {
      fit = 0;
      fg += stride;
      if (fg < p.groups) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) fw[r] = row_ptr(p, fg, r);
      }
    }
  };
  // Weights depend on no earlier kernel: the first D items load before the
  // wait for the previous kernel's x.
  Raw raw[D][kRows];
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (d < items) fetch(raw[d]);
  pdl_wait();

  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + (static_cast<int64_t>(m) * k + 15) / 16 * 16);
  TX* xf = reinterpret_cast<TX*>(smem);
  stage_x<TX, M, kFloatX, kSums>(x, m, k, p, xq, xd, xf);
  __syncthreads();

  const int64_t xs = k / 32;
  int64_t cg = wg;
  int cit = 0;
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
  for (int64_t f0 = 0; f0 < items; f0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (f0 + d < items) {  // uniform over the warp
        const int blk = cit * kPerIter + bl;
        if (blk < nb) {
          // Both rows decoded first, then each token's activations meet
          // them back to back: one read of a token's staged block serves
          // both rows.
          Fmt wv[kRows];
#pragma unroll
          for (int r = 0; r < kRows; ++r) wv[r].decode(raw[d][r], part);
#pragma unroll
          for (int t = 0; t < M; ++t) {
            if (t < m) {
              const int64_t xo = t * k + static_cast<int64_t>(blk) * Fmt::kElems;
              const int64_t so = t * xs + static_cast<int64_t>(blk) * (Fmt::kElems / 32);
#pragma unroll
              for (int r = 0; r < kRows; ++r) {
                if constexpr (kFloatX)
                  acc[r][t] += wv[r].dot(xf + xo);
                else if constexpr (kSums)
                  acc[r][t] += wv[r].dot_sums(xq + xo, xd + 2 * so);
                else
                  acc[r][t] += wv[r].dot(xq + xo, xd + so);
              }
            }
          }
        }
        if (f0 + d + D < items) fetch(raw[d]);
        if (++cit == iters) {
          store_item<TX, TO, M>(p, cg, m, lane, acc);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
          cit = 0;
          cg += stride;
        }
      }
    }
  }
}

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

bool quant_gemv_fused_supported(const QuantGemvArgs& a) {
  const int f = qfmt(a.w_dt);
  if (f < 0 || a.m < 1 || a.m > 8 || a.k < 32 || a.k % 32 != 0 ||
      a.k % dtype_block_elems(a.w_dt) != 0 || !small_ok(a.x_dt) || !a.x || !aligned(a.x, 16))
    return false;
  if (a.out_dt != DType::kF32 && a.out_dt != a.x_dt) return false;
  if (a.count < 1 || a.count > 4 || !a.segs) return false;
  if (a.swiglu && (a.count != 2 || a.out_dt != a.x_dt || a.segs[0].rows != a.segs[1].rows))
    return false;
  if ((a.accumulate || a.bias) && a.count != 1) return false;
  if (a.bias && !small_ok(a.bias_dt)) return false;
  if (a.norm && (!small_ok(a.norm_dt) || !aligned(a.norm, 16))) return false;
  if (smem_bytes(a.m, a.k, f, dtype_bytes(a.x_dt, 1)) > kMaxSmem) return false;
  // q4_k / q5_k blocks are read with 16-byte loads, u4_g128 / f8 with
  // 4-byte ones, the others (34, 18 and 210 bytes: 2-byte alignment) as the
  // aligned words around them.
  const uintptr_t wa = (f == kFmtQ4_K || f == kFmtQ5_K)            ? 16
                       : (f == kFmtU4G128 || f == kFmtF8B128) ? 4
                                                              : 2;
  if (dtype_bytes(a.w_dt, a.k) % static_cast<int64_t>(wa) != 0) return false;
  for (int i = 0; i < a.count; ++i)
    if (!a.segs[i].w || !a.segs[i].out || !aligned(a.segs[i].w, wa)) return false;
  return true;
}

Status launch_quant_gemv_fused(cudaStream_t s, const QuantGemvArgs& a) {
  if (!quant_gemv_fused_supported(a))
    return unsupported("quant gemv (fused): unsupported shape, format, types or alignment");
  FusedParams p{};
  for (int i = 0; i < a.count; ++i) {
    p.w[i] = static_cast<const uint8_t*>(a.segs[i].w);
    p.out[i] = a.segs[i].out;
    p.n[i] = a.segs[i].rows;
    p.total += a.segs[i].rows;
  }
  p.swiglu = a.swiglu;
  if (a.swiglu) p.total = a.segs[0].rows;
  if (p.total == 0) return Status::ok();
  p.groups = a.swiglu ? p.total : (p.total + kRows - 1) / kRows;
  p.row_bytes = dtype_bytes(a.w_dt, a.k);
  p.norm = a.norm;
  p.norm_dt = dt_code(a.norm_dt);
  p.eps = a.eps;
  p.zero_centred = a.zero_centred;
  p.accumulate = a.accumulate;
  p.bias = a.bias;
  p.bias_dt = dt_code(a.bias_dt);
  const size_t smem = smem_bytes(a.m, a.k, qfmt(a.w_dt), dtype_bytes(a.x_dt, 1));
  const int blocks = static_cast<int>((p.groups + kWarps - 1) / kWarps);
  const int mi = static_cast<int>(a.m);
  bool ok = dispatch_fmt(a.w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    dispatch_float(a.x_dt, [&](auto tx) {
      using TX = decltype(tx);
      auto run = [&](auto to, auto mc) {
        using TO = decltype(to);
        constexpr int M = decltype(mc)::value;
        auto kern = quant_gemv_fused_kernel<F, TX, TO, M>;
        // Above 48 KiB of shared memory a kernel must opt in, once.
        static const bool opted = cudaFuncSetAttribute(
            kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
            static_cast<int>(kMaxSmem)) == cudaSuccess;
        (void)opted;
        (void)launch_pdl_weights(kern, resident_grid(kern, blocks, smem, kThreads), kThreads,
                                 smem, s, static_cast<const TX*>(a.x), mi, a.k, p);
      };
      auto by_m = [&](auto to) {
        if (mi == 1) run(to, std::integral_constant<int, 1>{});
        else if (mi <= 4) run(to, std::integral_constant<int, 4>{});
        else run(to, std::integral_constant<int, 8>{});
      };
      if (a.out_dt == DType::kF32) {
        by_m(float{});
      } else if constexpr (!std::is_same_v<TX, float>) {
        by_m(TX{});
      }
    });
  });
  if (!ok) return bad_dtype("quant gemv (fused)", a.w_dt);
  return check_launch("quant_gemv_fused");
}

}  // namespace ferrite::cuda
