// gated_delta_recurrent_attention on CUDA: pre-norm, projections through
// gemm() to f32, causal conv + SiLU over the conv state, the gated delta rule
// in f32 (a block per (sequence, value head, 32 state columns): recurrent form
// for decode and short spans, chunked WY form for spans of >= 16 tokens,
// chosen on the device per sequence), the gated norm, out_proj accumulating
// into the residual. Never synchronises or allocates: graph-capturable.
#include <algorithm>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gated_delta.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/gated_delta_recurrent_attention.h"

namespace ferrite::cuda {
namespace {

class GatedDelta final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status supports(const NodeSignature& node) const override {
    FERRITE_RETURN_IF_ERROR(Provider::supports(node));
    const auto p = gated_delta_recurrent_attention::Params::from(node.attrs);
    if (p.conv_kernel < 1 || p.conv_kernel > 8)
      return unsupported("cuda.gated_delta_recurrent_attention: conv_kernel must be 1..8");
    if (p.num_k_heads == 0 || p.num_v_heads % p.num_k_heads)
      return unsupported("cuda.gated_delta_recurrent_attention: value heads must be a multiple "
                         "of key heads");
    GatedDeltaShape g;
    g.dk = static_cast<int32_t>(p.k_head_dim);
    g.dv = static_cast<int32_t>(p.v_head_dim);
    g.tiled = p.tiled_value_heads ? 1 : 0;
    if (gated_delta_smem_bytes(g) > 200 * 1024)
      return unsupported("cuda.gated_delta_recurrent_attention: k_head_dim too large");
    return Status::ok();
  }

  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    const auto p = gated_delta_recurrent_attention::Params::from(node.attrs);
    const int64_t e = dtype_bytes(node.activation_dtype, 1);
    const int64_t t = limits.max_tokens;
    const int64_t hv = i64(p.num_v_heads), vd = i64(p.value_dim());
    return Carver::round(t * i64(p.hidden_size) * e) + Carver::round(t * i64(p.conv_dim()) * 4) +
           Carver::round(t * vd * 4) + 2 * Carver::round(t * hv * 4) + Carver::round(t * vd * e);
  }

  Status encode(const Invocation& inv) const override {
    using namespace gated_delta_recurrent_attention;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t t = inv.batch->num_tokens();
    const int64_t S = inv.batch->num_sequences();
    const int64_t H = i64(p.hidden_size), C = i64(p.conv_dim()), VD = i64(p.value_dim());
    const int64_t hv = i64(p.num_v_heads);
    const int64_t e = dtype_bytes(act, 1);
    if (b[kConvState].dtype != DType::kF32 || b[kDeltaState].dtype != DType::kF32)
      return unsupported("cuda.gated_delta_recurrent_attention: states must be f32");
    FERRITE_RETURN_IF_ERROR(check_packed(*inv.batch, "cuda.gated_delta_recurrent_attention"));
    FERRITE_RETURN_IF_ERROR(ensure_prepared(inv));
    BackendState& st = state(inv);

    Carver ws(inv);
    void* n = ws.take(t * H * e);
    auto* x = static_cast<float*>(ws.take(t * C * 4));
    auto* z = static_cast<float*>(ws.take(t * VD * 4));
    auto* bb = static_cast<float*>(ws.take(t * hv * 4));
    auto* aa = static_cast<float*>(ws.take(t * hv * 4));
    void* y = ws.take(t * VD * e);
    if (!n || !x || !z || !bb || !aa || !y)
      return internal_error("gated_delta_recurrent_attention: workspace too small");

    profile_mark(st.stream, "delta.proj", st.capturing);
    FERRITE_RETURN_IF_ERROR(launch_rms_norm(st.stream, b[kHidden].data, n, act,
                                            b[kInputNorm].data, b[kInputNorm].dtype, t, H,
                                            static_cast<float>(p.eps), p.zero_centred));
    FERRITE_RETURN_IF_ERROR(gemm(st, n, act, t, H, b[kInProjQkv].data, b[kInProjQkv].dtype, C, x,
                                 DType::kF32, false));
    FERRITE_RETURN_IF_ERROR(gemm(st, n, act, t, H, b[kInProjZ].data, b[kInProjZ].dtype, VD, z,
                                 DType::kF32, false));
    FERRITE_RETURN_IF_ERROR(gemm(st, n, act, t, H, b[kInProjB].data, b[kInProjB].dtype, hv, bb,
                                 DType::kF32, false));
    FERRITE_RETURN_IF_ERROR(gemm(st, n, act, t, H, b[kInProjA].data, b[kInProjA].dtype, hv, aa,
                                 DType::kF32, false));
    profile_mark(st.stream, "delta.conv", st.capturing);
    FERRITE_RETURN_IF_ERROR(launch_causal_conv_silu(st.stream, st.meta, S, x, C,
                                                    b[kConvWeight].data, b[kConvWeight].dtype,
                                                    i64(p.conv_kernel), b[kConvState].as<float>()));
    profile_mark(st.stream, "delta.rule", st.capturing);
    GatedDeltaShape g;
    g.hk = static_cast<int32_t>(p.num_k_heads);
    g.hv = static_cast<int32_t>(p.num_v_heads);
    g.dk = static_cast<int32_t>(p.k_head_dim);
    g.dv = static_cast<int32_t>(p.v_head_dim);
    g.tiled = p.tiled_value_heads ? 1 : 0;
    g.eps = static_cast<float>(p.eps);
    int64_t max_span = 0;
    for (const SequenceSlice& sq : inv.batch->sequences)
      max_span = std::max<int64_t>(max_span, sq.token_count);
    FERRITE_RETURN_IF_ERROR(launch_gated_delta_rule(
        st.stream, st.meta, S, t, max_span, g, x, z, bb, aa, b[kALog].data, b[kALog].dtype,
        b[kDtBias].data, b[kDtBias].dtype, b[kNorm].data, b[kNorm].dtype,
        b[kDeltaState].as<float>(), y, act));
    profile_mark(st.stream, "delta.out_proj", st.capturing);
    return gemm(st, y, act, t, VD, b[kOutProj].data, b[kOutProj].dtype, H, b[kHidden].data, act,
                true);
  }

 private:
  ProviderDescriptor desc_ = with_block_formats(cuda_descriptor(
      "cuda.gated_delta_recurrent_attention", gated_delta_recurrent_attention::contract(),
      "GEMM projections, conv + SiLU over the conv state, gated delta rule in f32 (block per "
      "sequence, value head and 32 state columns; chunked WY form for spans of >= 16 tokens, "
      "recurrent otherwise), gated norm, out_proj into the residual"));
};

}  // namespace

std::unique_ptr<Provider> make_gated_delta_recurrent_attention() {
  return std::make_unique<GatedDelta>();
}

}  // namespace ferrite::cuda
