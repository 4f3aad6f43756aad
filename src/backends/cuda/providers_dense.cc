// CUDA providers of the dense contracts: token_embedding, rms_norm,
// residual_add, dense_linear, dense_swiglu, last_token_dense_linear.
// Every provider runs the whole step batch in a few launches on the
// backend's stream; none synchronises, so all are graph-capturable.
#include "backends/cuda/cuda_providers.h"

#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/profiler.h"
#include "contracts/dense_linear.h"
#include "contracts/dense_swiglu.h"
#include "contracts/last_token_dense_linear.h"
#include "contracts/residual_add.h"
#include "contracts/rms_norm.h"
#include "contracts/token_embedding.h"

namespace ferrite::cuda {
namespace {

int64_t i64(uint64_t v) { return static_cast<int64_t>(v); }

class TokenEmbedding final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace token_embedding;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    profile_mark(stream_of(inv), "embedding", state(inv).capturing);
    return launch_embedding(stream_of(inv), b[kIds].as<uint32_t>(), inv.batch->num_tokens(),
                            b[kTable].data, b[kTable].dtype, i64(p.vocab_size),
                            i64(p.hidden_size), b[kOut].data, b[kOut].dtype);
  }

 private:
  ProviderDescriptor desc_ = cuda_descriptor("cuda.token_embedding", "token_embedding",
                                             "row gather, converted to the activation dtype");
};

class RmsNorm final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace rms_norm;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    profile_mark(stream_of(inv), "final_norm", state(inv).capturing);
    return launch_rms_norm(stream_of(inv), b[kX].data, b[kOut].data, b[kX].dtype,
                           b[kWeight].data, b[kWeight].dtype, inv.batch->num_tokens(),
                           i64(p.hidden_size), static_cast<float>(p.eps), p.zero_centred);
  }

 private:
  ProviderDescriptor desc_ =
      cuda_descriptor("cuda.rms_norm", "rms_norm", "one block per row, f32 sums");
};

class ResidualAdd final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace residual_add;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    return launch_add(stream_of(inv), b[kA].data, b[kB].data, b[kOut].data, b[kA].dtype,
                      inv.batch->num_tokens() * i64(p.hidden_size));
  }

 private:
  ProviderDescriptor desc_ = cuda_descriptor("cuda.residual_add", "residual_add", "element-wise");
};

class DenseLinear final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace dense_linear;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    return gemm(state(inv), b[kX].data, b[kX].dtype, inv.batch->num_tokens(), i64(p.in_features),
                b[kWeight].data, b[kWeight].dtype, i64(p.out_features), b[kOut].data,
                b[kOut].dtype, false, b[kBias].data, b[kBias].dtype);
  }

 private:
  ProviderDescriptor desc_ = cuda_descriptor("cuda.dense_linear", "dense_linear",
                                             "GEMV (decode) / cuBLASLt bf16 / SIMT f32");
};

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
  ProviderDescriptor desc_ = cuda_descriptor(
      "cuda.dense_swiglu", "dense_swiglu",
      "norm, gate/up GEMMs, SiLU product, down GEMM accumulating into the residual");
};

class LastTokenDenseLinear final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    using namespace last_token_dense_linear;
    const Params p = Params::from(node.attrs);
    return Carver::round(limits.max_sequences * i64(p.hidden_size) *
                         dtype_bytes(node.activation_dtype, 1));
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_dense_linear;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t s = inv.batch->num_sequences();
    const int64_t h = i64(p.hidden_size);
    FERRITE_RETURN_IF_ERROR(ensure_prepared(inv));
    BackendState& st = state(inv);
    Carver ws(inv);
    void* rows = ws.take(s * h * dtype_bytes(act, 1));
    if (!rows) return internal_error("last_token_dense_linear: workspace too small");
    profile_mark(st.stream, "lm_head", st.capturing);
    FERRITE_RETURN_IF_ERROR(
        launch_gather_rows(st.stream, b[kHidden].data, st.meta.seq_last_row, rows, act, s, h));
    return gemm(st, rows, act, s, h, b[kLmHead].data, b[kLmHead].dtype, i64(p.vocab_size),
                b[kLogits].data, DType::kF32, false);
  }

 private:
  ProviderDescriptor desc_ = cuda_descriptor("cuda.last_token_dense_linear",
                                             "last_token_dense_linear",
                                             "gather last rows, GEMV / cuBLASLt to f32 logits");
};

}  // namespace

std::unique_ptr<Provider> make_token_embedding() { return std::make_unique<TokenEmbedding>(); }
std::unique_ptr<Provider> make_rms_norm() { return std::make_unique<RmsNorm>(); }
std::unique_ptr<Provider> make_residual_add() { return std::make_unique<ResidualAdd>(); }
std::unique_ptr<Provider> make_dense_linear() { return std::make_unique<DenseLinear>(); }
std::unique_ptr<Provider> make_dense_swiglu() { return std::make_unique<DenseSwiglu>(); }
std::unique_ptr<Provider> make_last_token_dense_linear() {
  return std::make_unique<LastTokenDenseLinear>();
}

}  // namespace ferrite::cuda
