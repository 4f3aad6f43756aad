// Cases of the sampler contracts: masked argmax with repetition, presence
// and frequency penalties, and seeded sampling with every filter. Both are
// exact: every backend must choose the same ids.
#include "contracts/last_token_masked_argmax.h"
#include "contracts/last_token_sample.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

// A logits batch of 5 sequences with planted ties and penalised leaders.
Case sampler_case(const ContractSchema& contract, const std::string& name, CaseRng& rng,
                  const std::vector<SamplingParams>& params, bool with_mask) {
  const int64_t vocab = 300;
  const int64_t seqs = static_cast<int64_t>(params.size());
  Case c;
  c.name = name;
  c.contract = &contract;
  c.attrs.set("vocab_size", u(vocab));
  for (int64_t s = 0; s < seqs; ++s) add_sequence(c, 1, 10);
  HostTensor logits = random_tensor(rng, DType::kF32, {seqs, vocab}, -4, 4, false);
  float* l = reinterpret_cast<float*>(logits.bytes.data());
  l[0 * vocab + 5] = 9.0f;  // ties: lowest id wins
  l[0 * vocab + 9] = 9.0f;
  l[1 * vocab + 17] = 8.0f;  // a leader the penalty demotes
  l[1 * vocab + 18] = 7.5f;
  l[2 * vocab + 3] = -0.5f;  // all negative around a seen id
  HostTensor mask;
  if (with_mask) {
    mask = zeros(DType::kU8, {vocab}, false);
    for (int64_t i = 0; i < vocab; ++i) mask.bytes[i] = (i % 7 != 0) ? 1 : 0;
  }
  for (int64_t s = 0; s < seqs; ++s) {
    auto hist = std::make_shared<std::vector<uint32_t>>(std::vector<uint32_t>{17, 3, 42, 17, 250});
    c.histories.push_back(hist);
    c.sampling.params.push_back(params[s]);
    c.sampling.history.push_back(*hist);
    c.sampling.generated.push_back(std::span<const uint32_t>(*hist).subspan(2));
    c.sampling.step_index.push_back(static_cast<uint64_t>(s * 3 + 1));
  }
  c.bindings = {logits, mask, zeros(DType::kU32, {seqs}, false)};
  if (contract.bindings().size() == 4) c.bindings.push_back(zeros(DType::kF32, {seqs}, false));
  return c;
}

}  // namespace

std::vector<Case> last_token_masked_argmax_cases() {
  CaseRng rng(8);
  std::vector<SamplingParams> params(5);
  params[1].repetition_penalty = 1.3f;
  params[2].repetition_penalty = 2.0f;
  params[3].presence_penalty = 1.0f;
  params[4].frequency_penalty = 0.7f;
  std::vector<Case> out;
  for (bool mask : {false, true})
    out.push_back(sampler_case(last_token_masked_argmax::contract(),
                               mask ? "penalties_masked" : "penalties", rng, params, mask));
  return out;
}

std::vector<Case> last_token_sample_cases() {
  CaseRng rng(9);
  std::vector<SamplingParams> params(5);
  params[0].temperature = 0.0f;  // greedy row inside a sampled batch
  params[1].temperature = 0.7f;
  params[1].seed = 11;
  params[2].temperature = 1.0f;
  params[2].top_k = 5;
  params[2].seed = 12;
  params[3].temperature = 1.3f;
  params[3].top_p = 0.8f;
  params[3].min_p = 0.05f;
  params[3].repetition_penalty = 1.2f;
  params[3].seed = 13;
  params[4].temperature = 0.9f;
  params[4].top_k = 40;
  params[4].top_p = 0.95f;
  params[4].seed = 14;
  std::vector<Case> out;
  for (bool mask : {false, true})
    out.push_back(sampler_case(last_token_sample::contract(), mask ? "filters_masked" : "filters",
                               rng, params, mask));
  return out;
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto gen : {token_embedding_cases, rms_norm_cases, residual_add_cases, dense_linear_cases,
                   dense_swiglu_cases, causal_paged_attention_cases, last_token_dense_linear_cases,
                   last_token_masked_argmax_cases, last_token_sample_cases,
                   gated_delta_recurrent_attention_cases, routed_swiglu_moe_cases,
                   routed_shared_swiglu_moe_cases}) {
    for (Case& c : gen()) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace ferrite::conformance
