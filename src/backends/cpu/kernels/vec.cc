#include "backends/cpu/kernels/vec.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/simd.h"
#include "base/check.h"

namespace ferrite::cpu {
namespace {

using simd::V16;

// Calls f(WL{}) with the loader type of dtype t.
template <typename F>
auto with_loader(DType t, F&& f) {
  switch (t) {
    case DType::kF32:
      return f(simd::F32{});
    case DType::kBF16:
      return f(simd::BF16{});
    case DType::kF16:
      return f(simd::F16{});
    default:
      FERRITE_CHECK(false) << "unsupported row dtype " << dtype_name(t);
      __builtin_unreachable();
  }
}

template <typename WL>
void axpy_impl(float a, const typename WL::T* x, float* y, int64_t n) {
  V16 av = simd::set1(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    simd::store(y + i, simd::fma(av, WL::load(x + i), simd::F32::load(y + i)));
  }
  if (i < n) {
    int r = static_cast<int>(n - i);
    simd::store_partial(
        y + i, simd::fma(av, WL::load_partial(x + i, r), simd::F32::load_partial(y + i, r)), r);
  }
}

// y = (x * inv) * g for one 16-lane chunk.
template <typename WL>
V16 norm_chunk(V16 xv, V16 inv, const typename WL::T* w, int r, bool add_one) {
  V16 v = simd::mul(xv, inv);
  if (w == nullptr) return v;
  V16 g = r == 16 ? WL::load(w) : WL::load_partial(w, r);
  if (add_one) g = simd::add(g, simd::set1(1.0f));
  return simd::mul(v, g);
}

template <typename WL>
void rms_norm_impl(const float* x, const typename WL::T* w, int64_t n, float eps, bool add_one,
                   float* y) {
  float ss = simd::dot<simd::F32>(x, x, n);
  float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  V16 iv = simd::set1(inv);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    simd::store(y + i,
                norm_chunk<WL>(simd::F32::load(x + i), iv, w ? w + i : nullptr, 16, add_one));
  }
  if (i < n) {
    int r = static_cast<int>(n - i);
    simd::store_partial(
        y + i,
        norm_chunk<WL>(simd::F32::load_partial(x + i, r), iv, w ? w + i : nullptr, r, add_one), r);
  }
}

V16 silu_mul_chunk(V16 g, V16 u) {
  V16 e = simd::exp(simd::sub(simd::zero(), g));
  return simd::mul(simd::div(g, simd::add(simd::set1(1.0f), e)), u);
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return simd::dot<simd::F32>(a, b, n); }

float dot_row(const float* a, const void* b, DType b_dtype, int64_t n) {
  return with_loader(b_dtype, [&](auto wl) {
    using WL = decltype(wl);
    return simd::dot<WL>(a, static_cast<const typename WL::T*>(b), n);
  });
}

void axpy_f32(float a, const float* x, float* y, int64_t n) { axpy_impl<simd::F32>(a, x, y, n); }

void axpy_row(float a, const void* x, DType x_dtype, float* y, int64_t n) {
  with_loader(x_dtype, [&](auto wl) {
    using WL = decltype(wl);
    axpy_impl<WL>(a, static_cast<const typename WL::T*>(x), y, n);
  });
}

void scale_f32(float a, float* y, int64_t n) {
  V16 av = simd::set1(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) simd::store(y + i, simd::mul(simd::F32::load(y + i), av));
  for (; i < n; ++i) y[i] *= a;
}

void add_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    simd::store(y + i, simd::add(simd::F32::load(y + i), simd::F32::load(x + i)));
  }
  for (; i < n; ++i) y[i] += x[i];
}

void rms_norm_row(const float* x, const void* w, DType w_dtype, int64_t n, float eps, bool add_one,
                  float* y) {
  if (n <= 0) return;
  if (w != nullptr && dtype_is_quantized(w_dtype)) {  // a norm weight in GGUF blocks
    thread_local std::vector<float> wf;
    wf.resize(n);
    dequantize_row(w_dtype, w, wf.data(), n);
    rms_norm_row(x, wf.data(), DType::kF32, n, eps, add_one, y);
    return;
  }
  with_loader(w == nullptr ? DType::kF32 : w_dtype, [&](auto wl) {
    using WL = decltype(wl);
    rms_norm_impl<WL>(x, static_cast<const typename WL::T*>(w), n, eps, add_one, y);
  });
}

void rms_norm(const float* x, int64_t rows, int64_t n, const void* w, DType w_dtype, float eps,
              bool add_one, float* y, ThreadPool* pool) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      rms_norm_row(x + r * n, w, w_dtype, n, eps, add_one, y + r * n);
    }
  };
  // A row of a few thousand elements is under a microsecond: only batches are
  // worth waking the pool for.
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
  if (pool != nullptr) {
    pool->parallel_for(rows, body, grain);
  } else {
    body(0, rows);
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    simd::store(out + i, silu_mul_chunk(simd::F32::load(gate + i), simd::F32::load(up + i)));
  }
  if (i < n) {
    int r = static_cast<int>(n - i);
    simd::store_partial(
        out + i,
        silu_mul_chunk(simd::F32::load_partial(gate + i, r), simd::F32::load_partial(up + i, r)),
        r);
  }
}

float max_f32(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  if (n >= 16) {
    V16 mv = simd::F32::load(x);
    for (i = 16; i + 16 <= n; i += 16) mv = simd::max(mv, simd::F32::load(x + i));
    m = simd::reduce_max(mv);
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float exp_sub_sum_inplace(float* x, int64_t n, float m) {
  V16 mv = simd::set1(m);
  V16 acc = simd::zero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V16 e = simd::exp(simd::sub(simd::F32::load(x + i), mv));
    simd::store(x + i, e);
    acc = simd::add(acc, e);
  }
  if (i < n) {
    int r = static_cast<int>(n - i);
    simd::store_partial(x + i, simd::exp(simd::sub(simd::F32::load_partial(x + i, r), mv)), r);
    // Reloaded so that the padding lanes are zero, not exp(-m).
    acc = simd::add(acc, simd::F32::load_partial(x + i, r));
  }
  return simd::reduce(acc);
}

void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  float m = max_f32(x, n);
  if (m == -std::numeric_limits<float>::infinity()) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  float sum = exp_sub_sum_inplace(x, n, m);
  scale_f32(1.0f / sum, x, n);
}

float exp_f32(float x) { return simd::exp_scalar(x); }

void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  to_f32_row(src, DType::kBF16, dst, n);
}
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  to_f32_row(src, DType::kF16, dst, n);
}

void to_f32_row(const void* src, DType src_dtype, float* dst, int64_t n) {
  if (dtype_is_quantized(src_dtype)) {
    dequantize_row(src_dtype, src, dst, n);
    return;
  }
  with_loader(src_dtype, [&](auto wl) {
    using WL = decltype(wl);
    const auto* s = static_cast<const typename WL::T*>(src);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) simd::store(dst + i, WL::load(s + i));
    if (i < n) {
      int r = static_cast<int>(n - i);
      simd::store_partial(dst + i, WL::load_partial(s + i, r), r);
    }
  });
}

void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(FERRITE_KERNELS_AVX512)
  // Integer round-to-nearest-even as f32_to_bf16 (vcvtneps2bf16 would flush
  // subnormals to zero), NaNs made quiet.
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  for (; i + 16 <= n; i += 16) {
    __m512i u = _mm512_loadu_si512(src + i);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_mov_epi32(r, nan, q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
#endif
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(FERRITE_KERNELS_AVX512)
  for (; i + 16 <= n; i += 16) {
    __m256i h =
        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
#endif
  // Tail and non-AVX-512 builds: the scalar conversion (NaN payloads may
  // differ from the hardware's; every finite value rounds the same).
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace ferrite::cpu
