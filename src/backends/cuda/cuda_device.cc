#include "backends/cuda/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.h"

namespace ferrite {
namespace cuda {

Status cuda_error(cudaError_t e, const char* what) {
  std::string msg = fmt::format("CUDA error in {}: {} ({})", what, cudaGetErrorName(e),
                                cudaGetErrorString(e));
  if (e == cudaErrorMemoryAllocation) return resource_exhausted(msg);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      e == cudaErrorDevicesUnavailable)
    return unavailable(msg);
  return internal_error(msg);
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::create(int ordinal) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return unavailable(fmt::format("no usable CUDA device: {}", cudaGetErrorString(e)));
  if (ordinal < 0 || ordinal >= count)
    return unavailable(fmt::format("CUDA device {} does not exist ({} found)", ordinal, count));
  FERRITE_CUDA_RETURN(cudaSetDevice(ordinal));
  cudaDeviceProp prop;
  FERRITE_CUDA_RETURN(cudaGetDeviceProperties(&prop, ordinal));
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->ordinal_ = ordinal;
  d->num_sms_ = prop.multiProcessorCount;
  d->name_ = fmt::format("cuda:{} {} (sm_{}{}, {} SMs, {:.0f} GiB)", ordinal, prop.name, prop.major,
                         prop.minor, prop.multiProcessorCount,
                         static_cast<double>(prop.totalGlobalMem) / (1ll << 30));
  FERRITE_CUDA_RETURN(cudaStreamCreateWithFlags(&d->stream_, cudaStreamNonBlocking));
  return d;
}

CudaDevice::~CudaDevice() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

int64_t CudaDevice::free_memory() const {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(free_b);
}

Result<void*> CudaDevice::allocate(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return resource_exhausted(fmt::format(
        "{}: cannot allocate {:.1f} MiB ({:.1f} MiB free of {:.1f} MiB): {}", name_,
        bytes / 1048576.0, free_b / 1048576.0, total / 1048576.0, cudaGetErrorString(e)));
  }
  return p;
}

void CudaDevice::free(void* p) {
  if (p) cudaFree(p);
}

Status CudaDevice::copy_to_device(void* dst, const void* src, size_t n) {
  if (n == 0) return Status::ok();
  FERRITE_CUDA_RETURN(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

Status CudaDevice::copy_to_host(void* dst, const void* src, size_t n) {
  if (n == 0) return Status::ok();
  FERRITE_CUDA_RETURN(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_));
  FERRITE_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaDevice::copy_on_device(void* dst, const void* src, size_t n) {
  if (n == 0) return Status::ok();
  FERRITE_CUDA_RETURN(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_));
  return Status::ok();
}

Status CudaDevice::synchronize() {
  FERRITE_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::ok();
}

}  // namespace cuda

bool cuda_device_present(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (why)
      *why = e != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(e)
                              : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

Result<std::unique_ptr<Device>> make_cuda_device(int ordinal) {
  FERRITE_ASSIGN_OR_RETURN(auto d, cuda::CudaDevice::create(ordinal));
  return std::unique_ptr<Device>(std::move(d));
}

Result<double> cuda_measure_copy_bandwidth(Device& device, int64_t bytes) {
  auto* d = dynamic_cast<cuda::CudaDevice*>(&device);
  if (!d) return invalid_argument("cuda_measure_copy_bandwidth: not a CUDA device");
  FERRITE_ASSIGN_OR_RETURN(auto a, DeviceBuffer::allocate(device, bytes));
  FERRITE_ASSIGN_OR_RETURN(auto b, DeviceBuffer::allocate(device, bytes));
  FERRITE_CUDA_RETURN(cudaMemsetAsync(a.data(), 1, bytes, d->stream()));
  cudaEvent_t e0, e1;
  FERRITE_CUDA_RETURN(cudaEventCreate(&e0));
  FERRITE_CUDA_RETURN(cudaEventCreate(&e1));
  std::vector<double> rates;
  for (int i = 0; i < 7; ++i) {
    cudaEventRecord(e0, d->stream());
    cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, d->stream());
    cudaEventRecord(e1, d->stream());
    FERRITE_CUDA_RETURN(cudaEventSynchronize(e1));
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i > 0) rates.push_back(2.0 * bytes / (ms * 1e-3));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace ferrite
