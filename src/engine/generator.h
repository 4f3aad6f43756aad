// generate(): offline batch generation as a client of the one scheduler
// (engine/scheduler.h): every request is queued at once and the calling
// thread runs the scheduler's steps until all of them finish. Used by
// `ferrite generate`, `bench` and tests; the Engine (engine.h) runs the same
// scheduler on its own thread for `run` and `serve`.
#pragma once

#include <functional>
#include <vector>

#include "engine/engine_types.h"
#include "engine/model_runner.h"

namespace ferrite {

// The engine's request (prompt, max_tokens, sampling, stop_ids, logprobs,
// constraint); max_tokens 0 gives an empty result.
using GenerationRequest = EngineRequest;

struct GenerationResult {
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;  // when the request asked for logprobs
  EngineFinish finish = EngineFinish::kLength;
};

struct GenerationStats {
  int64_t prefill_tokens = 0;  // prompt tokens computed
  int64_t decode_tokens = 0;   // generated tokens computed
  double prefill_seconds = 0;  // steps that carried prompt tokens
  double decode_seconds = 0;   // steps of decode tokens only
  int64_t steps = 0;
  // Tokens drawn in steps without prompt tokens (pure decode: every drawn
  // token is the only work of its sequence), and in steps that also carried
  // prompt tokens (mixed), with those steps' time.
  int64_t pure_decode_tokens = 0;
  double pure_decode_seconds = 0;
  int64_t pure_decode_steps = 0;
  // Mixed steps: prompt tokens of some sequences beside decode tokens of
  // others (continuous batching): their decode draws, prompt tokens, time.
  int64_t mixed_steps = 0;
  int64_t mixed_decode_tokens = 0;
  int64_t mixed_prompt_tokens = 0;
  double mixed_seconds = 0;
  double pure_decode_tokens_per_s() const {
    return pure_decode_seconds > 0 ? pure_decode_tokens / pure_decode_seconds : 0.0;
  }
};

// `ferrite bench`'s memory roofline of decode at `batch` sequences:
// batch * bandwidth / (weight bytes read per step + KV bytes read per step),
// the KV at the average context of the decode steps (prompt + gen / 2).
inline double decode_roofline_tokens_per_s(int64_t batch, double bandwidth,
                                           double weight_bytes_per_step,
                                           double kv_bytes_per_token, int64_t prompt_len,
                                           int64_t gen_len) {
  const double avg_ctx = static_cast<double>(prompt_len) + static_cast<double>(gen_len) / 2.0;
  const double bytes = weight_bytes_per_step + static_cast<double>(batch) * avg_ctx * kv_bytes_per_token;
  return bandwidth > 0 && bytes > 0 ? static_cast<double>(batch) * bandwidth / bytes : 0.0;
}

struct GenerateOptions {
  int32_t prefill_chunk = 0;  // prompt tokens per sequence per step (0: the budget)
  // Prefill every prompt before any sequence decodes (llama-batched-bench's
  // order): no decode token is scheduled while a prompt is unfinished.
  bool prefill_first = false;
};

// Called after each step with (request index, new token).
using TokenCallback = std::function<void(size_t, uint32_t)>;

// Runs all requests to completion. `prefill_chunk` caps the prompt tokens a
// sequence contributes to one step (0: the runner's max_tokens).
Result<std::vector<GenerationResult>> generate(ModelRunner& runner,
                                               const std::vector<GenerationRequest>& requests,
                                               const TokenCallback& on_token = nullptr,
                                               GenerationStats* stats = nullptr,
                                               int32_t prefill_chunk = 0);
Result<std::vector<GenerationResult>> generate(ModelRunner& runner,
                                               const std::vector<GenerationRequest>& requests,
                                               const GenerateOptions& options,
                                               const TokenCallback& on_token = nullptr,
                                               GenerationStats* stats = nullptr);
// The same on any StepExecutor (engine/scheduler.h; tests use a fake).
class StepExecutor;
Result<std::vector<GenerationResult>> generate(StepExecutor& executor,
                                               const std::vector<GenerationRequest>& requests,
                                               const GenerateOptions& options,
                                               const TokenCallback& on_token = nullptr,
                                               GenerationStats* stats = nullptr);

}  // namespace ferrite
