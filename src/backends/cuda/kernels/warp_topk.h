// The top-k selection of MoE routing (moe.cu, route_token) by warp
// reductions: a warp holds up to 32 x kCached probabilities, lane l those of
// experts l, l + 32, l + 64, ...; the k-th selection is the k-th of all
// experts in the order (probability descending, id ascending).
//
// Why: the routing of a decode step is one warp on the critical path of
// every MoE layer (Qwen3-30B-A3B b1: 7.4-8.9 us a layer under ncu). Its
// first form found each selection by a 5-level xor butterfly over (p, id)
// pairs: 10 dependent shuffles and compares a round, 8 rounds. Here every
// lane keeps its own best untaken candidate, and a round is two warp
// reductions (redux.sync on sm_80+): the largest key (a probability's bits:
// for p >= 0 the unsigned order is the float order), then the lowest id
// among the lanes holding it. Only the lane that owned the selection
// rescans its kCached slots. The selections are exactly the butterfly's.
//
// `reduce_max(v)` / `reduce_min(v)` are the warp's __reduce_max_sync /
// __reduce_min_sync on the device; the host (tests/kernels) runs the same
// code with 32 threads as lanes.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define FERRITE_TK_HD __host__ __device__ __forceinline__
#define FERRITE_TK_UNROLL _Pragma("unroll")
#else
#define FERRITE_TK_HD inline
#define FERRITE_TK_UNROLL
#endif

namespace ferrite::cuda::warp {

FERRITE_TK_HD uint32_t topk_float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
FERRITE_TK_HD float topk_bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// p[j]: the probability of expert lane + 32 j (j < kCached), >= 0 and not
// NaN (the caller maps NaN to 0) for the ids below E; consumed (a selected
// slot becomes -1). 1 <= K <= 32, K <= E <= 32 kCached. On return lane k < K
// holds the k-th selection's id and probability (bitwise p's value); other
// lanes' my_id / my_p are left as they were.
template <int kCached, typename Max, typename Min>
FERRITE_TK_HD void warp_topk(float (&p)[kCached], int lane, int E, int K, int& my_id,
                             float& my_p, Max& reduce_max, Min& reduce_min) {
  // The lane's best untaken slot: strictly greater p in increasing j, so
  // the lowest id among equal probabilities; -1 when none is left.
  int bj = -1;
  float bp = -1.0f;
  auto local_best = [&]() {
    bj = -1;
    bp = -1.0f;
    FERRITE_TK_UNROLL
    for (int j = 0; j < kCached; ++j)
      if (lane + 32 * j < E && p[j] > bp) bp = p[j], bj = j;
  };
  local_best();
  for (int k = 0; k < K; ++k) {
    const uint32_t key = bj >= 0 ? topk_float_bits(bp) : 0u;
    const uint32_t best = reduce_max(key);
    // A lane with nothing left offers no id (an untaken p = 0 slot has key
    // 0 too and an id: K <= E keeps one untaken slot for every round).
    const uint32_t id = bj >= 0 && key == best ? static_cast<uint32_t>(lane + 32 * bj) : ~0u;
    const uint32_t sel = reduce_min(id);
    if (lane == k) {
      my_id = static_cast<int>(sel);
      my_p = topk_bits_float(best);
    }
    if (bj >= 0 && id == sel) {
      FERRITE_TK_UNROLL
      for (int j = 0; j < kCached; ++j)
        if (j == bj) p[j] = -1.0f;
      local_best();
    }
  }
}

}  // namespace ferrite::cuda::warp
