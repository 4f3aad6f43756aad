// Internal to the CUDA backend, C++17 (state_copy.cu includes it): the
// launcher of the recurrent-state snapshot copy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"

namespace ferrite::cuda {

// One recurrent state tensor in device memory (runtime/state_copy.h's
// StateRows, as the kernel reads it).
struct StateCopyRow {
  char* slots;
  char* snapshots;
  int64_t row_bytes;
};

// For each of the `count` rows of `table` (device memory): row `slot` of its
// working storage to row `snapshot` of its snapshot storage (to_snapshot), or
// back. One launch on `stream`; `max_row_bytes` sizes the grid.
Status launch_state_copy(cudaStream_t stream, const StateCopyRow* table, int count,
                         int64_t max_row_bytes, int32_t slot, int32_t snapshot, bool to_snapshot);

}  // namespace ferrite::cuda
