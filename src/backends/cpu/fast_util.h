// Helpers of the fast CPU providers: workspace carving and the thread count
// the workspace formulas assume.
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

// Carves f32 arrays out of an invocation's workspace, 64-byte aligned.
class Scratch {
 public:
  explicit Scratch(const Invocation& inv)
      : base_(static_cast<char*>(inv.workspace)), cap_(inv.workspace_bytes) {}
  float* floats(int64_t n) {
    int64_t start = (used_ + 63) / 64 * 64;
    FERRITE_CHECK(start + 4 * n <= cap_)
        << "workspace too small: " << start + 4 * n << " > " << cap_;
    used_ = start + 4 * n;
    return reinterpret_cast<float*>(base_ + start);
  }
  // f32 elements still available.
  int64_t remaining_floats() const {
    int64_t start = (used_ + 63) / 64 * 64;
    return std::max<int64_t>(0, (cap_ - start) / 4);
  }
  // Bytes `floats` calls of these sizes need (for workspace formulas).
  static int64_t bytes_for(std::initializer_list<int64_t> sizes) {
    int64_t total = 0;
    for (int64_t n : sizes) total += (4 * n + 63) / 64 * 64;
    return total + 64;
  }

 private:
  char* base_;
  int64_t cap_;
  int64_t used_ = 0;
};

}  // namespace ferrite::cpu
