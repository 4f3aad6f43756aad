// The host side of the CUDA sampler stage shared by its two providers
// (last_token_masked_argmax.cc, last_token_sample.cc): the pinned staging
// of per-step parameters, penalised row copies, the masked argmax and the
// logprob outputs. Kernels: kernels/sampling.cu.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels/sampling.cuh"

namespace ferrite::cuda {

// Pinned host memory for the per-step upload. The buffer is refilled only
// after the copy recorded from it last has completed (by then long done: the
// executor reads the chosen tokens back after every sampler call), so the
// provider never synchronises the stream.
class Staging {
 public:
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    if (event_) {
      cudaEventSynchronize(event_);
      cudaEventDestroy(event_);
    }
    if (host_) cudaFreeHost(host_);
  }

  // Fills `bytes` bytes of the buffer with `fill`, then copies them to `dst`.
  Status upload(void* dst, size_t bytes, cudaStream_t stream,
                const std::function<void(char*)>& fill) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!event_) FERRITE_CUDA_RETURN(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    FERRITE_CUDA_RETURN(cudaEventSynchronize(event_));  // the last copy has left host_
    if (bytes > cap_) {
      if (host_) cudaFreeHost(host_);
      host_ = nullptr;
      cap_ = 0;
      const size_t want = std::max<size_t>(bytes + bytes / 2, 4096);
      FERRITE_CUDA_RETURN(cudaHostAlloc(reinterpret_cast<void**>(&host_), want, cudaHostAllocDefault));
      cap_ = want;
    }
    fill(host_);
    FERRITE_CUDA_RETURN(cudaMemcpyAsync(dst, host_, bytes, cudaMemcpyHostToDevice, stream));
    FERRITE_CUDA_RETURN(cudaEventRecord(event_, stream));
    return Status::ok();
  }

 private:
  std::mutex mu_;
  char* host_ = nullptr;
  size_t cap_ = 0;
  cudaEvent_t event_ = nullptr;
};

// Workspace of either sampler provider: a penalised copy of the logits and
// the per-step upload.
int64_t sampler_workspace(const NodeSignature& node, const StepLimits& limits);

// Uploads the penalties (and, with `row_params`, each row's SampleRowParams
// from inv.sampling: temperature 0 for greedy rows, the seeded uniform),
// applies penalties to a copy of the logits when a row has any. Sets
// *rows_in to the logits the selection must read (the copy, or the logits
// themselves) and *params_dev to the uploaded SampleRowParams. Allocates on
// the host only for penalties (their per-step entry tables).
Status stage_step(const Invocation& inv, Staging& staging, const float* logits, int64_t rows,
                  int64_t vocab, bool row_params, const float** rows_in,
                  const SampleRowParams** params_dev);

// Runs the masked argmax of `rows` rows of `logits` into `tokens` (device).
Status device_argmax(const Invocation& inv, Staging& staging, const float* logits, int64_t rows,
                     int64_t vocab, const uint8_t* mask, const uint32_t* allowed,
                     uint32_t* tokens);

// The optional logprob outputs (bindings lp, ids, lps of either contract)
// from the raw logits (binding 0) and the chosen tokens (binding 2).
Status device_logprobs(const Invocation& inv, int lp, int ids, int lps, int64_t rows,
                       int64_t vocab);

}  // namespace ferrite::cuda
