// The CUDA sampler stage's host side (sampler_stage.h). The per-step host
// data (penalty entries, per-row sampling parameters and uniform draws) goes
// up in one async copy from a pinned staging buffer; nothing synchronises.
// Penalties (repetition over the history, presence / frequency over
// generated ids) are applied to a copy of the rows, from (row, id) entries
// deduplicated on the host; the logits stay unmodified.
#include "backends/cuda/sampler_stage.h"

#include "contracts/last_token_sample.h"
#include "runtime/workspace.h"

#include <cstring>
#include <functional>
#include <unordered_map>
#include <vector>

#include "backends/cuda/profiler.h"

namespace ferrite::cuda {
namespace {

bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

// Penalty entries (row, id, in history, generated count), unique per row,
// and per-row penalty parameters.
struct Penalties {
  std::vector<int32_t> row, id, rep, count;
  std::vector<float> rep_penalty, presence, frequency;
  bool any = false;
  int64_t entries() const { return static_cast<int64_t>(row.size()); }
};

Penalties plan_penalties(const SamplingBatch* sb, int64_t rows, int64_t vocab) {
  Penalties p;
  if (!sb) return p;
  for (int64_t r = 0; r < rows && r < static_cast<int64_t>(sb->params.size()); ++r)
    p.any = p.any || has_penalties(sb->params[r]);
  if (!p.any) return p;
  p.rep_penalty.assign(rows, 1.0f);
  p.presence.assign(rows, 0.0f);
  p.frequency.assign(rows, 0.0f);
  std::unordered_map<uint32_t, size_t> index;
  for (int64_t r = 0; r < rows; ++r) {
    const SamplingParams& sp = sb->params[r];
    p.rep_penalty[r] = sp.repetition_penalty;
    p.presence[r] = sp.presence_penalty;
    p.frequency[r] = sp.frequency_penalty;
    if (!has_penalties(sp)) continue;
    index.clear();
    auto entry = [&](uint32_t id) -> size_t {
      auto [it, fresh] = index.emplace(id, p.row.size());
      if (fresh) {
        p.row.push_back(static_cast<int32_t>(r));
        p.id.push_back(static_cast<int32_t>(id));
        p.rep.push_back(0);
        p.count.push_back(0);
      }
      return it->second;
    };
    if (sp.repetition_penalty != 1.0f)
      for (uint32_t id : sb->history[r])
        if (id < vocab) p.rep[entry(id)] = 1;
    if (sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f)
      for (uint32_t id : sb->generated[r])
        if (id < vocab) ++p.count[entry(id)];
  }
  return p;
}

size_t align8(size_t n) { return (n + 7) / 8 * 8; }

// Layout of the one upload: [SampleRowParams x rows (sampler only)]
// [penalty floats x 3 rows] [penalty ints x 4 entries].
struct UploadLayout {
  size_t params = 0, floats = 0, ints = 0, bytes = 0;
  UploadLayout(int64_t rows, int64_t entries, bool with_params) {
    floats = with_params ? align8(static_cast<size_t>(rows) * sizeof(SampleRowParams)) : 0;
    ints = align8(floats + 12 * static_cast<size_t>(rows));
    bytes = ints + 16 * static_cast<size_t>(entries);
  }
};

}  // namespace

namespace {

// The sampler's workspace: the upload area, then the penalised copy of the
// logits (`copy_floats`, 0 when no row has penalties).
struct SamplerPieces {
  char* up;
  float* copy;
};
SamplerPieces sampler_layout(Workspace& ws, const UploadLayout& lay, int64_t copy_floats) {
  SamplerPieces s;
  s.up = ws.take<char>(static_cast<int64_t>(lay.bytes) + 64);
  s.copy = copy_floats > 0 ? ws.take<float>(copy_floats) : nullptr;
  return s;
}

}  // namespace

int64_t sampler_workspace(const NodeSignature& node, const StepLimits& limits) {
  const int64_t vocab = static_cast<int64_t>(node.attrs.u("vocab_size"));
  const UploadLayout most(limits.max_sequences, limits.max_sequences * limits.max_context, true);
  return measure_workspace(
      [&](Workspace& ws) { sampler_layout(ws, most, limits.max_sequences * vocab); });
}


// Uploads the penalties (and the rows' SampleRowParams when asked), applies
// penalties to a copy of the logits when a row has any. Sets *rows_in to the
// logits the selection must read (the copy, or the logits themselves) and
// *params_dev to the uploaded SampleRowParams.
Status stage_step(const Invocation& inv, Staging& staging, const float* logits, int64_t rows,
                  int64_t vocab, bool row_params, const float** rows_in,
                  const SampleRowParams** params_dev) {
  BackendState& st = state(inv);
  const Penalties pen = plan_penalties(inv.sampling, rows, vocab);
  const int64_t n = pen.entries();
  const UploadLayout lay(rows, n, row_params);
  Workspace ws(inv);
  const SamplerPieces sc = sampler_layout(ws, lay, pen.any ? rows * vocab : 0);
  char* up = sc.up;
  float* copy = sc.copy;
  // The workspace is sized for the step limits; a step past them is the
  // request's doing (its penalty history), so it is refused as exhausted.
  if (!ws.status("sampler").is_ok())
    return resource_exhausted("sampler: step exceeds the sampler workspace (penalty history too long?)");
  *rows_in = logits;
  if (params_dev) *params_dev = reinterpret_cast<const SampleRowParams*>(up + lay.params);
  if (!pen.any && !row_params) return Status::ok();
  // Written straight into the staging buffer (no per-step host vector); the
  // callback goes by reference (no std::function allocation either).
  auto fill = [&](char* h) {
    if (row_params) {
      for (int64_t r = 0; r < rows; ++r) {
        const SamplingParams& sp = inv.sampling->params[r];
        SampleRowParams p{};
        p.temperature = sp.greedy() ? 0.0f : sp.temperature;
        p.top_k = sp.top_k;
        p.top_p = sp.top_p;
        p.min_p = sp.min_p;
        p.u = sp.greedy() ? 0.0 : last_token_sample::uniform01(sp.seed, inv.sampling->step_index[r]);
        std::memcpy(h + lay.params + r * sizeof(SampleRowParams), &p, sizeof(SampleRowParams));
      }
    }
    if (!pen.any) return;
    float* f = reinterpret_cast<float*>(h + lay.floats);
    std::copy(pen.rep_penalty.begin(), pen.rep_penalty.end(), f);
    std::copy(pen.presence.begin(), pen.presence.end(), f + rows);
    std::copy(pen.frequency.begin(), pen.frequency.end(), f + 2 * rows);
    int32_t* i = reinterpret_cast<int32_t*>(h + lay.ints);
    std::copy(pen.row.begin(), pen.row.end(), i);
    std::copy(pen.id.begin(), pen.id.end(), i + n);
    std::copy(pen.rep.begin(), pen.rep.end(), i + 2 * n);
    std::copy(pen.count.begin(), pen.count.end(), i + 3 * n);
  };
  FERRITE_RETURN_IF_ERROR(staging.upload(up, lay.bytes, st.stream, std::ref(fill)));
  if (!pen.any) return Status::ok();
  const float* f = reinterpret_cast<const float*>(up + lay.floats);
  const int32_t* i = reinterpret_cast<const int32_t*>(up + lay.ints);
  FERRITE_RETURN_IF_ERROR(launch_apply_penalties(st.stream, logits, copy, rows, vocab, i, i + n,
                                                 i + 2 * n, i + 3 * n, n, f, f + rows,
                                                 f + 2 * rows));
  *rows_in = copy;
  return Status::ok();
}

// Runs the masked argmax of `rows` rows of `logits` into `tokens` (device).
Status device_argmax(const Invocation& inv, Staging& staging, const float* logits, int64_t rows,
                     int64_t vocab, const uint8_t* mask, const uint32_t* allowed,
                     uint32_t* tokens) {
  BackendState& st = state(inv);
  profile_mark(st.stream, "sampler (then host until the next step)", st.capturing);
  const float* in = nullptr;
  FERRITE_RETURN_IF_ERROR(stage_step(inv, staging, logits, rows, vocab, false, &in, nullptr));
  return launch_masked_argmax(st.stream, in, rows, vocab, mask, allowed, tokens);
}

// The optional logprob outputs (bindings lp, ids, lps of either contract)
// from the raw logits and the chosen tokens.
Status device_logprobs(const Invocation& inv, int lp, int ids, int lps, int64_t rows,
                       int64_t vocab) {
  const auto& b = inv.bindings;
  if (!b[lp].data && !b[ids].data && !b[lps].data) return Status::ok();
  const TensorView& top = b[ids].data ? b[ids] : b[lps];
  const int64_t top_n = top.data && top.shape.rank() == 2 ? top.shape[1] : 0;
  return launch_logprobs(state(inv).stream, b[0].as<float>(), rows, vocab,
                         b[2].as<uint32_t>(), b[lp].as<float>(), b[ids].as<uint32_t>(),
                         b[lps].as<float>(), top_n);
}

}  // namespace ferrite::cuda
