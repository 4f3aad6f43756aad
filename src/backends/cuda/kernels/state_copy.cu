// Recurrent-state snapshot copy: every gated-delta layer's conv and delta
// state row in one launch (a Qwen3.5-9B state is ~50 MiB over 48 tensors;
// one cudaMemcpyAsync each would be 48 launches per snapshot).
#include "backends/cuda/kernels/state_copy.cuh"

namespace ferrite::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kSegmentBytes = 64 << 10;  // bytes per block

// blockIdx.y: the tensor; blockIdx.x: a segment of its row. 16-byte moves
// when the row size allows (rows start at multiples of it then: buffers are
// 256-byte aligned), bytes otherwise.
__global__ void state_copy_kernel(const StateCopyRow* table, int32_t slot, int32_t snapshot,
                                  bool to_snapshot) {
  const StateCopyRow r = table[blockIdx.y];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSegmentBytes;
  if (begin >= r.row_bytes) return;
  const int64_t end = begin + kSegmentBytes < r.row_bytes ? begin + kSegmentBytes : r.row_bytes;
  const char* work = r.slots + r.row_bytes * slot;
  const char* snap = r.snapshots + r.row_bytes * snapshot;
  const char* src = to_snapshot ? work : snap;
  char* dst = const_cast<char*>(to_snapshot ? snap : work);
  if (r.row_bytes % 16 == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(src + begin);
    uint4* d4 = reinterpret_cast<uint4*>(dst + begin);
    const int64_t n = (end - begin) / 16;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) d4[i] = s4[i];
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
  }
}

}  // namespace

Status launch_state_copy(cudaStream_t stream, const StateCopyRow* table, int count,
                         int64_t max_row_bytes, int32_t slot, int32_t snapshot, bool to_snapshot) {
  if (count <= 0 || max_row_bytes <= 0) return Status::ok();
  const dim3 grid(static_cast<unsigned>((max_row_bytes + kSegmentBytes - 1) / kSegmentBytes),
                  static_cast<unsigned>(count));
  state_copy_kernel<<<grid, kThreads, 0, stream>>>(table, slot, snapshot, to_snapshot);
  return check_launch("state_copy_kernel");
}

}  // namespace ferrite::cuda
