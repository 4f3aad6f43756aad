// Dense matmul against a row-major weight kept in its stored type.
//
//   y[t][o] = sum_i x[t][i] * W[o][i]      x: f32 [tokens, in], W: [out, in]
//
// W is f32, bf16 or f16 and is never expanded in memory: one token (decode)
// streams W once, converting in registers; many tokens (prefill) convert a
// small panel of W rows to f32 in a per-thread scratch and reuse it across a
// block of tokens (register tiles of 4 tokens x 6 rows on AVX-512).
//
// Numerics: every y[t][o] is the canonical dot product of simd.h (16 lanes
// of f32 FMA in increasing i, fixed lane-sum tree), computed by one thread.
// The result is therefore bitwise independent of the thread count, of the
// number of tokens in the call (batch composition) and of the tile that
// computed it, and equal across the AVX-512 / AVX2 / scalar builds.
//
// pool == nullptr runs on the calling thread. Parallelism is over output rows
// and, for long prefills, over blocks of tokens.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace ferrite::cpu {

// Rows of y are `out` apart, rows of x are `in` apart.
void matmul(const float* x, int64_t tokens, int64_t in, const void* w, DType w_dtype, int64_t out,
            float* y, ThreadPool* pool);

// y[t][o] += sum_i x[t][i] * W[o][i] (e.g. the residual add of an output
// projection). The sum is formed first, then added: y + dot.
void matmul_accumulate(const float* x, int64_t tokens, int64_t in, const void* w, DType w_dtype,
                       int64_t out, float* y, ThreadPool* pool);

// The general form over output rows [o_begin, o_end) of W (w points at row 0,
// rows are `in` elements apart): x row t starts at x + t * ldx, and the
// result for row o goes to y[t * ldy + (o - o_begin)], added when
// `accumulate`. Used by a last-token LM head, vocab-parallel heads, MoE
// experts (W = one expert's matrix) and callers with strided activations.
void matmul_rows(const float* x, int64_t ldx, int64_t tokens, int64_t in, const void* w,
                 DType w_dtype, int64_t o_begin, int64_t o_end, float* y, int64_t ldy,
                 bool accumulate, ThreadPool* pool);

// True for the weight types matmul accepts (f32, bf16, f16).
bool matmul_supports(DType w_dtype);

}  // namespace ferrite::cpu
