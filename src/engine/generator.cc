#include "engine/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace ferrite {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kContextFull:
      return "length";
  }
  return "length";
}

namespace {

struct Sequence {
  const GenerationRequest* request = nullptr;
  std::vector<uint32_t> tokens;  // prompt + generated
  size_t prompt_len = 0;
  size_t computed = 0;  // tokens whose KV is in the cache
  std::vector<int32_t> pages;
  int32_t slot = -1;
  bool done = false;
  GenerationResult result;
};

}  // namespace

Result<std::vector<GenerationResult>> generate(ModelRunner& runner,
                                               const std::vector<GenerationRequest>& requests,
                                               const TokenCallback& on_token,
                                               GenerationStats* stats, int32_t prefill_chunk) {
  BoundPlan& plan = runner.bound();
  const StepLimits& limits = plan.plan().limits;
  const int64_t vocab = plan.program().vocab_size;
  if (static_cast<int64_t>(requests.size()) > limits.max_sequences)
    return invalid_argument(
        fmt::format("{} requests exceed --max-num-seqs {}", requests.size(), limits.max_sequences));
  std::vector<Sequence> seqs(requests.size());
  Status status;
  // Releases every page and slot, whatever happens.
  auto release = [&] {
    for (Sequence& s : seqs) {
      plan.pages().release_all(s.pages);
      s.pages.clear();
      if (s.slot >= 0) plan.slots().release(s.slot);
      s.slot = -1;
    }
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    Sequence& s = seqs[i];
    s.request = &r;
    if (r.prompt.empty()) {
      release();
      return invalid_argument("empty prompt");
    }
    for (uint32_t id : r.prompt) {
      if (id >= vocab) {
        release();
        return invalid_argument(
            fmt::format("token id {} is outside the vocabulary of {}", id, vocab));
      }
    }
    if (static_cast<int64_t>(r.prompt.size()) >= limits.max_context) {
      release();
      return invalid_argument(fmt::format("prompt of {} tokens leaves no room in a context of {}",
                                          r.prompt.size(), limits.max_context));
    }
    s.tokens = r.prompt;
    s.prompt_len = r.prompt.size();
    int64_t positions = std::min<int64_t>(s.prompt_len + r.max_tokens, limits.max_context);
    if (plan.has_kv()) {
      Status st = plan.pages().allocate(plan.pages().pages_for(positions), &s.pages);
      if (!st.is_ok()) {
        release();
        return st;
      }
    }
    if (plan.has_recurrent_state()) {
      auto slot = plan.slots().allocate();
      if (!slot.is_ok()) {
        release();
        return slot.status();
      }
      s.slot = *slot;
      FERRITE_RETURN_IF_ERROR(plan.reset_state_slot(s.slot));
    }
    if (r.max_tokens <= 0) s.done = true;
  }

  const int32_t chunk = prefill_chunk > 0 ? prefill_chunk : static_cast<int32_t>(limits.max_tokens);
  StepBatch batch;
  SamplingBatch sampling;
  std::vector<size_t> in_step;
  std::vector<uint32_t> chosen;
  std::vector<float> logprobs;
  for (;;) {
    batch.token_ids.clear();
    batch.sequences.clear();
    in_step.clear();
    int64_t budget = limits.max_tokens;
    bool has_prompt = false;
    for (size_t i = 0; i < seqs.size() && budget > 0; ++i) {
      Sequence& s = seqs[i];
      if (s.done) continue;
      size_t remaining = s.tokens.size() - s.computed;
      int32_t n = static_cast<int32_t>(std::min<int64_t>(
          {static_cast<int64_t>(remaining), budget, static_cast<int64_t>(chunk)}));
      if (s.computed < s.prompt_len) has_prompt = true;
      SequenceSlice slice;
      slice.token_begin = batch.num_tokens();
      slice.token_count = n;
      slice.position_start = static_cast<int32_t>(s.computed);
      slice.block_table = s.pages;
      slice.state_slot = s.slot;
      batch.token_ids.insert(batch.token_ids.end(), s.tokens.begin() + s.computed,
                             s.tokens.begin() + s.computed + n);
      batch.sequences.push_back(slice);
      in_step.push_back(i);
      budget -= n;
    }
    if (in_step.empty()) break;
    auto t0 = std::chrono::steady_clock::now();
    status = plan.forward(batch);
    if (!status.is_ok()) break;
    // Sample for the sequences whose whole known context is now computed.
    sampling.params.clear();
    sampling.history.clear();
    sampling.generated.clear();
    sampling.step_index.clear();
    bool want_logprobs = false;
    for (size_t k = 0; k < in_step.size(); ++k) {
      Sequence& s = seqs[in_step[k]];
      s.computed += batch.sequences[k].token_count;
      sampling.params.push_back(s.request->sampling);
      sampling.history.push_back(s.tokens);
      sampling.generated.push_back(std::span<const uint32_t>(s.tokens).subspan(s.prompt_len));
      sampling.step_index.push_back(s.result.tokens.size());
      want_logprobs = want_logprobs || s.request->want_logprobs;
    }
    status = plan.choose_tokens(batch, sampling, &chosen, want_logprobs ? &logprobs : nullptr);
    if (!status.is_ok()) break;
    auto t1 = std::chrono::steady_clock::now();
    if (stats) {
      double dt = std::chrono::duration<double>(t1 - t0).count();
      (has_prompt ? stats->prefill_seconds : stats->decode_seconds) += dt;
      ++stats->steps;
    }
    for (size_t k = 0; k < in_step.size(); ++k) {
      Sequence& s = seqs[in_step[k]];
      if (stats) {
        (s.computed <= s.prompt_len ? stats->prefill_tokens : stats->decode_tokens) +=
            batch.sequences[k].token_count;
      }
      if (s.computed < s.tokens.size()) continue;  // mid-prompt chunk: no token yet
      uint32_t tok = chosen[k];
      s.tokens.push_back(tok);
      s.result.tokens.push_back(tok);
      if (want_logprobs) s.result.logprobs.push_back(logprobs[k]);
      if (on_token) on_token(in_step[k], tok);
      const GenerationRequest& r = *s.request;
      if (std::find(r.stop_ids.begin(), r.stop_ids.end(), tok) != r.stop_ids.end()) {
        s.done = true;
        s.result.finish = FinishReason::kStop;
      } else if (static_cast<int32_t>(s.result.tokens.size()) >= r.max_tokens) {
        s.done = true;
        s.result.finish = FinishReason::kLength;
      } else if (static_cast<int64_t>(s.tokens.size()) >= limits.max_context) {
        s.done = true;
        s.result.finish = FinishReason::kContextFull;
      }
    }
  }
  release();
  if (!status.is_ok()) return status;
  std::vector<GenerationResult> out;
  for (Sequence& s : seqs) out.push_back(std::move(s.result));
  return out;
}

}  // namespace ferrite
