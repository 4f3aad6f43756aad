#include "backends/cuda/block_stages.h"

#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gemm.cuh"

namespace ferrite::cuda {

Status normed_projections(BackendState& st, const void* x, DType act, int64_t tokens, int64_t k,
                          const TensorView& norm, float eps, bool zero_centred, void* n_scratch,
                          std::initializer_list<NormedProjection> projections, DType out_dt,
                          bool swiglu) {
  const int count = static_cast<int>(projections.size());
  if (count < 1 || (swiglu && count != 2))
    return internal_error("normed_projections: 1..4 projections, or gate and up");
  bool fused = count <= 4 && (out_dt == act || (out_dt == DType::kF32 && !swiglu)) &&
               norm.dtype == act &&
               gemv_multi_supported(tokens, k, act) &&
               gemv_supported(tokens, k, act, projections.begin()->w.dtype, act);
  for (const NormedProjection& p : projections) fused = fused && p.w.dtype == act;
  if (fused) {
    GemvSegment segs[4];
    int i = 0;
    for (const NormedProjection& p : projections) segs[i++] = {p.w.data, p.out, p.rows};
    return launch_gemv_multi(st.stream, x, tokens, k, segs, count, act, swiglu, norm.data,
                             norm.dtype, eps, zero_centred, out_dt);
  }
  FERRITE_RETURN_IF_ERROR(launch_rms_norm(st.stream, x, n_scratch, act, norm.data, norm.dtype,
                                          tokens, k, eps, zero_centred));
  for (const NormedProjection& p : projections)
    FERRITE_RETURN_IF_ERROR(
        gemm(st, n_scratch, act, tokens, k, p.w.data, p.w.dtype, p.rows, p.out, out_dt, false));
  if (swiglu) {
    const NormedProjection& g = *projections.begin();
    const NormedProjection& u = *(projections.begin() + 1);
    if (out_dt != act) return internal_error("normed_projections: swiglu outputs are of act");
    FERRITE_RETURN_IF_ERROR(launch_silu_mul(st.stream, g.out, u.out, g.out, act, tokens * g.rows));
  }
  return Status::ok();
}

}  // namespace ferrite::cuda
