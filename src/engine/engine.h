// Engine: the serving core on one ModelRunner. Clients submit() requests from
// any thread and read their tokens from a RequestStream; one engine thread
// owns the device and runs the scheduler:
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
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/model_runner.h"
#include "engine/prefix_cache.h"
#include "runtime/step_batch.h"
#include "runtime/token_constraint.h"

namespace ferrite {

struct EngineOptions {
  bool prefix_cache = false;
  int32_t max_waiting = 1024;  // queued requests beyond this: resource_exhausted
  // Prompt tokens per sequence per step (0: the budget); recurrent models
  // round it up to a multiple of kRecurrentSplitAlign.
  int32_t prefill_chunk = 0;
  // Hybrid models with the prefix cache: memory of the recurrent-state
  // snapshots, as a fraction of the KV pool's bytes (allocated beside it
  // when the engine starts; at least one snapshot slot), in (0, 1].
  double snapshot_memory_fraction = 0.25;
  // Interval snapshots every this many pages of a prompt (0: the fewest
  // pages whose KV outweighs one snapshot / snapshot_memory_fraction);
  // rounded up to a multiple of kRecurrentSplitAlign positions.
  int32_t snapshot_interval_pages = 0;
};

// Recurrent models: prefill chunks end on multiples of this many positions
// (lcm with the page size), and
inline constexpr int32_t kRecurrentSplitAlign = 64;
// a prompt's last chunk has at least this many tokens (below it the delta
// rule takes its recurrent form, above its chunked one: see engine.h's top).
inline constexpr int32_t kRecurrentMinSpan = 16;

struct EngineRequest {
  std::vector<uint32_t> prompt;
  int32_t max_tokens = 16;  // >= 1
  SamplingParams sampling;
  std::vector<uint32_t> stop_ids;  // generation ends after emitting one of these
  int32_t logprobs = -1;           // -1: none; k >= 0: chosen token + top k
  // Grammar / structured-output constraint (runtime/token_constraint.h),
  // used on the engine thread only: every drawn token is one it allows; the
  // request finishes with kStop once it is terminated. Null: unconstrained.
  std::shared_ptr<TokenConstraint> constraint;
};

enum class EngineFinish { kLength, kStop, kCancelled, kError };
std::string_view engine_finish_name(EngineFinish f);  // "length", "stop", "cancelled", "error"

struct TokenLogprob {
  uint32_t token = 0;
  float logprob = 0;
};

struct TokenOutput {
  uint32_t token = 0;
  float logprob = 0;              // valid when the request asked for logprobs
  std::vector<TokenLogprob> top;  // the top-k alternatives, best first
};

// What a client reads: tokens as they are produced, then one finish.
class RequestStream {
 public:
  struct Update {
    std::vector<TokenOutput> tokens;
    bool finished = false;
    EngineFinish finish = EngineFinish::kLength;
    Status error;
  };

  uint64_t id() const { return id_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }
  // Prompt tokens served from the prefix cache (first admission).
  int32_t cached_tokens() const { return cached_tokens_.load(); }
  // Waits up to `timeout` for news; returns what arrived since the last call
  // (empty and unfinished on timeout).
  Update next(std::chrono::milliseconds timeout);
  // Stops generation; the engine frees the sequence at its next step and
  // finishes the stream with kCancelled (unless it finished before).
  void cancel();
  bool cancel_requested() const { return cancel_.load(); }

 private:
  friend class Engine;
  void push(TokenOutput t);
  void finish(EngineFinish f, Status error);

  uint64_t id_ = 0;
  int32_t prompt_tokens_ = 0;
  std::atomic<int32_t> cached_tokens_{0};
  std::atomic<bool> cancel_{false};
  class Engine* engine_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenOutput> pending_;
  bool finished_ = false;
  bool finish_taken_ = false;
  EngineFinish finish_ = EngineFinish::kLength;
  Status error_;
};

// Fixed-bucket histogram (Prometheus semantics: cumulative when rendered).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1 (the last is +Inf)
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {})
      : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

struct EngineMetrics {
  uint64_t requests_submitted = 0;
  uint64_t requests_finished[4] = {0, 0, 0, 0};  // by EngineFinish
  uint64_t requests_rejected = 0;                // queue full
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t prefix_cache_queries = 0;  // tokens looked up
  uint64_t prefix_cache_hits = 0;     // tokens found
  uint64_t steps = 0;
  double step_seconds = 0;  // time in forward + sampling
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_pages_used = 0;
  int32_t kv_pages_total = 0;
  int32_t prefix_cache_pages = 0;
  // Hybrid models: recurrent-state snapshots held by the prefix cache, and
  // the slots reserved for them (0 without the cache or recurrent state).
  int32_t prefix_cache_snapshots = 0;
  int32_t prefix_cache_snapshot_slots = 0;
  Histogram ttft{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram itl{
      {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram e2e{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
};

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
  bool prefix_cache_enabled() const { return cache_ != nullptr; }
  // Snapshot slots and interval of a hybrid model's prefix cache (zeros
  // otherwise).
  const SnapshotBudget& snapshot_budget() const { return snapshot_budget_; }
  void shutdown();

 private:
  friend class RequestStream;
  struct Seq;
  Engine(ModelRunner& runner, EngineOptions options);
  void loop();
  void wake();
  bool step();  // false when there was nothing to do
  void finish(Seq& s, EngineFinish f, Status error = Status::ok());
  void release(Seq& s);
  void preempt(std::unique_ptr<Seq> s);
  int32_t free_pages_with_eviction() const;
  bool ensure_pages(Seq& s, int64_t positions);
  void update_gauges();
  // Recurrent models (align_ > 0): prefill split rules and snapshots.
  bool valid_split(int64_t position, int64_t prompt_len) const;
  int32_t plan_chunk(const Seq& s, int64_t budget, int64_t chunk, bool alone) const;
  int32_t resume_from_snapshot(Seq& s, int32_t matched_pages);
  std::vector<int64_t> snapshot_positions(const Seq& s, int64_t kv_matched) const;
  Status take_snapshot(Seq& s);

  ModelRunner& runner_;
  EngineOptions options_;
  std::unique_ptr<PrefixCache> cache_;
  int64_t align_ = 0;  // recurrent models: the prefill split alignment (positions)
  SnapshotBudget snapshot_budget_;
  std::thread thread_;

  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::vector<std::unique_ptr<Seq>> inbox_;
  bool stop_ = false;
  bool wake_pending_ = false;
  std::atomic<int32_t> queued_{0};  // inbox + waiting
  uint64_t next_id_ = 1;

  // Engine thread only.
  std::vector<std::unique_ptr<Seq>> running_;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<uint32_t> allowed_;  // the step's allowed-id bitmap (constrained steps)

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;
};

}  // namespace ferrite
