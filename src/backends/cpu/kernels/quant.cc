#include "backends/cpu/kernels/quant.h"

#include <cstring>

#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/kernels/vec.h"

namespace ferrite::cpu {
namespace {

inline float rd_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

#if defined(FERRITE_KERNELS_AVX512)

// 16 unsigned bytes -> 16 f32 lanes.
inline __m512 u8_to_ps(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }
inline __m128i load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
// Lanes of (q * d) - m, as the reference: a product, then a difference.
inline void store_affine(float* y, __m512 q, __m512 d, __m512 m) {
  _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(q, d), m));
}

void q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const __m512 d = _mm512_set1_ps(rd_f16(b));
    for (int h = 0; h < 2; ++h) {
      __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(b + 2 + 16 * h)));
      _mm512_storeu_ps(y + 16 * h, _mm512_mul_ps(q, d));
    }
  }
}

void q4_0(const uint8_t* b, float* y, int64_t nb) {
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi32(8);
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const __m512 d = _mm512_set1_ps(rd_f16(b));
    const __m128i v = load16(b + 2);
    const __m128i lo = _mm_and_si128(v, lo4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), lo4);
    __m512 q0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight));
    __m512 q1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight));
    _mm512_storeu_ps(y, _mm512_mul_ps(q0, d));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(q1, d));
  }
}

void q45_k(bool five, const uint8_t* b, float* y, int64_t nb) {
  const int64_t bytes = five ? 176 : 144;
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  const __m128i sixteen = _mm_set1_epi8(16);
  for (int64_t i = 0; i < nb; ++i, b += bytes) {
    const float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + (five ? 48 : 16);
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      quant::scale_min_k4(2 * c, scales, &sc, &m);
      const __m512 d1 = _mm512_set1_ps(d * sc), m1 = _mm512_set1_ps(dmin * m);
      quant::scale_min_k4(2 * c + 1, scales, &sc, &m);
      const __m512 d2 = _mm512_set1_ps(d * sc), m2 = _mm512_set1_ps(dmin * m);
      const __m128i u1 = _mm_set1_epi8(static_cast<char>(1u << (2 * c)));
      const __m128i u2 = _mm_set1_epi8(static_cast<char>(2u << (2 * c)));
      for (int h = 0; h < 2; ++h) {
        const __m128i v = load16(q + 16 * h);
        __m128i lo = _mm_and_si128(v, lo4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), lo4);
        if (five) {
          const __m128i hb = load16(qh + 16 * h);
          lo = _mm_mask_add_epi8(lo, _mm_test_epi8_mask(hb, u1), lo, sixteen);
          hi = _mm_mask_add_epi8(hi, _mm_test_epi8_mask(hb, u2), hi, sixteen);
        }
        store_affine(y + 16 * h, u8_to_ps(lo), d1, m1);
        store_affine(y + 32 + 16 * h, u8_to_ps(hi), d2, m2);
      }
      y += 64;
    }
  }
}

void q6_k(const uint8_t* b, float* y, int64_t nb) {
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  const __m128i three = _mm_set1_epi8(3);
  const __m512i k32 = _mm512_set1_epi32(32);
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const float d = rd_f16(b + 208);
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int h = 0; h < 2; ++h) {  // l in [16h, 16h + 16): scale index is = h
        const __m128i a = load16(ql + 16 * h), a2 = load16(ql + 32 + 16 * h);
        const __m128i hb = load16(qh + 16 * h);
        const __m128i nib[4] = {_mm_and_si128(a, lo4), _mm_and_si128(a2, lo4),
                                _mm_and_si128(_mm_srli_epi16(a, 4), lo4),
                                _mm_and_si128(_mm_srli_epi16(a2, 4), lo4)};
        for (int k = 0; k < 4; ++k) {
          const __m128i h2 = _mm_and_si128(_mm_srli_epi16(hb, 2 * k), three);
          const __m128i qv = _mm_or_si128(nib[k], _mm_slli_epi16(h2, 4));
          const __m512 q = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(qv), k32));
          const __m512 s = _mm512_set1_ps(d * static_cast<float>(sc[h + 2 * k]));
          _mm512_storeu_ps(y + 32 * k + 16 * h, _mm512_mul_ps(s, q));
        }
      }
    }
  }
}

// f8_e4m3_b128 (f32 d, 128 e4m3 codes): each code's value built from its
// bits (normal: sign | (exp + 120) << 23 | mant << 20; subnormal: mant *
// 2^-9; 0x7F / 0xFF: the quiet NaN with the code's sign, as
// tensor/dtype.h's decoding), times d: the reference's product.
void f8_b128(const uint8_t* b, float* y, int64_t nb) {
  const __m512i m7f = _mm512_set1_epi32(0x7F), m80 = _mm512_set1_epi32(0x80);
  const __m512i bias = _mm512_set1_epi32(120 << 23), qnan = _mm512_set1_epi32(0x7FC00000);
  const __m512 two_m9 = _mm512_set1_ps(0x1p-9f);
  for (int64_t i = 0; i < nb; ++i, b += 132, y += 128) {
    float dv;
    std::memcpy(&dv, b, 4);
    const __m512 d = _mm512_set1_ps(dv);
    for (int c = 0; c < 8; ++c) {
      const __m512i v = _mm512_cvtepu8_epi32(load16(b + 4 + 16 * c));
      const __m512i em = _mm512_and_si512(v, m7f);
      const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, m80), 24);
      __m512i bits = _mm512_add_epi32(_mm512_slli_epi32(em, 20), bias);
      const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), two_m9);
      bits = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(em, _mm512_set1_epi32(8)), bits,
                                     _mm512_castps_si512(sub));
      bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(em, m7f), bits, qnan);
      const __m512 f = _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
      _mm512_storeu_ps(y + 16 * c, _mm512_mul_ps(f, d));
    }
  }
}

// u4_g128 (f32 d, u8 z, 64 bytes of nibbles; element 2j the low nibble of
// byte j): d * (q - z), as the reference.
void u4_g128(const uint8_t* b, float* y, int64_t nb) {
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; ++i, b += 72, y += 128) {
    float dv;
    std::memcpy(&dv, b, 4);
    const __m512 d = _mm512_set1_ps(dv);
    const __m512i z = _mm512_set1_epi32(b[4]);
    for (int c = 0; c < 4; ++c) {  // bytes 16c .. 16c + 15: elements 32c .. 32c + 31
      const __m128i a = load16(b + 8 + 16 * c);
      const __m128i lo = _mm_and_si128(a, lo4), hi = _mm_and_si128(_mm_srli_epi16(a, 4), lo4);
      // Interleave: element 2j = lo[j], 2j + 1 = hi[j].
      const __m128i e0 = _mm_unpacklo_epi8(lo, hi), e1 = _mm_unpackhi_epi8(lo, hi);
      const __m512 q0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(e0), z));
      const __m512 q1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(e1), z));
      _mm512_storeu_ps(y + 32 * c, _mm512_mul_ps(d, q0));
      _mm512_storeu_ps(y + 32 * c + 16, _mm512_mul_ps(d, q1));
    }
  }
}

#endif

}  // namespace

void dequantize_row_fast(DType t, const void* src, float* dst, int64_t n) {
  if (!dtype_is_quantized(t)) {
    to_f32_row(src, t, dst, n);
    return;
  }
#if defined(FERRITE_KERNELS_AVX512)
  const auto* b = static_cast<const uint8_t*>(src);
  const int64_t nb = n / dtype_block_elems(t);
  switch (t) {
    case DType::kQ8_0:
      q8_0(b, dst, nb);
      return;
    case DType::kQ4_0:
      q4_0(b, dst, nb);
      return;
    case DType::kQ4_K:
      q45_k(false, b, dst, nb);
      return;
    case DType::kQ5_K:
      q45_k(true, b, dst, nb);
      return;
    case DType::kQ6_K:
      q6_k(b, dst, nb);
      return;
    case DType::kF8B128:
      f8_b128(b, dst, nb);
      return;
    case DType::kU4G128:
      u4_g128(b, dst, nb);
      return;
    default:
      break;
  }
#endif
  dequantize_row(t, src, dst, n);
}

}  // namespace ferrite::cpu
