// gated_delta_recurrent_attention on CUDA: pre-norm, projections through
// gemm() to f32, causal conv + SiLU over the conv state, the gated delta rule
// in f32 (a block per (sequence, value head, 32 state columns): recurrent form
// for decode and short spans, chunked WY form for spans of >= 16 tokens,
// chosen on the device per sequence), the gated norm, out_proj accumulating
// into the residual. Never synchronises or allocates: graph-capturable.
#include <algorithm>

#include "backends/cuda/block_stages.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gated_delta.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/gated_delta_recurrent_attention.h"
#include "runtime/workspace.h"

namespace ferrite::cuda {
namespace {

class GatedDelta final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status supports(const NodeSignature& node) const override {
    FERRITE_RETURN_IF_ERROR(Provider::supports(node));
    const auto& p = node.params<gated_delta_recurrent_attention::Params>();
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

  // The workspace pieces of a step of `t` tokens: the normalised rows, the
  // projections in f32 (qkv, z, b, a), the gated-norm output and, with
  // act-order weights, the gather buffer of the permuted inputs.
  struct Pieces {
    void* n;
    float *x, *z, *bb, *aa;
    void *y, *perm;
  };
  static Pieces layout(Workspace& ws, const gated_delta_recurrent_attention::Params& p,
                       DType act, int64_t t, bool permuted) {
    const int64_t e = dtype_bytes(act, 1);
    const int64_t hv = i64(p.num_v_heads), vd = i64(p.value_dim());
    Pieces s;
    s.n = ws.take_bytes(t * i64(p.hidden_size) * e);
    s.x = ws.take<float>(t * i64(p.conv_dim()));
    s.z = ws.take<float>(t * vd);
    s.bb = ws.take<float>(t * hv);
    s.aa = ws.take<float>(t * hv);
    s.y = ws.take_bytes(t * vd * e);
    s.perm = permuted ? ws.take_bytes(t * std::max(i64(p.hidden_size), vd) * e) : nullptr;
    return s;
  }

  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<gated_delta_recurrent_attention::Params>(), node.activation_dtype,
             limits.max_tokens, any_permuted(node));
    });
  }

  Status encode(const Invocation& inv) const override {
    using namespace gated_delta_recurrent_attention;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t t = inv.batch->num_tokens();
    const int64_t S = inv.batch->num_sequences();
    const int64_t H = i64(p.hidden_size), C = i64(p.conv_dim()), VD = i64(p.value_dim());
    const int64_t hv = i64(p.num_v_heads);
    if (b[kConvState].dtype != DType::kF32 || b[kDeltaState].dtype != DType::kF32)
      return unsupported("cuda.gated_delta_recurrent_attention: states must be f32");
    FERRITE_RETURN_IF_ERROR(check_packed(*inv.batch, "cuda.gated_delta_recurrent_attention"));
    FERRITE_RETURN_IF_ERROR(ensure_prepared(inv));
    BackendState& st = state(inv);

    Workspace ws(inv);
    const Pieces sc = layout(ws, p, act, t, any_permuted(*inv.signature));
    FERRITE_RETURN_IF_ERROR(ws.status("cuda.gated_delta_recurrent_attention"));
    FERRITE_ASSIGN_OR_RETURN(const InputPerm out_perm, input_perm_of(b[kOutProj], H, sc.perm));
    float* x = sc.x;
    float* z = sc.z;
    float* bb = sc.bb;
    float* aa = sc.aa;
    void* y = sc.y;

    // The rule as a programmatic dependent of the conv (Tuning::
    // cuda_gated_delta_pdl) only in its recurrent form (every span under
    // the chunked form's tokens: decode), whose blocks read their state
    // before waiting; the chunked form starts after the conv as before.
    int64_t max_span = 0;
    for (const SequenceSlice& sq : inv.batch->sequences)
      max_span = std::max<int64_t>(max_span, sq.token_count);
    const bool delta_pdl = st.gated_delta_pdl && max_span < kGatedDeltaChunkedMinTokens;
    // The conv in the Q/K/V projection's epilogue (Tuning::
    // cuda_gated_delta_conv_in_projection) when every sequence has one token
    // (the kernels take one token only); the projection says whether its
    // launch took it.
    GemvConvEpilogue conv;
    if (st.gated_delta_conv_in_projection && max_span == 1 && t == S) {
      conv.w = b[kConvWeight].data;
      conv.w_dt = b[kConvWeight].dtype;
      conv.kernel = static_cast<int>(p.conv_kernel);
      conv.state = b[kConvState].as<float>();
      conv.token_seq = st.meta.token_seq;
      conv.seq_state_slot = st.meta.seq_state_slot;
    }
    bool conv_done = false;
    profile_mark(st.stream, "delta.proj", st.capturing);
    FERRITE_RETURN_IF_ERROR(normed_projections(
        st, b[kHidden].data, act, t, H, b[kInputNorm], static_cast<float>(p.eps), p.zero_centred,
        sc.n,
        {{b[kInProjQkv], C, x, conv.w ? &conv : nullptr, &conv_done},
         {b[kInProjZ], VD, z},
         {b[kInProjB], hv, bb},
         {b[kInProjA], hv, aa}},
        DType::kF32, /*swiglu=*/false, sc.perm));
    if (!conv_done) {
      profile_mark(st.stream, "delta.conv", st.capturing);
      FERRITE_RETURN_IF_ERROR(launch_causal_conv_silu(
          st.stream, st.meta, S, x, C, b[kConvWeight].data, b[kConvWeight].dtype,
          i64(p.conv_kernel), b[kConvState].as<float>(), delta_pdl));
    }
    profile_mark(st.stream, "delta.rule", st.capturing);
    GatedDeltaShape g;
    g.hk = static_cast<int32_t>(p.num_k_heads);
    g.hv = static_cast<int32_t>(p.num_v_heads);
    g.dk = static_cast<int32_t>(p.k_head_dim);
    g.dv = static_cast<int32_t>(p.v_head_dim);
    g.tiled = p.tiled_value_heads ? 1 : 0;
    g.eps = static_cast<float>(p.eps);
    FERRITE_RETURN_IF_ERROR(launch_gated_delta_rule(
        st.stream, st.meta, S, t, max_span, g, x, z, bb, aa, b[kALog].data, b[kALog].dtype,
        b[kDtBias].data, b[kDtBias].dtype, b[kNorm].data, b[kNorm].dtype,
        b[kDeltaState].as<float>(), y, act, st.pdl_trigger_small, st.gated_delta_fused_norm,
        delta_pdl));
    profile_mark(st.stream, "delta.out_proj", st.capturing);
    return gemm(st, y, act, t, VD, b[kOutProj].data, b[kOutProj].dtype, H, b[kHidden].data, act,
                true, nullptr, DType::kF32, out_perm);
  }

 private:
  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(cuda_descriptor(
      "cuda.gated_delta_recurrent_attention", gated_delta_recurrent_attention::contract(),
      "GEMM projections, conv + SiLU over the conv state, gated delta rule in f32 (block per "
      "sequence, value head and 32 state columns; chunked WY form for spans of >= 16 tokens, "
      "recurrent otherwise), gated norm, out_proj into the residual")));
};

}  // namespace

std::unique_ptr<Provider> make_gated_delta_recurrent_attention() {
  return std::make_unique<GatedDelta>();
}

}  // namespace ferrite::cuda
