// NCCL communicator: see communicator_nccl.h. Every call enqueues on the
// rank's stream and returns (asynchronous; capturable in a CUDA graph).
#include "runtime/communicator_nccl.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>

namespace ferrite {

namespace {

Status nccl_error(ncclResult_t r, const char* what) {
  return internal_error(fmt::format("{}: NCCL error {} ({})", what, static_cast<int>(r),
                                    ncclGetErrorString(r)));
}

#define FERRITE_NCCL_RETURN(expr)                                   \
  do {                                                              \
    ncclResult_t ferrite_nccl_r_ = (expr);                          \
    if (ferrite_nccl_r_ != ncclSuccess) return nccl_error(ferrite_nccl_r_, #expr); \
  } while (0)

Status set_device(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return internal_error(fmt::format("cudaSetDevice({}): {}", device, cudaGetErrorString(e)));
  return Status::ok();
}

Result<ncclDataType_t> sum_type(DType dt) {
  switch (dt) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    default:
      return invalid_argument(
          fmt::format("all_reduce_sum: {} is not a summable dtype (f32, bf16, f16)",
                      dtype_name(dt)));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, int device)
      : comm_(comm), rank_(rank), world_(world), device_(device) {}
  ~NcclCommunicator() override {
    if (!aborted_.load()) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string_view kind() const override { return "nccl"; }

  Status all_reduce_sum(void* data, int64_t count, DType dtype, void* stream) override {
    FERRITE_RETURN_IF_ERROR(usable());
    FERRITE_ASSIGN_OR_RETURN(ncclDataType_t t, sum_type(dtype));
    FERRITE_RETURN_IF_ERROR(set_device(device_));
    FERRITE_NCCL_RETURN(ncclAllReduce(data, data, static_cast<size_t>(count), t, ncclSum, comm_,
                                      static_cast<cudaStream_t>(stream)));
    return Status::ok();
  }

  Status all_gather(const void* send, void* recv, int64_t rows, int64_t count, DType dtype,
                    void* stream) override {
    FERRITE_RETURN_IF_ERROR(usable());
    if (dtype_block_elems(dtype) != 1 && count % dtype_block_elems(dtype) != 0)
      return invalid_argument("all_gather: count is not whole blocks");
    FERRITE_RETURN_IF_ERROR(set_device(device_));
    const size_t bytes = static_cast<size_t>(dtype_bytes(dtype, count));
    auto s = static_cast<cudaStream_t>(stream);
    if (rows == 1) {
      FERRITE_NCCL_RETURN(ncclAllGather(send, recv, bytes, ncclUint8, comm_, s));
      return Status::ok();
    }
    // Row i of recv is row i of every rank's send, rank order: one
    // all-gather per row, fused into one launch by the group.
    FERRITE_NCCL_RETURN(ncclGroupStart());
    for (int64_t i = 0; i < rows; ++i) {
      ncclResult_t r = ncclAllGather(static_cast<const char*>(send) + i * bytes,
                                     static_cast<char*>(recv) + i * bytes * world_, bytes,
                                     ncclUint8, comm_, s);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        return nccl_error(r, "ncclAllGather");
      }
    }
    FERRITE_NCCL_RETURN(ncclGroupEnd());
    return Status::ok();
  }

  Status broadcast(void* data, int64_t count, DType dtype, int root, void* stream) override {
    FERRITE_RETURN_IF_ERROR(usable());
    if (root < 0 || root >= world_)
      return invalid_argument(fmt::format("broadcast: root {} outside [0, {})", root, world_));
    FERRITE_RETURN_IF_ERROR(set_device(device_));
    FERRITE_NCCL_RETURN(ncclBroadcast(data, data, static_cast<size_t>(dtype_bytes(dtype, count)),
                                      ncclUint8, root, comm_, static_cast<cudaStream_t>(stream)));
    return Status::ok();
  }

  void abort() override {
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  Status usable() const {
    if (aborted_.load()) return cancelled("tensor-parallel group aborted");
    return Status::ok();
  }
  ncclComm_t comm_;
  int rank_, world_, device_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    const std::vector<int>& devices) {
  const int n = static_cast<int>(devices.size());
  if (n < 1 || n > kMaxTensorParallel)
    return invalid_argument(
        fmt::format("tensor-parallel size {} outside [1, {}]", n, kMaxTensorParallel));
  // NVLink multicast (NVLS) off, whatever the environment says.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::vector<ncclComm_t> comms(n);
  FERRITE_NCCL_RETURN(ncclCommInitAll(comms.data(), n, devices.data()));
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(comms[r], r, n, devices[r]));
  return out;
}

}  // namespace ferrite
