// last_token_masked_argmax on CUDA: penalties on a row copy (sampler_stage),
// one block per row takes the masked argmax (with the allowed-id bitmap),
// then the optional logprob outputs. Never synchronises.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/profiler.h"
#include "backends/cuda/sampler_stage.h"
#include "contracts/last_token_masked_argmax.h"

namespace ferrite::cuda {
namespace {

class MaskedArgmax final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return sampler_workspace(node, limits);
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_masked_argmax;
    const auto& b = inv.bindings;
    const int64_t vocab = static_cast<int64_t>(inv.signature->params<Params>().vocab_size);
    const int64_t rows = inv.batch->num_sequences();
    FERRITE_RETURN_IF_ERROR(device_argmax(inv, staging_, b[kLogits].as<float>(), rows, vocab,
                                          b[kValidMask].as<uint8_t>(), b[kAllowed].as<uint32_t>(),
                                          b[kTokens].as<uint32_t>()));
    return device_logprobs(inv, kLogprobs, kTopIds, kTopLogprobs, rows, vocab);
  }

 private:
  mutable Staging staging_;
  ProviderDescriptor desc_ = [] {
    auto d = cuda_descriptor("cuda.last_token_masked_argmax", last_token_masked_argmax::contract(),
                             "device argmax, penalties on a row copy");
    return d;
  }();
};

}  // namespace

std::unique_ptr<Provider> make_last_token_masked_argmax() { return std::make_unique<MaskedArgmax>(); }

}  // namespace ferrite::cuda
