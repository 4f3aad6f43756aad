// Helpers of the fast CPU providers: the thread count their workspace
// layouts are measured for.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>

#include "base/thread_pool.h"
#include "runtime/provider.h"

namespace ferrite::cpu {

// Threads a workspace is sized for: the configured count, or the global pool.
inline int64_t planned_threads(const StepLimits& limits) {
  int64_t t = limits.threads > 0 ? limits.threads : ThreadPool::global().size();
  return std::max<int64_t>(t, 1);
}

// Workspace pieces: runtime/workspace.h (the one bump allocator of every backend).

}  // namespace ferrite::cpu
