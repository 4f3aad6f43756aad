// Kernels on weights in GGUF block formats (q8_0, q4_0, q4_k, q5_k, q6_k;
// layouts in tensor/dtype.h).
//
// dequantize_row_fast is the SIMD form of the reference dequantize_row: the
// same f32 products and differences per element, so its output is bitwise
// the reference's (tested). matmul (matmul.h) takes block weights through
// it: a panel of rows is dequantized into L1 and the canonical f32 dot
// products run over it, so a matmul on block weights is bitwise the f32
// matmul of the dequantized weights, whatever the thread count or batch.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace ferrite::cpu {

// n elements (whole blocks) of a row in a weight format (f32, bf16, f16 or
// a block format) to f32.
void dequantize_row_fast(DType t, const void* src, float* dst, int64_t n);

}  // namespace ferrite::cpu
