#include "runtime/device.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

namespace ferrite {

std::string_view backend_name(BackendKind b) {
  switch (b) {
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "?";
}

Result<DeviceBuffer> DeviceBuffer::allocate(Device& device, size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  FERRITE_ASSIGN_OR_RETURN(b.data_, device.allocate(bytes));
  b.device_ = &device;
  b.size_ = bytes;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (device_ && data_) device_->free(data_);
    device_ = o.device_;
    data_ = o.data_;
    size_ = o.size_;
    o.device_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (device_ && data_) device_->free(data_);
}

namespace {

class CpuDevice final : public Device {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }
  std::string name() const override {
    return "cpu (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
  }
  int64_t free_memory() const override {
    long pages = sysconf(_SC_AVPHYS_PAGES);
    long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  }
  Result<void*> allocate(size_t bytes) override {
    size_t rounded = (bytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded);
    if (!p) return resource_exhausted("cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    return p;
  }
  void free(void* p) override { std::free(p); }
  Status copy_to_device(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return Status::ok();
  }
  Status copy_to_host(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return Status::ok();
  }
  Status copy_on_device(void* dst, const void* src, size_t n) override {
    std::memmove(dst, src, n);
    return Status::ok();
  }
  Status synchronize() override { return Status::ok(); }
  bool host_accessible() const override { return true; }
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace ferrite
