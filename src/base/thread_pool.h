// A fixed pool of worker threads for data-parallel CPU kernels.
//
// parallel_for(n, fn) splits [0, n) into one contiguous range per thread and
// calls fn(begin, end) on each, the calling thread taking the first range.
// Workers spin briefly before sleeping, because a decode step issues hundreds
// of short parallel regions and a futex wake-up per region would dominate.
// Not re-entrant: fn must not call parallel_for on the same pool. One caller
// at a time (the engine loop owns the pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferrite {

class ThreadPool {
 public:
  // threads <= 0: one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over a split of [0, n). `grain` is the smallest range worth
  // a thread; small n runs inline.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t grain = 1);

  // The process-wide pool (FERRITE_THREADS overrides the size).
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace ferrite
