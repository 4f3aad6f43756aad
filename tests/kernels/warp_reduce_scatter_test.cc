// warp::reduce_scatter_sum (backends/cuda/kernels/warp_reduce_scatter.h), the
// fused decode attention's score sums with Tuning::cuda_decode_reduce_scatter,
// run on the CPU with 32 threads as a warp's lanes (each shuffle a barrier
// round), against the xor butterfly that the kernel runs otherwise: every
// lane's total must be bitwise the butterfly's for the value it owns, and
// owned_lane must name a lane that holds it.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "backends/cuda/kernels/warp_reduce_scatter.h"

namespace ferrite {
namespace {

constexpr int kLanes = 32;

// The butterfly as the kernel runs it (offsets 16 .. 1, own + partner's),
// all lanes in lockstep: values[lane][i] -> totals[lane][i].
std::vector<std::vector<float>> butterfly(std::vector<std::vector<float>> v) {
  for (int off = 16; off > 0; off >>= 1) {
    std::vector<std::vector<float>> next = v;
    for (int l = 0; l < kLanes; ++l)
      for (size_t i = 0; i < v[l].size(); ++i) next[l][i] = v[l][i] + v[l ^ off][i];
    v = std::move(next);
  }
  return v;
}

// 32 threads run reduce_scatter_sum, a shuffle being: publish, wait, read the
// partner's slot, wait.
template <int N>
std::vector<float> reduce_scatter(const std::vector<std::vector<float>>& values) {
  std::vector<float> slot(kLanes), out(kLanes);
  std::barrier sync(kLanes);
  std::vector<std::thread> lanes;
  for (int l = 0; l < kLanes; ++l)
    lanes.emplace_back([&, l] {
      auto shfl_xor = [&](float x, int off) {
        slot[l] = x;
        sync.arrive_and_wait();
        const float got = slot[l ^ off];
        sync.arrive_and_wait();
        return got;
      };
      float v[N];
      for (int i = 0; i < N; ++i) v[i] = values[l][i];
      out[l] = cuda::warp::reduce_scatter_sum<N>(v, l, shfl_xor);
    });
  for (auto& t : lanes) t.join();
  return out;
}

template <int N>
void check(std::mt19937& rng) {
  SCOPED_TRACE("N = " + std::to_string(N));
  // Magnitudes over many binades, so that another summation order would
  // round differently.
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-20, 20);
  std::vector<std::vector<float>> values(kLanes, std::vector<float>(N));
  for (auto& lane : values)
    for (float& x : lane) x = std::ldexp(nd(rng), ex(rng));
  const std::vector<std::vector<float>> want = butterfly(values);
  const std::vector<float> got = reduce_scatter<N>(values);
  constexpr int kShift = N == 32 ? 0 : N == 16 ? 1 : 2;
  for (int l = 0; l < kLanes; ++l) {
    const int i = l >> kShift;  // the value lane l owns
    EXPECT_EQ(got[l], want[l][i]) << "lane " << l << " value " << i;
  }
  for (int i = 0; i < N; ++i) {
    const int owner = cuda::warp::owned_lane<N>(i);
    ASSERT_LT(owner, kLanes);
    EXPECT_EQ(got[owner], want[0][i]) << "value " << i << " at lane " << owner;
  }
  // A sum in another order differs somewhere: the comparison can fail.
  bool order_matters = false;
  for (int i = 0; i < N && !order_matters; ++i) {
    float seq = 0.0f;
    for (int l = 0; l < kLanes; ++l) seq += values[l][i];
    order_matters = seq != want[0][i];
  }
  EXPECT_TRUE(order_matters);
}

TEST(WarpReduceScatter, BitwiseTheButterflysSums) {
  std::mt19937 rng(17);
  for (int rep = 0; rep < 3; ++rep) {
    check<8>(rng);
    check<16>(rng);
    check<32>(rng);
  }
}

}  // namespace
}  // namespace ferrite
