#include "base/thread_pool.h"

#include <algorithm>
#include <cstdlib>

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

constexpr int64_t kChunksPerThread = 4;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
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

namespace {
std::atomic<int> g_global_threads{0};
std::atomic<bool> g_global_made{false};
}  // namespace

bool ThreadPool::configure_global(int threads) {
  if (threads <= 0) return true;  // keep the default
  if (g_global_made.load()) return global().size() == threads;
  g_global_threads.store(threads);
  return true;
}

ThreadPool& ThreadPool::global() {
  static ThreadPool* pool = [] {
    g_global_made.store(true);
    return new ThreadPool(g_global_threads.load());
  }();
  return *pool;
}

void ThreadPool::run_chunks(uint32_t generation, const std::function<void(int64_t, int64_t)>* fn,
                            int64_t n, int64_t chunks) {
  uint64_t v = next_chunk_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(v >> 32) != generation) return;  // a later job
    const int64_t idx = static_cast<int64_t>(v & 0xffffffffu);
    if (idx >= chunks) return;
    if (!next_chunk_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
    (*fn)(n * idx / chunks, n * (idx + 1) / chunks);
    done_chunks_.fetch_add(1, std::memory_order_acq_rel);
    v = next_chunk_.load(std::memory_order_acquire);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t max_parts = (n + grain - 1) / grain;
  const int64_t chunks = std::min<int64_t>(max_parts, size() * kChunksPerThread);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  uint32_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    done_chunks_.store(0, std::memory_order_relaxed);
    generation = static_cast<uint32_t>(generation_.fetch_add(1, std::memory_order_acq_rel) + 1);
    next_chunk_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunks(generation, &fn, n, chunks);
  // Chunks claimed by workers may still be running: wait for them, yielding
  // the core if a worker seems descheduled (it may be waiting for this core).
  for (int spin = 0; done_chunks_.load(std::memory_order_acquire) != chunks; ++spin) {
    if (spin < 4096)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little for the next job, then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n, chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (generation_.load() == seen) cv_.wait(lock, [&] { return generation_.load() != seen; });
      // Job fields and the generation are read together.
      seen = generation_.load();
      if (stop_.load()) return;
      fn = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    run_chunks(static_cast<uint32_t>(seen), fn, n, chunks);
  }
}

}  // namespace ferrite
