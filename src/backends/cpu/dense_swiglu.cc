// dense_swiglu on CPU: pre-norm, gate/up, SiLU product, down, residual add.
#include "contracts/dense_swiglu.h"

#include "backends/cpu/block_stages.h"
#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/fast_util.h"
#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/vec.h"
#include "backends/cpu/reference_math.h"
#include "runtime/workspace.h"

namespace ferrite::cpu {
namespace {

class DenseSwigluReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace dense_swiglu;
    const Params& p = inv.signature->params<Params>();
    const int64_t h = static_cast<int64_t>(p.hidden_size);
    const int64_t im = static_cast<int64_t>(p.intermediate_size);
    float* hidden = inv.bindings[kHidden].as<float>();
    const auto& b = inv.bindings;
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    float* partial = b.size() > kPartialOut && b[kPartialOut].data ? b[kPartialOut].as<float>() : nullptr;
    std::vector<float> n(h), g(im), u(im), d(h);
    for (int32_t t = 0; t < inv.batch->num_tokens(); ++t) {
      float* row = hidden + t * h;
      ref::rms_norm(row, inv.bindings[kNorm], h, p.eps, p.zero_centred, n.data());
      ref::matvec(n.data(), inv.bindings[kGate], h, im, g.data());
      ref::matvec(n.data(), inv.bindings[kUp], h, im, u.data());
      for (int64_t i = 0; i < im; ++i) g[i] = ref::silu(g[i]) * u[i];
      ref::matvec(g.data(), inv.bindings[kDown], im, h, d.data());
      for (int64_t i = 0; i < h; ++i)
        if (partial)
          partial[t * h + i] = d[i];
        else
          row[i] += d[i];
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      with_input_permutation(with_block_formats(cpu_descriptor("cpu.reference.dense_swiglu", dense_swiglu::contract(), kReferencePriority, "scalar")));
};

class DenseSwigluFast final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  struct Pieces {
    float *n, *g, *u;
  };
  static Pieces layout(Workspace& ws, const dense_swiglu::Params& p, int64_t tokens) {
    const int64_t im = static_cast<int64_t>(p.intermediate_size);
    Pieces s;
    s.n = ws.take<float>(tokens * static_cast<int64_t>(p.hidden_size));
    s.g = ws.take<float>(tokens * im);
    s.u = ws.take<float>(tokens * im);
    return s;
  }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<dense_swiglu::Params>(), limits.max_tokens);
    });
  }
  Status encode(const Invocation& inv) const override {
    using namespace dense_swiglu;
    const Params& p = inv.signature->params<Params>();
    const int64_t h = static_cast<int64_t>(p.hidden_size);
    const int64_t im = static_cast<int64_t>(p.intermediate_size);
    const int64_t tokens = inv.batch->num_tokens();
    ThreadPool* pool = inv.ctx->pool;
    const auto& b = inv.bindings;
    Workspace ws(inv);
    const Pieces sc = layout(ws, p, tokens);
    FERRITE_RETURN_IF_ERROR(ws.status("cpu.fast.dense_swiglu"));
    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    float* partial = b.size() > kPartialOut && b[kPartialOut].data ? b[kPartialOut].as<float>() : nullptr;
    normed_projections(hidden, tokens, h, b[kNorm], static_cast<float>(p.eps), p.zero_centred,
                       sc.n, {{b[kGate], im, sc.g}, {b[kUp], im, sc.u}}, pool);
    silu_mul(sc.g, sc.u, tokens * im, sc.g);
    output_projection(sc.g, tokens, im, b[kDown], h, hidden, partial, pool);
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(cpu_descriptor("cpu.fast.dense_swiglu", dense_swiglu::contract(), kFastPriority,
                                            "SIMD GEMM, fused residual")));
};

}  // namespace

std::unique_ptr<Provider> make_dense_swiglu_reference() {
  return std::make_unique<DenseSwigluReference>();
}

std::unique_ptr<Provider> make_dense_swiglu_fast() { return std::make_unique<DenseSwigluFast>(); }

}  // namespace ferrite::cpu
