// Device: the memory seam of a backend. A device owns allocations and copies
// between host and device memory; compute is recorded by providers through
// the ExecContext of the backend.
//
// Thread-safety: allocate/free are thread-safe; copies are ordered on the
// device's default stream and complete before `synchronize()` returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace ferrite {

enum class BackendKind { kCpu, kCuda };
std::string_view backend_name(BackendKind b);

class Device {
 public:
  virtual ~Device() = default;
  virtual BackendKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu (2 threads)", "cuda:0 NVIDIA H200"
  // Bytes of memory the device can still hand out (best effort).
  virtual int64_t free_memory() const = 0;
  // 256-byte aligned; resource_exhausted when out of memory.
  virtual Result<void*> allocate(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual Status copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual Status copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual Status copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  virtual Status synchronize() = 0;
  // True when host pointers can be used as device pointers (CPU): weights
  // are then bound straight from the mmap, without a copy.
  virtual bool host_accessible() const = 0;
};

// A buffer owned by a device; frees on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> allocate(Device& device, size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

std::unique_ptr<Device> make_cpu_device();

}  // namespace ferrite
