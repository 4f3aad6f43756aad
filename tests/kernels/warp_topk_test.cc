// warp::warp_topk (backends/cuda/kernels/warp_topk.h), the selections of the
// CUDA MoE routing for up to 256 experts, run on the CPU with 32 threads as a
// warp's lanes (each warp reduction a barrier round), against the routing's
// definition: the K experts of largest probability, ties to the lower id, in
// that order (probability descending, id ascending), each with its
// probability's exact value.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "backends/cuda/kernels/warp_topk.h"

namespace ferrite {
namespace {

constexpr int kLanes = 32;
constexpr int kCached = 8;

struct Pick {
  int id;
  float p;
};

// The definition: a stable sort by probability, descending.
std::vector<Pick> reference(const std::vector<float>& p, int K) {
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  std::vector<Pick> out;
  for (int k = 0; k < K; ++k) out.push_back({order[k], p[order[k]]});
  return out;
}

// 32 threads run warp_topk; a reduction: publish, wait, reduce every slot,
// wait.
std::vector<Pick> on_lanes(const std::vector<float>& p, int K) {
  const int E = static_cast<int>(p.size());
  std::vector<uint32_t> slot(kLanes);
  std::vector<Pick> out(kLanes, Pick{-2, -2.0f});
  std::barrier sync(kLanes);
  std::vector<std::thread> lanes;
  for (int l = 0; l < kLanes; ++l)
    lanes.emplace_back([&, l] {
      auto reduce = [&](uint32_t v, bool take_max) {
        slot[l] = v;
        sync.arrive_and_wait();
        uint32_t r = slot[0];
        for (int i = 1; i < kLanes; ++i) r = take_max ? std::max(r, slot[i]) : std::min(r, slot[i]);
        sync.arrive_and_wait();
        return r;
      };
      auto rmax = [&](uint32_t v) { return reduce(v, true); };
      auto rmin = [&](uint32_t v) { return reduce(v, false); };
      float mine[kCached];
      for (int j = 0; j < kCached; ++j) mine[j] = l + 32 * j < E ? p[l + 32 * j] : 0.0f;
      int id = -2;
      float pv = -2.0f;
      cuda::warp::warp_topk<kCached>(mine, l, E, K, id, pv, rmax, rmin);
      out[l] = {id, pv};
    });
  for (auto& t : lanes) t.join();
  return out;
}

void check(const std::vector<float>& p, int K) {
  const std::vector<Pick> want = reference(p, K);
  const std::vector<Pick> got = on_lanes(p, K);
  for (int k = 0; k < K; ++k) {
    EXPECT_EQ(got[k].id, want[k].id) << "E " << p.size() << " K " << K << " selection " << k;
    EXPECT_EQ(got[k].p, want[k].p) << "E " << p.size() << " K " << K << " selection " << k;
  }
  for (int l = K; l < kLanes; ++l) EXPECT_EQ(got[l].id, -2) << "lane " << l << " past K";
}

TEST(WarpTopK, TheKLargestTiesToTheLowerId) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int E : {1, 7, 60, 128, 129, 256}) {
    for (int K : {1, 8, 32}) {
      if (K > E) continue;
      // Distinct-ish probabilities.
      std::vector<float> p(E);
      for (float& x : p) x = u(rng);
      check(p, K);
      // Heavy ties, zeros among them (softmax underflow; NaN logits map to 0).
      std::uniform_int_distribution<int> level(0, 3);
      for (float& x : p) x = 0.125f * static_cast<float>(level(rng));
      check(p, K);
      // All equal: the K lowest ids.
      std::fill(p.begin(), p.end(), 0.0f);
      check(p, K);
    }
  }
}

// The order of the selections matters, not only the set: a largest-first
// order with ties broken the other way would differ here.
TEST(WarpTopK, TiesAcrossLanesAndSlotsKeepIdOrder) {
  std::vector<float> p(96, 0.0f);
  p[95] = 0.5f;  // lane 31, slot 2
  p[3] = 0.5f;   // lane 3, slot 0
  p[35] = 0.5f;  // lane 3, slot 1
  p[64] = 0.25f;
  p[0] = 0.25f;
  const std::vector<Pick> got = on_lanes(p, 6);
  const int want[6] = {3, 35, 95, 0, 64, 1};
  for (int k = 0; k < 6; ++k) EXPECT_EQ(got[k].id, want[k]) << "selection " << k;
}

}  // namespace
}  // namespace ferrite
