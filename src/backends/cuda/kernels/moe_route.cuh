// The routing of a decode step's tokens and the sort of its (token, k)
// pairs by expert, as device functions: moe.cu's routing kernels and the
// fused decode gate/up (quant_moe_decode.cu, Tuning::
// cuda_moe_route_in_gate_up), whose blocks each route for themselves, run
// the same code, so their ids, weights and tile tables are the same bits.
// CUDA only (included by .cu files).
#pragma once

#include <climits>
#include <cstdint>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/warp_topk.h"

namespace ferrite::cuda {

// A warp per token: softmax (f32), top-k by probability (ties: lower id),
// ids in increasing order, optional renormalisation (summed in increasing
// id, as the reference). Lane k holds the k-th selection. sorted_p: 32
// floats of the warp's own; ids_s (optional, shared memory): the ids again.
//
// Up to 256 experts the logits are loaded once (all of a lane's loads in
// flight together), the probabilities stay in registers and the selections
// come from warp_topk (two warp reductions a selection); more experts are
// re-read and recomputed each round and selected by a butterfly over (p, id)
// (the same selections).
__device__ inline void route_token(const float* l, int E, int K, bool normalize, int32_t* ids,
                            float* weights, float* sorted_p, int32_t* ids_s = nullptr) {
  const int lane = threadIdx.x & 31;
  constexpr int kCached = 8;
  const bool cached = E <= 32 * kCached;
  float lc[kCached];
  float mx = -INFINITY;
  float sum = 0;
  if (cached) {
#pragma unroll
    for (int j = 0; j < kCached; ++j) lc[j] = lane + 32 * j < E ? l[lane + 32 * j] : 0.0f;
#pragma unroll
    for (int j = 0; j < kCached; ++j)
      if (lane + 32 * j < E) mx = fmaxf(mx, lc[j]);
    mx = warp_max(mx);
#pragma unroll
    for (int j = 0; j < kCached; ++j)
      if (lane + 32 * j < E) sum += expf(lc[j] - mx);
  } else {
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
  }
  sum = warp_sum(sum);
  auto prob_of = [&](float logit) {
    const float pe = expf(logit - mx) / sum;
    return pe >= 0.0f ? pe : 0.0f;  // NaN logits: never an invalid id
  };
  int my_id = INT_MAX;
  float my_p = 0;
  if (cached) {
    float pc[kCached];
#pragma unroll
    for (int j = 0; j < kCached; ++j) pc[j] = lane + 32 * j < E ? prob_of(lc[j]) : 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    auto rmax = [](uint32_t v) { return __reduce_max_sync(0xffffffffu, v); };
    auto rmin = [](uint32_t v) { return __reduce_min_sync(0xffffffffu, v); };
#else
    auto rmax = [](uint32_t v) {
      for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
      return v;
    };
    auto rmin = [](uint32_t v) {
      for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
      return v;
    };
#endif
    warp::warp_topk<kCached>(pc, lane, E, K, my_id, my_p, rmax, rmin);
  } else {
    float prev_p = INFINITY;
    int prev_id = -1;
    for (int k = 0; k < K; ++k) {
      // The best (p, lower id) strictly after the previous selection.
      float bp = -1.0f;
      int bi = INT_MAX;
      for (int e = lane; e < E; e += 32) {
        const float pe = prob_of(l[e]);
        const bool after = pe < prev_p || (pe == prev_p && e > prev_id);
        if (after && (pe > bp || (pe == bp && e < bi))) bp = pe, bi = e;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float op = __shfl_xor_sync(0xffffffffu, bp, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (op > bp || (op == bp && oi < bi)) bp = op, bi = oi;
      }
      if (lane == k) my_id = bi, my_p = bp;
      prev_p = bp;
      prev_id = bi;
    }
  }
  // Rank by id (the ids are distinct).
  int rank = 0;
  for (int j = 0; j < K; ++j) rank += __shfl_sync(0xffffffffu, my_id, j) < my_id;
  if (lane < K) sorted_p[rank] = my_p;
  __syncwarp();
  float tot = 0;
  for (int j = 0; j < K; ++j) tot += sorted_p[j];
  if (lane < K) {
    ids[rank] = my_id;
    if (ids_s) ids_s[rank] = my_id;
    weights[rank] = normalize ? my_p / tot : my_p;
  }
}

// Routing and the sort by one warp for at most 32 pairs (decode): the
// tokens routed in turn, then lane p holds pair p's expert and its place
// (experts ascending, pairs of an expert in order) comes from comparisons
// over the warp; offsets, pair <-> row and the tile table as
// sort_small_block makes them, without its block-wide scans and barriers.
// One warp (lane = threadIdx.x % 32); sorted_p / sid: 32 floats / ints of
// shared memory of the warp's own. logits may be in shared memory, and
// every output may be (the fused gate/up's blocks route for themselves);
// offsets may be null.
__device__ inline void route_sort_warp(const float* logits, int tokens, int E, int K, bool normalize,
                                int32_t* ids, float* weights, int bm, int32_t* offsets,
                                int32_t* slot_of, int32_t* row_pair, int4* tiles,
                                int32_t* tile_count, float* sorted_p, int32_t* sid) {
  const int lane = threadIdx.x & 31;
  for (int t = 0; t < tokens; ++t) {
    // The ids into sid as well: read back from shared memory below, not
    // from the global writes (a round trip).
    route_token(logits + static_cast<int64_t>(t) * E, E, K, normalize, ids + t * K,
                weights + t * K, sorted_p, sid + t * K);
    __syncwarp();
  }
  const int P = tokens * K;
  const int my = lane < P ? sid[lane] : INT_MAX;
  __syncwarp();
  sid[lane] = my;
  __syncwarp();
  int before = 0, same_before = 0, cnt = 0;
  for (int q = 0; q < P; ++q) {
    const int o = sid[q];
    before += o < my;
    same_before += o == my && q < lane;
    cnt += o == my;
  }
  const bool valid = lane < P;
  const bool first = valid && same_before == 0;
  if (valid) {
    slot_of[lane] = before + same_before;
    row_pair[before + same_before] = lane;
  }
  // offsets null: the caller's kernels take the tile table alone (the
  // fused decode experts), and E / 32 + 1 rounds of P reads are skipped.
  for (int e0 = 0; offsets && e0 <= E; e0 += 32) {
    const int e = e0 + lane;
    int c = 0;
    for (int q = 0; q < P; ++q) c += sid[q] < e;
    if (e <= E) offsets[e] = c;
  }
  // Tiles: each expert's first lane writes its tiles after those of the
  // experts below it.
  const int my_tiles = first ? (cnt + bm - 1) / bm : 0;
  int base = 0, total = 0;
  for (int q = 0; q < P; ++q) {
    const int tq = __shfl_sync(0xffffffffu, my_tiles, q);
    base += sid[q] < my ? tq : 0;
    total += tq;
  }
  if (first)
    for (int j = 0; j < my_tiles; ++j)
      tiles[base + j] = make_int4(my, before + j * bm, min(bm, cnt - j * bm), 0);
  if (lane == 0) *tile_count = total;
}

}  // namespace ferrite::cuda
