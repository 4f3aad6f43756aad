// SIMT tiled GEMM and the decode GEMV / fused normed GEMV.
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// out[m, n] (= or +=) sum_k x[m, k] w[n, k] (+ bias[n]) with f32 accumulation,
// any mix of the supported types: the f32 path and fallbacks. Up to 8 rows
// run as a GEMV (one warp per output column), more as SIMT tiles.
Status launch_gemm_simt(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                        const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                        bool accumulate, const void* bias, DType bias_dt);
// Decode-shaped product for m <= 8 rows: one pass over W with 16-byte loads,
// x held in shared memory (bf16 / f16 weights and activations of one type,
// out of that type or f32).
Status launch_gemv(cudaStream_t s, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                   void* out, DType act, DType out_dt, bool accumulate);
bool gemv_supported(int64_t m, int64_t k, DType act, DType w_dt, DType out_dt);
// Several decode products over one RMS-normalised x in one launch:
// out_i = rms_norm(x, norm) W_i^T for up to 4 segments (Q/K/V; the gated
// delta's qkv / z / b / a), or with `swiglu` (2 segments, gate then up,
// equal n) out_0 = silu(n Wg^T) * (n Wu^T). Weights and norm of `act`;
// outputs of `out_dt`: `act`, or f32 (not with swiglu). Up to 2 rows take
// the GEMV path; more go to cuBLASLt.
struct GemvSegment {
  const void* w;
  void* out;
  int64_t n;
};
// m x k normalised rows fit the kernel's shared memory.
bool gemv_multi_supported(int64_t m, int64_t k, DType act);
Status launch_gemv_multi(cudaStream_t s, const void* x, int64_t m, int64_t k,
                         const GemvSegment* segs, int count, DType act, bool swiglu,
                         const void* norm, DType norm_dt, float eps, bool zero_centred,
                         DType out_dt);

}  // namespace ferrite::cuda
