// Stages shared by the CUDA block providers (attention, gated delta, dense
// SwiGLU): a block's pre-norm and input projections go through
// normed_projections(), so the choice "fused normed GEMV at decode, else
// norm then GEMM" is made here once (the CPU counterpart is
// backends/cpu/block_stages.h).
#pragma once

#include <initializer_list>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels/quant_gemv.cuh"

namespace ferrite::cuda {

// One projection of the normalised rows: out[t, rows] = n[t] W^T, of out_dt.
struct NormedProjection {
  const TensorView& w;
  int64_t rows;
  void* out;
  // A gated delta layer's causal conv + SiLU to run on these outputs (f32)
  // in the launch's epilogue (GemvConvEpilogue; batch-1 decode), or null.
  // Only the fused block-format launches take it, when quant_gemv_conv_ok:
  // they set *conv_applied; otherwise it stays false and the caller runs
  // the conv launch.
  const GemvConvEpilogue* conv = nullptr;
  bool* conv_applied = nullptr;
};

// n = rms_norm(x, norm) over k elements of `tokens` rows (x, n of `act`),
// then every projection of n into outputs of `out_dt`. With `swiglu` (two
// projections, gate then up, of equal rows): out_0 = silu(gate) * up.
//
// Decode-shaped steps whose weights and norm are of `act` and outputs of
// `act` or f32 (kernels/gemm.cuh: gemv_multi_supported, gemv_supported; up
// to 4 projections) take one fused launch that normalises x in shared memory
// (rounded to `act`, as n_scratch would hold it) and reads every weight
// once; block-format weights their fused launches (one per run of a
// format), and a call of both kinds (no swiglu) one launch of each;
// everything else (prefill) writes n to `n_scratch` ([tokens, k] of act) and
// runs gemm() per projection.
//
// Act-order weights (TensorView::input_perm): the fused launches gather x as
// they stage it when the projections of a launch share one permutation (the
// loader binds identical tables once); otherwise each product gathers n
// into `perm_scratch` ([tokens, k] of act, the provider's workspace: needed
// whenever a weight is permuted) first.
Status normed_projections(BackendState& st, const void* x, DType act, int64_t tokens, int64_t k,
                          const TensorView& norm, float eps, bool zero_centred, void* n_scratch,
                          std::initializer_list<NormedProjection> projections, DType out_dt,
                          bool swiglu = false, void* perm_scratch = nullptr);

// The same for rows x that are already normalised (the MoE shared expert
// reads the router's normalised rows): decode steps on block weights take
// the fused launches without a norm (gate and up with `swiglu` in one),
// everything else gemm() per projection (then silu(gate) * up).
Status projections(BackendState& st, const void* x, DType act, int64_t tokens, int64_t k,
                   std::initializer_list<NormedProjection> projections, DType out_dt,
                   bool swiglu = false, void* perm_scratch = nullptr);

}  // namespace ferrite::cuda
