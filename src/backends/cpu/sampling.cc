// The sampler stage on CPU: last_token_masked_argmax and last_token_sample.
// Both read the logits without modifying them (penalties are applied to a
// copy in the workspace), so logprobs and other consumers see the model's
// raw output.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/cpu_util.h"
#include "contracts/last_token_masked_argmax.h"
#include "contracts/last_token_sample.h"
#include "runtime/workspace.h"

namespace ferrite::cpu {
namespace {

using last_token_masked_argmax::kMaxTopLogprobs;

// Penalised copy of one row of logits (HF repetition penalty over history;
// OpenAI presence / frequency penalties over generated tokens).
// The scratch of one row (vocab entries each), from the invocation's
// workspace: a step allocates nothing.
struct RowScratch {
  float* row;        // the penalised logits
  int32_t* counts;   // penalties: occurrences per id
  uint32_t* idx;     // top-k logprobs: ids by logit
  int64_t* ids;      // sampling: the allowed ids by logit
  double* probs;     // sampling: their probabilities
};
RowScratch row_layout(Workspace& ws, int64_t vocab) {
  RowScratch s;
  s.row = ws.take<float>(vocab);
  s.counts = ws.take<int32_t>(vocab);
  s.idx = ws.take<uint32_t>(vocab);
  s.ids = ws.take<int64_t>(vocab);
  s.probs = ws.take<double>(vocab);
  return s;
}
int64_t sampler_workspace_bytes(int64_t vocab) {
  return measure_workspace([&](Workspace& ws) { row_layout(ws, vocab); });
}

void penalised_row(const float* logits, int64_t vocab, const SamplingParams& sp,
                   std::span<const uint32_t> history, std::span<const uint32_t> generated,
                   const RowScratch& sc) {
  float* out = sc.row;
  std::copy_n(logits, vocab, out);
  if (sp.repetition_penalty != 1.0f) {
    std::fill_n(sc.counts, vocab, 0);  // seen in the history
    for (uint32_t id : history)
      if (id < vocab) sc.counts[id] = 1;
    for (int64_t i = 0; i < vocab; ++i) {
      if (!sc.counts[i]) continue;
      float& l = out[i];
      l = l > 0 ? l / sp.repetition_penalty : l * sp.repetition_penalty;
    }
  }
  if (sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f) {
    std::fill_n(sc.counts, vocab, 0);
    for (uint32_t id : generated)
      if (id < vocab) ++sc.counts[id];
    for (int64_t i = 0; i < vocab; ++i) {
      if (!sc.counts[i]) continue;
      out[i] -= sp.presence_penalty + sp.frequency_penalty * static_cast<float>(sc.counts[i]);
    }
  }
}

// The ids a row may choose: the shared valid_mask and the row's allowed-id
// bitmap (either may be absent).
struct Allowed {
  const uint8_t* mask = nullptr;
  const uint32_t* bits = nullptr;  // this row's words
  bool operator()(int64_t i) const {
    return (!mask || mask[i]) && (!bits || (bits[i >> 5] >> (i & 31)) & 1u);
  }
};

Allowed row_allowed(const uint8_t* mask, const uint32_t* allowed, int64_t vocab, size_t s) {
  return {mask, allowed ? allowed + s * static_cast<size_t>((vocab + 31) / 32) : nullptr};
}

uint32_t masked_argmax(const float* row, int64_t vocab, const Allowed& mask) {
  int64_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!mask(i)) continue;
    if (best < 0 || row[i] > row[best]) best = i;
  }
  return static_cast<uint32_t>(std::max<int64_t>(best, 0));
}

// The optional logprob outputs of both sampler contracts.
struct LogprobOutputs {
  float* logprobs = nullptr;     // [rows]
  uint32_t* top_ids = nullptr;   // [rows, top_n]
  float* top_logprobs = nullptr;
  int64_t top_n = 0;
  bool any() const { return logprobs || top_ids || top_logprobs; }
};

LogprobOutputs logprob_outputs(const Invocation& inv, int lp, int ids, int lps) {
  LogprobOutputs o;
  o.logprobs = inv.bindings[lp].as<float>();
  o.top_ids = inv.bindings[ids].as<uint32_t>();
  o.top_logprobs = inv.bindings[lps].as<float>();
  const TensorView& t = inv.bindings[ids].data ? inv.bindings[ids] : inv.bindings[lps];
  if (t.data && t.shape.rank() == 2) o.top_n = t.shape[1];
  return o;
}

// Row s of the logprob outputs from the raw logits: l - lse with
// lse = max + (float) log(sum exp((double) (l - max))); the top entries
// ordered by value descending, id ascending. `want` < 0: nothing.
void write_logprobs(const float* logits, int64_t vocab, uint32_t chosen, size_t s, int32_t want,
                    const LogprobOutputs& o, uint32_t* idx) {
  if (want < 0 || !o.any()) return;
  const float mx = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  if (o.logprobs) o.logprobs[s] = logits[chosen] - lse;
  const int64_t k = std::min<int64_t>({static_cast<int64_t>(want), o.top_n, vocab});
  if (k <= 0) return;
  std::iota(idx, idx + vocab, 0u);
  std::partial_sort(idx, idx + k, idx + vocab, [&](uint32_t a, uint32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int64_t j = 0; j < k; ++j) {
    if (o.top_ids) o.top_ids[s * o.top_n + j] = idx[j];
    if (o.top_logprobs) o.top_logprobs[s * o.top_n + j] = logits[idx[j]] - lse;
  }
}

int32_t wanted(const SamplingBatch& sb, size_t s) {
  return sb.logprobs.empty() ? static_cast<int32_t>(kMaxTopLogprobs) : sb.logprobs[s];
}

uint32_t sample_row(const float* row, int64_t vocab, const Allowed& mask, const SamplingParams& sp,
                    double u, const RowScratch& sc) {
  int64_t* ids = sc.ids;
  double* probs = sc.probs;
  size_t count = 0;
  for (int64_t i = 0; i < vocab; ++i)
    if (mask(i)) ids[count++] = i;
  if (count == 0) return 0;
  // Sort by logit, descending; ties by id for determinism.
  std::sort(ids, ids + count,
            [&](int64_t a, int64_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  if (sp.top_k > 0 && static_cast<int64_t>(count) > sp.top_k) count = sp.top_k;
  const double mx = row[ids[0]] / sp.temperature;
  double sum = 0;
  for (size_t i = 0; i < count; ++i)
    sum += (probs[i] = std::exp(row[ids[i]] / sp.temperature - mx));
  for (size_t i = 0; i < count; ++i) probs[i] /= sum;
  size_t keep = count;
  if (sp.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < count; ++i) {
      acc += probs[i];
      if (acc >= sp.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (sp.min_p > 0.0f) {
    const double threshold = sp.min_p * probs[0];
    size_t k = 1;
    while (k < keep && probs[k] >= threshold) ++k;
    keep = k;
  }
  double total = std::accumulate(probs, probs + keep, 0.0);
  double target = u * total, acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (target < acc) return static_cast<uint32_t>(ids[i]);
  }
  return static_cast<uint32_t>(ids[keep - 1]);
}

class MaskedArgmaxReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits&) const override {
    return sampler_workspace_bytes(
        static_cast<int64_t>(node.params<last_token_masked_argmax::Params>().vocab_size));
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_masked_argmax;
    const int64_t vocab = static_cast<int64_t>(inv.signature->params<Params>().vocab_size);
    const float* logits = inv.bindings[kLogits].as<float>();
    const uint8_t* mask = inv.bindings[kValidMask].as<uint8_t>();
    const uint32_t* allowed = inv.bindings[kAllowed].as<uint32_t>();
    uint32_t* tokens = inv.bindings[kTokens].as<uint32_t>();
    const LogprobOutputs lp = logprob_outputs(inv, kLogprobs, kTopIds, kTopLogprobs);
    const SamplingBatch& sb = *inv.sampling;
    Workspace ws(inv);
    const RowScratch sc = row_layout(ws, vocab);
    FERRITE_RETURN_IF_ERROR(ws.status(desc_.name));
    for (size_t s = 0; s < sb.params.size(); ++s) {
      penalised_row(logits + s * vocab, vocab, sb.params[s], sb.history[s], sb.generated[s], sc);
      tokens[s] = masked_argmax(sc.row, vocab, row_allowed(mask, allowed, vocab, s));
      write_logprobs(logits + s * vocab, vocab, tokens[s], s, wanted(sb, s), lp, sc.idx);
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      cpu_descriptor("cpu.reference.last_token_masked_argmax", last_token_masked_argmax::contract(),
                     kReferencePriority, "scalar");
};

class SampleReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits&) const override {
    return sampler_workspace_bytes(
        static_cast<int64_t>(node.params<last_token_sample::Params>().vocab_size));
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_sample;
    const int64_t vocab = static_cast<int64_t>(inv.signature->params<Params>().vocab_size);
    const float* logits = inv.bindings[kLogits].as<float>();
    const uint8_t* mask = inv.bindings[kValidMask].as<uint8_t>();
    uint32_t* tokens = inv.bindings[kTokens].as<uint32_t>();
    const LogprobOutputs lp = logprob_outputs(inv, kLogprobs, kTopIds, kTopLogprobs);
    const uint32_t* allowed = inv.bindings[kAllowed].as<uint32_t>();
    const SamplingBatch& sb = *inv.sampling;
    Workspace ws(inv);
    const RowScratch sc = row_layout(ws, vocab);
    FERRITE_RETURN_IF_ERROR(ws.status(desc_.name));
    for (size_t s = 0; s < sb.params.size(); ++s) {
      const SamplingParams& sp = sb.params[s];
      penalised_row(logits + s * vocab, vocab, sp, sb.history[s], sb.generated[s], sc);
      const Allowed ok = row_allowed(mask, allowed, vocab, s);
      tokens[s] = sp.greedy() ? masked_argmax(sc.row, vocab, ok)
                              : sample_row(sc.row, vocab, ok, sp,
                                           last_token_sample::uniform01(sp.seed, sb.step_index[s]),
                                           sc);
      write_logprobs(logits + s * vocab, vocab, tokens[s], s, wanted(sb, s), lp, sc.idx);
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ = cpu_descriptor("cpu.reference.last_token_sample", last_token_sample::contract(),
                                            kReferencePriority, "scalar");
};

}  // namespace

std::unique_ptr<Provider> make_last_token_masked_argmax_reference() {
  return std::make_unique<MaskedArgmaxReference>();
}
std::unique_ptr<Provider> make_last_token_sample_reference() {
  return std::make_unique<SampleReference>();
}

}  // namespace ferrite::cpu
