// The block formats as the bf16 tensor-core tile of quant_tile.cu reads
// them: for one weight row and one k step of 256 elements (its raw bytes
// copied to shared memory, `r` at the step's first byte), 32-element chunk
// kc (0..7) and lane quad tq (0..3),
//
//   values(r, kc, tq, v): elements 8 tq .. 8 tq + 7 of the chunk in f32,
//   exactly as dequantize_row computes them (tensor/dtype.h: the same f32
//   products and differences, each rounded once)
//
// which the tile rounds to the activation type and packs into its mma A
// fragments (quant_tile.cu says which element goes where).
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
// 0x4B000000 | b are the float 2^23 + b for b < 2^23, so (2^23 + b) - (2^23
// + c) is b - c exactly, with no integer-to-float conversion.
//
// Plain C++ (host and device), so that tests/kernels checks every format
// against dequantize_row on the CPU, where CI runs. Reads are aligned 16-bit
// halves (q8_0 / q4_0 / q6_k steps keep only 2-byte alignment) or aligned
// 32-bit words (q4_k, q5_k, f8, u4_g128). The helpers also serve the int8
// tile's formats (quant_mmq_formats.h).
#pragma once

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
// a * b and a - b rounded once each, never contracted into a fused
// multiply-add (the reference dequantization rounds the product first).
FERRITE_TILE_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  volatile float p = a * b;
  return p;
#endif
}
FERRITE_TILE_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  volatile float p = a - b;
  return p;
#endif
}
// Byte i of w minus c, as an exact f32 (the magic-number form above).
FERRITE_TILE_HD float byte_minus(uint32_t w, int i, uint32_t c) {
  return bits_f32(0x4B000000u | ((w >> (8 * i)) & 0xFFu)) - bits_f32(0x4B000000u | c);
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

template <int F>
struct Values;

template <>
struct Values<kQ8_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 34;
  static FERRITE_TILE_HD void values(const uint8_t* r, int kc, int tq, float (&v)[8]) {
    const uint8_t* b = r + kBlockBytes * kc;
    const float d = f16_bits(rd16(b));
    // Codes + 128 as unsigned bytes.
    const uint32_t w[2] = {rd32_a2(b + 2 + 8 * tq) ^ 0x80808080u,
                           rd32_a2(b + 6 + 8 * tq) ^ 0x80808080u};
    for (int i = 0; i < 8; ++i) v[i] = mul_rn(byte_minus(w[i >> 2], i & 3, 128), d);
  }
};

template <>
struct Values<kQ4_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 18;
  // Element l < 16 is the low nibble of byte l, element 16 + l its high one.
  static FERRITE_TILE_HD void values(const uint8_t* r, int kc, int tq, float (&v)[8]) {
    const uint8_t* b = r + kBlockBytes * kc;
    const float d = f16_bits(rd16(b));
    const uint8_t* q = b + 2 + 8 * (tq & 1);
    const int sh = 4 * (tq >> 1);
    const uint32_t w[2] = {(rd32_a2(q) >> sh) & 0x0F0F0F0Fu, (rd32_a2(q + 4) >> sh) & 0x0F0F0F0Fu};
    for (int i = 0; i < 8; ++i) v[i] = mul_rn(byte_minus(w[i >> 2], i & 3, 8), d);
  }
};

// q4_k / q5_k: chunk kc is sub-block kc: the low (kc even) or high (kc odd)
// nibbles of qs[32 (kc / 2) ..], plus, for q5_k, bit kc of qh[l] as 16.
template <bool kFive>
struct ValuesK {
  static constexpr int kBlockElems = 256, kBlockBytes = kFive ? 176 : 144;
  static FERRITE_TILE_HD void values(const uint8_t* r, int kc, int tq, float (&v)[8]) {
    uint32_t sc, mn;
    kquant_scale_min(r + 4, kc, &sc, &mn);
    const float d1 = mul_rn(f16_bits(rd16(r)), static_cast<float>(sc));
    const float m1 = mul_rn(f16_bits(rd16(r + 2)), static_cast<float>(mn));
    const uint8_t* qs = r + (kFive ? 48 : 16) + 32 * (kc >> 1) + 8 * tq;
    const int sh = 4 * (kc & 1);
    uint32_t w[2] = {(rd32(qs) >> sh) & 0x0F0F0F0Fu, (rd32(qs + 4) >> sh) & 0x0F0F0F0Fu};
    if constexpr (kFive) {
      const uint8_t* qh = r + 16 + 8 * tq;
      w[0] |= ((rd32(qh) >> kc) & 0x01010101u) << 4;
      w[1] |= ((rd32(qh + 4) >> kc) & 0x01010101u) << 4;
    }
    for (int i = 0; i < 8; ++i) v[i] = sub_rn(mul_rn(d1, byte_minus(w[i >> 2], i & 3, 0)), m1);
  }
};
template <>
struct Values<kQ4_K> : ValuesK<false> {};
template <>
struct Values<kQ5_K> : ValuesK<true> {};

// q6_k: chunk kc is quarter qt = kc % 4 of half kc / 4: element l of it has
// its low 4 bits in nibble qt / 2 of ql[64 half + 32 (qt % 2) + l] and its
// high 2 bits at bit 2 qt of qh[32 half + l]; scales[8 half + 2 qt] serves
// l < 16 (lanes 0, 1), scales[8 half + 2 qt + 1] the rest.
template <>
struct Values<kQ6_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 210;
  static FERRITE_TILE_HD void values(const uint8_t* r, int kc, int tq, float (&v)[8]) {
    const int half = kc >> 2, qt = kc & 3;
    const uint8_t* ql = r + 64 * half + 32 * (qt & 1) + 8 * tq;
    const uint8_t* qh = r + 128 + 32 * half + 8 * tq;
    const int lsh = 4 * (qt >> 1), hsh = 2 * qt;
    const int sc = static_cast<int8_t>(r[192 + 8 * half + 2 * qt + (tq >> 1)]);
    const float ds = mul_rn(f16_bits(rd16(r + 208)), static_cast<float>(sc));
    uint32_t w[2];
    for (int h = 0; h < 2; ++h)
      w[h] = ((rd32_a2(ql + 4 * h) >> lsh) & 0x0F0F0F0Fu) |
             (((rd32_a2(qh + 4 * h) >> hsh) & 0x03030303u) << 4);
    for (int i = 0; i < 8; ++i) v[i] = mul_rn(ds, byte_minus(w[i >> 2], i & 3, 32));
  }
};

// f8_e4m3_b128: chunk kc is the 32 elements 32 (kc % 4) .. of block kc / 4.
template <>
struct Values<kF8B128> {
  static constexpr int kBlockElems = 128, kBlockBytes = 132;
  static FERRITE_TILE_HD void values(const uint8_t* r, int kc, int tq, float (&v)[8]) {
    const uint8_t* b = r + kBlockBytes * (kc >> 2);
    const float d = rd_f32(b);
    const uint8_t* q = b + 4 + 32 * (kc & 3) + 8 * tq;
    const uint32_t w[2] = {rd32(q), rd32(q + 4)};
#ifdef __CUDA_ARCH__
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 2; ++p) {
        // Two codes at a time; e4m3fn -> f16 is exact.
        const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>((w[h] >> (16 * p)) & 0xFFFFu), __NV_E4M3);
        const float2 f = __half22float2(__half2(hr));
        v[4 * h + 2 * p] = mul_rn(f.x, d);
        v[4 * h + 2 * p + 1] = mul_rn(f.y, d);
      }
    }
#else
    for (int i = 0; i < 8; ++i)
      v[i] = mul_rn(f8e4m3_to_f32(static_cast<uint8_t>(w[i >> 2] >> (8 * (i & 3)))), d);
#endif
  }
};

// u4_g128: chunk kc is the 32 elements 32 (kc % 4) .. of block kc / 4;
// element 2j is the low nibble of byte j, 2j + 1 its high one.
template <>
struct Values<kU4G128> {
  static constexpr int kBlockElems = 128, kBlockBytes = 72;
  static FERRITE_TILE_HD void values(const uint8_t* r, int kc, int tq, float (&v)[8]) {
    const uint8_t* b = r + kBlockBytes * (kc >> 2);
    const float d = rd_f32(b);
    const uint32_t z = b[4];
    const uint32_t w = rd32(b + 8 + 16 * (kc & 3) + 4 * tq);
    const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = mul_rn(d, byte_minus(lo, j, z));
      v[2 * j + 1] = mul_rn(d, byte_minus(hi, j, z));
    }
  }
};

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
