// Measured main-memory read bandwidth: the roofline that decode (GEMV over
// the weights) is judged against.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace ferrite::cpu {

// Bytes of the last-level cache of this machine (sysfs), 0 when unknown.
int64_t last_level_cache_bytes();

// Reads a buffer of max(1 GiB, 4 x LLC) with every thread of `pool` (each
// thread its contiguous share, as the matmul kernels split rows), a few
// times, and returns the best rate in bytes per second. Takes about a second,
// most of it touching the pages once.
double measure_read_bandwidth_bytes_per_s(ThreadPool& pool);

// The same with an explicit buffer size and repetition count (tests).
double measure_read_bandwidth_bytes_per_s(ThreadPool& pool, int64_t bytes, int reps);

}  // namespace ferrite::cpu
