// The sampler stage on CUDA.
//  - last_token_masked_argmax: on the device. Penalties (repetition over the
//    history, presence / frequency over generated ids) are applied to a copy
//    of the rows that need them, from (row, id) entries deduplicated on the
//    host; the logits stay unmodified.
//  - last_token_sample: greedy rows as above; stochastic rows run the CPU
//    reference algorithm on a host copy of the logits (same seeded draws on
//    every backend). A device sampler is future work.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "backends/cpu/cpu_providers.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_providers.h"
#include "contracts/standard_contracts.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/profiler.h"
#include "contracts/last_token_masked_argmax.h"
#include "contracts/last_token_sample.h"

namespace ferrite::cuda {
namespace {

bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

// Runs the masked argmax of `rows` rows of `logits` into `tokens` (device).
Status device_argmax(const Invocation& inv, const float* logits, int64_t rows, int64_t vocab,
                     const uint8_t* mask, uint32_t* tokens) {
  BackendState& st = state(inv);
  profile_mark(st.stream, "sampler (then host until the next step)", st.capturing);
  const SamplingBatch* sb = inv.sampling;
  bool any = false;
  if (sb)
    for (int64_t r = 0; r < rows && r < static_cast<int64_t>(sb->params.size()); ++r)
      any = any || has_penalties(sb->params[r]);
  if (!any) return launch_masked_argmax(st.stream, logits, rows, vocab, mask, tokens);

  // Entries (row, id, in history, generated count), unique per row.
  std::vector<int32_t> e_row, e_id, e_rep, e_count;
  std::vector<float> rep(rows, 1.0f), pres(rows, 0.0f), freq(rows, 0.0f);
  std::unordered_map<uint32_t, size_t> index;
  for (int64_t r = 0; r < rows; ++r) {
    const SamplingParams& sp = sb->params[r];
    rep[r] = sp.repetition_penalty;
    pres[r] = sp.presence_penalty;
    freq[r] = sp.frequency_penalty;
    if (!has_penalties(sp)) continue;
    index.clear();
    auto entry = [&](uint32_t id) -> size_t {
      auto [it, fresh] = index.emplace(id, e_row.size());
      if (fresh) {
        e_row.push_back(static_cast<int32_t>(r));
        e_id.push_back(static_cast<int32_t>(id));
        e_rep.push_back(0);
        e_count.push_back(0);
      }
      return it->second;
    };
    if (sp.repetition_penalty != 1.0f)
      for (uint32_t id : sb->history[r])
        if (id < vocab) e_rep[entry(id)] = 1;
    if (sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f)
      for (uint32_t id : sb->generated[r])
        if (id < vocab) ++e_count[entry(id)];
  }
  const int64_t n = static_cast<int64_t>(e_row.size());
  Carver ws(inv);
  auto* copy = static_cast<float*>(ws.take(rows * vocab * 4));
  auto* ints = static_cast<int32_t*>(ws.take(std::max<int64_t>(n, 1) * 16));
  auto* params = static_cast<float*>(ws.take(rows * 12));
  if (!copy || !ints || !params)
    return resource_exhausted("argmax: penalty history exceeds the sampler workspace");
  std::vector<int32_t> packed;
  packed.reserve(4 * n);
  for (auto* v : {&e_row, &e_id, &e_rep, &e_count}) packed.insert(packed.end(), v->begin(), v->end());
  std::vector<float> pk;
  for (auto* v : {&rep, &pres, &freq}) pk.insert(pk.end(), v->begin(), v->end());
  if (n > 0)
    FERRITE_CUDA_RETURN(cudaMemcpyAsync(ints, packed.data(), packed.size() * 4,
                                        cudaMemcpyHostToDevice, st.stream));
  FERRITE_CUDA_RETURN(
      cudaMemcpyAsync(params, pk.data(), pk.size() * 4, cudaMemcpyHostToDevice, st.stream));
  FERRITE_RETURN_IF_ERROR(launch_apply_penalties(st.stream, logits, copy, rows, vocab, ints,
                                                 ints + n, ints + 2 * n, ints + 3 * n, n, params,
                                                 params + rows, params + 2 * rows));
  FERRITE_RETURN_IF_ERROR(launch_masked_argmax(st.stream, copy, rows, vocab, mask, tokens));
  // The host vectors above must outlive the pageable copies: wait for them.
  FERRITE_CUDA_RETURN(cudaStreamSynchronize(st.stream));
  return Status::ok();
}

int64_t argmax_workspace(const NodeSignature& node, const StepLimits& limits) {
  const int64_t vocab = static_cast<int64_t>(node.attrs.u("vocab_size"));
  return Carver::round(limits.max_sequences * vocab * 4) +
         Carver::round(limits.max_sequences * limits.max_context * 16 + 16) +
         Carver::round(limits.max_sequences * 12);
}

class MaskedArgmax final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return argmax_workspace(node, limits);
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_masked_argmax;
    const auto& b = inv.bindings;
    const int64_t vocab = static_cast<int64_t>(Params::from(inv.signature->attrs).vocab_size);
    return device_argmax(inv, b[kLogits].as<float>(), inv.batch->num_sequences(), vocab,
                         b[kValidMask].as<uint8_t>(), b[kTokens].as<uint32_t>());
  }

 private:
  ProviderDescriptor desc_ = [] {
    auto d = cuda_descriptor("cuda.last_token_masked_argmax", "last_token_masked_argmax",
                             "device argmax, penalties on a row copy");
    return d;
  }();
};

class Sample final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return argmax_workspace(node, limits);
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_sample;
    const auto& b = inv.bindings;
    const int64_t vocab = static_cast<int64_t>(Params::from(inv.signature->attrs).vocab_size);
    const int64_t rows = inv.batch->num_sequences();
    bool all_greedy = true;
    for (const SamplingParams& p : inv.sampling->params) all_greedy = all_greedy && p.greedy();
    if (all_greedy && !b[kLogprobs].data)
      return device_argmax(inv, b[kLogits].as<float>(), rows, vocab, b[kValidMask].as<uint8_t>(),
                           b[kTokens].as<uint32_t>());
    // Host path: the reference algorithm on a copy of the logits.
    Device& dev = *inv.ctx->device;
    std::vector<float> logits(rows * vocab);
    FERRITE_RETURN_IF_ERROR(dev.copy_to_host(logits.data(), b[kLogits].data, logits.size() * 4));
    std::vector<uint8_t> mask;
    if (b[kValidMask].data) {
      mask.resize(vocab);
      FERRITE_RETURN_IF_ERROR(dev.copy_to_host(mask.data(), b[kValidMask].data, vocab));
    }
    std::vector<uint32_t> tokens(rows);
    std::vector<float> logprobs(rows);
    Invocation host = inv;
    host.bindings = {TensorView{logits.data(), DType::kF32, b[kLogits].shape},
                     mask.empty() ? TensorView{} : TensorView{mask.data(), DType::kU8, b[kValidMask].shape},
                     TensorView{tokens.data(), DType::kU32, b[kTokens].shape},
                     b[kLogprobs].data ? TensorView{logprobs.data(), DType::kF32, b[kLogprobs].shape}
                                       : TensorView{}};
    host.workspace = nullptr;
    host.workspace_bytes = 0;
    host.ctx = nullptr;
    FERRITE_RETURN_IF_ERROR(reference_->encode(host));
    FERRITE_RETURN_IF_ERROR(dev.copy_to_device(b[kTokens].data, tokens.data(), rows * 4));
    if (b[kLogprobs].data)
      FERRITE_RETURN_IF_ERROR(dev.copy_to_device(b[kLogprobs].data, logprobs.data(), rows * 4));
    return dev.synchronize();
  }

 private:
  std::unique_ptr<Provider> reference_ = cpu::make_last_token_sample_reference();
  ProviderDescriptor desc_ = [] {
    auto d = cuda_descriptor("cuda.last_token_sample", "last_token_sample",
                             "device argmax when greedy; host reference draw otherwise");
    d.replay_safe = false;
    return d;
  }();
};

}  // namespace

std::unique_ptr<Provider> make_last_token_masked_argmax() { return std::make_unique<MaskedArgmax>(); }
std::unique_ptr<Provider> make_last_token_sample() { return std::make_unique<Sample>(); }

}  // namespace ferrite::cuda

namespace ferrite {

void register_cuda_providers(Registry& r) {
  for (const ContractSchema* c : standard_contracts()) r.add_contract(c);
  r.add_provider(cuda::make_token_embedding());
  r.add_provider(cuda::make_rms_norm());
  r.add_provider(cuda::make_residual_add());
  r.add_provider(cuda::make_dense_linear());
  r.add_provider(cuda::make_dense_swiglu());
  r.add_provider(cuda::make_causal_paged_attention());
  r.add_provider(cuda::make_last_token_dense_linear());
  r.add_provider(cuda::make_last_token_masked_argmax());
  r.add_provider(cuda::make_last_token_sample());
  r.add_provider(cuda::make_gated_delta_recurrent_attention());
  r.add_provider(cuda::make_routed_swiglu_moe());
  r.add_provider(cuda::make_routed_shared_swiglu_moe());
}

std::unique_ptr<Registry> make_cuda_registry() {
  auto r = std::make_unique<Registry>(BackendKind::kCuda);
  register_cuda_providers(*r);
  return r;
}

}  // namespace ferrite
