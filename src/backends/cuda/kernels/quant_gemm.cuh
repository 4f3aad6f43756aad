// Products and gathers on weights in GGUF block formats (q8_0, q4_0, q4_k,
// q5_k, q6_k; layouts in tensor/dtype.h), uploaded to the GPU as they are
// stored (blocks, never expanded in memory):
//
//   out[m, n] (= or +=) sum_k x[m, k] dequant(W)[n, k] (+ bias[n])
//
//  - decode (m <= 8) and f32 activations: a GEMV, one warp per weight row
//    streaming its blocks once, each lane dequantizing 8 consecutive
//    elements in registers, f32 accumulation for up to 8 rows of x;
//  - bf16 / f16 activations, m > 8: tensor-core tiles (64 tokens x 64 weight
//    rows per block, k steps of 32): the W tile is dequantized into shared
//    memory in the activation type, then m16n8k16 mma with f32 accumulators.
//
// k is a multiple of the block size (the planner checks); x and out are
// row-major [m, k] / [m, n]; out is f32 or the activation type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

bool quant_gemm_supported(DType x_dt, DType w_dt, DType out_dt);
Status launch_quant_gemm(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                         const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                         bool accumulate, const void* bias, DType bias_dt);

// out[t] = dequant(table)[min(ids[t], vocab - 1)], rows of `hidden` elements.
Status launch_quant_embedding(cudaStream_t s, const uint32_t* ids, int64_t tokens,
                              const void* table, DType table_dt, int64_t vocab, int64_t hidden,
                              void* out, DType out_dt);

}  // namespace ferrite::cuda
