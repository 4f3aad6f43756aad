// Internal to the CUDA backend, C++17 (l2_prefetch.cu includes it): the
// launcher of the weight prefetch into L2 (WeightPrefetcher, runtime/
// provider.h; cuda_exec.cc issues it from a side stream).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"

namespace ferrite::cuda {

constexpr int kL2PrefetchMaxRanges = 16;

// Up to kL2PrefetchMaxRanges spans of global memory, passed by value.
struct L2PrefetchRanges {
  const void* data[kL2PrefetchMaxRanges];
  int64_t bytes[kL2PrefetchMaxRanges];
  int count = 0;
};

// Asks for every 16-byte granule inside the ranges to be brought into L2
// (cp.async.bulk.prefetch.L2, chunks of 16 KiB spread over up to 128 blocks
// of one warp, so that no SM's copy engine issues it all).
// Nothing is written; a hint the memory system may drop.
Status launch_l2_prefetch(cudaStream_t stream, const L2PrefetchRanges& ranges);

}  // namespace ferrite::cuda
