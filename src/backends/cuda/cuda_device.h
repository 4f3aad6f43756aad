// CudaDevice: cudaMalloc'd memory and copies ordered on the device's stream.
#pragma once

#include <cuda_runtime.h>

#include "runtime/device.h"

namespace ferrite::cuda {

class CudaDevice final : public Device {
 public:
  static Result<std::unique_ptr<CudaDevice>> create(int ordinal);
  ~CudaDevice() override;
  BackendKind kind() const override { return BackendKind::kCuda; }
  std::string name() const override { return name_; }
  int64_t free_memory() const override;
  Result<void*> allocate(size_t bytes) override;
  void free(void* p) override;
  Status copy_to_device(void* dst, const void* src, size_t bytes) override;
  Status copy_to_host(void* dst, const void* src, size_t bytes) override;
  Status copy_on_device(void* dst, const void* src, size_t bytes) override;
  Status synchronize() override;
  bool host_accessible() const override { return false; }

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }
  int num_sms() const { return num_sms_; }

 private:
  CudaDevice() = default;
  int ordinal_ = 0;
  int num_sms_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace ferrite::cuda
