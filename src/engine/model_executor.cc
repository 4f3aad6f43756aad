// StepExecutor over a ModelRunner: the bound plan's pools and snapshot
// copies, and one step as forward, allowed-id bitmaps (filled on the host
// while the device runs the forward step: it is asynchronous on CUDA), then
// the sampler stage with its logprob outputs.
#include <algorithm>
#include <chrono>

#include "engine/model_runner.h"
#include "engine/scheduler.h"

namespace ferrite {
namespace {

class ModelStepExecutor final : public StepExecutor {
 public:
  explicit ModelStepExecutor(ModelRunner& runner) : plan_(runner.bound()) {}
  PagePool& pages() override { return plan_.pages(); }
  StateSlots& slots() override { return plan_.slots(); }
  StateSlots& snapshot_slots() override { return plan_.snapshot_slots(); }
  bool has_kv() const override { return plan_.has_kv(); }
  bool has_recurrent_state() const override { return plan_.has_recurrent_state(); }
  const StepLimits& limits() const override { return plan_.plan().limits; }
  int64_t vocab_size() const override { return plan_.program().vocab_size; }
  int64_t kv_bytes_per_page() const override { return plan_.kv_bytes_per_page(); }
  int64_t state_bytes_per_slot() const override { return plan_.state_bytes_per_slot(); }
  Status reserve_snapshots(int32_t n) override { return plan_.reserve_snapshots(n); }
  Status reset_state_slot(int32_t slot) override { return plan_.reset_state_slot(slot); }
  Status save_snapshot(int32_t slot, int32_t snapshot) override {
    return plan_.save_snapshot(slot, snapshot);
  }
  Status restore_snapshot(int32_t snapshot, int32_t slot) override {
    return plan_.restore_snapshot(snapshot, slot);
  }

  void run(Step& step, StepResult* r) override {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = plan_.forward(step.batch);
    if (st.is_ok() && step.constrained) {
      const size_t words = static_cast<size_t>((vocab_size() + 31) / 32);
      r->allowed.resize(step.seqs.size() * words);
      for (size_t k = 0; k < step.seqs.size(); ++k) {
        std::span<uint32_t> row(r->allowed.data() + k * words, words);
        if (step.seqs[k].constraint)
          step.seqs[k].constraint->fill_mask(row);
        else
          std::fill(row.begin(), row.end(), ~0u);
      }
      step.sampling.allowed = r->allowed;
    }
    if (st.is_ok())
      st = plan_.choose_tokens(step.batch, step.sampling, &r->tokens,
                               step.top_n >= 0 ? &r->logprobs : nullptr,
                               std::max(step.top_n, 0), &r->top_ids, &r->top_logprobs);
    r->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r->status = std::move(st);
  }

 private:
  BoundPlan& plan_;
};

}  // namespace

std::unique_ptr<StepExecutor> make_model_executor(ModelRunner& runner) {
  return std::make_unique<ModelStepExecutor>(runner);
}

}  // namespace ferrite
