// AVX2 (+ FMA, F16C) kernels of the integer block matmul (quant_dot.h):
// vpmaddubsw + vpmaddwd in place of VNNI; compiled for AVX2 whatever the
// build's flags (no AVX-512), used when cpuid says the CPU has AVX2. The
// same integers and f32 operations per output as the scalar definition
// (16 canonical lanes held in two 8-lane registers).
#include <immintrin.h>

#include "backends/cpu/kernels/quant_dot_impl.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

namespace ferrite::cpu::qdot {
namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
inline float fmaf_(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}
inline __m256i ld(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i ld128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256 ldf(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }

// Lanes 0-7 in lo, 8-15 in hi: (j, j+8), (j, j+4), (j, j+2), (0, 1).
inline float tree16(__m256 lo, __m256 hi) {
  __m256 b = _mm256_add_ps(lo, hi);
  __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}
// [sum of the 8 lanes of v, sum of the 8 lanes of m].
inline __m128i hsum2(__m256i v, __m256i m) {
  __m256i h = _mm256_hadd_epi32(v, m);
  h = _mm256_hadd_epi32(h, h);
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline int32_t hsum8(__m256i m) {
  __m128i a = _mm_add_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  a = _mm_add_epi32(a, _mm_shuffle_epi32(a, _MM_SHUFFLE(1, 0, 3, 2)));
  a = _mm_add_epi32(a, _mm_shuffle_epi32(a, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(a);
}
// 8 lanes of sum of 4 u8 * s8 products, exact (|pair| < 2^15 for the
// formats' ranges).
inline __m256i dot4(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

constexpr int kMaxTok = 8;

template <int F, int nt>
void row32(const uint8_t* row, const uint8_t* act, int64_t stride, int64_t n, float* out) {
  const Layout L = layout(F, n);
  const int64_t nb = n / 32, pairs = (nb + 1) / 2;
  constexpr int64_t bb = F == kQ8_0 ? 34 : 18;
  __m256 lo[nt], hi[nt];
  for (int t = 0; t < nt; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  const __m256i k128 = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t p = 0; p < pairs; ++p) {
    const uint8_t* b0 = row + 2 * p * bb;
    const bool two = 2 * p + 1 < nb;
    const float d0 = f16(b0), d1 = two ? f16(b0 + bb) : 0.0f;
    if constexpr (F == kQ8_0) {
      const __m256i w0 = ld(b0 + 2), w1 = two ? ld(b0 + bb + 2) : _mm256_setzero_si256();
      const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
      const __m256 dw0 = _mm256_set1_ps(d0), dw1 = _mm256_set1_ps(d1);
#pragma GCC unroll 8
      for (int t = 0; t < nt; ++t) {
        const uint8_t* a = act + t * stride;
        const __m256i x0 = _mm256_xor_si256(ld(a + L.q + 64 * p), k128);
        const __m256i x1 = _mm256_xor_si256(ld(a + L.q + 64 * p + 32), k128);
        const __m256i v0 = dot4(a0, _mm256_sign_epi8(x0, w0));
        const __m256i v1 = dot4(a1, _mm256_sign_epi8(x1, w1));
        const uint8_t* dx = a + L.dx + 64 * p;
        lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v0), _mm256_mul_ps(dw0, ldf(dx)), lo[t]);
        hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v1), _mm256_mul_ps(dw1, ldf(dx + 32)), hi[t]);
      }
    } else {
      const __m128i h = two ? ld128(b0 + bb + 2) : _mm_setzero_si128();
      const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(b0 + 2)), h, 1);
      __m256i w0 = _mm256_sub_epi8(_mm256_and_si256(y, m4), eight);
      __m256i w1 = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(y, 4), m4), eight);
      if (!two) {  // the padding block's weights are 0, not -8
        const __m256i keep = _mm256_inserti128_si256(_mm256_set1_epi8(-1), _mm_setzero_si128(), 1);
        w0 = _mm256_and_si256(w0, keep);
        w1 = _mm256_and_si256(w1, keep);
      }
      // Activations are q + 128 (|pairs| <= 2 * 255 * 8): subtract 128 * sum(w).
      const __m256i c0 = dot4(k128, w0), c1 = dot4(k128, w1);
      const __m256 dw = _mm256_blend_ps(_mm256_set1_ps(d0), _mm256_set1_ps(d1), 0xF0);
#pragma GCC unroll 8
      for (int t = 0; t < nt; ++t) {
        const uint8_t* a = act + t * stride;
        const __m256i v0 = _mm256_sub_epi32(dot4(ld(a + L.q + 64 * p), w0), c0);
        const __m256i v1 = _mm256_sub_epi32(dot4(ld(a + L.q + 64 * p + 32), w1), c1);
        const uint8_t* dx = a + L.dx + 64 * p;
        lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v0), _mm256_mul_ps(dw, ldf(dx)), lo[t]);
        hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v1), _mm256_mul_ps(dw, ldf(dx + 32)), hi[t]);
      }
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = tree16(lo[t], hi[t]);
}

// q8_0: per block the exact integer dot, then one f32 FMA per block.
template <int nt>
void row_q8(const uint8_t* row, const uint8_t* act, int64_t stride, int64_t n, float* out) {
  const Layout L = layout(kQ8_0, n);
  const int64_t nb = n / 32;
  float acc[nt] = {};
  const __m256i k128 = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * 34;
    const float dw = f16(blk);
    const __m256i w = ld(blk + 2), aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
    for (int t = 0; t < nt; ++t) {
      const uint8_t* a = act + t * stride;
      const __m256i x = _mm256_xor_si256(ld(a + L.q + 32 * b), k128);
      const int32_t v = hsum8(dot4(aw, _mm256_sign_epi8(x, w)));
      const float dx = reinterpret_cast<const float*>(a + L.dx)[16 * (b / 2) + 8 * (b % 2)];
      acc[t] = fmaf_(static_cast<float>(v), dw * dx, acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = acc[t];
}

// k4_scales (quant_dot_impl.h) in registers: bytes sc[0..7], m[0..7] of the
// 12 scale bytes at s (16 bytes readable).
inline __m128i k4_scales_v(const uint8_t* s) {
  const __m128i x = ld128(s);                                        // [a, b, c, .]
  const __m128i v1 = _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 1, 2, 0));  // [a, c, b, c]
  const __m128i v2 = _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 1, 0, 0));  // [a, a, b, b]
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(v1, _mm_setr_epi32(0, 0, 0, 4)),
                                   _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i hi = _mm_and_si128(_mm_srlv_epi32(v2, _mm_setr_epi32(0, 6, 0, 6)),
                                   _mm_setr_epi32(0, 0x03030303, 0, 0x03030303));
  return _mm_or_si128(lo, _mm_slli_epi32(hi, 4));
}

template <bool kFive, int nt>
void row_q45k(const uint8_t* row, const uint8_t* act, int64_t stride, int64_t n, float* out) {
  constexpr int F = kFive ? kQ5_K : kQ4_K;
  const Layout L = layout(F, n);
  constexpr int64_t bb = kFive ? 176 : 144;
  float acc[nt] = {}, accm[nt] = {};
  const __m256i m4 = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(16);
  const __m128i dup = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* blk = row + b * bb;
    uint8_t sm[16];
    k4_scales(blk + 4, sm);
    // The mins from registers: a 16-byte reload of the 4-byte stores of sm
    // would wait for them (no store forwarding).
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(k4_scales_v(blk + 4), dup));
    const uint8_t* qs = blk + (kFive ? 48 : 16);
    __m256i w[8], sc[8];
    const __m256i qh = kFive ? ld(blk + 16) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i z = ld(qs + 32 * c);
      w[2 * c] = _mm256_and_si256(z, m4);
      w[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
      if constexpr (kFive) {
        for (int k = 0; k < 2; ++k) {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1u << (2 * c + k)));
          const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
          w[2 * c + k] = _mm256_add_epi8(w[2 * c + k], _mm256_and_si256(set, sixteen));
        }
      }
      sc[2 * c] = _mm256_set1_epi16(sm[2 * c]);
      sc[2 * c + 1] = _mm256_set1_epi16(sm[2 * c + 1]);
    }
    const float dw = f16(blk), dmin = f16(blk + 2);
#pragma GCC unroll 8
    for (int t = 0; t < nt; ++t) {
      const uint8_t* a = act + t * stride;
      const uint8_t* x = a + L.q + 256 * b;
      __m256i v = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j)
        v = _mm256_add_epi32(
            v, _mm256_madd_epi16(_mm256_maddubs_epi16(w[j], ld(x + 32 * kSubPos[j])), sc[j]));
      const __m256i mm = _mm256_madd_epi16(mins, ld(a + L.bsum + 32 * b));
      const __m128 s = _mm_cvtepi32_ps(hsum2(v, mm));
      const float dx = reinterpret_cast<const float*>(a + L.d)[b];
      acc[t] = fmaf_(dw * dx, _mm_cvtss_f32(s), acc[t]);
      accm[t] = fmaf_(dmin * dx, _mm_cvtss_f32(_mm_movehdup_ps(s)), accm[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = acc[t] - accm[t];
}

template <int nt>
void row_q6k(const uint8_t* row, const uint8_t* act, int64_t stride, int64_t n, float* out) {
  const Layout L = layout(kQ6_K, n);
  float acc[nt] = {};
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* blk = row + b * 210;
    const auto* scb = reinterpret_cast<const int8_t*>(blk + 192);
    const __m256i scw = _mm256_cvtepi8_epi16(ld128(blk + 192));
    __m256i w[8], sc[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = ld(blk + 64 * h), l1 = ld(blk + 64 * h + 32);
      const __m256i qh = ld(blk + 128 + 32 * h);
      const __m256i nib[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                              _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                              _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2);
        w[4 * h + k] = _mm256_or_si256(nib[k], _mm256_slli_epi16(hb, 4));
        const int j = 8 * h + 2 * k;
        sc[4 * h + k] = _mm256_set_m128i(_mm_set1_epi16(scb[j + 1]), _mm_set1_epi16(scb[j]));
      }
    }
    const float dw = f16(blk + 208);
#pragma GCC unroll 8
    for (int t = 0; t < nt; ++t) {
      const uint8_t* a = act + t * stride;
      const uint8_t* x = a + L.q + 256 * b;
      __m256i v = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j)
        v = _mm256_add_epi32(v, _mm256_madd_epi16(_mm256_maddubs_epi16(w[j], ld(x + 32 * j)), sc[j]));
      const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(scw, ld(a + L.bsum + 32 * b)), 5);
      const int32_t s1 = hsum8(_mm256_sub_epi32(v, off));
      const float dx = reinterpret_cast<const float*>(a + L.d)[b];
      acc[t] = fmaf_(dw * dx, static_cast<float>(s1), acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = acc[t];
}

// One weight row against nt (1..kMaxTok) activation rows.
// u4_g128: per 128-block the nibbles (low: even elements, high: odd) meet
// the activation halves; lanes 0-7 are the block's bytes 0..31, lanes 8-15
// bytes 32..63 (elements 8l .. 8l + 7 in lane l, as the scalar definition).
template <int nt>
void row_u4(const uint8_t* row, const uint8_t* act, int64_t stride, int64_t n, float* out) {
  const Layout L = layout(kU4, n);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 lo[nt], hi[nt];
  float accz[nt];
  for (int t = 0; t < nt; ++t) {
    lo[t] = hi[t] = _mm256_setzero_ps();
    accz[t] = 0.0f;
  }
  for (int64_t b = 0; b < n / 128; ++b) {
    const uint8_t* blk = row + b * 72;
    float dw;
    std::memcpy(&dw, blk, 4);
    const int32_t z = blk[4];
    const __m256i w0 = ld(blk + 8), w1 = ld(blk + 40);
    const __m256i l0 = _mm256_and_si256(w0, m4), h0 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), m4);
    const __m256i l1 = _mm256_and_si256(w1, m4), h1 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), m4);
#pragma GCC unroll 8
    for (int t = 0; t < nt; ++t) {
      const uint8_t* a = act + t * stride;
      const uint8_t* xq = a + L.q + 128 * b;
      const __m256i v0 = _mm256_add_epi32(dot4(l0, ld(xq)), dot4(h0, ld(xq + 64)));
      const __m256i v1 = _mm256_add_epi32(dot4(l1, ld(xq + 32)), dot4(h1, ld(xq + 96)));
      const float s = dw * reinterpret_cast<const float*>(a + L.d)[b];
      const int32_t bs = reinterpret_cast<const int16_t*>(a + L.bsum)[b];
      const __m256 sv = _mm256_set1_ps(s);
      lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v0), sv, lo[t]);
      hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v1), sv, hi[t]);
      accz[t] = fmaf_(static_cast<float>(z * bs), s, accz[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = tree16(lo[t], hi[t]) - accz[t];
}

template <int nt>
void row_nt(int f, const uint8_t* row, const uint8_t* a, int64_t stride, int64_t n, float* out) {
  switch (f) {
    case kQ8_0: row_q8<nt>(row, a, stride, n, out); break;
    case kQ4_0: row32<kQ4_0, nt>(row, a, stride, n, out); break;
    case kQ4_K: row_q45k<false, nt>(row, a, stride, n, out); break;
    case kQ5_K: row_q45k<true, nt>(row, a, stride, n, out); break;
    case kU4: row_u4<nt>(row, a, stride, n, out); break;
    default: row_q6k<nt>(row, a, stride, n, out); break;
  }
}
using RowFn = void (*)(int, const uint8_t*, const uint8_t*, int64_t, int64_t, float*);
constexpr RowFn kRowFns[kMaxTok + 1] = {nullptr,    &row_nt<1>, &row_nt<2>, &row_nt<3>, &row_nt<4>,
                                        &row_nt<5>, &row_nt<6>, &row_nt<7>, &row_nt<8>};

void tile(int f, const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
          int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate) {
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    for (int64_t t0 = 0; t0 < ntok; t0 += kMaxTok) {
      const int nt = static_cast<int>(ntok - t0 < kMaxTok ? ntok - t0 : kMaxTok);
      float out[kMaxTok];
      kRowFns[nt](f, row, act + t0 * stride, stride, n, out);
      for (int t = 0; t < nt; ++t) {
        float* p = y + (t0 + t) * ldy + r;
        *p = accumulate ? *p + out[t] : out[t];
      }
    }
  }
}

}  // namespace

// The activation quantization is the scalar one (a small part of the work).
const Kernels* avx2_kernels() {
  static const Kernels k = {scalar_kernels()->quantize, &tile};
  return &k;
}

}  // namespace ferrite::cpu::qdot

#else

namespace ferrite::cpu::qdot {
const Kernels* avx2_kernels() { return nullptr; }
}  // namespace ferrite::cpu::qdot

#endif
