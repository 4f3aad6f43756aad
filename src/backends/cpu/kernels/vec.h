// Small fused row kernels for attention, norms and activations. All math is
// f32; rows of keys / values / norm weights may be f32, bf16 or f16 and are
// converted in registers. Dot products follow the canonical order of simd.h
// (so dot_row(q, k) equals the matching matmul element bitwise); all results
// are bitwise equal across the AVX-512 / AVX2 / scalar builds when the
// scalar build has hardware FMA.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace ferrite::cpu {

// sum_i a[i] * b[i].
float dot_f32(const float* a, const float* b, int64_t n);
// sum_i a[i] * b[i], b in b_dtype (f32, bf16, f16): attention q . k.
float dot_row(const float* a, const void* b, DType b_dtype, int64_t n);

// y[i] += a * x[i] (one FMA per element).
void axpy_f32(float a, const float* x, float* y, int64_t n);
// y[i] += a * x[i], x in x_dtype (f32, bf16, f16): attention p * v.
void axpy_row(float a, const void* x, DType x_dtype, float* y, int64_t n);
// y[i] *= a.
void scale_f32(float a, float* y, int64_t n);
// y[i] += x[i] (residual add; y may not partially overlap x).
void add_f32(const float* x, float* y, int64_t n);

// y = x * rsqrt(mean(x^2) + eps) * g, with g = w, or 1 + w when add_one
// (zero-centred norm weights), or 1 when w is null. w in w_dtype (f32, bf16,
// f16). y may alias x. The mean of squares uses the canonical dot order.
void rms_norm_row(const float* x, const void* w, DType w_dtype, int64_t n, float eps, bool add_one,
                  float* y);
// w may also be in a GGUF block format (dequantized first).
// rms_norm_row over `rows` rows of n (x and y rows n apart), parallel over
// rows when pool is not null.
void rms_norm(const float* x, int64_t rows, int64_t n, const void* w, DType w_dtype, float eps,
              bool add_one, float* y, ThreadPool* pool);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias
// gate or up.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// x = softmax(x): x[i] = exp(x[i] - max) / sum. A row of all -inf becomes 0
// (a fully masked row contributes nothing). n >= 1.
void softmax_inplace(float* x, int64_t n);
// x[i] = exp(x[i] - m), returns the sum of the new x: the block step of an
// online softmax (the caller keeps the running max and rescales).
float exp_sub_sum_inplace(float* x, int64_t n, float m);
// max_i x[i] (-inf for n == 0).
float max_f32(const float* x, int64_t n);

// exp(x) as computed by the vector kernels (about 2 ulp), for callers and
// tests that need the same value in scalar code.
float exp_f32(float x);

// Row conversions; f32 -> 16 bit rounds to nearest even (as dtype.h).
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n);
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);
// src in src_dtype (f32, bf16, f16, or a GGUF block format: n a multiple of
// its block) -> f32.
void to_f32_row(const void* src, DType src_dtype, float* dst, int64_t n);

}  // namespace ferrite::cpu
