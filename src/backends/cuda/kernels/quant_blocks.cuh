// Weight blocks on the device (layouts in tensor/dtype.h), shared by the
// kernels that read them (quant_gemm.cu: tiles, dequantization, MoE experts;
// quant_gemv.cu: the fused decode GEMV):
//  - QFmt / qfmt / dispatch_fmt: a block DType as a compile-time format code;
//  - dequant8<F>: 8 elements of a row in f32, exactly as the reference
//    dequantization (the f32 paths and the tiles);
//  - Q8Dot<F>: one lane's share of a block against 8-bit activation blocks of
//    32 (dp4a integer dot products). Its Raw / fetch() holds only the loaded
//    bytes and decode() unpacks them, so a loop can keep several blocks in
//    flight per lane for a few registers each; load() is both at once.
// Device code only, plus the host-side format dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cuda/kernels/cuda_types.cuh"

namespace ferrite::cuda::qblocks {

// The format codes, in the order of kFmtDTypes.
enum QFmt : int {
  kFmtQ8_0 = 0,
  kFmtQ4_0 = 1,
  kFmtQ4_K = 2,
  kFmtQ5_K = 3,
  kFmtQ6_K = 4,
  kFmtF8B128 = 5,  // Hugging Face FP8 (tensor/dtype.h: f32 d + 128 x e4m3)
  kFmtU4G128 = 6,  // GPTQ / AWQ / W4A16 (f32 d, u8 z, 64 bytes of nibbles)
  kFmtCount = 7,
};
inline constexpr DType kFmtDTypes[kFmtCount] = {DType::kQ8_0, DType::kQ4_0,  DType::kQ4_K,
                                                DType::kQ5_K, DType::kQ6_K,  DType::kF8B128,
                                                DType::kU4G128};

// The format code of a block dtype, -1 for any other.
inline int qfmt(DType t) {
  for (int f = 0; f < kFmtCount; ++f)
    if (kFmtDTypes[f] == t) return f;
  return -1;
}

template <typename Fn, int... Fs>
inline bool dispatch_fmt_codes(int f, Fn& fn, std::integer_sequence<int, Fs...>) {
  return ((f == Fs ? (fn(std::integral_constant<int, Fs>{}), true) : false) || ...);
}
// Calls f(std::integral_constant<int, F>{}) for the format code of t; false
// (nothing called) when t is not a block format.
template <typename Fn>
inline bool dispatch_fmt(DType t, Fn&& f) {
  return dispatch_fmt_codes(qfmt(t), f, std::make_integer_sequence<int, kFmtCount>{});
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

// The block readers' loads (fetch<kShared>): read-only global loads, or for
// blocks that a bulk copy staged in shared memory (kShared) plain loads.
template <bool kShared, typename T>
__device__ __forceinline__ T ldq(const T* p) {
  if constexpr (kShared) return *p;
  else return __ldg(p);
}
__device__ __forceinline__ int dp4(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}
// a as 4 unsigned bytes (0..255), b as 4 signed ones: the dot of codes kept
// in the high nibble of their byte (w & 0xF0F0F0F0, 16 x the code) without
// shifting them down first (one LOP3 a word instead of a shift and a mask);
// the sum is 16 x the codes' dot, exactly, and one shift a sum undoes it.
__device__ __forceinline__ int dp4_u8s8(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ int sum4x4(const uint4& x) {  // sum of 16 signed bytes
  return dp4(x.w, 0x01010101u, dp4(x.z, 0x01010101u, dp4(x.y, 0x01010101u, dp4(x.x, 0x01010101u, 0))));
}
__device__ __forceinline__ int dot4x4(const uint32_t (&w)[4], const uint4& x) {
  return dp4(w[3], x.w, dp4(w[2], x.z, dp4(w[1], x.y, dp4(w[0], x.x, 0))));
}
// Bytewise x - z as signed bytes, for codes x in [0, 127] and offsets z
// with each x - z in [-128, 127] (q4_0: x - 8, q6_k: x - 32, u4: x - zero
// point): 128 + x - z per byte neither borrows nor carries, and flipping
// bit 7 turns it into the two's complement of x - z. Three instructions;
// __vsubss4 (saturating, never needed here) is emulated in about a dozen on
// sm_90 and was the largest part of a q6_k lane's decode.
__device__ __forceinline__ uint32_t sub_codes4(uint32_t x, uint32_t z) {
  return ((x | 0x80808080u) - z) ^ 0x80808080u;
}
__device__ __forceinline__ float half_bits(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// The 6-bit scales and mins of K-quant sub-blocks 2c and 2c + 1 (ggml's
// get_scale_min_k4) from the 12 scale bytes as three little-endian words:
// sub-blocks 0-3 keep scale and min in the low 6 bits of bytes 0-3 / 4-7,
// sub-blocks 4-7 their low 4 bits in the nibbles of bytes 8-11 and their
// high 2 bits in the top bits of bytes 0-3 / 4-7. Word-wide, without
// branches: c differs per lane and both halves of a warp take one path.
__device__ __forceinline__ void kquant_scale_min_pair(const uint32_t (&sw)[3], int c,
                                                      uint32_t (&sc)[2], uint32_t (&mn)[2]) {
  // Both forms, then a mask select: lanes of one warp differ in c, and a
  // ternary here compiled to a divergent branch.
  const uint32_t lo = 0u - static_cast<uint32_t>(c < 2);
  const uint32_t s_lo = sw[0] & 0x3F3F3F3Fu;
  const uint32_t s_hi = (sw[2] & 0x0F0F0F0Fu) | (((sw[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_lo = sw[1] & 0x3F3F3F3Fu;
  const uint32_t m_hi = ((sw[2] >> 4) & 0x0F0F0F0Fu) | (((sw[1] >> 6) & 0x03030303u) << 4);
  const uint32_t s4 = (s_lo & lo) | (s_hi & ~lo);
  const uint32_t m4 = (m_lo & lo) | (m_hi & ~lo);
  const int sh = 16 * (c & 1);
  sc[0] = (s4 >> sh) & 0xFF;
  sc[1] = (s4 >> (sh + 8)) & 0xFF;
  mn[0] = (m4 >> sh) & 0xFF;
  mn[1] = (m4 >> (sh + 8)) & 0xFF;
}

// The 8-bit activation blocks of 32 that every Q8Dot product reads: a warp
// holds one block, lane `lane` element v; q = round(v * 127 / amax) goes to
// *q, the scale amax / 127 to *d (lane 0). The one definition of that
// quantization (the prefill-side kernel, the MoE router and expert kernels).
__device__ __forceinline__ void quantize_q8_lane(float v, int lane, int8_t* q, float* d) {
  const float amax = warp_max(fabsf(v));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  *q = static_cast<int8_t>(__float2int_rn(v * id));
  if (lane == 0) *d = amax / 127.0f;
}

// Per format: a weight block's share of one lane (`part` of kLanes lanes per
// block): fetch() loads its bytes (Raw, kRawRegs registers), decode()
// unpacks them once, then dot() meets each token's 8-bit activations of that
// block (xq, xd point at the block's first element and first 32-scale).
template <int F>
struct Q8Dot;

// The raw share of a lane in a 2-byte aligned block of 32 (q8_0, q4_0): the
// f16 d and N payload words at b + 2 + 4N part (the blocks keep 2-byte
// alignment only). Loaded as the N (+1 when the start is not 4-byte
// aligned) aligned words that cover them, joined by word() with a funnel
// shift once the loads have arrived: N + 2 loads instead of 2N + 1 halves.
// The extra word is loaded only when the start is misaligned, so no load
// reaches past the block's last byte's word.
template <int N>
struct WordsA2 {
  uint32_t w[N + 1], d, sh;
  template <bool S = false>
  static __device__ __forceinline__ WordsA2 fetch(const uint8_t* b, int p) {
    WordsA2 r;
    r.d = ldq<S>(reinterpret_cast<const unsigned short*>(b));
    const uintptr_t s = reinterpret_cast<uintptr_t>(b + 2 + 4 * N * p);
    const auto* a = reinterpret_cast<const uint32_t*>(s & ~uintptr_t{3});
    r.sh = static_cast<uint32_t>(s & 2) * 8;  // 0 or 16 bits
#pragma unroll
    for (int i = 0; i < N; ++i) r.w[i] = ldq<S>(a + i);
    r.w[N] = r.sh ? ldq<S>(a + N) : 0u;
    return r;
  }
  __device__ __forceinline__ uint32_t word(int i) const {
    return __funnelshift_r(w[i], w[i + 1], sh);
  }
};

// The raw share of a lane in a 4-byte aligned block of 128 (u4_g128,
// f8_e4m3_b128): the f32 d at b and the 16 bytes at b + kPayload + 16 part.
template <int kPayload>
struct WordsRaw {
  uint32_t w[4], d;
  template <bool S = false>
  static __device__ __forceinline__ WordsRaw fetch(const uint8_t* b, int p) {
    WordsRaw r;
    r.d = ldq<S>(reinterpret_cast<const uint32_t*>(b));
#pragma unroll
    for (int i = 0; i < 4; ++i)
      r.w[i] = ldq<S>(reinterpret_cast<const uint32_t*>(b + kPayload + 16 * p + 4 * i));
    return r;
  }
};

template <>
struct Q8Dot<kFmtQ8_0> {  // 34 bytes: d, 32 x int8; 2 lanes x 16 values
  static constexpr int kElems = 32, kBytes = 34, kLanes = 2, kRawRegs = 7;
  using Raw = WordsA2<4>;
  uint32_t q[4];
  float d;
  int part;
  template <bool S = false>
  static __device__ __forceinline__ Raw fetch(const uint8_t* b, int p) {
    return Raw::template fetch<S>(b, p);
  }
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    d = half_bits(r.d);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = r.word(i);
  }
  __device__ void load(const uint8_t* b, int p) { decode(fetch(b, p), p); }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const uint4 x = *reinterpret_cast<const uint4*>(xq + 16 * part);
    return d * xd[0] * static_cast<float>(dot4x4(q, x));
  }
};

template <>
struct Q8Dot<kFmtQ4_0> {  // 18 bytes: d, 16 bytes of nibbles (lo: 0..15, hi: 16..31)
  static constexpr int kElems = 32, kBytes = 18, kLanes = 2, kRawRegs = 5;
  using Raw = WordsA2<2>;
  uint32_t lo[2], hi[2];
  float d;
  int part;
  template <bool S = false>
  static __device__ __forceinline__ Raw fetch(const uint8_t* b, int p) {
    return Raw::template fetch<S>(b, p);
  }
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    d = half_bits(r.d);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t w = r.word(i);
      lo[i] = sub_codes4(w & 0x0F0F0F0Fu, 0x08080808u);
      hi[i] = sub_codes4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    }
  }
  __device__ void load(const uint8_t* b, int p) { decode(fetch(b, p), p); }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const uint2 a = *reinterpret_cast<const uint2*>(xq + 8 * part);
    const uint2 b = *reinterpret_cast<const uint2*>(xq + 16 + 8 * part);
    const int s = dp4(lo[1], a.y, dp4(lo[0], a.x, dp4(hi[1], b.y, dp4(hi[0], b.x, 0))));
    return d * xd[0] * static_cast<float>(s);
  }
};

// q4_k (144 bytes: d, dmin, 12 scale bytes, 128 bytes of nibbles) and q5_k
// (176 bytes: the same + 32 bytes of fifth bits before the nibbles). The
// nibbles are 4 chunks of 32 bytes; chunk c holds sub-block 2c in its low
// nibbles and 2c + 1 in its high ones. With kL lanes a block (8 or 4), lane
// `part` takes B = 128 / kL bytes of chunk c = part / (kL / 4), at B * h (h
// = part % (kL / 4)): B values of each of the two sub-blocks. With 4 lanes
// a lane owns whole sub-blocks, so the scales and the head load are not
// duplicated across lanes (the fused decode GEMVs); 8 lanes spread short
// rows over more lanes (the MoE expert kernels). The first 16 bytes (d,
// dmin, scales) are one load (blocks are 16-byte aligned).
template <bool kFive, int kL = 8>
struct Q8DotK {
  static_assert(kL == 4 || kL == 8, "4 or 8 lanes a block");
  static constexpr int kElems = 256, kBytes = kFive ? 176 : 144, kLanes = kL;
  static constexpr int kB = 128 / kL, kN = kB / 4, kV = kN / 4;  // bytes, words, uint4
  static constexpr int kRawRegs = 4 + kN + (kFive ? kN : 0);
  struct Raw {
    uint4 head, q[kV], qh[kFive ? kV : 1];  // qh: q5_k only
  };
  // q4_k with 4 lanes (the fused decode GEMVs) keeps its high nibbles in
  // the top of their bytes (16 x the code, dp4_u8s8): |16 x a lane's
  // sub-block dot| <= 16 x 15 x 127 x 32 < 2^20. Not with 8 lanes: the MoE
  // down + combine kernel, at its 128-register cap, spilled with it.
  static constexpr bool kHigh16 = !kFive && kL == 4;
  uint32_t lo[kN], hi[kN];
  float dl, dh, ml, mh;
  int part;
  static __device__ __forceinline__ int chunk(int p) { return p / (kL / 4); }
  static __device__ __forceinline__ int half(int p) { return p % (kL / 4); }
  template <bool S = false>
  static __device__ __forceinline__ Raw fetch(const uint8_t* b, int p) {
    Raw r;
    const int c = chunk(p), h = half(p);
    auto ld = [](const uint8_t* q) { return ldq<S>(reinterpret_cast<const uint4*>(q)); };
    r.head = ld(b);
#pragma unroll
    for (int i = 0; i < kV; ++i) r.q[i] = ld(b + (kFive ? 48 : 16) + 32 * c + kB * h + 16 * i);
    if constexpr (kFive) {
#pragma unroll
      for (int i = 0; i < kV; ++i) r.qh[i] = ld(b + 16 + kB * h + 16 * i);
    }
    return r;
  }
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    const int c = chunk(p);
    const float d = half_bits(r.head.x & 0xFFFF), dmin = half_bits(r.head.x >> 16);
    const uint32_t sw[3] = {r.head.y, r.head.z, r.head.w};
    uint32_t sc[2], mn[2];
    kquant_scale_min_pair(sw, c, sc, mn);
    dl = __fmul_rn(d, static_cast<float>(sc[0]));
    dh = __fmul_rn(d, static_cast<float>(sc[1]));
    ml = __fmul_rn(dmin, static_cast<float>(mn[0]));
    mh = __fmul_rn(dmin, static_cast<float>(mn[1]));
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const uint4& qv = r.q[i / 4];
      const uint32_t qw = (i & 3) == 0 ? qv.x : (i & 3) == 1 ? qv.y : (i & 3) == 2 ? qv.z : qv.w;
      lo[i] = qw & 0x0F0F0F0Fu;
      // q4_k: the high nibbles in place (kHigh16); q5_k shifts them down to
      // put its fifth bit above them.
      hi[i] = kHigh16 ? qw & 0xF0F0F0F0u : (qw >> 4) & 0x0F0F0F0Fu;
      if constexpr (kFive) {
        const uint4& hv = r.qh[i / 4];
        const uint32_t hw = (i & 3) == 0 ? hv.x : (i & 3) == 1 ? hv.y : (i & 3) == 2 ? hv.z : hv.w;
        lo[i] |= ((hw >> (2 * c)) & 0x01010101u) << 4;
        hi[i] |= ((hw >> (2 * c + 1)) & 0x01010101u) << 4;
      }
    }
  }
  __device__ void load(const uint8_t* b, int p) { decode(fetch(b, p), p); }
  // Integer dot and code sum of the lane's words w against B bytes at x
  // (kHigh: w holds 16 x the codes, the dot is taken back down exactly).
  template <bool kHigh = false>
  static __device__ __forceinline__ void dot_words(const uint32_t (&w)[kN], const int8_t* x,
                                                   int* dot, int* sum) {
    int s = 0, t = 0;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const uint4 xv = *reinterpret_cast<const uint4*>(x + 16 * i);
      if constexpr (kHigh) {
        s = dp4_u8s8(w[4 * i + 3], xv.w,
                     dp4_u8s8(w[4 * i + 2], xv.z,
                              dp4_u8s8(w[4 * i + 1], xv.y, dp4_u8s8(w[4 * i], xv.x, s))));
      } else {
        const uint32_t wv[4] = {w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]};
        s += dot4x4(wv, xv);
      }
      if (sum) t += sum4x4(xv);
    }
    *dot = kHigh ? s >> 4 : s;  // a multiple of 16: the shift is exact
    if (sum) *sum = t;
  }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const int c = chunk(part), h = half(part);
    int il, ih, xl, xh;
    dot_words(lo, xq + 64 * c + kB * h, &il, &xl);
    dot_words<kHigh16>(hi, xq + 64 * c + 32 + kB * h, &ih, &xh);
    const float sl = static_cast<float>(il), sxl = static_cast<float>(xl);
    const float sh = static_cast<float>(ih), sxh = static_cast<float>(xh);
    return xd[2 * c] * (dl * sl - ml * sxl) + xd[2 * c + 1] * (dh * sh - mh * sxh);
  }
  // The same against activations staged with their block sums (xds: per
  // block of 32 its scale and scale x sum of its codes, 16-byte aligned at
  // the block's first 32-block): the min term of a sub-block is one product
  // per sub-block, taken by the lane of its first part (h = 0), instead of
  // a dp4a per word and token.
  static constexpr bool kStagedSums = true;
  __device__ float dot_sums(const int8_t* xq, const float* xds) const {
    const int c = chunk(part), h = half(part);
    int il, ih;
    dot_words(lo, xq + 64 * c + kB * h, &il, nullptr);
    dot_words<kHigh16>(hi, xq + 64 * c + 32 + kB * h, &ih, nullptr);
    const float4 ds = *reinterpret_cast<const float4*>(xds + 4 * c);
    const float sl = static_cast<float>(il), sh = static_cast<float>(ih);
    const float mins = h ? 0.0f : fmaf(ml, ds.y, mh * ds.w);
    return fmaf(ds.x * dl, sl, fmaf(ds.z * dh, sh, -mins));
  }
};
template <>
struct Q8Dot<kFmtQ4_K> : Q8DotK<false> {};
template <>
struct Q8Dot<kFmtQ5_K> : Q8DotK<true> {};

// q6_k (210 bytes: 128 low-nibble bytes, 64 bytes of 2-bit highs, 16 int8
// scales of 16 values, d). With kL lanes a block (8 or 4), lane `part`:
// half = part / (kL / 2), l0 = B (part % (kL / 2)) with B = 64 / kL: the B
// values at l0.. of each quarter qt of that half (elements 128 half + 32 qt
// + l0 ..), as signed bytes value - 32; each lane-quarter lies in one scale's
// 16 values. 4 lanes (the fused decode GEMVs) halve the scale decoding and
// the per-lane float work of 8 (the MoE expert kernels).
template <int kL = 8>
struct Q8Dot6K {
  static_assert(kL == 4 || kL == 8, "4 or 8 lanes a block");
  static constexpr int kElems = 256, kBytes = 210, kLanes = kL;
  static constexpr int kB = 64 / kL, kN = kB / 4;  // bytes, words a span
  static constexpr int kRawRegs = 3 * (kN + 1) + 4;
  // The lane's three B-byte spans (low nibbles of quarters 0 / 2 and 1 / 3,
  // high bits) share the block's alignment (offsets are multiples of 8):
  // each is kN aligned words + 1 when the block is not 4-byte aligned,
  // joined with shift sh; its 4 scales (bytes at 2 apart) come from 3
  // aligned words joined with shift ssh. d and both shifts share a
  // register (d | sh << 16 | ssh << 24).
  struct Raw {
    uint32_t qa[kN + 1], qb[kN + 1], qh[kN + 1], s[3], dsh;
  };
  // With 4 lanes (the fused decode GEMVs) the codes stay unsigned (0..63)
  // and the offset is taken off each quarter's integer as 32 x the sum of
  // its 16 activations (4 dp4a shared by the two rows of a work item)
  // instead of sub_codes4 on every word of both rows: the same integer.
  // With 8 lanes (the MoE expert kernels, near their register caps) the
  // codes are offset as before.
  static constexpr bool kOffsetBySum = kL == 4;
  uint32_t v[4][kN];
  float ds[4];
  int part;
  static __device__ __forceinline__ int half_of(int p) { return p / (kL / 2); }
  static __device__ __forceinline__ int l0_of(int p) { return kB * (p % (kL / 2)); }
  template <bool S>
  static __device__ __forceinline__ void span(const uint32_t* a, bool odd, uint32_t (&w)[kN + 1]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) w[i] = ldq<S>(a + i);
    w[kN] = odd ? ldq<S>(a + kN) : 0u;
  }
  template <bool S = false>
  static __device__ __forceinline__ Raw fetch(const uint8_t* b, int p) {
    Raw r;
    const int half = half_of(p), l0 = l0_of(p);
    const uintptr_t bb = reinterpret_cast<uintptr_t>(b);
    const bool odd = (bb & 2) != 0;
    const auto* a = reinterpret_cast<const uint32_t*>(bb & ~uintptr_t{3});
    const int base = static_cast<int>(bb & 3);  // 0 or 2
    span<S>(a + (base + 64 * half + l0) / 4, odd, r.qa);
    span<S>(a + (base + 64 * half + 32 + l0) / 4, odd, r.qb);
    span<S>(a + (base + 128 + 32 * half + l0) / 4, odd, r.qh);
    // Scales of quarters 0-3: bytes sb, sb + 2, sb + 4, sb + 6 (within 3
    // aligned words from sb's word on; sb's word holds the block's byte 192 +
    // 8 half + j or earlier bytes of the same block).
    const uintptr_t sb = bb + 192 + 8 * half + (l0 >> 4);
    const auto* sa = reinterpret_cast<const uint32_t*>(sb & ~uintptr_t{3});
    r.dsh = ldq<S>(reinterpret_cast<const unsigned short*>(b + 208)) | (odd ? 16u << 16 : 0u) |
            (static_cast<uint32_t>(sb & 3) * 8 << 24);
    r.s[0] = ldq<S>(sa);
    r.s[1] = ldq<S>(sa + 1);
    r.s[2] = (sb & 3) > 1 ? ldq<S>(sa + 2) : 0u;  // byte sb + 6 past the second word
    return r;
  }
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    const float d = half_bits(r.dsh & 0xFFFF);
    const uint32_t sh = (r.dsh >> 16) & 0xFF, ssh = r.dsh >> 24;
    const uint32_t s01 = __funnelshift_r(r.s[0], r.s[1], ssh);  // quarters 0, 1 at bytes 0, 2
    const uint32_t s23 = __funnelshift_r(r.s[1], r.s[2], ssh);  // quarters 2, 3
    const uint32_t sq[4] = {s01 & 0xFF, (s01 >> 16) & 0xFF, s23 & 0xFF, (s23 >> 16) & 0xFF};
#pragma unroll
    for (int qt = 0; qt < 4; ++qt)
      ds[qt] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(sq[qt])));
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const uint32_t qa = __funnelshift_r(r.qa[i], r.qa[i + 1], sh);
      const uint32_t qb = __funnelshift_r(r.qb[i], r.qb[i + 1], sh);
      const uint32_t qh = __funnelshift_r(r.qh[i], r.qh[i + 1], sh);
      constexpr uint32_t kLo = 0x0F0F0F0Fu, kHi = 0x03030303u;
      v[0][i] = (qa & kLo) | ((qh & kHi) << 4);
      v[1][i] = (qb & kLo) | (((qh >> 2) & kHi) << 4);
      v[2][i] = ((qa >> 4) & kLo) | (((qh >> 4) & kHi) << 4);
      v[3][i] = ((qb >> 4) & kLo) | (((qh >> 6) & kHi) << 4);
      if constexpr (!kOffsetBySum) {
#pragma unroll
        for (int qt = 0; qt < 4; ++qt) v[qt][i] = sub_codes4(v[qt][i], 0x20202020u);
      }
    }
  }
  __device__ void load(const uint8_t* b, int p) { decode(fetch(b, p), p); }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    static_assert(!kOffsetBySum, "unsigned codes: dot_rows");
    const int half = half_of(part), l0 = l0_of(part);
    float acc = 0.0f;
#pragma unroll
    for (int qt = 0; qt < 4; ++qt) {
      const int8_t* xp = xq + 128 * half + 32 * qt + l0;
      int s;
      if constexpr (kN == 2) {
        const uint2 x = *reinterpret_cast<const uint2*>(xp);
        s = dp4(v[qt][1], x.y, dp4(v[qt][0], x.x, 0));
      } else {
        const uint4 x = *reinterpret_cast<const uint4*>(xp);
        s = dot4x4(v[qt], x);
      }
      acc = fmaf(xd[4 * half + qt] * ds[qt], static_cast<float>(s), acc);
    }
    return acc;
  }
  // kOffsetBySum: the dots of R rows' unsigned codes (the rows of a work
  // item) against one token, each quarter's offset 32 x the sum of its 16
  // activations (|.| <= 32 x 16 x 127) taken once for all R rows, with each
  // row's f32 steps in dot's order. (As a per-row dot with precomputed
  // offsets the compiler did not share the sums between the two calls, and
  // four offsets live across both rows spilled in kernels at their caps.)
  template <int R>
  static __device__ __forceinline__ void dot_rows(const Q8Dot6K (&w)[R], const int8_t* xq,
                                                  const float* xd, float (&out)[R]) {
    static_assert(kOffsetBySum && kN == 4, "4 lanes a block");
    const int half = half_of(w[0].part), l0 = l0_of(w[0].part);
#pragma unroll
    for (int r = 0; r < R; ++r) out[r] = 0.0f;
#pragma unroll
    for (int qt = 0; qt < 4; ++qt) {
      const uint4 x = *reinterpret_cast<const uint4*>(xq + 128 * half + 32 * qt + l0);
      const int off = 32 * sum4x4(x);
      const float xs = xd[4 * half + qt];
#pragma unroll
      for (int r = 0; r < R; ++r)
        out[r] = fmaf(xs * w[r].ds[qt], static_cast<float>(dot4x4(w[r].v[qt], x) - off), out[r]);
    }
  }
};
template <>
struct Q8Dot<kFmtQ6_K> : Q8Dot6K<8> {};

// u4_g128 (72 bytes: f32 d, u8 z, 3 pad, 64 bytes of nibbles; element 2j is
// the low nibble of byte j). Lane `part` of 4: bytes 16 part .. + 16, i.e.
// elements 32 part .. + 32, one 32-block of the activations.
template <>
struct Q8Dot<kFmtU4G128> {
  static constexpr int kElems = 128, kBytes = 72, kLanes = 4, kRawRegs = 6;
  struct Raw : WordsRaw<8> {
    uint32_t z;
  };
  uint32_t v[8];
  float d;
  int part;
  template <bool S = false>
  static __device__ __forceinline__ Raw fetch(const uint8_t* b, int p) {
    Raw r;
    static_cast<WordsRaw<8>&>(r) = WordsRaw<8>::template fetch<S>(b, p);
    r.z = ldq<S>(b + 4);
    return r;
  }
  // The lane's 32 codes as unsigned bytes in element order.
  static __device__ __forceinline__ void unpack(const Raw& r, uint32_t (&v)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = r.w[i] & 0x0F0F0F0Fu, hi = (r.w[i] >> 4) & 0x0F0F0F0Fu;
      v[2 * i] = __byte_perm(lo, hi, 0x5140);      // elements 8i .. 8i + 3
      v[2 * i + 1] = __byte_perm(lo, hi, 0x7362);  // 8i + 4 .. 8i + 7
    }
  }
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    d = __uint_as_float(r.d);
    const uint32_t z4 = 0x01010101u * r.z;
    unpack(r, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = sub_codes4(v[i], z4);
  }
  __device__ void load(const uint8_t* b, int p) { decode(fetch(b, p), p); }
  // sum v x over the lane's 32 values (a, c: its 32 activations).
  __device__ __forceinline__ int dot_codes(const uint4& a, const uint4& c) const {
    const int s = dp4(v[0], a.x, dp4(v[1], a.y, dp4(v[2], a.z, dp4(v[3], a.w, 0))));
    return dp4(v[4], c.x, dp4(v[5], c.y, dp4(v[6], c.z, dp4(v[7], c.w, s))));
  }
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const uint4 a = *reinterpret_cast<const uint4*>(xq + 32 * part);
    const uint4 c = *reinterpret_cast<const uint4*>(xq + 32 * part + 16);
    return d * xd[part] * static_cast<float>(dot_codes(a, c));
  }
};

// u4_g128 with its codes left unsigned (0..15: dp4a reads them as the
// positive signed bytes they are) and the zero point taken off once a lane,
// sum (q - z) x = sum q x - z sum x, instead of sub_codes4 on every word
// (24 of a lane's ~60 instructions a block; ncu: the GPTQ GEMVs at 0.43 warp
// instructions a byte, q4_k at 0.18). Q8Dot<kFmtU4G128>'s lanes and loads.
// Two readers: U4DotSums (the fused decode GEMVs, GemvFmt: against the
// staged code sums, one product a lane, activations in nibble order) and U4DotExact (the MoE decode
// kernels, one token a decoded row: sum x by dp4a, bitwise
// Q8Dot<kFmtU4G128>::dot). Paths that meet a decoded row with many tokens
// keep Q8Dot's subtracted codes.
struct U4DotRaw : Q8Dot<kFmtU4G128> {
  int z;
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    d = __uint_as_float(r.d);
    z = static_cast<int>(r.z & 0xFFu);
    unpack(r, v);  // v: the codes themselves
  }
  __device__ void load(const uint8_t* b, int p) { decode(fetch(b, p), p); }
  // Q8Dot's dot reads subtracted codes: not these.
  __device__ float dot(const int8_t*, const float*) const = delete;
};

// Against activations staged in nibble order (gemv::split_x): word i's low
// nibbles are its 4 even elements and the high ones its 4 odd ones, as the
// staged words are, so the nibbles go in as they are (no byte permutes).
struct U4DotSums : U4DotRaw {
  __device__ __forceinline__ void decode(const Raw& r, int p) {
    part = p;
    d = __uint_as_float(r.d);
    z = static_cast<int>(r.z & 0xFFu);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = r.w[i] & 0x0F0F0F0Fu;      // elements 8i, 8i + 2, 8i + 4, 8i + 6
      v[2 * i + 1] = r.w[i] & 0xF0F0F0F0u;  // 8i + 1, ...: 16 x the codes, in place (dp4_u8s8)
    }
  }
  __device__ void load(const uint8_t* b, int p) { decode(fetch(b, p), p); }
  // Q8Dot's dot_codes over these words: the even elements' dot plus the odd
  // ones' taken back down from 16 x (exact: |.| < 2^20), the same integer.
  __device__ __forceinline__ int dot_codes(const uint4& a, const uint4& c) const {
    const int even = dp4(v[0], a.x, dp4(v[2], a.z, dp4(v[4], c.x, dp4(v[6], c.z, 0))));
    const int odd16 =
        dp4_u8s8(v[1], a.y, dp4_u8s8(v[3], a.w, dp4_u8s8(v[5], c.y, dp4_u8s8(v[7], c.w, 0))));
    return even + (odd16 >> 4);
  }
  // xds: per 32-block of the activations its scale and scale x code sum;
  // the lane's 32-block is `part` of the block's four.
  static constexpr bool kStagedSums = true;
  __device__ float dot_sums(const int8_t* xq, const float* xds) const {
    const uint4 a = *reinterpret_cast<const uint4*>(xq + 32 * part);
    const uint4 c = *reinterpret_cast<const uint4*>(xq + 32 * part + 16);
    const float2 ds = *reinterpret_cast<const float2*>(xds + 2 * part);
    return d * fmaf(ds.x, static_cast<float>(dot_codes(a, c)), -static_cast<float>(z) * ds.y);
  }
};

struct U4DotExact : U4DotRaw {
  __device__ float dot(const int8_t* xq, const float* xd) const {
    const uint4 a = *reinterpret_cast<const uint4*>(xq + 32 * part);
    const uint4 c = *reinterpret_cast<const uint4*>(xq + 32 * part + 16);
    const int s = dot_codes(a, c) - z * (sum4x4(a) + sum4x4(c));  // exact: |s| < 2^16
    return d * xd[part] * static_cast<float>(s);
  }
};

}  // namespace ferrite::cuda::qblocks
