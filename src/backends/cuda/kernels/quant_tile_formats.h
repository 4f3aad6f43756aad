// The block formats as the bf16 tensor-core tile of quant_tile.cu reads
// them: for one weight row and one k step of 256 elements (its raw bytes
// copied to shared memory, `r` at the step's first byte), 32-element chunk
// kc (0..7), 16-element group grp (0, 1) and lane quad tq (0..3),
//
//   scale(r, kc, grp):    the group's Scale (s, t), which the tile computes
//                         once a step for every row and group;
//   codes(r, kc, tq, w):  the codes of elements 8 tq .. 8 tq + 7 of the chunk,
//                         a byte each in element order;
//   decode<kind>(w, sc, v): their values in f32
//
// and values() = decode(codes, scale of group tq / 2): exactly
// dequantize_row's (tensor/dtype.h: the same f32 products, each rounded
// once), but for the K-quants' s q - m, one fused multiply-add where the
// reference rounds s q first (at most an f32 rounding apart). The tile rounds
// the values to bf16 and packs them into its mma A fragments.
//
//   format        bytes a step          element
//   q8_0          8 blocks of 34        d q
//   q4_0          8 blocks of 18        d (q - 8)
//   q4_k / q5_k   1 block of 144 / 176  (d sc) q - (dmin mn)
//   q6_k          1 block of 210        (d sc) (q - 32), a scale per 16
//   f8_e4m3_b128  2 blocks of 132       f32(e4m3) d
//   u4_g128       2 blocks of 72        d (q - z)
//
// Codes become floats exactly through the magic-number form: the bits
// 0x4B000000 | b are the float 2^23 + b for b < 2^23 (one byte permute on
// the GPU), so (2^23 + b) - (2^23 + c) is b - c exactly, with no
// integer-to-float conversion.
//
// Plain C++ (host and device), so that tests/kernels checks every format
// against dequantize_row on the CPU, where CI runs. Reads are aligned 16-bit
// halves (q8_0 / q4_0 / q6_k steps keep only 2-byte alignment) or aligned
// 32-bit words (q4_k, q5_k, f8, u4_g128).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define FERRITE_TILE_HD __host__ __device__ __forceinline__
#else
#include <cstdio>
#include <cstdlib>

#include "tensor/dtype.h"
#define FERRITE_TILE_HD inline
#endif

// Host builds of a test define FERRITE_TILE_CHECK_ALIGNMENT: every read then
// aborts unless its address has the alignment the device load needs.
#if !defined(__CUDA_ARCH__) && defined(FERRITE_TILE_CHECK_ALIGNMENT)
#define FERRITE_TILE_ALIGNED(p, n)                                                     \
  do {                                                                                 \
    if (reinterpret_cast<uintptr_t>(p) % (n) != 0) {                                   \
      std::fprintf(stderr, "quant_tile_formats.h: %d-byte read at %p\n", (n),         \
                   static_cast<const void*>(p));                                       \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
#else
#define FERRITE_TILE_ALIGNED(p, n) \
  do {                             \
  } while (0)
#endif

namespace ferrite::cuda::tile {

// Elements per k step, 32-element chunks per step.
inline constexpr int kStepElems = 256;
inline constexpr int kChunks = 8;

FERRITE_TILE_HD uint32_t rd16(const uint8_t* p) {  // 2-byte aligned
  FERRITE_TILE_ALIGNED(p, 2);
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}
FERRITE_TILE_HD uint32_t rd32(const uint8_t* p) {  // 4-byte aligned
  FERRITE_TILE_ALIGNED(p, 4);
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
// A 32-bit word at a 2-byte aligned address.
FERRITE_TILE_HD uint32_t rd32_a2(const uint8_t* p) { return rd16(p) | (rd16(p + 2) << 16); }
FERRITE_TILE_HD float bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
FERRITE_TILE_HD float rd_f32(const uint8_t* p) { return bits_f32(rd32(p)); }
FERRITE_TILE_HD float f16_bits(uint32_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
#else
  return f16_to_f32(static_cast<uint16_t>(h));
#endif
}
// a * b rounded once, never contracted into a fused multiply-add.
FERRITE_TILE_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  volatile float p = a * b;
  return p;
#endif
}
// The 6-bit scale and min of K-quant sub-block j from the 12 scale bytes s
// (ggml's get_scale_min_k4).
FERRITE_TILE_HD void kquant_scale_min(const uint8_t* s, int j, uint32_t* sc, uint32_t* mn) {
  if (j < 4) {
    *sc = s[j] & 63u;
    *mn = s[j + 4] & 63u;
  } else {
    *sc = (s[j + 4] & 0xFu) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The format codes (qblocks::QFmt's order).
enum Fmt : int { kQ8_0 = 0, kQ4_0 = 1, kQ4_K = 2, kQ5_K = 3, kQ6_K = 4, kF8B128 = 5, kU4G128 = 6 };

// How a format's codes become values, with (s, t) the Scale of the code's
// 16-element group of its chunk:
//  - kOffset: s (q - c), exactly the reference's single rounding; t = 2^23 + c,
//    so that (2^23 + q) - t is q - c exactly (q8_0: codes + 128, c = 128; q4_0:
//    c = 8; q6_k: c = 32; u4_g128: c = z);
//  - kMin: s q - m as one fused multiply-add, t = -m (the K-quants: within an
//    f32 rounding of the reference's s q, then - m);
//  - kFp8: f32(e4m3) s (t unused).
enum class Kind { kOffset, kMin, kFp8 };
struct alignas(8) Scale {
  float s, t;
};
// The magic-number float of a code b < 2^23: 2^23 + b.
FERRITE_TILE_HD float magic_f32(uint32_t b) { return bits_f32(0x4B000000u | b); }
inline constexpr float kMagic = 8388608.0f;  // 2^23

template <int F>
struct Values;

template <>
struct Values<kQ8_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 34;
  static constexpr Kind kKind = Kind::kOffset;
  static FERRITE_TILE_HD Scale scale(const uint8_t* r, int kc, int) {
    return {f16_bits(rd16(r + kBlockBytes * kc)), magic_f32(128)};
  }
  // Codes + 128 as unsigned bytes.
  static FERRITE_TILE_HD void codes(const uint8_t* r, int kc, int tq, uint32_t (&w)[2]) {
    const uint8_t* q = r + kBlockBytes * kc + 2 + 8 * tq;
    w[0] = rd32_a2(q) ^ 0x80808080u;
    w[1] = rd32_a2(q + 4) ^ 0x80808080u;
  }
};

// Element l < 16 is the low nibble of byte l, element 16 + l its high one.
template <>
struct Values<kQ4_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 18;
  static constexpr Kind kKind = Kind::kOffset;
  static FERRITE_TILE_HD Scale scale(const uint8_t* r, int kc, int) {
    return {f16_bits(rd16(r + kBlockBytes * kc)), magic_f32(8)};
  }
  static FERRITE_TILE_HD void codes(const uint8_t* r, int kc, int tq, uint32_t (&w)[2]) {
    const uint8_t* q = r + kBlockBytes * kc + 2 + 8 * (tq & 1);
    const int sh = 4 * (tq >> 1);
    w[0] = (rd32_a2(q) >> sh) & 0x0F0F0F0Fu;
    w[1] = (rd32_a2(q + 4) >> sh) & 0x0F0F0F0Fu;
  }
};

// q4_k / q5_k: chunk kc is sub-block kc: the low (kc even) or high (kc odd)
// nibbles of qs[32 (kc / 2) ..], plus, for q5_k, bit kc of qh[l] as 16.
template <bool kFive>
struct ValuesK {
  static constexpr int kBlockElems = 256, kBlockBytes = kFive ? 176 : 144;
  static constexpr Kind kKind = Kind::kMin;
  static FERRITE_TILE_HD Scale scale(const uint8_t* r, int kc, int) {
    uint32_t sc, mn;
    kquant_scale_min(r + 4, kc, &sc, &mn);
    return {mul_rn(f16_bits(rd16(r)), static_cast<float>(sc)),
            -mul_rn(f16_bits(rd16(r + 2)), static_cast<float>(mn))};
  }
  static FERRITE_TILE_HD void codes(const uint8_t* r, int kc, int tq, uint32_t (&w)[2]) {
    const uint8_t* qs = r + (kFive ? 48 : 16) + 32 * (kc >> 1) + 8 * tq;
    const int sh = 4 * (kc & 1);
    w[0] = (rd32(qs) >> sh) & 0x0F0F0F0Fu;
    w[1] = (rd32(qs + 4) >> sh) & 0x0F0F0F0Fu;
    if constexpr (kFive) {
      const uint8_t* qh = r + 16 + 8 * tq;
      w[0] |= ((rd32(qh) >> kc) & 0x01010101u) << 4;
      w[1] |= ((rd32(qh + 4) >> kc) & 0x01010101u) << 4;
    }
  }
};
template <>
struct Values<kQ4_K> : ValuesK<false> {};
template <>
struct Values<kQ5_K> : ValuesK<true> {};

// q6_k: chunk kc is quarter qt = kc % 4 of half kc / 4: element l of it has
// its low 4 bits in nibble qt / 2 of ql[64 half + 32 (qt % 2) + l] and its
// high 2 bits at bit 2 qt of qh[32 half + l]; scales[8 half + 2 qt] serves
// l < 16 (group 0), scales[8 half + 2 qt + 1] the rest.
template <>
struct Values<kQ6_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 210;
  static constexpr Kind kKind = Kind::kOffset;
  static FERRITE_TILE_HD Scale scale(const uint8_t* r, int kc, int grp) {
    const int sc = static_cast<int8_t>(r[192 + 8 * (kc >> 2) + 2 * (kc & 3) + grp]);
    return {mul_rn(f16_bits(rd16(r + 208)), static_cast<float>(sc)), magic_f32(32)};
  }
  static FERRITE_TILE_HD void codes(const uint8_t* r, int kc, int tq, uint32_t (&w)[2]) {
    const int half = kc >> 2, qt = kc & 3;
    const uint8_t* ql = r + 64 * half + 32 * (qt & 1) + 8 * tq;
    const uint8_t* qh = r + 128 + 32 * half + 8 * tq;
    const int lsh = 4 * (qt >> 1), hsh = 2 * qt;
    for (int h = 0; h < 2; ++h)
      w[h] = ((rd32_a2(ql + 4 * h) >> lsh) & 0x0F0F0F0Fu) |
             (((rd32_a2(qh + 4 * h) >> hsh) & 0x03030303u) << 4);
  }
};

// f8_e4m3_b128: chunk kc is the 32 elements 32 (kc % 4) .. of block kc / 4.
template <>
struct Values<kF8B128> {
  static constexpr int kBlockElems = 128, kBlockBytes = 132;
  static constexpr Kind kKind = Kind::kFp8;
  static FERRITE_TILE_HD Scale scale(const uint8_t* r, int kc, int) {
    return {rd_f32(r + kBlockBytes * (kc >> 2)), 0.0f};
  }
  static FERRITE_TILE_HD void codes(const uint8_t* r, int kc, int tq, uint32_t (&w)[2]) {
    const uint8_t* q = r + kBlockBytes * (kc >> 2) + 4 + 32 * (kc & 3) + 8 * tq;
    w[0] = rd32(q);
    w[1] = rd32(q + 4);
  }
};

// u4_g128: chunk kc is the 32 elements 32 (kc % 4) .. of block kc / 4;
// element 2j is the low nibble of byte j, 2j + 1 its high one: the codes are
// returned in element order (w[0] elements 0..3 of the lane, w[1] 4..7).
template <>
struct Values<kU4G128> {
  static constexpr int kBlockElems = 128, kBlockBytes = 72;
  static constexpr Kind kKind = Kind::kOffset;
  static FERRITE_TILE_HD Scale scale(const uint8_t* r, int kc, int) {
    const uint8_t* b = r + kBlockBytes * (kc >> 2);
    return {rd_f32(b), magic_f32(b[4])};
  }
  static FERRITE_TILE_HD void codes(const uint8_t* r, int kc, int tq, uint32_t (&w)[2]) {
    const uint32_t v = rd32(r + kBlockBytes * (kc >> 2) + 8 + 16 * (kc & 3) + 4 * tq);
    // Nibbles 0..3 (bytes 0, 1) and 4..7 (bytes 2, 3) spread to a byte each.
    const uint32_t lo = v & 0x0F0F0F0Fu, hi = (v >> 4) & 0x0F0F0F0Fu;
#ifdef __CUDA_ARCH__
    w[0] = __byte_perm(lo, hi, 0x5140);
    w[1] = __byte_perm(lo, hi, 0x7362);
#else
    auto b = [](uint32_t x, int i) { return (x >> (8 * i)) & 0xFFu; };
    w[0] = b(lo, 0) | b(hi, 0) << 8 | b(lo, 1) << 16 | b(hi, 1) << 24;
    w[1] = b(lo, 2) | b(hi, 2) << 8 | b(lo, 3) << 16 | b(hi, 3) << 24;
#endif
  }
};

// Byte i of w as the magic-number float 2^23 + byte (one byte permute).
FERRITE_TILE_HD float magic_byte(uint32_t w, int i) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | static_cast<unsigned>(i)));
#else
  return magic_f32((w >> (8 * i)) & 0xFFu);
#endif
}
FERRITE_TILE_HD float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// The 8 values of codes w (element order) at scale sc.
template <Kind K>
FERRITE_TILE_HD void decode(const uint32_t (&w)[2], Scale sc, float (&v)[8]) {
  if constexpr (K == Kind::kFp8) {
#ifdef __CUDA_ARCH__
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 2; ++p) {
        // Two codes at a time; e4m3fn -> f16 is exact.
        const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>((w[h] >> (16 * p)) & 0xFFFFu), __NV_E4M3);
        const float2 f = __half22float2(__half2(hr));
        v[4 * h + 2 * p] = mul_rn(f.x, sc.s);
        v[4 * h + 2 * p + 1] = mul_rn(f.y, sc.s);
      }
    }
#else
    for (int i = 0; i < 8; ++i)
      v[i] = mul_rn(f8e4m3_to_f32(static_cast<uint8_t>(w[i >> 2] >> (8 * (i & 3)))), sc.s);
#endif
  } else {
    for (int i = 0; i < 8; ++i) {
      const float f = magic_byte(w[i >> 2], i & 3);
      if constexpr (K == Kind::kOffset)
        v[i] = mul_rn(f - sc.t, sc.s);  // (2^23 + q) - (2^23 + c): exact
      else
        v[i] = fma_rn(f - kMagic, sc.s, sc.t);
    }
  }
}

// Elements 8 tq .. 8 tq + 7 of chunk kc: the codes of the lane at the scale
// of its 16-element group (tq / 2).
template <int F>
FERRITE_TILE_HD void values(const uint8_t* r, int kc, int tq, float (&v)[8]) {
  uint32_t w[2];
  Values<F>::codes(r, kc, tq, w);
  decode<Values<F>::kKind>(w, Values<F>::scale(r, kc, tq >> 1), v);
}

// --- Fragments ----------------------------------------------------------
// The tile's m16n8k16 mma takes weight rows as A (16 a tile) and tokens as B
// (8 a group). Lane (g = lane / 4, tq = lane % 4) puts, for half h of a
// 32-element chunk, the chunk's elements 8 tq + 4 h .. + 3 in its k slots
// (2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9) (mma.cuh's layouts): a sum over k
// does not depend on which slot an element takes as long as weights and
// tokens agree, and so a lane decodes 8 consecutive elements of each of its
// rows and reads a token's 8 activations with one 16-byte load.

// Two values rounded to bf16 (nearest even) in one register, the first in
// the low half.
FERRITE_TILE_HD uint32_t pack_bf16(float lo, float hi) {
#ifdef __CUDA_ARCH__
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return static_cast<uint32_t>(f32_to_bf16(lo)) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
#endif
}
// Registers a[0..3] of half h's A fragment from the values of the lane's
// rows g (`lo`) and g + 8 (`hi`).
FERRITE_TILE_HD void a_fragment(const float (&lo)[8], const float (&hi)[8], int h, uint32_t (&a)[4]) {
  a[0] = pack_bf16(lo[4 * h], lo[4 * h + 1]);
  a[1] = pack_bf16(hi[4 * h], hi[4 * h + 1]);
  a[2] = pack_bf16(lo[4 * h + 2], lo[4 * h + 3]);
  a[3] = pack_bf16(hi[4 * h + 2], hi[4 * h + 3]);
}
// Registers b0, b1 of half h's B fragment from the 16-byte load of token g's
// activations 8 tq .. 8 tq + 7 of the chunk (four words, two bf16 each).
FERRITE_TILE_HD void b_fragment(const uint32_t (&x)[4], int h, uint32_t* b0, uint32_t* b1) {
  *b0 = x[2 * h];
  *b1 = x[2 * h + 1];
}

// Raw bytes of one row's k step of `elems` elements (whole blocks).
template <int F>
constexpr int step_bytes(int elems) {
  return elems / Values<F>::kBlockElems * Values<F>::kBlockBytes;
}

}  // namespace ferrite::cuda::tile
