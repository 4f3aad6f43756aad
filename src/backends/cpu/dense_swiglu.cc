// dense_swiglu on CPU: pre-norm, gate/up, SiLU product, down, residual add.
#include "contracts/dense_swiglu.h"

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/fast_util.h"
#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/vec.h"
#include "backends/cpu/reference_math.h"

namespace ferrite::cpu {
namespace {

class DenseSwigluReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace dense_swiglu;
    const Params p = Params::from(inv.signature->attrs);
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
      with_block_formats(cpu_descriptor("cpu.reference.dense_swiglu", dense_swiglu::contract(), kReferencePriority, "scalar"));
};

class DenseSwigluFast final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    using namespace dense_swiglu;
    const Params p = Params::from(node.attrs);
    const int64_t t = limits.max_tokens;
    return Scratch::bytes_for({t * static_cast<int64_t>(p.hidden_size),
                               t * static_cast<int64_t>(p.intermediate_size),
                               t * static_cast<int64_t>(p.intermediate_size)});
  }
  Status encode(const Invocation& inv) const override {
    using namespace dense_swiglu;
    const Params p = Params::from(inv.signature->attrs);
    const int64_t h = static_cast<int64_t>(p.hidden_size);
    const int64_t im = static_cast<int64_t>(p.intermediate_size);
    const int64_t tokens = inv.batch->num_tokens();
    ThreadPool* pool = inv.ctx->pool;
    const auto& b = inv.bindings;
    Scratch scratch(inv);
    float* n = scratch.floats(tokens * h);
    float* g = scratch.floats(tokens * im);
    float* u = scratch.floats(tokens * im);
    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    float* partial = b.size() > kPartialOut && b[kPartialOut].data ? b[kPartialOut].as<float>() : nullptr;
    rms_norm(hidden, tokens, h, b[kNorm].data, b[kNorm].dtype, static_cast<float>(p.eps),
             p.zero_centred, n, pool);
    matmul(n, tokens, h, b[kGate].data, b[kGate].dtype, im, g, pool);
    matmul(n, tokens, h, b[kUp].data, b[kUp].dtype, im, u, pool);
    silu_mul(g, u, tokens * im, g);
    if (partial)
      matmul(g, tokens, im, b[kDown].data, b[kDown].dtype, h, partial, pool);
    else
      matmul_accumulate(g, tokens, im, b[kDown].data, b[kDown].dtype, h, hidden, pool);
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ = with_block_formats(cpu_descriptor("cpu.fast.dense_swiglu", dense_swiglu::contract(), kFastPriority,
                                            "SIMD GEMM, fused residual"));
};

}  // namespace

std::unique_ptr<Provider> make_dense_swiglu_reference() {
  return std::make_unique<DenseSwigluReference>();
}

std::unique_ptr<Provider> make_dense_swiglu_fast() { return std::make_unique<DenseSwigluFast>(); }

}  // namespace ferrite::cpu
