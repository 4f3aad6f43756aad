// The Marlin-class 4-bit GEMM: products of tens of tokens on u4_g128 weights
// (GPTQ / AWQ / compressed-tensors W4A16 checkpoints, as the loader repacks
// them: tensor/dtype.h) with bf16 activations, on the bf16 tensor cores,
// the codes decoded in registers:
//
//   out[t, r] (= or +=) sum_steps d[r, s] sum_{e in s} (q[r, e] - z[r, s]) x[t, e]
//                       (+ bias[r])
//
// The integers q - z are exact in bf16 and their products with x exact in
// f32; each 128-element step's f32 sums are scaled by the block's f32 d in
// f32. So the result is the product of the f32 dequantized weights up to
// the order of f32 sums: closer to it than the dequantize-to-bf16 path
// (which rounds every weight to bf16 first).
//
// A block of 8 warps takes 128 weight rows x 16, 32 or 64 tokens (more
// tokens: more token tiles); up to 32 tokens each warp owns 16 rows and
// every token, at 64 two warps share 32 rows (u4_tile.cu WarpLayout). Per
// k step (one u4_g128 block a row) the rows' blocks and the tokens'
// activations go to shared memory (cp.async, 3-4 stages); each lane reads
// one code word a row and chunk and turns it into A fragments with ~1.6
// instructions a weight (u4_tile_formats.h code_values); the activations
// are B fragments as they lie. Where the output tiles are too few to fill
// the GPU, k is split over blocks whose partial sums meet in the bf16
// tile's scratch (kernels/quant_tile.cuh), added in split order
// (deterministic).
//
// Its wgmma form (Tuning::cuda_u4_tile_wgmma, off) takes up to 128 tokens
// a tile and keeps the older arithmetic: weights decoded to bf16(d (q - z))
// (bitwise those of the dequantizing path for f16 / bf16 scales).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/kernels/quant_tile.cuh"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Where the weights' blocks lie: kRows, u4_g128 as stored (row-major, the
// loader's); kTiles, 128-row tiles step by step (u4_tile_formats.h
// tile_u4_rows: each k step of a tile one contiguous run; the mma.sync form
// only, one k step a stage; benchmarks and tests, not yet the loader's).
enum class U4Layout { kRows, kTiles };

// Lets the kernels use the shared memory they need (once per process,
// before the first launch, outside any graph capture).
Status u4_tile_init();

// The split-k scratch it needs (QuantTileScratch::partial_floats) for
// `num_sms` multiprocessors: a few blocks an SM of 128 rows x 128 tokens.
int64_t u4_tile_partial_floats(int num_sms);

// True when launch_u4_tile runs this product: u4_g128 weights (16-byte
// aligned), x bf16 with 16-byte aligned rows, k a multiple of 128 below
// 2^22, out f32 / bf16 / f16.
bool u4_tile_supported(DType x_dt, const void* x, DType w_dt, const void* w, int64_t k,
                       DType out_dt);

// out [m, n] (row-major) (= or +=) x [m, k] (row-major bf16) . W^T (+ bias
// [n]); W [n, k] u4_g128 blocks. The split-k scratch is the bf16 tile's.
// wgmma: the warpgroup-MMA form (Tuning::cuda_u4_tile_wgmma; u4_tile.cu);
// stage_steps: k steps a pipeline stage of the mma.sync form (1 or 2; 0:
// its default, 2 for 16-token tiles; BackendState::u4_tile_stage_steps);
// layout: where W's blocks lie (kTiles: 128-row tiles, tiled_bytes(n, k)).
Status launch_u4_tile(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m, int64_t k,
                      const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                      bool accumulate, const void* bias, DType bias_dt,
                      const QuantTileScratch& scratch, bool wgmma = false,
                      int stage_steps = 0, U4Layout layout = U4Layout::kRows);

}  // namespace ferrite::cuda
