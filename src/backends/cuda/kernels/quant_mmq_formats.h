// The block formats as the int8 tensor-core tile of quant_mmq.cu reads them:
// for one weight row and one k step of 256 elements (its raw bytes copied to
// shared memory, `r` at the step's first byte), 32-element chunk kc (0..7)
// gives
//
//   codes: the signed 8-bit codes of elements 4 tq .. 4 tq + 3 (lo) and
//          16 + 4 tq .. 16 + 4 tq + 3 (hi) of the chunk, one byte each, the
//          first element in the low byte: the A fragment of an m16n8k32 s8
//          mma for the lane of thread-in-group tq (tq 0..3);
//   scale: (d, m) with element e of the chunk = d * code_e - m exactly as the
//          reference dequantization computes it (tensor/dtype.h: the same f32
//          products), m = 0 for the formats without a min term; q6_k has a
//          scale per 16 elements: (d_lo, d_hi) for elements 0..15 / 16..31.
//
//   format   bytes a step            codes                     scale
//   q8_0     8 blocks of 34          q                         (d, 0)
//   q4_0     8 blocks of 18          q - 8                     (d, 0)
//   q4_k     1 block of 144          q (0..15)                 (d sc, dmin mn)
//   q5_k     1 block of 176          q (0..31)                 (d sc, dmin mn)
//   q6_k     1 block of 210          q - 32                    (d sc_lo, d sc_hi)
//   u4_g128  2 blocks of 72          q - z (z 0..16)           (d, 0)
//
// Plain C++ (host and device) so that tests/kernels checks every format's
// codes and scales against dequantize_row on the CPU, where CI runs. Reads
// are of aligned 16-bit halves (q8_0 / q4_0 / q6_k steps keep only 2-byte
// alignment) or aligned 32-bit words (q4_k / q5_k / u4_g128).
#pragma once

#include <cstdint>

// The aligned reads, f16 scales and K-quant scale bytes are the bf16 tile's
// (FERRITE_TILE_CHECK_ALIGNMENT in a host test checks every read's alignment).
#include "backends/cuda/kernels/quant_tile_formats.h"

#ifdef __CUDACC__
#define FERRITE_MMQ_HD __host__ __device__ __forceinline__
#else
#define FERRITE_MMQ_HD inline
#endif

namespace ferrite::cuda::mmq {

using tile::f16_bits;
using tile::kChunks;
using tile::kquant_scale_min;
using tile::kStepElems;
using tile::rd16;
using tile::rd32;
using tile::rd32_a2;
using tile::rd_f32;

// Byte-wise a - b for bytes of a and b below 128 (no borrow between bytes):
// the signed difference in each byte.
FERRITE_MMQ_HD uint32_t sub_bytes(uint32_t a, uint32_t b) {
  return ((a | 0x80808080u) - b) ^ 0x80808080u;
}
// Four nibbles of a 16-bit value as bytes: element order n0 (low nibble of
// byte 0), n1 (its high nibble), n2, n3 (byte 1) -> bytes 0..3.
FERRITE_MMQ_HD uint32_t nibbles4(uint32_t h) {
  return (h & 0xFu) | ((h & 0xF0u) << 4) | ((h & 0xF00u) << 8) | ((h & 0xF000u) << 12);
}

// The format codes (qblocks::QFmt's; quant_tile.cu checks).
using tile::kQ4_0;
using tile::kQ4_K;
using tile::kQ5_K;
using tile::kQ6_K;
using tile::kQ8_0;
using tile::kU4G128;

template <int F>
struct Format;

template <>
struct Format<kQ8_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 34;
  static constexpr bool kHasMin = false, kScalePer16 = false;
  static FERRITE_MMQ_HD void codes(const uint8_t* r, int kc, int tq, uint32_t* lo, uint32_t* hi) {
    const uint8_t* q = r + kBlockBytes * kc + 2;
    *lo = rd32_a2(q + 4 * tq);
    *hi = rd32_a2(q + 16 + 4 * tq);
  }
  static FERRITE_MMQ_HD void scale(const uint8_t* r, int kc, float* d, float* m) {
    *d = f16_bits(rd16(r + kBlockBytes * kc));
    *m = 0.0f;
  }
};

template <>
struct Format<kQ4_0> {
  static constexpr int kBlockElems = 32, kBlockBytes = 18;
  static constexpr bool kHasMin = false, kScalePer16 = false;
  static FERRITE_MMQ_HD void codes(const uint8_t* r, int kc, int tq, uint32_t* lo, uint32_t* hi) {
    const uint32_t w = rd32_a2(r + kBlockBytes * kc + 2 + 4 * tq);
    *lo = sub_bytes(w & 0x0F0F0F0Fu, 0x08080808u);
    *hi = sub_bytes((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
  }
  static FERRITE_MMQ_HD void scale(const uint8_t* r, int kc, float* d, float* m) {
    *d = f16_bits(rd16(r + kBlockBytes * kc));
    *m = 0.0f;
  }
};

// q4_k / q5_k: chunk kc is sub-block kc; its codes are the low (kc even) or
// high (kc odd) nibbles of qs[32 (kc / 2) ..], plus, for q5_k, bit kc of
// qh[l] as 16.
template <bool kFive>
struct FormatK {
  static constexpr int kBlockElems = 256, kBlockBytes = kFive ? 176 : 144;
  static constexpr bool kHasMin = true, kScalePer16 = false;
  static FERRITE_MMQ_HD void codes(const uint8_t* r, int kc, int tq, uint32_t* lo, uint32_t* hi) {
    const uint8_t* qs = r + (kFive ? 48 : 16) + 32 * (kc >> 1);
    const int sh = 4 * (kc & 1);
    uint32_t l = (rd32(qs + 4 * tq) >> sh) & 0x0F0F0F0Fu;
    uint32_t h = (rd32(qs + 16 + 4 * tq) >> sh) & 0x0F0F0F0Fu;
    if constexpr (kFive) {
      const uint8_t* qh = r + 16;
      l |= ((rd32(qh + 4 * tq) >> kc) & 0x01010101u) << 4;
      h |= ((rd32(qh + 16 + 4 * tq) >> kc) & 0x01010101u) << 4;
    }
    *lo = l;
    *hi = h;
  }
  static FERRITE_MMQ_HD void scale(const uint8_t* r, int kc, float* d, float* m) {
    uint32_t sc, mn;
    kquant_scale_min(r + 4, kc, &sc, &mn);
    *d = f16_bits(rd16(r)) * static_cast<float>(sc);
    *m = f16_bits(rd16(r + 2)) * static_cast<float>(mn);
  }
};
template <>
struct Format<kQ4_K> : FormatK<false> {};
template <>
struct Format<kQ5_K> : FormatK<true> {};

// q6_k: chunk kc is quarter qt = kc % 4 of half kc / 4: element l of it has
// its low 4 bits in nibble qt / 2 of ql[64 half + 32 (qt % 2) + l] and its
// high 2 bits at bit 2 qt of qh[32 half + l]; scales[8 half + 2 qt] serves
// l < 16, scales[8 half + 2 qt + 1] the rest.
template <>
struct Format<kQ6_K> {
  static constexpr int kBlockElems = 256, kBlockBytes = 210;
  static constexpr bool kHasMin = false, kScalePer16 = true;
  static FERRITE_MMQ_HD void codes(const uint8_t* r, int kc, int tq, uint32_t* lo, uint32_t* hi) {
    const int half = kc >> 2, qt = kc & 3;
    const uint8_t* ql = r + 64 * half + 32 * (qt & 1);
    const uint8_t* qh = r + 128 + 32 * half;
    const int lsh = 4 * (qt >> 1), hsh = 2 * qt;
    const uint32_t l0 = rd32_a2(ql + 4 * tq), l1 = rd32_a2(ql + 16 + 4 * tq);
    const uint32_t h0 = rd32_a2(qh + 4 * tq), h1 = rd32_a2(qh + 16 + 4 * tq);
    *lo = sub_bytes(((l0 >> lsh) & 0x0F0F0F0Fu) | (((h0 >> hsh) & 0x03030303u) << 4), 0x20202020u);
    *hi = sub_bytes(((l1 >> lsh) & 0x0F0F0F0Fu) | (((h1 >> hsh) & 0x03030303u) << 4), 0x20202020u);
  }
  // (d sc_lo, d sc_hi): the scales of elements 0..15 and 16..31.
  static FERRITE_MMQ_HD void scale(const uint8_t* r, int kc, float* d_lo, float* d_hi) {
    const int half = kc >> 2, qt = kc & 3;
    const float d = f16_bits(rd16(r + 208));
    const uint8_t* s = r + 192 + 8 * half + 2 * qt;
    *d_lo = d * static_cast<float>(static_cast<int8_t>(s[0]));
    *d_hi = d * static_cast<float>(static_cast<int8_t>(s[1]));
  }
};

// u4_g128: chunk kc is the 32 elements 32 (kc % 4) .. of block kc / 4,
// bytes 16 (kc % 4) .. of its nibbles (element 2j: low nibble of byte j).
template <>
struct Format<kU4G128> {
  static constexpr int kBlockElems = 128, kBlockBytes = 72;
  static constexpr bool kHasMin = false, kScalePer16 = false;
  static FERRITE_MMQ_HD void codes(const uint8_t* r, int kc, int tq, uint32_t* lo, uint32_t* hi) {
    const uint8_t* b = r + kBlockBytes * (kc >> 2);
    const uint32_t z = 0x01010101u * b[4];
    const uint8_t* qs = b + 8 + 16 * (kc & 3);
    *lo = sub_bytes(nibbles4(rd16(qs + 2 * tq)), z);
    *hi = sub_bytes(nibbles4(rd16(qs + 8 + 2 * tq)), z);
  }
  static FERRITE_MMQ_HD void scale(const uint8_t* r, int kc, float* d, float* m) {
    *d = rd_f32(r + kBlockBytes * (kc >> 2));
    *m = 0.0f;
  }
};

// Raw bytes of one row's k step of `elems` elements (whole blocks).
template <int F>
constexpr int step_bytes(int elems) {
  return elems / Format<F>::kBlockElems * Format<F>::kBlockBytes;
}

}  // namespace ferrite::cuda::mmq
