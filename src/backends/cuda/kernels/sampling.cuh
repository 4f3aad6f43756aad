// The device sampler: penalties, masked argmax, sampling.
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Penalised copies of logits rows: dst = logits, then entries applied
// (row, id, repetition flag, generated count) with per-row parameters.
Status launch_apply_penalties(cudaStream_t s, const float* logits, float* dst, int64_t rows,
                              int64_t vocab, const int32_t* entry_row, const int32_t* entry_id,
                              const int32_t* entry_rep, const int32_t* entry_count,
                              int64_t entries, const float* rep_penalty, const float* presence,
                              const float* frequency);
// tokens[r] = argmax over valid ids (mask, allowed may be null; allowed:
// [rows, ceil(vocab / 32)] bitmap); ties to the lowest id.
Status launch_masked_argmax(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                            const uint8_t* mask, const uint32_t* allowed, uint32_t* tokens);
// Per-row parameters of the device sampler (uploaded by the provider).
struct SampleRowParams {
  double u;           // the reference's uniform draw in [0, 1) for this row and step
  float temperature;  // <= 0: greedy (masked argmax of `logits`)
  float top_p;        // >= 1: off
  float min_p;        // <= 0: off
  int32_t top_k;      // <= 0: off
  int32_t reserved[2];
};
static_assert(sizeof(SampleRowParams) == 32, "SampleRowParams layout");
// tokens[r]: the CPU reference's last_token_sample draw over row r of
// `logits` (penalties already applied), one block per row.
Status launch_sample(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                     const uint8_t* mask, const uint32_t* allowed, const SampleRowParams* params,
                     uint32_t* tokens);
// The sampler contracts' logprob outputs from the raw logits (each may be
// null): logprobs[r] at tokens[r], top_ids / top_logprobs [rows, top_n].
Status launch_logprobs(cudaStream_t s, const float* raw_logits, int64_t rows, int64_t vocab,
                       const uint32_t* tokens, float* logprobs, uint32_t* top_ids,
                       float* top_logprobs, int64_t top_n);

}  // namespace ferrite::cuda
