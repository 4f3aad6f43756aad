// The dense product every CUDA provider uses:
//   out[m, n] (= or +=) sum_k x[m, k] w[n, k]  (+ bias[n])
// routed to the decode GEMV (m <= 8, bf16/f16), cuBLASLt (bf16/f16 weights
// and activations, f32 accumulation) or the SIMT kernel (everything else).
#pragma once

#include "backends/cuda/cuda_common.h"

namespace ferrite::cuda {

struct QuantGemvArgs;     // kernels/quant_gemv.cuh
struct QuantTileScratch;  // kernels/quant_tile.cuh

// The longest input row (k) the fixed 8-bit activation scratch of the
// decode GEMV holds (q8_x / q8_d); longer rows take the paths without it.
constexpr int64_t kQuantScratchMaxK = 65536;

// An act-order weight's input permutation (TensorView::input_perm): stored
// column c of W multiplies x[:, table[c]]. Decode products gather x as their
// fused kernel stages it; the others gather it into `scratch` ([m, k] of
// x_dt, the provider's workspace) first, one launch. Null table: natural
// order.
struct InputPerm {
  const int32_t* table = nullptr;
  void* scratch = nullptr;
};
// The permutation of weight w for a product over its `rows` rows, into
// `scratch`: its one permutation (a table per run of fewer rows, stacked
// experts', is an error here; the loader binds one run for a dense weight).
Result<InputPerm> input_perm_of(const TensorView& w, int64_t rows, void* scratch);

Status gemm(BackendState& st, const void* x, DType x_dt, int64_t m, int64_t k, const void* w,
            DType w_dt, int64_t n, void* out, DType out_dt, bool accumulate,
            const void* bias = nullptr, DType bias_dt = DType::kF32, InputPerm perm = {});

// The weight tiles' split-k scratch (quant_tile.cuh, u4_tile.cuh) in st:
// for gemm() and the kernel-level benchmarks and tests that launch a tile
// directly.
QuantTileScratch quant_tile_scratch(const BackendState& st);

// Makes st.q8_x / st.q8_d hold 8-bit blocks of at least `elems` activations
// (grown on eager steps only): false when they do not and cannot now.
Result<bool> ensure_q8_capacity(BackendState& st, int64_t elems);

// Whether a decode product of m tokens on block weights of w_dt may take the
// fused GEMV (kernels/quant_gemv.cuh): Tuning::cuda_quant_dot and
// cuda_quant_fused, and for e4m3 weights cuda_quant_fused_fp8; the kernel's
// own shape checks (quant_gemv_fused_supported) come after; not the products
// that mmq_takes. The one place of this policy for gemm() and
// normed_projections().
bool quant_fused_enabled(const BackendState& st, DType w_dt, int64_t m);
// Whether a product of m tokens on w_dt goes to the int8 tile
// (kernels/quant_mmq.cuh) by the token range (Tuning::cuda_quant_mmq_min_tokens
// .. cuda_quant_mmq_tokens) and format (q4_k / q6_k / q8_0); the tile's own
// shape checks (quant_mmq_supported) come after.
bool mmq_takes(const BackendState& st, DType w_dt, int64_t m);
// Sets the path choices of such a product's QuantGemvArgs (a.w_dt and a.m
// set): the bulk-copy kernel (Tuning::cuda_quant_stream_tokens / _blocks),
// the tensor-core kernel (cuda_quant_mma_fp8 / _u4 for e4m3 / 4-bit
// weights), its shared-memory budget and e4m3 activations
// (cuda_quant_mma_smem_kib, cuda_quant_mma_fp8_act). The one place for
// gemm() and normed_projections().
void set_gemv_paths(const BackendState& st, QuantGemvArgs& a);

// Makes st.dequant hold at least `bytes` (grown on eager steps only; a
// regrowth drops the captured decode graphs, which point into the old
// buffer): false when it does not and cannot now (capturing, or the
// allocation failed: the caller takes a path without it).
Result<bool> ensure_dequant_capacity(BackendState& st, int64_t bytes);

// Creates / destroys the cuBLASLt handle and workspace of a backend state.
Status gemm_init(BackendState& st);
void gemm_shutdown(BackendState& st);

}  // namespace ferrite::cuda
