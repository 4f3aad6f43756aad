// Products with a bound weight view on CPU: kernels/matmul.h's products, with
// the view's act-order input permutation (TensorView::input_perm, GPTQ
// desc_act checkpoints kept in 4 bits) applied to the activations first.
//
// An act-order weight stores its columns in group order, so row r's product
// is sum_c W[r][c] x[perm_r[c]]: the rows of one permutation run (a module,
// or one expert's matrix of a stacked MoE weight) multiply the gathered rows
// x[:, perm_r], and the sum is the natural-order one with its terms reordered
// (the same products, in another summation order). Weights without a
// permutation go straight to matmul_rows.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/matmul.h"
#include "tensor/tensor.h"

namespace ferrite::cpu {

// matmul_rows over rows [o_begin, o_end) of the matrix that starts at row
// `row0` of `w` (its rows flattened over the leading dimensions: an expert's
// matrix inside a stacked [E, rows, in] weight): x row t at x + t * ldx, the
// result for row o at y[t * ldy + (o - o_begin)], added when `accumulate`.
void weight_product_rows(const float* x, int64_t ldx, int64_t tokens, int64_t in,
                         const TensorView& w, int64_t row0, int64_t o_begin, int64_t o_end,
                         float* y, int64_t ldy, bool accumulate, ThreadPool* pool);

// The whole matrix: y[t * rows + o] (+)= W[o] . x[t] (x rows `in` apart);
// without a permutation exactly matmul / matmul_accumulate (their own form).
inline void weight_product(const float* x, int64_t tokens, int64_t in, const TensorView& w,
                           int64_t rows, float* y, bool accumulate, ThreadPool* pool) {
  weight_product_rows(x, in, tokens, in, w, 0, 0, rows, y, rows, accumulate, pool);
}

// Rows [row, row + shape[0]) of `w` (elements from `offset`, a multiple of
// the row length) as their own view, its permutation table included: one
// expert's matrix of a stacked weight.
TensorView weight_rows_view(const TensorView& w, int64_t offset, Shape shape);

}  // namespace ferrite::cpu
