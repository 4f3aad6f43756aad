#include "backends/cuda/state_copy.h"

#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/kernels/state_copy.cuh"

namespace ferrite {

namespace {

class CudaStateCopier final : public StateCopier {
 public:
  explicit CudaStateCopier(cuda::CudaDevice& device) : device_(device) {}
  ~CudaStateCopier() override {
    if (table_) {
      cudaStreamSynchronize(device_.stream());  // a copy may still read the table
      cudaFree(table_);
    }
  }

  // The table is uploaded once here (bind time), so a copy is one launch
  // with two scalars: nothing per copy crosses from the host.
  Status bind(std::span<const StateRows> tensors) override {
    std::vector<cuda::StateCopyRow> rows;
    max_row_bytes_ = 0;
    for (const StateRows& t : tensors) {
      rows.push_back(cuda::StateCopyRow{t.slots, t.snapshots, t.row_bytes});
      max_row_bytes_ = std::max(max_row_bytes_, t.row_bytes);
    }
    if (table_) {
      FERRITE_CUDA_RETURN(cudaStreamSynchronize(device_.stream()));
      FERRITE_CUDA_RETURN(cudaFree(table_));
      table_ = nullptr;
    }
    count_ = static_cast<int>(rows.size());
    if (rows.empty()) return Status::ok();
    const size_t bytes = rows.size() * sizeof(cuda::StateCopyRow);
    FERRITE_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&table_), bytes));
    FERRITE_CUDA_RETURN(cudaMemcpyAsync(table_, rows.data(), bytes, cudaMemcpyHostToDevice,
                                        device_.stream()));
    // `rows` is pageable host memory: the upload must finish before it goes.
    FERRITE_CUDA_RETURN(cudaStreamSynchronize(device_.stream()));
    return Status::ok();
  }

  Status copy(int32_t slot, int32_t snapshot, StateCopyDirection direction) override {
    if (count_ == 0) return Status::ok();
    return cuda::launch_state_copy(device_.stream(), table_, count_, max_row_bytes_, slot,
                                   snapshot, direction == StateCopyDirection::kToSnapshot);
  }

 private:
  cuda::CudaDevice& device_;
  cuda::StateCopyRow* table_ = nullptr;
  int count_ = 0;
  int64_t max_row_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<StateCopier>> make_cuda_state_copier(Device& device) {
  auto* d = dynamic_cast<cuda::CudaDevice*>(&device);
  if (!d) return invalid_argument("make_cuda_state_copier: not a CUDA device");
  return std::unique_ptr<StateCopier>(std::make_unique<CudaStateCopier>(*d));
}

}  // namespace ferrite
