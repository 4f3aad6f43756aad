// The weight prefetch into L2 (the contract is in l2_prefetch.cuh).
#include "backends/cuda/kernels/l2_prefetch.cuh"

#include <algorithm>

#include "backends/cuda/kernels/bulk_copy.cuh"

namespace ferrite::cuda {
namespace {

// Bytes a thread asks for at once, and chunks a block of one warp: ~8
// chunks a block spread a 10 MB prefetch over ~80 SMs (one SM's copy
// engine issuing megabytes would take longer than the node it overlaps).
constexpr int64_t kL2PrefetchChunk = 16 << 10;
constexpr int64_t kL2PrefetchChunksABlock = 8;

__global__ void __launch_bounds__(32) l2_prefetch_kernel(L2PrefetchRanges r, int64_t chunks) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += stride) {
    // Chunk c of the ranges laid end to end (each range a whole number of chunks).
    int64_t first = 0;
    for (int i = 0; i < r.count; ++i) {
      const int64_t n = (r.bytes[i] + kL2PrefetchChunk - 1) / kL2PrefetchChunk;
      if (c < first + n) {
        const auto* base = static_cast<const uint8_t*>(r.data[i]);
        const int64_t lo = (c - first) * kL2PrefetchChunk;
        const int64_t hi = std::min(lo + kL2PrefetchChunk, r.bytes[i]);
        bulk_prefetch_l2(base + lo, base + hi);
        break;
      }
      first += n;
    }
  }
}

}  // namespace

Status launch_l2_prefetch(cudaStream_t stream, const L2PrefetchRanges& ranges) {
  if (ranges.count < 0 || ranges.count > kL2PrefetchMaxRanges)
    return invalid_argument("l2 prefetch: 0.." + std::to_string(kL2PrefetchMaxRanges) +
                            " ranges");
  int64_t chunks = 0;
  for (int i = 0; i < ranges.count; ++i) {
    if (ranges.bytes[i] < 0) return invalid_argument("l2 prefetch: a negative size");
    chunks += (ranges.bytes[i] + kL2PrefetchChunk - 1) / kL2PrefetchChunk;
  }
  if (chunks == 0) return Status::ok();
  const int blocks = static_cast<int>(
      std::min<int64_t>(128, (chunks + kL2PrefetchChunksABlock - 1) / kL2PrefetchChunksABlock));
  l2_prefetch_kernel<<<blocks, 32, 0, stream>>>(ranges, chunks);
  return check_launch("l2_prefetch_kernel");
}

}  // namespace ferrite::cuda
