// StepBatch: what one executor step runs. The tokens of every active sequence
// are packed into one buffer; each sequence owns a contiguous token range.
// Providers run the whole batch in one invocation (no per-sequence loops of
// dense work): dense ops see [num_tokens, width] rows; attention and
// recurrent ops use the per-sequence metadata.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ferrite {

struct SequenceSlice {
  int32_t token_begin = 0;     // first row in the packed token buffer
  int32_t token_count = 0;     // rows of this sequence in this step (>= 1)
  int32_t position_start = 0;  // position of the first of these tokens
  // Page ids of the sequence's KV blocks, logical block order; covers at
  // least position_start + token_count positions. Unused by non-paged ops.
  std::span<const int32_t> block_table;
  int32_t state_slot = -1;  // recurrent state slot, -1 when the model has none
};

struct StepBatch {
  std::vector<uint32_t> token_ids;  // packed, num_tokens() entries
  std::vector<SequenceSlice> sequences;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_sequences() const { return static_cast<int32_t>(sequences.size()); }
};

// Per-sequence sampling controls, as in the OpenAI / vLLM APIs.
struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (last_token_masked_argmax)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// Inputs of the sampler stage, one entry per sequence of the step batch.
struct SamplingBatch {
  std::vector<SamplingParams> params;
  // Ids that penalties apply to: prompt + generated so far (HF semantics for
  // repetition_penalty); presence / frequency penalties use `generated`.
  std::vector<std::span<const uint32_t>> history;
  std::vector<std::span<const uint32_t>> generated;
  // Index of the token being drawn in the sequence's output; keys the RNG.
  std::vector<uint64_t> step_index;
  // Host allowed-id bitmap of the step, [sequences, ceil(vocab / 32)] u32
  // (TokenConstraint::fill_mask per constrained sequence, every bit set for
  // the others), or empty when no sequence of the step is constrained.
  std::span<const uint32_t> allowed;
  // Logprobs wanted per sequence: -1 none, k >= 0 the chosen id's and the
  // top k; empty: every row (the sampler contracts' logprob outputs).
  std::vector<int32_t> logprobs;
};

}  // namespace ferrite
