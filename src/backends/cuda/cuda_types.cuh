// Device-side helpers shared by the .cu files: element conversions and the
// dtype dispatch of launchers (f32, bf16, f16 only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Calls f(T{}) with T the C++ type of dt; false for other dtypes.
template <typename F>
bool dispatch_float(DType dt, F&& f) {
  switch (dt) {
    case DType::kF32: f(float{}); return true;
    case DType::kBF16: f(__nv_bfloat16{}); return true;
    case DType::kF16: f(__half{}); return true;
    default: return false;
  }
}

inline Status bad_dtype(const char* what, DType dt) {
  return unsupported(std::string(what) + ": dtype " + std::string(dtype_name(dt)));
}

}  // namespace ferrite::cuda
