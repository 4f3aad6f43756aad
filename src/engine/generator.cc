#include "engine/generator.h"

#include <fmt/format.h>

#include "engine/scheduler.h"

namespace ferrite {

Result<std::vector<GenerationResult>> generate(ModelRunner& runner,
                                               const std::vector<GenerationRequest>& requests,
                                               const TokenCallback& on_token,
                                               GenerationStats* stats, int32_t prefill_chunk) {
  GenerateOptions o;
  o.prefill_chunk = prefill_chunk;
  return generate(runner, requests, o, on_token, stats);
}

Result<std::vector<GenerationResult>> generate(ModelRunner& runner,
                                               const std::vector<GenerationRequest>& requests,
                                               const GenerateOptions& options,
                                               const TokenCallback& on_token,
                                               GenerationStats* stats) {
  auto executor = make_model_executor(runner);
  return generate(*executor, requests, options, on_token, stats);
}

Result<std::vector<GenerationResult>> generate(StepExecutor& executor,
                                               const std::vector<GenerationRequest>& requests,
                                               const GenerateOptions& options,
                                               const TokenCallback& on_token,
                                               GenerationStats* stats) {
  const StepLimits& limits = executor.limits();
  const int64_t vocab = executor.vocab_size();
  if (static_cast<int64_t>(requests.size()) > limits.max_sequences)
    return invalid_argument(
        fmt::format("{} requests exceed --max-num-seqs {}", requests.size(), limits.max_sequences));
  // generate's own wording of the scheduler's checks (the CLI prints them).
  for (const GenerationRequest& r : requests) {
    if (r.prompt.empty()) return invalid_argument("empty prompt");
    for (uint32_t id : r.prompt)
      if (id >= vocab)
        return invalid_argument(
            fmt::format("token id {} is outside the vocabulary of {}", id, vocab));
    if (static_cast<int64_t>(r.prompt.size()) >= limits.max_context)
      return invalid_argument(fmt::format("prompt of {} tokens leaves no room in a context of {}",
                                          r.prompt.size(), limits.max_context));
  }
  EngineOptions eo;
  eo.prefill_chunk = options.prefill_chunk;
  eo.prefill_first = options.prefill_first;
  eo.max_waiting = static_cast<int32_t>(requests.size()) + 1;
  FERRITE_ASSIGN_OR_RETURN(auto scheduler, Scheduler::create(executor, eo));
  std::vector<GenerationResult> out(requests.size());
  std::vector<std::shared_ptr<RequestStream>> streams(requests.size());
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].max_tokens <= 0) continue;
    FERRITE_RETURN_IF_ERROR(scheduler->validate(requests[i]));
    streams[i] = std::make_shared<RequestStream>();
    scheduler->add(requests[i], streams[i], now);
  }
  Status failed;
  size_t open = 0;
  for (auto& s : streams) open += s != nullptr;
  while (open > 0) {
    const StepInfo info = scheduler->step();
    if (stats && info.ran) {
      const bool prompt = info.prompt_tokens > 0;
      ++stats->steps;
      stats->prefill_tokens += info.prompt_tokens;
      stats->decode_tokens += info.other_tokens;
      (prompt ? stats->prefill_seconds : stats->decode_seconds) += info.seconds;
      if (prompt && info.decode_drawn > 0) {
        ++stats->mixed_steps;
        stats->mixed_decode_tokens += info.decode_drawn;
        stats->mixed_prompt_tokens += info.prompt_tokens;
        stats->mixed_seconds += info.seconds;
      } else if (!prompt) {
        stats->pure_decode_tokens += info.drawn;
        stats->pure_decode_seconds += info.seconds;
        ++stats->pure_decode_steps;
      }
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      if (!streams[i]) continue;
      RequestStream::Update u = streams[i]->next(std::chrono::milliseconds(0));
      for (const TokenOutput& t : u.tokens) {
        out[i].tokens.push_back(t.token);
        if (requests[i].logprobs >= 0) out[i].logprobs.push_back(t.logprob);
        if (on_token) on_token(i, t.token);
      }
      if (u.finished) {
        out[i].finish = u.finish;
        if (u.finish == EngineFinish::kError && failed.is_ok()) failed = u.error;
        streams[i] = nullptr;
        --open;
      }
    }
  }
  if (!failed.is_ok()) return failed;
  return out;
}

}  // namespace ferrite
