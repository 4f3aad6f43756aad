// What the weight-tile kernels (quant_tile.cu, u4_tile.cu) share: their
// launch parameters (TileParams, tile_launch: 128-row x kBT-token output
// tiles, k split over blocks where the tiles cannot fill the GPU) and their
// end:
//  - split_k_meet: blocks that split a tile's k store their partial sums;
//    the last block to arrive adds them all, in split order (the same
//    result whichever block arrives last), and resets the tile's arrival
//    counter for the next launch (and graph replays);
//  - store_tile: out = acc (+ old out with `accumulate`) + bias, with every
//    load (old outputs, bias) before any store: a load after a store waited
//    out an L2 round trip each (outputs and bias may alias, for all the
//    compiler knows).
// A kernel describes its accumulators by a visitor: each(f) calls f(float&
// acc, int at, int64_t row, int64_t token) for every accumulator the thread
// holds, `at` its index among a tile's partial sums (lanes fastest, so that
// a warp's stores and loads are coalesced).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/quant_tile.cuh"

namespace ferrite::cuda {

// out [m, n] (= or +=) x [m, k] (bf16) . W^T (+ bias): W's rows row_bytes
// apart; grid (token tiles, row tiles, splits), k in `steps` steps, each
// split steps_per_split of them; the split-k scratch (partials, counters:
// QuantTileScratch).
struct TileParams {
  const uint8_t* w;
  int64_t row_bytes, n, k, m;
  int steps;
  const __nv_bfloat16* x;
  void* out;
  int out_dt;
  bool accumulate;
  const void* bias;
  int bias_dt;
  int splits, steps_per_split;
  float* partials;
  int32_t* counters;
};

// The parameters and grid of a product in tiles of kRows rows x kBT tokens
// over `steps` k steps on `num_sms` multiprocessors (quant_tile_splits).
template <int kRows, int kBT>
TileParams tile_launch(const void* x, int64_t m, int64_t k, const void* w, DType w_dt, int64_t n,
                       void* out, DType out_dt, bool accumulate, const void* bias, DType bias_dt,
                       int steps, int num_sms, const QuantTileScratch& scratch, dim3* grid) {
  const int64_t row_tiles = (n + kRows - 1) / kRows, token_tiles = (m + kBT - 1) / kBT;
  const int splits =
      quant_tile_splits(row_tiles * token_tiles, steps, num_sms, int64_t{kRows} * kBT, scratch);
  const int per = (steps + splits - 1) / splits;
  TileParams p{};
  p.w = static_cast<const uint8_t*>(w);
  p.row_bytes = dtype_bytes(w_dt, k);
  p.n = n;
  p.k = k;
  p.m = m;
  p.x = static_cast<const __nv_bfloat16*>(x);
  p.out = out;
  p.out_dt = dt_code(out_dt);
  p.accumulate = accumulate;
  p.bias = bias;
  p.bias_dt = dt_code(bias_dt);
  p.steps = steps;
  p.splits = (steps + per - 1) / per;
  p.steps_per_split = per;
  p.partials = scratch.partials;
  p.counters = scratch.counters;
  *grid = dim3(static_cast<unsigned>(token_tiles), static_cast<unsigned>(row_tiles),
               static_cast<unsigned>(p.splits));
  return p;
}

// The k steps [*begin, *end) of this block's split (blockIdx.z).
__device__ __forceinline__ void split_steps(const TileParams& p, int* begin, int* end) {
  *begin = static_cast<int>(blockIdx.z) * p.steps_per_split;
  *end = min(p.steps, *begin + p.steps_per_split);
}

// f(a, b, i) for a < kA, b < kB, i < 4, unrolled: a thread's accumulators
// acc[a][b][i] (m16n8 fragments: i / 2 the row half, i % 2 the column).
template <int kA, int kB, typename F>
__device__ __forceinline__ void each_fragment(F&& f) {
#pragma unroll
  for (int a = 0; a < kA; ++a)
#pragma unroll
    for (int b = 0; b < kB; ++b)
#pragma unroll
      for (int i = 0; i < 4; ++i) f(a, b, i);
}

// The copies of the first kStages - 1 k steps of [s_begin, s_end): the
// weights before the PDL wait (no earlier kernel writes them), then the
// activations; one cp.async commit group a stage (maybe empty), as the
// main loop's cp_async_wait<kStages - 2> counts them.
template <int kStages, typename LoadW, typename LoadX>
__device__ __forceinline__ void tile_prologue(int s_begin, int s_end, LoadW&& load_w,
                                              LoadX&& load_x) {
  for (int i = 0; i < kStages - 1; ++i)
    if (s_begin + i < s_end) load_w(s_begin + i, i);
  pdl_wait();
  for (int i = 0; i < kStages - 1; ++i) {
    if (s_begin + i < s_end) load_x(s_begin + i, i);
    cp_async_commit();
  }
}

// Splits of one tile: partials holds splits x tile_floats sums a tile,
// counters one arrival counter a tile. `holds` is false for threads whose
// accumulators are not the tile's (the bf16 tile's second k-half warps,
// already added in); every thread of the block calls it. Returns false in
// the blocks that are not the last (they are done), true in the last one,
// whose accumulators then hold the whole sums.
template <typename Each>
__device__ __forceinline__ bool split_k_meet(float* partials, int32_t* counters, int splits,
                                             int64_t tile, int64_t tile_floats, bool holds,
                                             int* last_flag, Each&& each) {
  float* part = partials + tile * splits * tile_floats;
  if (holds) {
    float* mine = part + static_cast<int64_t>(blockIdx.z) * tile_floats;
    each([&](float& a, int at, int64_t, int64_t) { __stcg(mine + at, a); });
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *last_flag = atomicAdd(counters + tile, 1) == splits - 1;
  __syncthreads();
  if (!*last_flag) return false;
  __threadfence();
  if (holds) {
    // A split's sums at a time, every load of it in flight together (a loop
    // over the splits inside each sum waited out one L2 round trip per
    // load: tens of microseconds a launch).
    each([&](float& a, int, int64_t, int64_t) { a = 0.0f; });
    for (int sp = 0; sp < splits; ++sp) {
      const float* src = part + static_cast<int64_t>(sp) * tile_floats;
      each([&](float& a, int at, int64_t, int64_t) { a += __ldcg(src + at); });
    }
  }
  if (threadIdx.x == 0) counters[tile] = 0;  // ready for the next launch
  return true;
}

// out [m, n] (row-major, type code out_dt) at (token, row) = acc (+ old) +
// bias[row] for the accumulators of rows < n and tokens < m.
template <typename Each>
__device__ __forceinline__ void store_tile(void* out, int out_dt, bool accumulate, const void* bias,
                                           int bias_dt, int64_t n, int64_t m, Each&& each) {
  each([&](float& a, int, int64_t row, int64_t t) {
    if (row >= n || t >= m) return;
    if (accumulate) a += load_any(out, out_dt, t * n + row);
    a += bias ? load_any(bias, bias_dt, row) : 0.0f;
  });
  each([&](float& a, int, int64_t row, int64_t t) {
    if (row < n && t < m) store_any(out, out_dt, t * n + row, a);
  });
}

// A tile's end: with split k, the meeting (only the last block goes on),
// then the outputs of the threads that hold the tile's sums.
template <typename Each>
__device__ __forceinline__ void finish_tile(const TileParams& p, int64_t tile_floats, bool holds,
                                            int* last_flag, Each&& each) {
  if (p.splits > 1) {
    const int64_t tile = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    if (!split_k_meet(p.partials, p.counters, p.splits, tile, tile_floats, holds, last_flag, each))
      return;
  }
  if (holds) store_tile(p.out, p.out_dt, p.accumulate, p.bias, p.bias_dt, p.n, p.m, each);
}

}  // namespace ferrite::cuda
