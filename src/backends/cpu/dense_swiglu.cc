// dense_swiglu on CPU: pre-norm, gate/up, SiLU product, down, residual add.
#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/reference_math.h"
#include "contracts/dense_swiglu.h"

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
    std::vector<float> n(h), g(im), u(im), d(h);
    for (int32_t t = 0; t < inv.batch->num_tokens(); ++t) {
      float* row = hidden + t * h;
      ref::rms_norm(row, inv.bindings[kNorm], h, p.eps, p.zero_centred, n.data());
      ref::matvec(n.data(), inv.bindings[kGate], h, im, g.data());
      ref::matvec(n.data(), inv.bindings[kUp], h, im, u.data());
      for (int64_t i = 0; i < im; ++i) g[i] = ref::silu(g[i]) * u[i];
      ref::matvec(g.data(), inv.bindings[kDown], im, h, d.data());
      for (int64_t i = 0; i < h; ++i) row[i] += d[i];
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      cpu_descriptor("cpu.reference.dense_swiglu", "dense_swiglu", kReferencePriority, "scalar");
};

}  // namespace

std::unique_ptr<Provider> make_dense_swiglu_reference() {
  return std::make_unique<DenseSwigluReference>();
}

}  // namespace ferrite::cpu
