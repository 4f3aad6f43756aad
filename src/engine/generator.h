// Batch generation on a ModelRunner: every request is a sequence with its
// own KV pages (and recurrent slot); each step packs the next prompt chunk or
// decode token of every unfinished sequence into one StepBatch under the
// runner's token budget. Used by `ferrite generate`, `bench` and tests; the
// serving scheduler (continuous admission, preemption) builds on the same
// step structure.
#pragma once

#include <functional>
#include <vector>

#include "engine/model_runner.h"

namespace ferrite {

struct GenerationRequest {
  std::vector<uint32_t> prompt;
  int32_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<uint32_t> stop_ids;  // generation ends after emitting one of these
  bool want_logprobs = false;
};

enum class FinishReason { kLength, kStop, kContextFull };
std::string_view finish_reason_name(FinishReason r);  // "length", "stop"

struct GenerationResult {
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kLength;
};

struct GenerationStats {
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  double prefill_seconds = 0;  // steps that carried prompt tokens
  double decode_seconds = 0;   // steps of decode tokens only
  int64_t steps = 0;
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

}  // namespace ferrite
