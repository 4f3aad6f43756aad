// The MoE pre-norm's inverse RMS by a whole thread block (device code,
// C++17): moe.cu's norm and norm + router launches and the fused gate / up
// launch that takes the norm + router itself (quant_moe_decode.cu,
// MoeRouteInExperts::hidden) all normalise with this one function, so
// their normalised rows, hence router logits and routing, are bitwise
// alike.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/cuda_types.cuh"

namespace ferrite::cuda {

// The inverse RMS of a row, by a whole block: each thread sums the squares
// of the elements it strides over, then the warps' sums are added in warp
// order. Shared by moe_norm_kernel and the fused norm + router, which must
// normalise bitwise alike. red: 32 floats; every thread gets the result.
// 16-bit rows of whole 16-byte vectors: a thread strides over vectors of 8,
// four loads in flight together (the element loop waited on a round trip
// every few elements: the router launch took 9.3 us a layer at one token
// on the H200, ncu, at 13 % issue).
template <typename T>
__device__ float block_inv_rms(const T* xr, int64_t width, float eps, float* red) {
  float ss = 0;
  bool done = false;
  if constexpr (sizeof(T) == 2) {
    if (width % 8 == 0 && (reinterpret_cast<uintptr_t>(xr) & 15) == 0) {
      const uint4* xv = reinterpret_cast<const uint4*>(xr);
      const int64_t n8 = width / 8;
      for (int64_t i0 = threadIdx.x; i0 < n8; i0 += 4 * int64_t(blockDim.x)) {
        uint4 u[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int64_t i = i0 + c * int64_t(blockDim.x);
          if (i < n8) u[c] = xv[i];
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (i0 + c * int64_t(blockDim.x) < n8) {
            float f[8];
            unpack_words<T, 8>(&u[c].x, f);
#pragma unroll
            for (int e = 0; e < 8; ++e) ss += f[e] * f[e];
          }
        }
      }
      done = true;
    }
  }
  if (!done) {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      const float v = to_f(xr[i]);
      ss += v * v;
    }
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float tot = 0;
  for (int i = 0; i < static_cast<int>((blockDim.x + 31) >> 5); ++i) tot += red[i];
  __syncthreads();  // red may be reused
  return rsqrtf(tot / static_cast<float>(width) + eps);
}

}  // namespace ferrite::cuda
