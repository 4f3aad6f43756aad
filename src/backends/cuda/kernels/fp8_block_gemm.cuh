// The operands of cuBLASLt's block-scaled FP8 GEMM (gemm.cc, fp8_lt_product)
// for f8_e4m3_b128 weights: prefill and large batches on the e4m3 tensor
// cores (the FP8 checkpoints' own W8A8 scheme) instead of dequantizing the
// weights to the activation type.
//
// cuBLASLt's layouts (measured on the H200 by bench/cuda/fp8_lt_probe; the
// header does not say): the column-major product out^T [n, m] = W^T x^T
// takes
//  - W as e4m3 codes [n, k] (row-major: k fastest) with either
//    VEC128_32F scales, one per row and 128-element group, stored [k/128][n]
//    (rows fastest), or BLK128x128_32F scales, one per 128-row group and
//    128-element group, stored [ceil(n/128)][kpad] (groups along k fastest,
//    kpad = k/128 rounded up to a multiple of 4);
//  - x as e4m3 codes [m, k] with VEC128_32F scales stored [k/128][m]
//    (tokens fastest).
// The stored f8_e4m3_b128 blocks (tensor/dtype.h: f32 d, 128 codes) carry a
// scale per row and 128 columns; a weight from a weight_block_size [128, 128]
// checkpoint has the same d on the 128 rows of a group, which
// launch_fp8_blk_uniform checks once per weight (BLK128x128 is ~1.25x the
// speed of VEC128 on the Qwen3-8B shapes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// x [m, k] (bf16 / f16, row-major; k a multiple of 128) to e4m3 codes [m, k]
// and f32 scales [k/128][m]: per token and 128-element group, scale = amax /
// 448 and code = e4m3(x / scale) (division and conversion rounded to
// nearest even, saturating; a group of zeros: scale 0, codes 0). The same
// quantization as the tensor-core decode GEMV's e4m3 activations.
Status launch_fp8_quantize_act(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                               uint8_t* codes, float* scales);

// Rows [row0, row0 + rows) of an f8_e4m3_b128 weight [n, k] into e4m3 codes
// [rows, k] and scales: blk false, VEC128 [k/128][rows]; blk true, BLK128x128
// [ceil(rows/128)][kpad] taken from the first row of each 128-row group
// (row0 a multiple of 128; only for weights launch_fp8_blk_uniform accepts).
Status launch_fp8_repack_rows(cudaStream_t s, const void* w, int64_t k, int64_t row0, int64_t rows,
                              bool blk, uint8_t* codes, float* scales);

// *mismatch (device) = 0 when every 128-row group of the f8_e4m3_b128
// weight [n, k] has one scale per 128 columns (bitwise equal d on its rows),
// else 1.
Status launch_fp8_blk_uniform(cudaStream_t s, const void* w, int64_t n, int64_t k,
                              int32_t* mismatch);

// kpad of the BLK128x128 scales: k/128 rounded up to a multiple of 4.
__host__ __device__ inline int64_t fp8_blk_kpad(int64_t k) { return (k / 128 + 3) / 4 * 4; }
// Bytes of the scales launch_fp8_repack_rows writes for `rows` rows.
inline int64_t fp8_weight_scale_bytes(int64_t k, int64_t rows, bool blk) {
  return 4 * (blk ? (rows + 127) / 128 * fp8_blk_kpad(k) : k / 128 * rows);
}

}  // namespace ferrite::cuda
