// Warp sums of N values (8, 16 or 32) with fewer shuffles than one xor
// butterfly per value, bitwise the same sums (the fused decode attention's
// scores, attention_decode.cu).
//
// The butterfly adds, at offsets 16, 8, 4, 2, 1, each lane's value and its
// partner's (own + partner's). Here, at each offset a lane keeps half of its
// live values (the upper half when the offset's bit of its lane is set) and
// adds its partner's copy of each: the same two operands in the same order as
// the butterfly at that lane, so every partial is the butterfly's. Once one
// value is live the offsets left are the butterfly's own steps. The lane then
// holds the total of value lane >> (5 - log2 N); owned_lane(i) is the first
// lane holding value i's, from which the others fetch it (one shuffle each).
// N = 16: 15 + 1 shuffles and 30 selects instead of 80 shuffles.
//
// `shfl_xor(v, off)` is the warp's __shfl_xor_sync on the device; the host
// (tests/kernels) runs the same code with 32 threads as lanes.
#pragma once

#ifdef __CUDACC__
#define FERRITE_RS_HD __host__ __device__ __forceinline__
#define FERRITE_RS_UNROLL _Pragma("unroll")
#else
#define FERRITE_RS_HD inline
#define FERRITE_RS_UNROLL
#endif

namespace ferrite::cuda::warp {

template <int N, int Live, int Off, typename Xor>
FERRITE_RS_HD void reduce_scatter_steps(float (&v)[N], int lane, Xor& shfl_xor) {
  if constexpr (Off > 0) {
    if constexpr (Live > 1) {
      constexpr int kHalf = Live / 2;
      const bool upper = (lane & Off) != 0;
      FERRITE_RS_UNROLL
      for (int i = 0; i < kHalf; ++i) {
        const float send = upper ? v[i] : v[i + kHalf];
        const float keep = upper ? v[i + kHalf] : v[i];
        v[i] = keep + shfl_xor(send, Off);
      }
      reduce_scatter_steps<N, kHalf, Off / 2>(v, lane, shfl_xor);
    } else {
      v[0] = v[0] + shfl_xor(v[0], Off);
      reduce_scatter_steps<N, 1, Off / 2>(v, lane, shfl_xor);
    }
  }
}

// v is consumed; returns the total of value lane >> (5 - log2 N).
template <int N, typename Xor>
FERRITE_RS_HD float reduce_scatter_sum(float (&v)[N], int lane, Xor& shfl_xor) {
  static_assert(N == 8 || N == 16 || N == 32, "8, 16 or 32 values");
  reduce_scatter_steps<N, N, 16>(v, lane, shfl_xor);
  return v[0];
}

template <int N>
FERRITE_RS_HD constexpr int owned_lane(int i) {
  return i << (N == 32 ? 0 : N == 16 ? 1 : 2);
}

}  // namespace ferrite::cuda::warp
