// A fixed pool of worker threads for data-parallel CPU kernels.
//
// parallel_for(n, fn) splits [0, n) into contiguous chunks (a few per
// thread) and calls fn(begin, end) once per chunk; the calling thread works
// too. Chunks are claimed dynamically, so a worker the OS has descheduled
// (a busy machine) delays at most the chunk it holds instead of a fixed
// share of every region. Results must not depend on which thread runs a
// chunk: kernels give every output element to exactly one call of fn.
//
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
#include <type_traits>
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
  // a thread; small n runs inline on the caller.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);
  // Any callable (a kernel's lambda): wrapped by reference, so that a
  // closure of many captures costs no heap allocation (std::function keeps
  // a reference_wrapper in place; a decode step makes hundreds of these
  // calls and must allocate nothing, issue 11).
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, std::function<void(int64_t, int64_t)>>)
  void parallel_for(int64_t n, F&& fn, int64_t grain = 1) {
    parallel_for(n, std::function<void(int64_t, int64_t)>(std::ref(fn)), grain);
  }

  // The size of the process-wide pool when it is made (at its first use):
  // threads > 0 sets it (Tuning::threads); <= 0 keeps one per hardware
  // thread. False when the pool exists already with another size.
  static bool configure_global(int threads);
  // The process-wide pool.
  static ThreadPool& global();

 private:
  void worker_loop();
  // Claims and runs chunks of job `generation` until none is left.
  void run_chunks(uint32_t generation, const std::function<void(int64_t, int64_t)>* fn, int64_t n,
                  int64_t chunks);

  std::vector<std::thread> workers_;
  // The current job, written under mu_ together with generation_.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunks_ = 0;
  std::atomic<uint64_t> generation_{0};
  // (generation << 32) | next unclaimed chunk: a claim only succeeds for the
  // job its claimer read, so a late worker never runs a finished job.
  std::atomic<uint64_t> next_chunk_{0};
  std::atomic<int64_t> done_chunks_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace ferrite
