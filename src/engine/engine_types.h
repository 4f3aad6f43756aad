// The engine's request, stream, options and metrics types, shared by the
// Engine (engine.h) and its scheduler (scheduler.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
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
  // Offline batches (bench): while a prompt is unfinished and can be worked
  // on, no decode token is scheduled, so that decode steps are pure.
  bool prefill_first = false;
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
  friend class Scheduler;
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

}  // namespace ferrite
