// Plain scalar math of the CPU reference providers, written for clarity
// (double accumulation, no SIMD, no threads): this is the oracle.
#pragma once

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_util.h"

namespace ferrite::cpu::ref {

// y = x * rsqrt(mean(x^2) + eps) * (w or 1 + w), n elements.
inline void rms_norm(const float* x, const TensorView& w, int64_t n, double eps, bool zero_centred,
                     float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int64_t i = 0; i < n; ++i) {
    float wi = weight_at(w, i);
    y[i] = x[i] * inv * (zero_centred ? 1.0f + wi : wi);
  }
}

// y[o] = sum_i W[o, i] x[i] (+ bias[o]) for o < out. An act-order weight
// (TensorView::input_perm) stores row o's columns permuted: its stored
// column i multiplies x[perm_o[i]].
inline void matvec(const float* x, const TensorView& w, int64_t in, int64_t out, float* y,
                   const TensorView* bias = nullptr) {
  for (int64_t o = 0; o < out; ++o) {
    const int32_t* perm = w.input_perm ? w.input_perm + (o / w.perm_rows) * in : nullptr;
    double acc = 0;
    for (int64_t i = 0; i < in; ++i)
      acc += static_cast<double>(weight_at(w, o * in + i)) * x[perm ? perm[i] : i];
    if (bias && bias->data) acc += weight_at(*bias, o);
    y[o] = static_cast<float>(acc);
  }
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace ferrite::cpu::ref
