// The Marlin-class 4-bit GEMM: products of tens to hundreds of tokens on
// u4_g128 weights (GPTQ / AWQ / compressed-tensors W4A16 checkpoints, as the
// loader repacks them: tensor/dtype.h) with bf16 activations, on the bf16
// tensor cores, the codes decoded in registers:
//
//   out[t, r] (= or +=) sum_e x[t, e] bf16(d (q[r, e] - z)) (+ bias[r])
//
// with f32 accumulation; the weight values are exactly those of dequantizing
// the rows to bf16 for cuBLASLt where the checkpoint's scales are f16 or
// bf16 numbers (u4_tile_formats.h), so this path and the dequantizing one
// agree up to the order of the f32 sums.
//
// A block of 8 warps takes 128 weight rows x 16, 32, 64 or 128 tokens; warps 0-3
// and 4-7 take the two token halves, warp w % 4 rows 32 (w % 4) .. + 31. Per
// k step of 128 elements (one u4_g128 block a row) the rows' blocks and the
// tokens' activations go to shared memory (cp.async, 3-4 stages); each lane
// reads one code word a row and chunk and turns it into A fragments with ~2.4
// instructions a weight (u4_tile_formats.h: mask-and-magic pairs, bf16x2
// subtract / multiply / fused multiply-add), the activations into B
// fragments by byte permutes. Where the output tiles are too few to fill the
// GPU, k is split over blocks whose partial sums meet in the bf16 tile's
// scratch (kernels/quant_tile.cuh), added in split order (deterministic).
//
// The bf16 tile (quant_tile.cuh) serves every block format with a generic
// per-group scale table; this kernel serves u4_g128 only, reads each weight
// once per 128 tokens instead of 64, and has no per-step scale pass or
// second barrier (Tuning::cuda_u4_tile_tokens; gemm.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/kernels/quant_tile.cuh"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Lets the kernels use the shared memory they need (once per process,
// before the first launch, outside any graph capture).
Status u4_tile_init();

// The split-k scratch it needs (QuantTileScratch::partial_floats) for
// `num_sms` multiprocessors: a few blocks an SM of 128 rows x 128 tokens.
int64_t u4_tile_partial_floats(int num_sms);

// True when launch_u4_tile runs this product: u4_g128 weights (16-byte
// aligned), x bf16 with 16-byte aligned rows, k a multiple of 128, out f32 /
// bf16 / f16.
bool u4_tile_supported(DType x_dt, const void* x, DType w_dt, const void* w, int64_t k,
                       DType out_dt);

// out [m, n] (row-major) (= or +=) x [m, k] (row-major bf16) . W^T (+ bias
// [n]); W [n, k] u4_g128 blocks. The split-k scratch is the bf16 tile's.
// wgmma: the warpgroup-MMA form (Tuning::cuda_u4_tile_wgmma; u4_tile.cu).
Status launch_u4_tile(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m, int64_t k,
                      const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                      bool accumulate, const void* bias, DType bias_dt,
                      const QuantTileScratch& scratch, bool wgmma = false);

}  // namespace ferrite::cuda
