// last_token_sample on CUDA: all-greedy batches take the argmax path.
// Otherwise the penalised copy (when a row has penalties) goes to
// launch_sample: one block per row applies temperature, top_k, top_p and
// min_p in the CPU reference's order and draws with the reference's uniform
// number for (seed, step), computed here on the host (see kernels/sampling.cu
// for the algorithm and its agreement with the reference). Then the optional
// logprob outputs (one block per row of the raw logits).
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/profiler.h"
#include "backends/cuda/sampler_stage.h"
#include "contracts/last_token_sample.h"

namespace ferrite::cuda {
namespace {

class Sample final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return sampler_workspace(node, limits);
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_sample;
    const auto& b = inv.bindings;
    const int64_t vocab = static_cast<int64_t>(inv.signature->params<Params>().vocab_size);
    const int64_t rows = inv.batch->num_sequences();
    const SamplingBatch* sb = inv.sampling;
    if (!sb || static_cast<int64_t>(sb->params.size()) != rows ||
        static_cast<int64_t>(sb->step_index.size()) != rows)
      return invalid_argument("last_token_sample: sampling batch does not match the step");
    bool all_greedy = true;
    for (const SamplingParams& p : sb->params) all_greedy = all_greedy && p.greedy();
    if (all_greedy) {
      FERRITE_RETURN_IF_ERROR(device_argmax(inv, staging_, b[kLogits].as<float>(), rows, vocab,
                                            b[kValidMask].as<uint8_t>(),
                                            b[kAllowed].as<uint32_t>(), b[kTokens].as<uint32_t>()));
      return device_logprobs(inv, kLogprobs, kTopIds, kTopLogprobs, rows, vocab);
    }
    BackendState& st = state(inv);
    profile_mark(st.stream, "sampler (then host until the next step)", st.capturing);
    const float* in = nullptr;
    const SampleRowParams* params_dev = nullptr;
    FERRITE_RETURN_IF_ERROR(
        stage_step(inv, staging_, b[kLogits].as<float>(), rows, vocab, /*row_params=*/true, &in,
                   &params_dev));
    FERRITE_RETURN_IF_ERROR(launch_sample(st.stream, in, rows, vocab, b[kValidMask].as<uint8_t>(),
                                          b[kAllowed].as<uint32_t>(), params_dev,
                                          b[kTokens].as<uint32_t>()));
    return device_logprobs(inv, kLogprobs, kTopIds, kTopLogprobs, rows, vocab);
  }

 private:
  mutable Staging staging_;
  ProviderDescriptor desc_ = [] {
    auto d = cuda_descriptor("cuda.last_token_sample", last_token_sample::contract(),
                             "device top-k / top-p / min-p draw with the reference's seeded uniforms");
    // Per-step parameters are staged by encode(): the executor runs the
    // sampler eagerly, after the (possibly replayed) forward step.
    d.replay_safe = false;
    return d;
  }();
};

}  // namespace

std::unique_ptr<Provider> make_last_token_sample() { return std::make_unique<Sample>(); }

}  // namespace ferrite::cuda
