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

// When one request passed each stage of its life in the engine (steady
// clock; a default-constructed time point: not reached). vLLM's request
// intervals come from them (EngineMetrics::observe_finished):
//   queue = scheduled - arrival, prefill = first_token - scheduled,
//   decode = last_token - first_token, inference = last_token - scheduled,
//   e2e = finished - arrival.
struct RequestTimes {
  std::chrono::steady_clock::time_point arrival;      // submit()
  std::chrono::steady_clock::time_point scheduled;    // first admission to the running batch
  std::chrono::steady_clock::time_point first_token;  // first generated token
  std::chrono::steady_clock::time_point last_token;   // last generated token
  std::chrono::steady_clock::time_point finished;     // the finish
  int32_t generated = 0;                              // tokens generated
};
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
  // The request's stage times; complete once next() has returned the finish.
  RequestTimes times() const;
  // Stops generation; the engine frees the sequence at its next step and
  // finishes the stream with kCancelled (unless it finished before).
  void cancel();
  bool cancel_requested() const { return cancel_.load(); }

 private:
  friend class Engine;
  friend class Scheduler;
  void push(TokenOutput t);
  void finish(EngineFinish f, Status error, const RequestTimes& times = {});

  uint64_t id_ = 0;
  int32_t prompt_tokens_ = 0;
  std::atomic<int32_t> cached_tokens_{0};
  std::atomic<bool> cancel_{false};
  class Engine* engine_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  RequestTimes times_;
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

  // vLLM's histograms (/metrics, the vllm: names), with vLLM's buckets
  // (vllm/v1/metrics/loggers.py). TTFT and ITL are observed per token, the
  // request intervals once per finished request (observe_finished).
  static std::vector<double> vllm_latency_buckets() {
    return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  }
  static std::vector<double> vllm_tpot_buckets() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
            0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
  }
  Histogram vllm_ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                       1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}};
  Histogram vllm_itl{vllm_tpot_buckets()};
  Histogram vllm_e2e{vllm_latency_buckets()};
  Histogram vllm_queue{vllm_latency_buckets()};
  Histogram vllm_prefill{vllm_latency_buckets()};
  Histogram vllm_decode{vllm_latency_buckets()};
  Histogram vllm_inference{vllm_latency_buckets()};
  Histogram vllm_request_tpot{vllm_tpot_buckets()};  // per request: decode / (generated - 1)
  // A finished request: e2e always; the queue time once it was scheduled;
  // prefill, decode, inference and per-request TPOT once it produced a
  // token (vLLM: TPOT 0 for a single token).
  void observe_finished(const RequestTimes& t);
};

}  // namespace ferrite
