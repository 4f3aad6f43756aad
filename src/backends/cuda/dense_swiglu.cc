// dense_swiglu on CUDA: pre-norm, gate/up products and the SiLU product (one
// fused normed GEMV at decode), down product accumulating into the residual.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/dense_swiglu.h"

namespace ferrite::cuda {
namespace {

class DenseSwiglu final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    using namespace dense_swiglu;
    const Params p = Params::from(node.attrs);
    const int64_t e = dtype_bytes(node.activation_dtype, 1);
    const int64_t t = limits.max_tokens;
    return Carver::round(t * i64(p.hidden_size) * e) +
           2 * Carver::round(t * i64(p.intermediate_size) * e);
  }
  Status encode(const Invocation& inv) const override {
    using namespace dense_swiglu;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t t = inv.batch->num_tokens();
    const int64_t h = i64(p.hidden_size), im = i64(p.intermediate_size);
    const int64_t e = dtype_bytes(act, 1);
    BackendState& st = state(inv);
    Carver ws(inv);
    void* n = ws.take(t * h * e);
    void* g = ws.take(t * im * e);
    void* u = ws.take(t * im * e);
    if (!n || !g || !u) return internal_error("dense_swiglu: workspace too small");
    profile_mark(st.stream, "mlp.gate_up", st.capturing);
    if (gemv_multi_supported(t, h, act) && gemv_supported(t, h, act, b[kGate].dtype, act) && b[kUp].dtype == act &&
        b[kNorm].dtype == act) {
      // Decode: norm, gate, up and the SiLU product in one pass over both weights.
      const GemvSegment segs[2] = {{b[kGate].data, g, im}, {b[kUp].data, u, im}};
      FERRITE_RETURN_IF_ERROR(launch_gemv_multi(st.stream, b[kHidden].data, t, h, segs, 2, act,
                                                true, b[kNorm].data, b[kNorm].dtype,
                                                static_cast<float>(p.eps), p.zero_centred));
    } else {
      FERRITE_RETURN_IF_ERROR(launch_rms_norm(st.stream, b[kHidden].data, n, act, b[kNorm].data,
                                              b[kNorm].dtype, t, h, static_cast<float>(p.eps),
                                              p.zero_centred));
      FERRITE_RETURN_IF_ERROR(gemm(st, n, act, t, h, b[kGate].data, b[kGate].dtype, im, g, act, false));
      FERRITE_RETURN_IF_ERROR(gemm(st, n, act, t, h, b[kUp].data, b[kUp].dtype, im, u, act, false));
      FERRITE_RETURN_IF_ERROR(launch_silu_mul(st.stream, g, u, g, act, t * im));
    }
    profile_mark(st.stream, "mlp.down", st.capturing);
    return gemm(st, g, act, t, im, b[kDown].data, b[kDown].dtype, h, b[kHidden].data, act, true);
  }

 private:
  ProviderDescriptor desc_ = with_block_formats(cuda_descriptor(
      "cuda.dense_swiglu", dense_swiglu::contract(),
      "norm, gate/up GEMMs, SiLU product, down GEMM accumulating into the residual"));
};

}  // namespace

std::unique_ptr<Provider> make_dense_swiglu() { return std::make_unique<DenseSwiglu>(); }

}  // namespace ferrite::cuda
