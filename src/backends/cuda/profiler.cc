#include "backends/cuda/profiler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ferrite::cuda {
namespace {

struct Mark {
  const char* label;
  cudaEvent_t event;
  cudaStream_t stream;
};

struct Profiler {
  std::mutex mu;
  std::vector<Mark> marks;
  std::map<std::string, std::pair<double, int64_t>> totals;

  // Charges intervals between consecutive marks of one stream; keeps the last.
  void flush() {
    if (marks.size() < 2) return;
    cudaEventSynchronize(marks.back().event);
    for (size_t i = 0; i + 1 < marks.size(); ++i) {
      if (marks[i].stream != marks[i + 1].stream) continue;
      float ms = 0;
      if (cudaEventElapsedTime(&ms, marks[i].event, marks[i + 1].event) == cudaSuccess) {
        auto& t = totals[marks[i].label];
        t.first += ms;
        t.second += 1;
      }
      cudaEventDestroy(marks[i].event);
    }
    marks.erase(marks.begin(), marks.end() - 1);
  }

  ~Profiler() {
    flush();
    double all = 0;
    for (auto& [k, v] : totals) all += v.first;
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(totals.begin(), totals.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    std::fprintf(stderr, "profile (GPU ms between marks, eager):\n");
    for (auto& [k, v] : rows)
      std::fprintf(stderr, "  %-40s %10.3f ms %8lld calls %6.1f%%\n", k.c_str(), v.first,
                   static_cast<long long>(v.second), all > 0 ? 100.0 * v.first / all : 0.0);
  }
};

Profiler& profiler() {
  static Profiler p;
  return p;
}

}  // namespace

std::atomic<bool> g_profiling{false};

void set_profiling(bool on) { g_profiling.store(on); }
bool profiling_enabled() { return g_profiling.load(std::memory_order_relaxed); }

void profile_mark(cudaStream_t stream, const char* label, bool capturing) {
  if (!profiling_enabled() || capturing) return;
  Profiler& p = profiler();
  std::lock_guard<std::mutex> lock(p.mu);
  cudaEvent_t e;
  if (cudaEventCreate(&e) != cudaSuccess) return;
  cudaEventRecord(e, stream);
  p.marks.push_back({label, e, stream});
  if (p.marks.size() > 4096) p.flush();
}

}  // namespace ferrite::cuda
