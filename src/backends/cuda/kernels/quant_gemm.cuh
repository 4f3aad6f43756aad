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

// Decode products on 8-bit activation blocks (Tuning::cuda_quant_dot): x
// [m, k] is quantized once per call to blocks of 32 (int8 q = round(x * 127
// / amax), f32 scale amax / 127: xq [m, k], xd [m, k / 32]), then every
// weight block meets its activations in dp4a integer dot products (4-bit and
// 6-bit values unpacked to bytes in registers, K-quant sub-block scales and
// mins applied to the integer sums), f32 accumulation across blocks. Each
// element is off by at most amax / 254 of its 32-block (the conformance
// suite's bound for block activations). m <= kQuantGemvMaxTokens (8: with
// 64, measured on the H200, Q4_K_M Qwen3-8B batch 64 fell from 4,293 to 610
// tok/s against dequantize + cuBLASLt); xq / xd hold m * k and m * k / 32
// entries. False when the format or alignment does not allow it
// (the caller then uses launch_quant_gemm).
constexpr int64_t kQuantGemvMaxTokens = 8;
bool quant_gemv_q8_supported(DType w_dt, const void* w, int64_t k, DType out_dt);
Status launch_quant_gemv_q8(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                            const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                            bool accumulate, const void* bias, DType bias_dt, int8_t* xq,
                            float* xd);

// Rows [row0, row0 + rows) of a block-format weight [n, k] dequantized into
// out [rows, k] (bf16 / f16 / f32, row-major): the tile the prefill GEMM
// (cuBLASLt) reads. A transient workspace, never the stored weight.
Status launch_quant_dequant_rows(cudaStream_t s, const void* w, DType w_dt, int64_t k,
                                 int64_t row0, int64_t rows, void* out, DType out_dt);

// MoE experts in block formats, over the tile table of launch_moe_sort
// (moe.cuh): out[r, j] (f32, row stride ldo) = x[row(r)] . w[e, j, :] for
// every row r of each tile of expert e, w [experts, nout, k] in blocks; row(r)
// = row_pair[r] / top_k when by_token, else r; x f32 [rows, k] with row
// stride ldx. With xq / xd (room for rows * k and rows * k / 32) the rows are
// quantized to 8-bit blocks of 32 and the products are integer (as
// launch_quant_gemv_q8); without, f32 on the dequantized blocks.
Status launch_quant_moe_experts(cudaStream_t s, const float* x, int64_t ldx, int64_t rows,
                                int64_t k, bool by_token, int64_t top_k, const int32_t* row_pair,
                                const void* w, DType w_dt, int64_t nout, const int32_t* tiles,
                                const int32_t* tile_count, int64_t max_tiles, float* out,
                                int64_t ldo, int8_t* xq, float* xd);

// out[t, c] += bias[c] for t < m, c < n (row stride ld).
Status launch_add_bias(cudaStream_t s, void* out, DType out_dt, int64_t m, int64_t n, int64_t ld,
                       const void* bias, DType bias_dt);

// out[t] = dequant(table)[min(ids[t], vocab - 1)], rows of `hidden` elements.
Status launch_quant_embedding(cudaStream_t s, const uint32_t* ids, int64_t tokens,
                              const void* table, DType table_dt, int64_t vocab, int64_t hidden,
                              void* out, DType out_dt);

}  // namespace ferrite::cuda
