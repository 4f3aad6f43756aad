#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ferrite {
namespace {

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 2, 3, 7, 100, 1001}) {
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << i;
    }
  }
}

TEST(ThreadPoolTest, GrainKeepsSmallWorkInline) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.parallel_for(
      10, [&](int64_t, int64_t) { calls++; }, 100);
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace ferrite
