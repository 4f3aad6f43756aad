// Products of 9 to a few hundred tokens on block weights (q8_0, q4_0, q4_k,
// q5_k, q6_k, f8_e4m3_b128, u4_g128; layouts in tensor/dtype.h) with bf16
// activations, on the bf16 tensor cores, reading every weight byte once per
// 64 tokens and never writing a dequantized weight to memory:
//
//   out[t, r] (= or +=) sum_e x[t, e] bf16(w[r, e]) (+ bias[r])
//
// with w[r, e] the reference dequantization (tensor/dtype.h) in f32, rounded
// once to bf16 (the numerics of dequantizing for cuBLASLt), and f32
// accumulation.
//
// A block of 8 warps takes 128 weight rows x 16, 32 or 64 tokens. Per k step
// of 256 elements the rows' raw blocks and the tokens' activations are
// copied to shared memory (cp.async, several stages deep), the step's scales
// are computed once per row and 16-element group into shared memory, and
// each warp decodes its 32 rows of a half step straight from the raw blocks
// into the A fragments of m16n8k16 mma (quant_tile_formats.h); the
// activations are the B fragments. The two half-steps' warps add up in
// shared memory at the end. When the row tiles are too few to fill the GPU,
// k is split over several blocks whose partial sums meet in a scratch
// buffer, the last block of a tile adding them in split order
// (deterministic) and writing out.
//
// This replaces, for these token counts, dequantizing the weights to 16 bits
// for cuBLASLt: a write and a read of twice the bf16 size on top of the
// blocks (Tuning::cuda_quant_tile_tokens, 64: above that the tile loses to
// cuBLASLt's tensor-core rate; gemm.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Lets the kernels use the shared memory they need (once per process,
// before the first launch, outside any graph capture).
Status quant_tile_init();

// The split-k scratch: partial sums (floats) and one arrival counter per
// output tile (zeroed once; the last block of a tile sets its counter back
// to 0, so the buffers stay valid across graph replays).
struct QuantTileScratch {
  float* partials = nullptr;
  int64_t partial_floats = 0;
  int32_t* counters = nullptr;
  int64_t counter_count = 0;
};
// The partial sums' room for `num_sms` multiprocessors: a few blocks an SM
// of 128 rows x 64 tokens (the splits are capped to fit it).
int64_t quant_tile_partial_floats(int num_sms);
constexpr int64_t kQuantTileCounters = 1 << 14;
// Splits of k for `tiles` output tiles of `steps` k steps on `sms`
// multiprocessors (one block each), `tile_floats` partial sums a tile: the
// fewest estimated step times (waves x steps a split, plus about a quarter
// step a split for the last block's read of the partial sums), capped by the
// scratch. Shared with the 4-bit tile (u4_tile.cuh).
int quant_tile_splits(int64_t tiles, int steps, int sms, int64_t tile_floats,
                      const QuantTileScratch& sc);

// True when launch_quant_tile runs this product: a format above, k whole
// blocks, x bf16 with 16-byte aligned rows, out f32 / bf16 / f16, a 16-byte
// aligned weight (rows may start anywhere their predecessor ends).
bool quant_tile_supported(DType x_dt, const void* x, DType w_dt, const void* w, int64_t k,
                          DType out_dt);

// out [m, n] (row-major, out_dt) (= or +=) x [m, k] (row-major bf16) . W^T
// (+ bias [n]); W [n, k] in w_dt blocks.
Status launch_quant_tile(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m,
                         int64_t k, const void* w, DType w_dt, int64_t n, void* out,
                         DType out_dt, bool accumulate, const void* bias, DType bias_dt,
                         const QuantTileScratch& scratch);

}  // namespace ferrite::cuda
