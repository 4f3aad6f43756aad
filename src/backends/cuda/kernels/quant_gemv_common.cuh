// Device pieces shared by the decode GEMVs on block weights
// (quant_gemv.cu: rows streamed through registers; quant_gemv_stream.cu:
// rows bulk-copied into shared memory): the launch parameters, the rows of
// the concatenated segments, the staged activations and the epilogue. The
// arithmetic of both kernels is the same by construction (one definition
// of every step here and in quant_blocks.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/causal_conv.cuh"
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"
#include "backends/cuda/kernels/quant_gemv.cuh"

namespace ferrite::cuda::gemv {

using namespace qblocks;

// Weight rows per work item of a warp (gate and up of one column with swiglu).
constexpr int kRows = 2;
// The staged 8-bit rows: m * k bytes + m * k / 32 scales, at most this much
// (m = 8 x k = 14,336, Llama-3.1-8B's down projection at batch 8, fits,
// with the code sums of q4_k / q5_k: 143 KiB).
constexpr size_t kMaxSmem = 160u << 10;

// Formats whose blocks subtract a min per sub-block (q4_k, q5_k) or a zero
// point (u4_g128): their activations are staged with each 32-block's scale
// x code sum beside its scale (Q8DotK::dot_sums, U4DotSums::dot_sums), so
// the min term costs one product per sub-block.
constexpr bool staged_sums(int f) {
  return f == kFmtQ4_K || f == kFmtQ5_K || f == kFmtU4G128;
}
// Formats whose activations are staged in nibble order (u4_g128: each run
// of 8 as its even elements, then its odd ones, the order of a word's low
// and high nibbles), so that U4DotSums meets the nibbles without permuting
// them. Integer dots: the same sums in any order.
constexpr bool split_x(int f) { return f == kFmtU4G128; }

// The staged rows: 8-bit blocks (m * k bytes + a scale per 32, + its code
// sum with staged_sums), or for e4m3 weights the normalised rows themselves
// in the activation type.
inline size_t smem_bytes(int64_t m, int64_t k, int f, int64_t x_elem) {
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
  template <bool S = false>
  static __device__ __forceinline__ Raw fetch(const uint8_t* b, int p) {
    return Raw::template fetch<S>(b, p);
  }
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    d = __uint_as_float(r.d);
    // Two codes a conversion (cvt.rn.f16x2.e4m3x2 takes a pair: one per
    // code was 16 conversions and 16 byte extractions a lane); e4m3 -> f16
    // -> f32 is exact (every e4m3 value is an f16 value).
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(r.w[i >> 1] >> (16 * (i & 1)));
      const float2 v = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      f[2 * i] = v.x;  // the pair's low byte: code 2i
      f[2 * i + 1] = v.y;
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
// K-quants with 4 lanes a block (q4_k / q5_k: whole sub-blocks a lane, no
// duplicated scale decoding, about half the instructions a byte of the
// 8-lane split; q6_k: 64 values a lane, half the scale and float work).
template <>
struct GemvFmt<kFmtQ4_K> {
  using Dot = Q8DotK<false, 4>;
  static constexpr bool kFloatX = false;
};
template <>
struct GemvFmt<kFmtQ5_K> {
  using Dot = Q8DotK<true, 4>;
  static constexpr bool kFloatX = false;
};
template <>
struct GemvFmt<kFmtQ6_K> {
  using Dot = Q8Dot6K<4>;
  static constexpr bool kFloatX = false;
};
template <>
struct GemvFmt<kFmtU4G128> {
  using Dot = U4DotSums;
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
  const int32_t* perm;  // QuantGemvArgs::input_perm, or null
  // QuantGemvArgs::tail_seg: segments from tail_seg on are in the tail
  // format, rows of row_bytes_tail, groups from tail_group on (no tail:
  // tail_seg 4, tail_group = groups).
  int tail_seg;
  int64_t tail_group, row_bytes_tail;
  // QuantGemvArgs::conv (conv_w null: none): segment 0's n[0] channels,
  // kConvEpilogueTaps taps.
  const void* conv_w;
  int conv_wdt;
  float* conv_state;
  const int32_t* conv_token_seq;
  const int32_t* conv_seq_slot;
};

// The kernels' parameters of a launch (host side).
inline FusedParams fused_params(const QuantGemvArgs& a) {
  FusedParams p{};
  for (int i = 0; i < a.count; ++i) {
    p.w[i] = static_cast<const uint8_t*>(a.segs[i].w);
    p.out[i] = a.segs[i].out;
    p.n[i] = a.segs[i].rows;
    p.total += a.segs[i].rows;
  }
  p.swiglu = a.swiglu;
  if (a.swiglu) p.total = a.segs[0].rows;
  p.groups = a.swiglu ? p.total : (p.total + kRows - 1) / kRows;
  p.row_bytes = dtype_bytes(a.w_dt, a.k);
  p.norm = a.norm;
  p.norm_dt = dt_code(a.norm_dt);
  p.eps = a.eps;
  p.zero_centred = a.zero_centred;
  p.accumulate = a.accumulate;
  p.bias = a.bias;
  p.bias_dt = dt_code(a.bias_dt);
  p.perm = a.input_perm;
  p.tail_seg = 4;
  p.tail_group = p.groups;
  p.row_bytes_tail = p.row_bytes;
  if (a.tail_seg > 0 && a.tail_seg < a.count) {
    int64_t before = 0;
    for (int i = 0; i < a.tail_seg; ++i) before += a.segs[i].rows;
    p.tail_seg = a.tail_seg;
    p.tail_group = before / kRows;  // quant_gemv_tail_ok: a whole number of groups
    p.row_bytes_tail = dtype_bytes(a.tail_dt, a.k);
  }
  p.conv_w = a.conv.w;
  p.conv_wdt = dt_code(a.conv.w_dt);
  p.conv_state = a.conv.state;
  p.conv_token_seq = a.conv.token_seq;
  p.conv_seq_slot = a.conv.seq_state_slot;
  return p;
}

// Calls run(F, TX{}, TO{}, M) with the launch's format code F and token
// bucket M (1, 4 or 8) as integral constants, TX the activation type and TO
// the output type (f32 or TX); false for a format or type the kernels lack.
template <typename Run>
bool dispatch_gemv(const QuantGemvArgs& a, Run&& run) {
  const int mi = static_cast<int>(a.m);
  return dispatch_fmt(a.w_dt, [&](auto fc) {
    dispatch_float(a.x_dt, [&](auto tx) {
      using TX = decltype(tx);
      auto by_m = [&](auto to) {
        if (mi == 1) run(fc, tx, to, std::integral_constant<int, 1>{});
        else if (mi <= 4) run(fc, tx, to, std::integral_constant<int, 4>{});
        else run(fc, tx, to, std::integral_constant<int, 8>{});
      };
      if (a.out_dt == DType::kF32) {
        by_m(float{});
      } else if constexpr (!std::is_same_v<TX, float>) {
        by_m(TX{});
      }
    });
  });
}

// Row gr of the concatenated segments: its segment's weight row and output
// (constant indices only: a run-time index would put the params in local
// memory). Rows past the end read row 0 of segment 0 and are not stored.
struct RowRef {
  const uint8_t* w;  // rows of p.row_bytes (a tail segment's: tail_row_ptr)
  void* out;
  int64_t n, col;
  int seg;
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
  r.seg = seg;
  r.w = w + col * p.row_bytes;
  return r;
}
// The weight row of a row in a tail segment (FusedParams::tail_seg).
__device__ __forceinline__ const uint8_t* tail_row_ptr(const FusedParams& p, const RowRef& r) {
  const uint8_t* w = r.seg == 0 ? p.w[0] : r.seg == 1 ? p.w[1] : r.seg == 2 ? p.w[2] : p.w[3];
  return w + r.col * p.row_bytes_tail;
}
__device__ __forceinline__ const uint8_t* row_ptr(const FusedParams& p, int64_t g, int r) {
  if (p.swiglu) return (r == 0 ? p.w[0] : p.w[1]) + (g < p.n[0] ? g : 0) * p.row_bytes;
  return locate(p, kRows * g + r).w;
}

// Eight consecutive elements as f32 (16-byte aligned, read-only data).
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

// Eight norm weights of any float type (GGUF files keep norms in f32 beside
// bf16 activations); dt as dt_code.
__device__ __forceinline__ void load8_any(const void* p, int dt, int64_t i, float (&f)[8]) {
  if (dt == 1) {
    load8(static_cast<const __nv_bfloat16*>(p) + i, f);
  } else if (dt == 2) {
    load8(static_cast<const __half*>(p) + i, f);
  } else {
    load8(static_cast<const float*>(p) + i, f);
  }
}

// The norm weights into L1 (128-byte lines, spread over the block's
// threads), before the kernel waits for x: they are weights, written by no
// earlier kernel, and stage_x reads them right after the sum of squares.
__device__ __forceinline__ void prefetch_norm(const FusedParams& p, int64_t k) {
  if (!p.norm) return;
  const int64_t bytes = k * (p.norm_dt == 0 ? 4 : 2);
  const char* base = static_cast<const char*>(p.norm);
  for (int64_t off = 128 * static_cast<int64_t>(threadIdx.x); off < bytes;
       off += 128 * static_cast<int64_t>(blockDim.x))
    asm volatile("prefetch.global.L1 [%0];" ::"l"(base + off));
}

// x [m, k] (normalised with p.norm, rounded to TX as the rms_norm kernel
// stores it) into 8-bit blocks of 32 in shared memory: xq [m, k], xd [m, k /
// 32], exactly as quantize_q8_kernel makes them (with kSums, xd [m, k / 32,
// 2]: each scale followed by scale x the sum of the block's codes; with
// kSplit each 8 codes as the even ones, then the odd ones: split_x; with
// xd_plain, the scales alone once more, xd_plain [m, k / 32], for a tail
// format staged without sums, FusedParams::tail_seg). Four
// lanes per block of 32, eight elements each. The norm's sum of squares
// is taken by the first kNormWarps warps whatever the block size (at least
// kNormWarps warps), so that kernels of any block size agree bitwise.
constexpr int kNormWarps = 8;
template <typename TX, int M, bool kFloatX, bool kSums, bool kSplit>
__device__ __forceinline__ void stage_x(const TX* __restrict__ x, int m, int64_t k,
                                        const FusedParams& p, int8_t* xq, float* xd, TX* xf,
                                        float* xd_plain = nullptr) {
  const int threads = static_cast<int>(blockDim.x);
  __shared__ float red[kNormWarps][M];
  __shared__ float inv[M];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const void* nw = p.norm;
  if (nw) {
    float ss[M];
#pragma unroll
    for (int t = 0; t < M; ++t) ss[t] = 0.0f;
    const int64_t norm_end = warp < kNormWarps ? k / 8 : 0;
    for (int64_t i = tid; i < norm_end; i += kNormWarps * 32) {
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
      if (lane == 0 && warp < kNormWarps) red[warp][t] = v;
    }
    __syncthreads();
    if (tid < M) {
      float tot = 0.0f;
#pragma unroll
      for (int w = 0; w < kNormWarps; ++w) tot += red[w][tid];
      inv[tid] = rsqrtf(tot / static_cast<float>(k) + p.eps);
    }
    __syncthreads();
  }
  const int64_t per_row = k / 32, groups = m * per_row;
  for (int64_t base = 0; base < groups; base += threads / 4) {
    const int64_t g = base + tid / 4;
    const bool ok = g < groups;  // every lane takes part in the shuffles below
    const int64_t t = ok ? g / per_row : 0;
    const int64_t c = ok ? (g - t * per_row) * 32 + (lane & 3) * 8 : 0;
    float v[8];
    int32_t src[8];  // the input columns of stored columns c .. c + 7
    if (p.perm) {
      const int4 a = __ldg(reinterpret_cast<const int4*>(p.perm + c));
      const int4 b = __ldg(reinterpret_cast<const int4*>(p.perm + c) + 1);
      src[0] = a.x, src[1] = a.y, src[2] = a.z, src[3] = a.w;
      src[4] = b.x, src[5] = b.y, src[6] = b.z, src[7] = b.w;
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = to_f(x[t * k + src[j]]);
    } else {
      load8(x + t * k + c, v);
    }
    if (nw) {
      float w8[8];
      if (p.perm) {
#pragma unroll
        for (int j = 0; j < 8; ++j) w8[j] = load_any(nw, p.norm_dt, src[j]);
      } else {
        load8_any(nw, p.norm_dt, c, w8);
      }
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
      const int at = kSplit ? (j & 1) * 4 + (j >> 1) : j;  // the byte j goes to
      q[at >> 2] |= b << (8 * (at & 3));
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
          if (xd_plain) xd_plain[g] = sc;
        } else {
          xd[g] = sc;
        }
      }
    }
  }
}

// Block blk of a work item's two rows (decoded, wv) against each token's
// staged activations, into the lanes' sums: both rows are decoded first and
// then each token's activations meet them back to back, so one read of a
// token's staged block serves both rows. The one definition of a fused
// GEMV's products (quant_gemv.cu and quant_gemv_stream.cu).
template <int F, typename TX, int M>
__device__ __forceinline__ void accumulate_block(const typename GemvFmt<F>::Dot (&wv)[kRows],
                                                 int blk, int m, int64_t k, const int8_t* xq,
                                                 const float* xd, const TX* xf,
                                                 float (&acc)[kRows][M]) {
  using Fmt = typename GemvFmt<F>::Dot;
  const int64_t xs = k / 32;
#pragma unroll
  for (int t = 0; t < M; ++t) {
    if (t < m) {
      const int64_t xo = t * k + static_cast<int64_t>(blk) * Fmt::kElems;
      const int64_t so = t * xs + static_cast<int64_t>(blk) * (Fmt::kElems / 32);
      if constexpr (F == kFmtQ6_K) {  // unsigned codes: each quarter's offset once for both rows
        static_assert(Fmt::kOffsetBySum, "GemvFmt's q6_k reader offsets by the sums");
        float d[kRows];
        Fmt::dot_rows(wv, xq + xo, xd + so, d);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][t] += d[r];
      } else {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if constexpr (GemvFmt<F>::kFloatX)
            acc[r][t] += wv[r].dot(xf + xo);
          else if constexpr (staged_sums(F))
            acc[r][t] += wv[r].dot_sums(xq + xo, xd + 2 * so);
          else
            acc[r][t] += wv[r].dot(xq + xo, xd + so);
        }
      }
    }
  }
}

// Work item g's sums (per lane) reduced over the warp and stored by lane 0;
// acc is cleared for the next item.
template <typename TX, typename TO, int M>
__device__ __forceinline__ void store_item(const FusedParams& p, int64_t g, int m, int lane,
                                           float (&acc)[kRows][M]) {
  float s[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) {
      s[r][t] = warp_sum(acc[r][t]);
      acc[r][t] = 0.0f;
    }
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

// The conv epilogue (FusedParams::conv_w; one token, out_dt f32, no tail
// format): after its last store_item, a warp passes the segment-0 outputs
// it stored (groups wg, wg + stride, ... below p.groups) through their
// channels' causal conv + SiLU in place, a lane per row, reading
// each output back as the conv's own launch would. Apart from the products'
// loop and compiled only into the one-token f32 kernels without a tail:
// inside store_item it cost every instantiation up to 28 registers and some
// a stack frame, and even here the kernels at their register cap (8 tokens;
// a q6_k tail) spilled.
template <typename TO, int M>
__device__ __forceinline__ void conv_epilogue(const FusedParams& p, int64_t wg, int64_t stride,
                                              int lane) {
  if constexpr (std::is_same_v<TO, float> && M == 1) {  // token 0 only
    if (!p.conv_w) return;
    __syncwarp();  // lane 0's stores, visible to the warp
    // 32-bit index arithmetic (64-bit division is a subroutine with a stack
    // frame): a segment's rows fit.
    const int n = static_cast<int>(p.n[0]);
    const int groups0 = (n + kRows - 1) / kRows;  // the groups with segment-0 rows
    const int w = static_cast<int>(wg), str = static_cast<int>(stride);
    const int mine = w < groups0 ? (groups0 - 1 - w) / str + 1 : 0;
    const int slot = p.conv_seq_slot[p.conv_token_seq[0]];
    float* st = slot >= 0 ? p.conv_state + int64_t(slot) * (kConvEpilogueTaps - 1) * n : nullptr;
    for (int e = lane; e < mine * kRows; e += 32) {
      // Row e % kRows of the warp's (e / kRows)-th group.
      const int col = kRows * (w + (e / kRows) * str) + e % kRows;
      if (col >= n) continue;
      float* o = static_cast<float*>(p.out[0]) + col;
      ConvChannel<kConvEpilogueTaps> cc;
      conv_load(cc, p.conv_w, p.conv_wdt, st, n, col);
      *o = conv_silu_step(cc, *o);
      conv_store(cc, st, n, col);
    }
  }
}

}  // namespace ferrite::cuda::gemv
