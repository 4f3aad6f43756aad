#include "base/thread_pool.h"

#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferrite {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool* pool = [] {
    int n = 0;
    if (const char* env = std::getenv("FERRITE_THREADS")) n = std::atoi(env);
    return new ThreadPool(n);
  }();
  return *pool;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_parts = (n + grain - 1) / grain;
  int parts = static_cast<int>(std::min<int64_t>(size(), max_parts));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_.store(parts - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0, n / parts);
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little for the next job, then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    if (stop_.load()) return;
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n;
    int parts;
    {
      // Job fields and the generation are read together so that a worker that
      // slept through a job never runs the next one twice.
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_.load();
      fn = job_;
      n = job_n_;
      parts = job_parts_;
    }
    if (index < parts) {
      int64_t begin = n * index / parts;
      int64_t end = n * (index + 1) / parts;
      (*fn)(begin, end);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

}  // namespace ferrite
