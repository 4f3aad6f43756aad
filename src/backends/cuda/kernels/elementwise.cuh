// Embedding gather, RMS norm, residual add, SiLU product, row and column
// gathers.
// Host-side launchers (defined in the .cu beside this header). Element types
// are passed as DType and dispatched inside; every launcher records on
// `stream` and returns the launch error. C++17 (the .cu files include it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// out[t] = table[min(ids[t], vocab-1)] for t < tokens.
Status launch_embedding(cudaStream_t s, const uint32_t* ids, int64_t tokens, const void* table,
                        DType table_dt, int64_t vocab, int64_t hidden, void* out, DType out_dt);
// y = rms_norm(x) * (w or 1 + w); x, y of `act`; may alias.
Status launch_rms_norm(cudaStream_t s, const void* x, void* y, DType act, const void* w,
                       DType w_dt, int64_t rows, int64_t width, float eps, bool zero_centred);
// out = a + b, n elements.
Status launch_add(cudaStream_t s, const void* a, const void* b, void* out, DType act, int64_t n);
// out = silu(gate) * up, n elements (out may alias gate).
Status launch_silu_mul(cudaStream_t s, const void* gate, const void* up, void* out, DType act,
                       int64_t n);
// dst[s] = src[rows[s]] (rows from device memory), width elements each.
Status launch_gather_rows(cudaStream_t s, const void* src, const int32_t* rows, void* dst,
                          DType act, int64_t count, int64_t width);
// dst[t, c] = src[t, cols[c]] for t < rows, c < width (cols from device
// memory, each in 0 .. width - 1): the activations of an act-order weight in
// its stored column order (TensorView::input_perm). dst must not alias src.
Status launch_gather_columns(cudaStream_t s, const void* src, const int32_t* cols, void* dst,
                             DType act, int64_t rows, int64_t width);

}  // namespace ferrite::cuda
