// BoundPlan: a resolved plan with its weights, activation buffers, arena, KV
// pool and state slots bound on one device. `forward` runs one step batch:
// one batched invocation per node over all sequences; `choose_tokens` runs
// the sampler stage on the logits.
//
// Tensor parallelism (runtime/tensor_parallel.h): a plan of a program split
// W ways is bound on W ranks, each with its device, execution context (its
// communicator endpoint, its CPU pool or stream) and its cut of the weights,
// and its own values, KV pages and state slots of the rank's sizes. The page
// pool and the slots (the bookkeeping) are one: a page id or a slot means
// the same rows on every rank. `forward` runs the nodes on every rank at
// once (rank 0 on the calling thread, the others on the plan's rank
// threads); the plan's collective nodes meet across ranks. Logits (whole,
// after the LM head's all-gather) and the sampler stage are rank 0's. Sizes
// reported (kv_bytes_per_page, state_bytes_per_slot) are the sums over the
// ranks. When a rank fails, it aborts the group: that step and every later
// one fail (the plan must be rebuilt).
//
// Not thread-safe: one engine loop owns a bound plan.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "runtime/memory.h"
#include "runtime/planner.h"
#include "runtime/state_copy.h"
#include "runtime/weights.h"

namespace ferrite {

struct CacheConfig {
  int32_t page_size = 16;
  int32_t num_pages = 0;  // 0: derive from kv_memory_bytes
  int64_t kv_memory_bytes = 256ll << 20;
  int32_t num_state_slots = 0;  // 0: limits.max_sequences
};

// One rank of a bound plan: its device, execution context and weights.
struct RankBinding {
  Device* device = nullptr;
  ExecContext ctx;
  std::unique_ptr<WeightStore> weights;
};

class BoundPlan {
 public:
  static Result<std::unique_ptr<BoundPlan>> bind(ResolvedPlan plan, const ModelProgram& program,
                                                 std::unique_ptr<WeightStore> weights,
                                                 Device& device, ExecContext ctx,
                                                 const CacheConfig& cache);
  // One RankBinding per rank of the program (program.tensor_parallel).
  static Result<std::unique_ptr<BoundPlan>> bind(ResolvedPlan plan, const ModelProgram& program,
                                                 std::vector<RankBinding> ranks,
                                                 const CacheConfig& cache);
  ~BoundPlan();
  int world_size() const { return static_cast<int>(ranks_.size()); }

  const ResolvedPlan& plan() const { return plan_; }
  const ModelProgram& program() const { return program_; }
  PagePool& pages() { return pages_; }
  StateSlots& slots() { return slots_; }
  bool has_kv() const { return kv_bytes_per_page_ > 0; }
  bool has_recurrent_state() const { return state_bytes_per_slot_ > 0; }
  int64_t kv_bytes_per_page() const { return kv_bytes_per_page_; }
  int64_t state_bytes_per_slot() const { return state_bytes_per_slot_; }
  const WeightStore& weights() const { return *ranks_[0].weights; }  // rank 0's
  const WeightStore& rank_weights(int rank) const { return *ranks_[rank].weights; }
  Device& device() { return *ranks_[0].device; }  // rank 0's

  // Runs the nodes on `batch`; afterwards logits() holds one f32 row per
  // sequence. Validates the batch (token ids, ranges, block tables) first.
  Status forward(const StepBatch& batch);
  // [sequences, vocab] f32, valid after forward (device memory).
  TensorView logits() const;
  // Chooses one token per sequence (greedy or sampled per its params).
  // Optional outputs of the sampler contracts: the chosen ids' logprobs and
  // the top_n (<= 20) ids and logprobs per sequence ([sequences, top_n]).
  Status choose_tokens(const StepBatch& batch, const SamplingBatch& sampling,
                       std::vector<uint32_t>* tokens, std::vector<float>* logprobs,
                       int32_t top_n = 0, std::vector<uint32_t>* top_ids = nullptr,
                       std::vector<float>* top_logprobs = nullptr);
  // Zeroes a recurrent slot before a new sequence uses it.
  Status reset_state_slot(int32_t slot);

  // Prefix-cache snapshots of the recurrent state: `n` rows of every
  // recurrent state tensor beside the working slots (so a snapshot id is
  // never a valid StepBatch state slot), handed out by snapshot_slots().
  // Allocated here, once per engine, not per step; a later call with no
  // snapshot in use re-sizes (n = 0 frees them). internal_error while
  // snapshots are in use; a model without recurrent state gets none.
  Status reserve_snapshots(int32_t n);
  StateSlots& snapshot_slots() { return snapshot_slots_; }
  // Bytes of one snapshot (= state_bytes_per_slot()) times the reserved count.
  int64_t snapshot_bytes() const {
    return state_bytes_per_slot_ * snapshot_slots_.num_slots();
  }
  // Working slot -> snapshot, and back: every recurrent state tensor's row,
  // ordered before the next step's work (the copier's contract).
  Status save_snapshot(int32_t slot, int32_t snapshot);
  Status restore_snapshot(int32_t snapshot, int32_t slot);
  // The backend's copier (ModelRunner sets it); null: Device::copy_on_device.
  void set_state_copier(std::unique_ptr<StateCopier> copier);

 private:
  BoundPlan(ResolvedPlan plan, const ModelProgram& program);
  struct BoundNode {
    std::vector<TensorView> views;  // the node's bindings, schema order
    struct StepRows {
      int32_t index;   // a value binding: its first dimension is the step's
      ValueRows rows;  // tokens or sequences
    };
    std::vector<StepRows> step_rows;
  };
  // Everything one rank holds.
  struct Rank {
    Device* device = nullptr;
    ExecContext ctx;
    std::unique_ptr<WeightStore> weights;
    std::map<std::string, DeviceBuffer> values;
    std::map<std::string, DeviceBuffer> states;
    std::map<std::string, TensorView> state_views;
    std::map<std::string, DeviceBuffer> snapshot_buffers;
    DeviceBuffer workspace;
    std::vector<BoundNode> bound_nodes;  // one per plan_.nodes
  };
  class RankThreads;

  Status validate_batch(const StepBatch& batch) const;
  Status forward_rank(Rank& rank, const StepBatch& batch);
  Status run_nodes(Rank& rank, const StepBatch& batch);
  Status copy_snapshot(int32_t slot, int32_t snapshot, StateCopyDirection direction);
  Status run_node(Rank& rank, const PlannedNode& node, const StepBatch& batch,
                  const SamplingBatch* sampling, std::span<const TensorView> bindings);
  // Resolves every node's binding views once (at bind): a step only sets
  // the row count of its per-step values.
  void bind_views(Rank& rank);

  ResolvedPlan plan_;
  ModelProgram program_;  // a copy: plan_ nodes point into it
  std::vector<Rank> ranks_;
  std::unique_ptr<RankThreads> threads_;  // ranks 1.. (tensor parallelism)
  DeviceBuffer tokens_out_, logprobs_out_;
  DeviceBuffer allowed_in_;  // device copy of SamplingBatch::allowed (on first use)
  DeviceBuffer top_out_;     // top ids, then top logprobs (on first use)
  std::vector<uint32_t> top_host_;
  std::vector<TensorView> sampler_views_;  // choose_tokens' bindings (sized at bind)
  PagePool pages_;
  StateSlots slots_;
  StateSlots snapshot_slots_;
  std::vector<StateRows> snapshot_rows_;  // one per recurrent state tensor and rank
  std::vector<int> snapshot_row_rank_;    // the rank of each
  std::unique_ptr<StateCopier> copier_;
  int64_t kv_bytes_per_page_ = 0;
  int64_t state_bytes_per_slot_ = 0;
  int32_t last_sequences_ = 0;
};

}  // namespace ferrite
