// Internal to the CUDA backend, C++17 (the .cu files include it): CUDA
// error mapping and the step binding buffer layout read by kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "base/status.h"

namespace ferrite::cuda {

Status cuda_error(cudaError_t e, const char* what);

#define FERRITE_CUDA_RETURN(expr)                                           \
  do {                                                                      \
    cudaError_t ferrite_cuda_e_ = (expr);                                   \
    if (ferrite_cuda_e_ != cudaSuccess) return ::ferrite::cuda::cuda_error(ferrite_cuda_e_, #expr); \
  } while (0)

// The launch error of the kernels just recorded (configuration errors show
// here; faults inside kernels surface at the next synchronisation).
inline Status check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status::ok() : cuda_error(e, what);
}

// Per-step metadata in device memory (the binding buffer), written by the
// StepPreparer before the nodes run; graph replays read it at fixed
// addresses (for a bucket, every array starts at the same offset). Rows
// beyond the real batch are padding sequences of one token with length 0:
// no KV write, attention output zero.
struct StepMeta {
  const int32_t* token_pos = nullptr;       // [tokens] absolute position
  const int32_t* token_seq = nullptr;       // [tokens] sequence index
  // [tokens] the start of the token's sequence's block table
  // (seq_block_off[token_seq]), -1 for a padding row: a page id one
  // dependent load sooner (the cluster decode attention's staged pages).
  const int32_t* token_table = nullptr;
  const int32_t* seq_last_row = nullptr;    // [sequences] last packed row
  const int32_t* seq_len = nullptr;         // [sequences] positions after this step (0: padding)
  const int32_t* seq_state_slot = nullptr;  // [sequences]
  const int32_t* seq_block_off = nullptr;   // [sequences] start of its block table
  const int32_t* block_tables = nullptr;    // concatenated block tables (page ids)
  // Flash prefill query tiles: (sequence, first row) of every kPrefillTileQ
  // rows of each sequence, built with the rest of the step's metadata so the
  // attention provider never uploads from pageable memory (which would stall
  // the host on the stream). `num_tiles` and `longest_run` are host values.
  const int32_t* tile_seq = nullptr;
  const int32_t* tile_row = nullptr;
  int32_t num_tiles = 0;
  int32_t longest_run = 0;  // most tokens of one sequence in the step
  // Host value: a power of two >= every sequence's length after the step
  // (at least 256). The split-KV decode sizes its splits by it rather than
  // by the model's maximum context, and decode graphs are captured per
  // (batch bucket, kv_len_bound): a short context gets a few splits that
  // all hold keys instead of dozens of empty ones and a 32-way combine.
  int32_t kv_len_bound = 256;
};

}  // namespace ferrite::cuda
