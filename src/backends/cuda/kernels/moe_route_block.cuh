// One token's MoE routing by a whole thread block (device code, C++17;
// moe.cu's moe_route_one_kernel and quant_moe_decode.cu's gate / up launch
// include it): the selections and weights route_token (moe.cu) makes for
// the token, bit for bit, on a shorter chain than its one warp.
//
// Why: at one token the one-warp routing is a serial chain of ~2,000
// instructions (softmax, eight selections of two warp reductions, ranking,
// the sort's loops), ~5 us of every Qwen3-30B-A3B layer at batch 1
// (session 32's timeline) with nothing beside it. Here every warp takes the
// softmax's max and sum as route_token's warp does (the same lanes, order
// and operations: the same bits; no block barrier waits on one warp's
// chain); every expert's probability (the same expression) goes to shared
// memory; a warp a group of 32 experts keeps the first top_k of its group
// as candidates, and a few threads a candidate count the candidates ahead
// of it in (probability descending, id ascending), the order route_token's
// selections come in, so the candidates ranked below top_k are the
// selections in that order; warp 0 orders them by id and renormalises as
// route_token (route_write_selected).
#pragma once

#include <climits>
#include <cstdint>

#include "backends/cuda/kernels/cuda_types.cuh"

namespace ferrite::cuda {

constexpr int kRouteBlockMaxExperts = 512;
constexpr int kRouteBlockMaxTopK = 32;
// Experts a thread loads its logit of: blocks of at least
// kRouteBlockMaxExperts / kRouteBlockOwn threads.
constexpr int kRouteBlockOwn = 4;

// The end of a token's routing, by a warp whose lane k < K holds the k-th
// selection (my_id, my_p; other lanes my_id INT_MAX): the selections
// ordered by id (the ids are distinct), their probabilities summed in id
// order (as the reference renormalises), ids / weights (and ids_s, shared
// memory, when given) written at the id rank, which is returned. sorted_p:
// 32 floats of the warp's own. route_token and route_one_token_block share
// it, so both make the same bits.
__device__ __forceinline__ int route_write_selected(int my_id, float my_p, int K, bool normalize,
                                                    int32_t* ids, float* weights,
                                                    float* sorted_p, int32_t* ids_s) {
  const int lane = threadIdx.x & 31;
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
  return rank;
}

struct RouteBlockShared {
  float p[kRouteBlockMaxExperts];
  // The ranking's candidates: the first K of each group of 32 experts
  // (at most 16 groups x 32).
  float cand_p[kRouteBlockMaxExperts];
  int32_t cand_id[kRouteBlockMaxExperts];
  float sel_p[kRouteBlockMaxTopK], sorted_p[kRouteBlockMaxTopK];
  int32_t sel_id[kRouteBlockMaxTopK];
};

// The threads a ranked candidate of route_one_token_block for E experts,
// top K and a block of `threads`: a power of two up to 32, threads / the
// candidates (K a group of 32 experts) rounded up to one.
inline int route_block_threads_per_item(int threads, int E, int K) {
  const int items = (E + 31) / 32 * K;
  int pow2 = 1;
  while (pow2 < items) pow2 *= 2;
  const int spe = threads / pow2;
  return spe < 1 ? 1 : spe > 32 ? 32 : spe;
}

struct RouteBlockLane {
  int rank = -1;  // warp 0's lanes k < K: the id rank of the k-th selection; else -1
  int id = 0;     // its expert
};

// Every thread of the block calls it (it has block barriers; blockDim.x a
// multiple of 32 and at least 128); 1 <= K <= 32, K <= E <=
// kRouteBlockMaxExperts, spe from route_block_threads_per_item(blockDim.x,
// E, K). logits: the token's E f32 logits; ids / weights: K
// outputs at the id rank (global or shared memory), written by warp 0.
// sh.sel_id / sel_p afterwards: the selections in (probability
// descending, id ascending) order.
__device__ __forceinline__ RouteBlockLane route_one_token_block(const float* logits, int E, int K,
                                                                bool normalize, int spe,
                                                                RouteBlockShared& sh,
                                                                int32_t* ids, float* weights) {
  const int tid = threadIdx.x, lane = tid & 31, threads = blockDim.x;
  // The thread's own experts' logits, loaded at once beside its warp's.
  float own[kRouteBlockOwn];
#pragma unroll
  for (int i = 0; i < kRouteBlockOwn; ++i) {
    const int e = tid + i * threads;
    own[i] = e < E ? logits[e] : 0.0f;
  }
  // route_token's statistics, by every warp (the same bits in each): lane
  // l over experts l, l + 32, ... in order, its logits loaded once (the
  // sum needs the max first: no second round trip for them); lane 0's
  // sum, as route_token keeps it (the butterfly's lanes may differ in the
  // last bit).
  constexpr int kLane = kRouteBlockMaxExperts / 32;
  float lv[kLane];
#pragma unroll
  for (int i = 0; i < kLane; ++i) lv[i] = lane + 32 * i < E ? logits[lane + 32 * i] : 0.0f;
  float mx = -INFINITY, sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kLane; ++i)
    if (lane + 32 * i < E) mx = fmaxf(mx, lv[i]);
  mx = warp_max(mx);
#pragma unroll
  for (int i = 0; i < kLane; ++i)
    if (lane + 32 * i < E) sum += expf(lv[i] - mx);
  sum = __shfl_sync(0xffffffffu, warp_sum(sum), 0);
#pragma unroll
  for (int i = 0; i < kRouteBlockOwn; ++i) {
    const int e = tid + i * threads;
    if (e < E) {
      const float pe = expf(own[i] - mx) / sum;
      sh.p[e] = pe >= 0.0f ? pe : 0.0f;  // NaN logits: never an invalid id
    }
  }
  __syncthreads();
  // The ranking in two steps. An expert ranked below K overall is ranked
  // below K within its group of 32 experts (every expert ahead of it overall
  // is ranked below K too), so the first K of each group (a warp's 32
  // shuffles a group) hold every selection, and a candidate's rank among the
  // candidates is its rank overall whenever that is below K. (Counting every
  // expert against every expert took a thread E comparisons: 256 at
  // Qwen3.5-MoE's 256 experts on 256 threads, the larger part of the fused
  // gate / up launch's stall samples in session 42; ranking by candidates
  // lifted Qwen3.5-35B-A3B GPTQ-Int4 b1 by 15 % on an H100, session 44.)
  // Lanes past E count as probability -1, below every expert (p >= 0): each
  // group fills its K slots, and they are never selected. The comparisons
  // are bitwise operations, not || and && (which compiled to a branch each).
  const int warp = tid >> 5, warps = threads >> 5;
  const int groups = (E + 31) / 32;
  for (int g = warp; g < groups; g += warps) {
    const int e = g * 32 + lane;
    const float pe = e < E ? sh.p[e] : -1.0f;
    int ahead = 0;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float pj = __shfl_sync(0xffffffffu, pe, j);
      ahead += static_cast<int>(pj > pe) | (static_cast<int>(pj == pe) & static_cast<int>(j < lane));
    }
    if (ahead < K) {
      sh.cand_id[g * K + ahead] = e;
      sh.cand_p[g * K + ahead] = pe;
    }
  }
  __syncthreads();
  // Candidate c's rank over its spe threads (adjacent lanes), each counting
  // every spe-th candidate ahead of it; passes of threads / spe candidates,
  // the same count for every thread (the shuffles' full mask). A count is
  // exact in any partition: the same ranks.
  const int C = groups * K;
  const int per_pass = threads / spe, part = tid % spe;
  const int passes = (C + per_pass - 1) / per_pass;
  for (int pass = 0; pass < passes; ++pass) {
    const int c = pass * per_pass + tid / spe;
    const int ec = c < C ? sh.cand_id[c] : INT_MAX;
    const float pc = c < C ? sh.cand_p[c] : -1.0f;
    int ahead = 0;
#pragma unroll 4
    for (int i = part; i < C; i += spe) {
      const float pj = sh.cand_p[i];
      const int ej = sh.cand_id[i];
      ahead += static_cast<int>(pj > pc) | (static_cast<int>(pj == pc) & static_cast<int>(ej < ec));
    }
    for (int o = spe >> 1; o > 0; o >>= 1) ahead += __shfl_xor_sync(0xffffffffu, ahead, o);
    if (c < C && ec < E && part == 0 && ahead < K) {
      sh.sel_id[ahead] = ec;
      sh.sel_p[ahead] = pc;
    }
  }
  __syncthreads();
  RouteBlockLane out;
  if (tid < 32) {
    const int my_id = lane < K ? sh.sel_id[lane] : INT_MAX;
    const float my_p = lane < K ? sh.sel_p[lane] : 0.0f;
    const int rank =
        route_write_selected(my_id, my_p, K, normalize, ids, weights, sh.sorted_p, nullptr);
    if (lane < K) {
      out.rank = rank;
      out.id = my_id;
    }
  }
  return out;
}

}  // namespace ferrite::cuda
