// The one scheduler behind `generate`, `run`, `serve` and `bench` (the
// Engine's thread and generate() are its only loops):
//
//   Scheduler::schedule(&step)   cancellations, admission (prefix-cache reuse,
//                                state snapshots), preemption, chunking: fills
//                                a Step, a plain value (per sequence its token
//                                range, pages, state slot, sampling controls,
//                                constraint, logprobs wanted);
//   StepExecutor::run(step, &r)  executes it (forward, allowed-id bitmaps
//                                while the device runs, sampler);
//   Scheduler::update(step, r)   bookkeeping: computed positions, prefix-cache
//                                insertion, snapshots, tokens to the streams,
//                                constraint accept, stop checks, metrics.
//
// The scheduler needs no model: StepExecutor gives it the page pool, the
// state slots and the snapshot copies of a runner (ModelStepExecutor wraps a
// ModelRunner; tests use a fake). Policy: see engine.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/engine_types.h"
#include "engine/prefix_cache.h"
#include "runtime/memory.h"
#include "runtime/provider.h"
#include "runtime/step_batch.h"
#include "runtime/token_constraint.h"

namespace ferrite {

// One sequence of a step.
struct StepSequence {
  uint64_t id = 0;               // the request's id
  bool draws = false;            // the step ends its known tokens: it draws one
  int32_t logprobs = -1;         // when it draws: -1 none, k: chosen + top k
  TokenConstraint* constraint = nullptr;  // when it draws and is constrained
  bool prompt = false;           // the step carries prompt tokens of it
};

// What one step runs: the packed batch (slices: token range, position,
// pages, state slot), the sampler inputs and per-sequence extras, all in
// scheduling order. Reused from step to step (no allocation once warm).
struct Step {
  StepBatch batch;
  SamplingBatch sampling;
  std::vector<StepSequence> seqs;
  int32_t top_n = -1;         // the most top logprobs a drawing sequence wants (-1: none)
  bool constrained = false;   // a drawing sequence has a constraint
  int64_t prompt_tokens = 0;  // tokens of the step that are prompt tokens
  int64_t drawn = 0;          // sequences that draw
  bool empty() const { return seqs.empty(); }
  void clear();
};

// What the executor returns, per sequence of the step.
struct StepResult {
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;         // when step.top_n >= 0
  std::vector<uint32_t> top_ids;       // [sequences, top_n]
  std::vector<float> top_logprobs;
  std::vector<uint32_t> allowed;       // the bitmap buffer (constrained steps)
  Status status;
  double seconds = 0;  // forward + sampling
};

// The model side of the scheduler: resources and execution.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual PagePool& pages() = 0;
  virtual StateSlots& slots() = 0;
  virtual StateSlots& snapshot_slots() = 0;
  virtual bool has_kv() const = 0;
  virtual bool has_recurrent_state() const = 0;
  virtual const StepLimits& limits() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t kv_bytes_per_page() const = 0;
  virtual int64_t state_bytes_per_slot() const = 0;
  virtual Status reserve_snapshots(int32_t n) = 0;
  virtual Status reset_state_slot(int32_t slot) = 0;
  virtual Status save_snapshot(int32_t slot, int32_t snapshot) = 0;
  virtual Status restore_snapshot(int32_t snapshot, int32_t slot) = 0;
  // Runs the step; the allowed-id bitmaps of constrained drawing sequences
  // are filled (TokenConstraint::fill_mask) while the device computes.
  virtual void run(Step& step, StepResult* result) = 0;
};

class ModelRunner;
// StepExecutor over a ModelRunner's bound plan.
std::unique_ptr<StepExecutor> make_model_executor(ModelRunner& runner);

// Per-step figures for clients that time themselves (bench, generate).
struct StepInfo {
  bool ran = false;
  int64_t prompt_tokens = 0;   // prompt tokens computed
  int64_t other_tokens = 0;    // generated tokens computed (decode, replays)
  int64_t drawn = 0;           // tokens drawn (sampled)
  int64_t decode_drawn = 0;    // of them, by sequences past their prompt
  int32_t sequences = 0;
  double seconds = 0;
};

class Scheduler {
 public:
  static Result<std::unique_ptr<Scheduler>> create(StepExecutor& executor, EngineOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The checks submit() makes: invalid_argument for a request this model
  // can never run (empty, ids outside the vocabulary, too long).
  Status validate(const EngineRequest& r) const;
  // Queues a validated request; its tokens and finish go to `stream`.
  void add(EngineRequest request, std::shared_ptr<RequestStream> stream,
           std::chrono::steady_clock::time_point arrival);
  bool idle() const { return running_.empty() && waiting_.empty(); }
  int32_t waiting() const { return waiting_count_.load(); }

  // Fills `step` (cleared first); false when nothing can run.
  bool schedule(Step* step);
  void update(const Step& step, const StepResult& result);
  // schedule + run + update; ran = false when idle.
  StepInfo step();
  // Finishes every request (kCancelled) and empties the prefix cache.
  void cancel_all();

  EngineMetrics metrics() const;
  // submit()'s counters: a request queued, or turned away (queue full).
  void count_submitted(bool queued);
  bool prefix_cache_enabled() const { return cache_ != nullptr; }
  const SnapshotBudget& snapshot_budget() const { return snapshot_budget_; }
  StepExecutor& executor() { return executor_; }

 private:
  struct Seq;
  Scheduler(StepExecutor& executor, EngineOptions options);
  void finish(Seq& s, EngineFinish f, Status error = Status::ok());
  void release(Seq& s);
  void preempt(std::unique_ptr<Seq> s);
  bool ensure_pages(Seq& s, int64_t positions);
  void update_gauges();
  bool valid_split(int64_t position, int64_t prompt_len) const;
  int32_t plan_chunk(const Seq& s, int64_t budget, int64_t chunk, bool alone) const;
  int32_t resume_from_snapshot(Seq& s, int32_t matched_pages);
  std::vector<int64_t> snapshot_positions(const Seq& s, int64_t kv_matched) const;
  Status take_snapshot(Seq& s);
  void add_to_step(Step* step, Seq& s, int32_t n);

  StepExecutor& executor_;
  EngineOptions options_;
  std::unique_ptr<PrefixCache> cache_;
  int64_t align_ = 0;  // recurrent models: the prefill split alignment (positions)
  SnapshotBudget snapshot_budget_;
  std::vector<std::unique_ptr<Seq>> running_;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::atomic<int32_t> waiting_count_{0};
  std::vector<Seq*> in_step_;  // the last schedule()'s sequences, step order
  Step step_;                  // step() reuses these
  StepResult result_;
  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;
};

}  // namespace ferrite
