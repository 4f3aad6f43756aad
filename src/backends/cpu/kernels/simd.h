// Internal to the CPU kernels: a 16-lane f32 vector with one meaning on every
// instruction set, so that the AVX-512, AVX2 and scalar paths perform the same
// operations in the same order and give bitwise equal results (when the
// scalar path has hardware FMA).
//
// The canonical reduction of a dot product of length n: lane j accumulates
// x[i] * w[i] for i = j (mod 16) in increasing i with fused multiply-add; a
// final partial chunk is zero padded; the 16 lanes are then summed by the
// fixed tree of reduce(). Every kernel that produces a dot product (matmul
// tiles of any shape, dot_f32, attention scores) follows it, which makes a
// result independent of tiling, batch composition and thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define FERRITE_KERNELS_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define FERRITE_KERNELS_AVX2 1
#include <immintrin.h>
#endif

namespace ferrite::cpu::simd {

// A name for logs and benchmark labels.
inline const char* isa_name() {
#if defined(FERRITE_KERNELS_AVX512)
  return "avx512";
#elif defined(FERRITE_KERNELS_AVX2)
  return "avx2";
#else
  return "scalar";
#endif
}

inline float scalar_fma(float a, float b, float c) {
#if defined(__FMA__) || defined(__aarch64__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

#if defined(FERRITE_KERNELS_AVX512)

struct V16 {
  __m512 v;
};
inline __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline V16 zero() { return {_mm512_setzero_ps()}; }
inline V16 set1(float a) { return {_mm512_set1_ps(a)}; }
inline V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline V16 mul(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 add(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V16 sub(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V16 max(V16 a, V16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline V16 div(V16 a, V16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline void store(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
inline void store_partial(float* p, V16 a, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), a.v); }

// Canonical tree: (j, j+8), then (j, j+4), then (j, j+2), then (0, 1).
inline float reduce(V16 a) {
  __m256 lo = _mm512_castps512_ps256(a.v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1));
  __m256 b = _mm256_add_ps(lo, hi);
  __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}
// Tree of max, same shape (max is exact, so only speed matters).
inline float reduce_max(V16 a) { return _mm512_reduce_max_ps(a.v); }

struct F32 {
  using T = float;
  static V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  // The first n (< 16) lanes from p, the rest zero.
  static V16 load_partial(const float* p, int n) {
    return {_mm512_maskz_loadu_ps(tail_mask(n), p)};
  }
};
struct BF16 {
  using T = uint16_t;
  // bf16 -> f32 is exact: the 16 bits become the high half of the f32.
  static V16 widen(__m256i h) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
  }
  static V16 load(const uint16_t* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V16 load_partial(const uint16_t* p, int n) {
    return widen(_mm256_maskz_loadu_epi16(tail_mask(n), p));
  }
};
struct F16 {
  using T = uint16_t;
  static V16 load(const uint16_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static V16 load_partial(const uint16_t* p, int n) {
    return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p))};
  }
};

#elif defined(FERRITE_KERNELS_AVX2)

// Lanes 0-7 in lo, 8-15 in hi.
struct V16 {
  __m256 lo, hi;
};
inline V16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 set1(float a) { return {_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
inline V16 fma(V16 a, V16 b, V16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline V16 mul(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V16 add(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline V16 sub(V16 a, V16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline V16 max(V16 a, V16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline V16 div(V16 a, V16 b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
inline void store(float* p, V16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
inline void store_partial(float* p, V16 a, int n) {
  alignas(64) float tmp[16];
  store(tmp, a);
  std::memcpy(p, tmp, sizeof(float) * n);
}
inline float reduce(V16 a) {
  __m256 b = _mm256_add_ps(a.lo, a.hi);
  __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}
inline float reduce_max(V16 a) {
  alignas(64) float t[16];
  store(t, a);
  float m = t[0];
  for (int j = 1; j < 16; ++j) m = t[j] > m ? t[j] : m;
  return m;
}

struct F32 {
  using T = float;
  static V16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static V16 load_partial(const float* p, int n) {
    alignas(64) float tmp[16] = {};
    std::memcpy(tmp, p, sizeof(float) * n);
    return load(tmp);
  }
};
struct BF16 {
  using T = uint16_t;
  static __m256 widen8(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static V16 load(const uint16_t* p) {
    return {widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static V16 load_partial(const uint16_t* p, int n) {
    alignas(32) uint16_t tmp[16] = {};
    std::memcpy(tmp, p, 2 * n);
    return load(tmp);
  }
};
struct F16 {
  using T = uint16_t;
  static V16 load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static V16 load_partial(const uint16_t* p, int n) {
    alignas(32) uint16_t tmp[16] = {};
    std::memcpy(tmp, p, 2 * n);
    return load(tmp);
  }
};

#else  // portable scalar

struct V16 {
  float a[16];
};
inline V16 zero() { return V16{}; }
inline V16 set1(float x) {
  V16 r;
  for (int j = 0; j < 16; ++j) r.a[j] = x;
  return r;
}
inline V16 fma(V16 a, V16 b, V16 c) {
  V16 r;
  for (int j = 0; j < 16; ++j) r.a[j] = scalar_fma(a.a[j], b.a[j], c.a[j]);
  return r;
}
#define FERRITE_V16_BINOP(name, expr) \
  inline V16 name(V16 x, V16 y) {     \
    V16 r;                            \
    for (int j = 0; j < 16; ++j) {    \
      float a = x.a[j], b = y.a[j];   \
      r.a[j] = (expr);                \
    }                                 \
    return r;                         \
  }
FERRITE_V16_BINOP(mul, a* b)
FERRITE_V16_BINOP(add, a + b)
FERRITE_V16_BINOP(sub, a - b)
FERRITE_V16_BINOP(max, a > b ? a : b)
FERRITE_V16_BINOP(div, a / b)
#undef FERRITE_V16_BINOP
inline void store(float* p, V16 a) { std::memcpy(p, a.a, sizeof(a.a)); }
inline void store_partial(float* p, V16 a, int n) { std::memcpy(p, a.a, sizeof(float) * n); }
inline float reduce(V16 a) {
  float b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j) b[j] = a.a[j] + a.a[j + 8];
  for (int j = 0; j < 4; ++j) c[j] = b[j] + b[j + 4];
  for (int j = 0; j < 2; ++j) d[j] = c[j] + c[j + 2];
  return d[0] + d[1];
}
inline float reduce_max(V16 a) {
  float m = a.a[0];
  for (int j = 1; j < 16; ++j) m = a.a[j] > m ? a.a[j] : m;
  return m;
}

struct F32 {
  using T = float;
  static V16 load(const float* p) {
    V16 r;
    std::memcpy(r.a, p, sizeof(r.a));
    return r;
  }
  static V16 load_partial(const float* p, int n) {
    V16 r{};
    std::memcpy(r.a, p, sizeof(float) * n);
    return r;
  }
};
struct BF16 {
  using T = uint16_t;
  static V16 load(const uint16_t* p) { return load_partial(p, 16); }
  static V16 load_partial(const uint16_t* p, int n) {
    V16 r{};
    for (int j = 0; j < n; ++j) r.a[j] = bf16_to_f32(p[j]);
    return r;
  }
};
struct F16 {
  using T = uint16_t;
  static V16 load(const uint16_t* p) { return load_partial(p, 16); }
  static V16 load_partial(const uint16_t* p, int n) {
    V16 r{};
    for (int j = 0; j < n; ++j) r.a[j] = f16_to_f32(p[j]);
    return r;
  }
};

#endif

// The canonical dot product of n elements (see the top of this file).
template <typename WL>
inline float dot(const float* x, const typename WL::T* w, int64_t n) {
  V16 acc = zero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = fma(F32::load(x + i), WL::load(w + i), acc);
  if (i < n) {
    int r = static_cast<int>(n - i);
    acc = fma(F32::load_partial(x + i, r), WL::load_partial(w + i, r), acc);
  }
  return reduce(acc);
}

// exp(x) for f32 lanes, the same operations on every ISA: range reduction
// x = k ln2 + r with a two-constant ln2, a degree-6 polynomial for e^r, and
// 2^k built in the exponent bits. Max error about 2 ulp; inputs below -87.3
// give 0 (flushed, as the softmax and SiLU callers want), above 88.7 give inf.
struct ExpConsts {
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f;
  static constexpr float kLn2Lo = -2.12194440e-4f;
  static constexpr float kP0 = 1.9875691500e-4f;
  static constexpr float kP1 = 1.3981999507e-3f;
  static constexpr float kP2 = 8.3334519073e-3f;
  static constexpr float kP3 = 4.1665795894e-2f;
  static constexpr float kP4 = 1.6666665459e-1f;
  static constexpr float kP5 = 5.0000001201e-1f;
  static constexpr float kHi = 88.7228391117f;
  static constexpr float kLo = -87.3365447504f;
};

inline float exp_scalar(float x) {
  using C = ExpConsts;
  if (!(x == x)) return x;
  if (x > C::kHi) return INFINITY;
  if (x < C::kLo) return 0.0f;
  float k = std::nearbyint(x * C::kLog2e);
  float r = scalar_fma(k, -C::kLn2Hi, x);
  r = scalar_fma(k, -C::kLn2Lo, r);
  float p = C::kP0;
  p = scalar_fma(p, r, C::kP1);
  p = scalar_fma(p, r, C::kP2);
  p = scalar_fma(p, r, C::kP3);
  p = scalar_fma(p, r, C::kP4);
  p = scalar_fma(p, r, C::kP5);
  float r2 = r * r;
  p = scalar_fma(p, r2, r);
  p = p + 1.0f;
  int32_t ki = static_cast<int32_t>(k);
  // 2^k in two steps so that k = 128 (x near kHi) does not overflow the bits.
  int32_t k1 = ki / 2, k2 = ki - ki / 2;
  uint32_t b1 = static_cast<uint32_t>(k1 + 127) << 23, b2 = static_cast<uint32_t>(k2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}

#if defined(FERRITE_KERNELS_AVX512)
inline V16 exp(V16 xv) {
  using C = ExpConsts;
  __m512 x = xv.v;
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(C::kHi), _CMP_GT_OQ);
  __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(C::kLo), _CMP_LT_OQ);
  __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(C::kHi)), _mm512_set1_ps(C::kLo));
  __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(C::kLog2e)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-C::kLn2Hi), xc);
  r = _mm512_fmadd_ps(k, _mm512_set1_ps(-C::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(C::kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::kP5));
  __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  __m512i ki = _mm512_cvtps_epi32(k);
  // Truncating division by 2 as in exp_scalar: k1 = k / 2 toward zero.
  __m512i k1 = _mm512_srai_epi32(_mm512_add_epi32(ki, _mm512_srli_epi32(ki, 31)), 1);
  __m512i k2 = _mm512_sub_epi32(ki, k1);
  const __m512i bias = _mm512_set1_epi32(127);
  __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
  __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  y = _mm512_mask_mov_ps(y, lo, _mm512_setzero_ps());
  y = _mm512_mask_mov_ps(y, hi, _mm512_set1_ps(INFINITY));
  y = _mm512_mask_mov_ps(y, nan, x);
  return {y};
}
#else
inline V16 exp(V16 x) {
  alignas(64) float t[16];
  store(t, x);
  for (int j = 0; j < 16; ++j) t[j] = exp_scalar(t[j]);
  return F32::load(t);
}
#endif

}  // namespace ferrite::cpu::simd
