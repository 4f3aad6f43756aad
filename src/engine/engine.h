// Engine: the serving core on one ModelRunner. Clients submit() requests from
// any thread and read their tokens from a RequestStream; one engine thread
// owns the device and runs the scheduler (engine/scheduler.h, the same one
// generate() runs on its caller's thread). The scheduler's policy:
//
//   each step packs the decode token of every running sequence and chunks of
//   prompts (running first, then newly admitted ones, FIFO) under the token
//   budget (--max-num-batched-tokens) and the sequence cap (--max-num-seqs).
//   KV pages are taken as positions are reached. A sequence is admitted when
//   pages for its first chunk (after prefix-cache reuse) and a state slot are
//   free. When pages run out, cached-only prefix pages are evicted (LRU), then
//   the most recently admitted running sequence is preempted: its pages go
//   back and it re-enters the queue's head to be recomputed (its generated
//   tokens are kept, so the client sees one uninterrupted stream).
//
// Prefix cache (EngineOptions::prefix_cache): every full page of computed KV
// is offered to a PrefixCache keyed by its content; a new sequence starts
// after the longest cached run of full pages of its tokens (at least one
// token is always computed, to get logits).
//
// Hybrid models (recurrent state: gated-delta layers) cannot rebuild their
// state from KV pages, so the cache also keeps state snapshots: after the
// prefill chunk that ends at a snapshot position the sequence's slot is
// copied into a snapshot slot keyed by that prefix's page hash. Snapshot
// positions of a prompt: every EngineOptions::snapshot_interval_pages pages,
// its end, and the point where it leaves the longest cached run of pages
// (where cached prefixes branch: the next request with that prefix resumes
// there). A sequence resumes from the longest cached run that ends at a
// snapshot: those pages are shared, the snapshot is copied into its own
// slot, and computation starts there.
//
// Recurrent models also split prefills canonically, so that a resumed
// sequence computes exactly what a cold one does: a prompt chunk ends on a
// multiple of kRecurrentSplitAlign positions (the delta rule's chunk in both
// backends: a span starting there is cut into the same chunks as a span
// starting at 0), never leaves a last span shorter than kRecurrentMinSpan
// (which would take the recurrent form instead of the chunked one), and
// generated tokens recomputed after a preemption are replayed one per step,
// as they were first computed. On CPU f32 the outputs are then identical
// with the cache on or off, whatever the batching and preemptions.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine_types.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"

namespace ferrite {

class Engine {
 public:
  // Starts the engine thread. The runner must outlive the engine.
  static Result<std::unique_ptr<Engine>> create(ModelRunner& runner, EngineOptions options = {});
  ~Engine();  // stops the thread; unfinished streams finish with kCancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. invalid_argument for a request the model
  // can never run (empty, ids outside the vocabulary, too long for the
  // context or the KV pool); resource_exhausted when the queue is full;
  // unavailable after shutdown.
  Result<std::shared_ptr<RequestStream>> submit(EngineRequest request);

  // Convenience: submits and waits for the whole output.
  struct Completion {
    std::vector<TokenOutput> tokens;
    EngineFinish finish = EngineFinish::kLength;
    int32_t prompt_tokens = 0;
    int32_t cached_tokens = 0;
  };
  Result<Completion> complete(EngineRequest request);

  EngineMetrics metrics() const;
  ModelRunner& runner() { return runner_; }
  int64_t max_context() const;
  bool prefix_cache_enabled() const { return scheduler_->prefix_cache_enabled(); }
  // Snapshot slots and interval of a hybrid model's prefix cache (zeros
  // otherwise).
  const SnapshotBudget& snapshot_budget() const { return scheduler_->snapshot_budget(); }
  void shutdown();

 private:
  friend class RequestStream;
  Engine(ModelRunner& runner, EngineOptions options);
  void loop();
  void wake();

  ModelRunner& runner_;
  EngineOptions options_;
  std::unique_ptr<StepExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;  // engine thread only (but metrics())
  std::thread thread_;

  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  struct Pending {
    EngineRequest request;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point arrival;
  };
  std::vector<Pending> inbox_;
  bool stop_ = false;
  bool wake_pending_ = false;
  std::atomic<int32_t> inbox_count_{0};
  uint64_t next_id_ = 1;
};

}  // namespace ferrite
