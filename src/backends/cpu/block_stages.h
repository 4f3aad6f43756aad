// Stages shared by the CPU block providers (attention, gated delta, dense
// and routed SwiGLU): each block's pre-norm and input projections go
// through normed_projections(), so the choice of how a block turns its
// residual rows into projections is made here once (on CPU: the norm into
// the workspace, then one GEMM per projection; the CUDA backend's
// counterpart, backends/cuda/block_stages.h, fuses them at decode).
#pragma once

#include <initializer_list>

#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/vec.h"
#include "backends/cpu/weight_product.h"
#include "tensor/tensor.h"

namespace ferrite::cpu {

// One projection of the normalised rows: out[t, rows] = n[t] W^T.
struct Projection {
  const TensorView& w;
  int64_t rows;
  float* out;
};

// n[t] = rms_norm(x[t], norm) over k elements, then every projection of n.
inline void normed_projections(const float* x, int64_t tokens, int64_t k, const TensorView& norm,
                               float eps, bool zero_centred, float* n,
                               std::initializer_list<Projection> projections, ThreadPool* pool) {
  rms_norm(x, tokens, k, norm.data, norm.dtype, eps, zero_centred, n, pool);
  for (const Projection& pr : projections)
    weight_product(n, tokens, k, pr.w, pr.rows, pr.out, /*accumulate=*/false, pool);
}

// The block's output product into the residual (hidden += y W^T), or into
// partial_out when the plan bound it (tensor-parallel ranks: the block's
// contribution alone).
inline void output_projection(const float* y, int64_t tokens, int64_t k, const TensorView& w,
                              int64_t rows, float* hidden, float* partial, ThreadPool* pool) {
  if (partial)
    weight_product(y, tokens, k, w, rows, partial, /*accumulate=*/false, pool);
  else
    weight_product(y, tokens, k, w, rows, hidden, /*accumulate=*/true, pool);
}

}  // namespace ferrite::cpu
