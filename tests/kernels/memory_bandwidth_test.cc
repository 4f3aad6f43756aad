#include "backends/cpu/kernels/memory_bandwidth.h"

#include <gtest/gtest.h>

namespace ferrite::cpu {
namespace {

TEST(MemoryBandwidth, SmallBufferGivesAPlausibleRate) {
  ThreadPool pool(2);
  double bw = measure_read_bandwidth_bytes_per_s(pool, 64 << 20, 2);
  EXPECT_GT(bw, 1e8);
  EXPECT_LT(bw, 1e13);
}

TEST(MemoryBandwidth, CacheSizeFromSysfs) {
  int64_t llc = last_level_cache_bytes();
  if (llc == 0) GTEST_SKIP() << "no cache information in sysfs";
  EXPECT_GE(llc, 1 << 16);
}

}  // namespace
}  // namespace ferrite::cpu
