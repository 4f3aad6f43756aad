#include "backends/cuda/block_stages.h"

#include <fmt/format.h>

#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/kernels/quant_gemm.cuh"
#include "backends/cuda/kernels/quant_gemv.cuh"

namespace ferrite::cuda {
namespace {

// Up to 4 of a call's projections (a subset, in call order).
struct ProjectionSet {
  const NormedProjection* p[4];
  int count = 0;
};

// Decode on block weights (Tuning::cuda_quant_dot and cuda_quant_fused): one
// fused launch (norm, 8-bit quantization, products) per run of projections
// of one format, e.g. Q and K in q4_k, V in q6_k: two launches, or one with
// V as the bulk-copy kernel's tail format at one token (Tuning::
// cuda_quant_stream_mixed, quant_gemv_tail_ok). False
// (nothing launched) when a projection is not a block format, a run is not
// one the kernel takes, or a run's act-order weights do not share one
// permutation.
Result<bool> fused_block_projections(BackendState& st, const void* x, DType act, int64_t tokens,
                                     int64_t k, const TensorView& norm, float eps,
                                     bool zero_centred, const ProjectionSet& set, DType out_dt,
                                     bool swiglu) {
  QuantGemvSegment segs[4];
  DType formats[4];
  const int32_t* perms[4];
  const int count = set.count;
  for (int i = 0; i < count; ++i) {
    const NormedProjection& p = *set.p[i];
    if (!quant_fused_enabled(st, p.w.dtype, tokens)) return false;
    formats[i] = p.w.dtype;
    segs[i] = {p.w.data, p.out, p.rows};
    if (p.w.input_perm && p.w.perm_rows != p.rows) return false;  // gemm() says why
    perms[i] = p.w.input_perm;
  }
  if (swiglu && (formats[0] != formats[1] || perms[0] != perms[1])) return false;
  QuantGemvArgs runs[4];
  bool* conv_applied[4] = {};  // of each run's conv epilogue
  int nruns = 0;
  for (int i = 0; i < count;) {
    int j = i + 1;
    while (j < count && formats[j] == formats[i]) ++j;
    for (int r = i + 1; r < j; ++r)
      if (perms[r] != perms[i]) return false;
    QuantGemvArgs& a = runs[nruns++];
    a.x = x;
    a.x_dt = act;
    a.m = tokens;
    a.k = k;
    a.w_dt = formats[i];
    a.segs = segs + i;
    a.count = j - i;
    a.swiglu = swiglu;
    a.norm = norm.data;
    a.norm_dt = norm.dtype;
    a.eps = eps;
    a.zero_centred = zero_centred;
    a.out_dt = out_dt;
    set_gemv_paths(st, a);
    a.input_perm = perms[i];
    if (!quant_gemv_fused_supported(a)) return false;
    // A conv epilogue goes with the first segment of a run (the kernels
    // apply it to segment 0) when the run's kernel takes it.
    if (set.p[i]->conv && set.p[i]->conv_applied) {
      a.conv = *set.p[i]->conv;
      if (quant_gemv_conv_ok(a))
        conv_applied[nruns - 1] = set.p[i]->conv_applied;
      else
        a.conv = GemvConvEpilogue{};
    }
    i = j;
  }
  // (Not when runs[1] has a conv epilogue: merged, its segments are not
  // segment 0.)
  if (nruns == 2 && st.quant_stream_mixed && !runs[1].conv.w) {
    QuantGemvArgs both = runs[0];  // segs: runs[1]'s follow runs[0]'s; runs[0]'s conv
    both.count = runs[0].count + runs[1].count;
    both.tail_seg = runs[0].count;
    both.tail_dt = runs[1].w_dt;
    if (both.conv.w && !quant_gemv_conv_ok(both)) both.conv = GemvConvEpilogue{};
    if (quant_gemv_fused_supported(both)) {
      FERRITE_RETURN_IF_ERROR(launch_quant_gemv_fused(st.stream, both));
      if (both.conv.w) *conv_applied[0] = true;
      return true;
    }
  }
  for (int r = 0; r < nruns; ++r) {
    FERRITE_RETURN_IF_ERROR(launch_quant_gemv_fused(st.stream, runs[r]));
    if (runs[r].conv.w) *conv_applied[r] = true;
  }
  return true;
}

// Whether the multi-GEMV of weights of `act` (one launch that normalises x
// in shared memory and reads every weight once) takes these projections.
bool float_multi_ok(int64_t tokens, int64_t k, DType act, const TensorView& norm,
                    const ProjectionSet& set, DType out_dt, bool swiglu) {
  if (set.count < 1 || !(out_dt == act || (out_dt == DType::kF32 && !swiglu)) ||
      norm.dtype != act || !gemv_multi_supported(tokens, k, act) ||
      !gemv_supported(tokens, k, act, set.p[0]->w.dtype, act))
    return false;
  for (int i = 0; i < set.count; ++i)
    if (set.p[i]->w.dtype != act) return false;
  return true;
}
Status launch_float_multi(BackendState& st, const void* x, DType act, int64_t tokens, int64_t k,
                          const TensorView& norm, float eps, bool zero_centred,
                          const ProjectionSet& set, DType out_dt, bool swiglu) {
  GemvSegment segs[4];
  for (int i = 0; i < set.count; ++i) segs[i] = {set.p[i]->w.data, set.p[i]->out, set.p[i]->rows};
  return launch_gemv_multi(st.stream, x, tokens, k, segs, set.count, act, swiglu, norm.data,
                           norm.dtype, eps, zero_centred, out_dt);
}

// A call's projections as a set: 1 to 4 of them, exactly gate and up with swiglu.
Result<ProjectionSet> all_of(std::initializer_list<NormedProjection> projections, bool swiglu,
                             const char* what) {
  const size_t count = projections.size();
  if (count < 1 || count > 4 || (swiglu && count != 2))
    return internal_error(fmt::format("{}: 1..4 projections, or gate and up", what));
  ProjectionSet set;
  for (const NormedProjection& p : projections) set.p[set.count++] = &p;
  return set;
}

// Every projection of the rows n (already normalised) through gemm(), then
// with swiglu out_0 = silu(gate) * up: the path of shapes no fused kernel takes.
Status gemm_projections(BackendState& st, const void* n, DType act, int64_t tokens, int64_t k,
                        std::initializer_list<NormedProjection> projections, DType out_dt,
                        bool swiglu, void* perm_scratch) {
  // n is unchanged between the products: the FP8 path quantizes it once
  // (what an earlier call left in fp8_act is never taken: the same scratch
  // pointer held another layer's rows).
  st.fp8_act_same_x = false;
  st.fp8_act_x = nullptr;
  for (const NormedProjection& p : projections) {
    FERRITE_ASSIGN_OR_RETURN(const InputPerm perm, input_perm_of(p.w, p.rows, perm_scratch));
    const Status s = gemm(st, n, act, tokens, k, p.w.data, p.w.dtype, p.rows, p.out, out_dt, false,
                          nullptr, DType::kF32, perm);
    st.fp8_act_same_x = s.is_ok();
    if (!s.is_ok()) return s;
  }
  st.fp8_act_same_x = false;
  if (!swiglu) return Status::ok();
  const NormedProjection& g = *projections.begin();
  const NormedProjection& u = *(projections.begin() + 1);
  if (out_dt != act) return internal_error("projections: swiglu outputs are of act");
  return launch_silu_mul(st.stream, g.out, u.out, g.out, act, tokens * g.rows);
}

}  // namespace

Status normed_projections(BackendState& st, const void* x, DType act, int64_t tokens, int64_t k,
                          const TensorView& norm, float eps, bool zero_centred, void* n_scratch,
                          std::initializer_list<NormedProjection> projections, DType out_dt,
                          bool swiglu, void* perm_scratch) {
  FERRITE_ASSIGN_OR_RETURN(const ProjectionSet all,
                           all_of(projections, swiglu, "normed_projections"));
  FERRITE_ASSIGN_OR_RETURN(bool block_fused, fused_block_projections(st, x, act, tokens, k, norm,
                                                                     eps, zero_centred, all,
                                                                     out_dt, swiglu));
  if (block_fused) return Status::ok();
  if (float_multi_ok(tokens, k, act, norm, all, out_dt, swiglu))
    return launch_float_multi(st, x, act, tokens, k, norm, eps, zero_centred, all, out_dt, swiglu);
  // Block weights beside weights of `act` (GPTQ / AWQ checkpoints keep the
  // gated delta's b / a projections in bf16 beside its GPTQ qkv / z): the
  // block ones in their fused launches, the others in the multi-GEMV, each
  // normalising x itself (rounded to act, as n_scratch would hold it),
  // instead of a norm launch and a GEMV launch per projection.
  if (!swiglu) {
    ProjectionSet blocks, floats;
    for (int i = 0; i < all.count; ++i) {
      ProjectionSet& to = dtype_is_quantized(all.p[i]->w.dtype) ? blocks : floats;
      to.p[to.count++] = all.p[i];
    }
    if (blocks.count > 0 && floats.count > 0 &&
        float_multi_ok(tokens, k, act, norm, floats, out_dt, false)) {
      // (The float launch first, to run while the block launch's weight
      // copies are in flight, measured -0.5 % on Qwen3.5-35B-A3B GPTQ b1,
      // session 44: the block launch first.)
      FERRITE_ASSIGN_OR_RETURN(bool split_fused,
                               fused_block_projections(st, x, act, tokens, k, norm, eps,
                                                       zero_centred, blocks, out_dt, false));
      if (split_fused)
        return launch_float_multi(st, x, act, tokens, k, norm, eps, zero_centred, floats, out_dt,
                                  false);
    }
  }
  FERRITE_RETURN_IF_ERROR(launch_rms_norm(st.stream, x, n_scratch, act, norm.data, norm.dtype,
                                          tokens, k, eps, zero_centred));
  return gemm_projections(st, n_scratch, act, tokens, k, projections, out_dt, swiglu,
                          perm_scratch);
}

Status projections(BackendState& st, const void* x, DType act, int64_t tokens, int64_t k,
                   std::initializer_list<NormedProjection> projections, DType out_dt,
                   bool swiglu, void* perm_scratch) {
  FERRITE_ASSIGN_OR_RETURN(const ProjectionSet all, all_of(projections, swiglu, "projections"));
  const TensorView no_norm{};  // data null: the kernels skip the norm
  FERRITE_ASSIGN_OR_RETURN(bool block_fused,
                           fused_block_projections(st, x, act, tokens, k, no_norm, 0.0f, false,
                                                   all, out_dt, swiglu));
  if (block_fused) return Status::ok();
  return gemm_projections(st, x, act, tokens, k, projections, out_dt, swiglu, perm_scratch);
}

}  // namespace ferrite::cuda
