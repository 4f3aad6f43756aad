// rms_norm on CPU: reference (scalar, double sums) and fast (SIMD row kernel,
// rows split over threads).
#include "contracts/rms_norm.h"

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/kernels/vec.h"
#include "backends/cpu/reference_math.h"

namespace ferrite::cpu {
namespace {

class RmsNormReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace rms_norm;
    const Params& p = inv.signature->params<Params>();
    const int64_t h = static_cast<int64_t>(p.hidden_size);
    const float* x = inv.bindings[kX].as<float>();
    float* y = inv.bindings[kOut].as<float>();
    for (int32_t t = 0; t < inv.batch->num_tokens(); ++t)
      ref::rms_norm(x + t * h, inv.bindings[kWeight], h, p.eps, p.zero_centred, y + t * h);
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      cpu_descriptor("cpu.reference.rms_norm", rms_norm::contract(), kReferencePriority, "scalar");
};

class RmsNormFast final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace rms_norm;
    const Params& p = inv.signature->params<Params>();
    const TensorView& w = inv.bindings[kWeight];
    rms_norm(inv.bindings[kX].as<float>(), inv.batch->num_tokens(),
             static_cast<int64_t>(p.hidden_size), w.data, w.dtype, static_cast<float>(p.eps),
             p.zero_centred, inv.bindings[kOut].as<float>(), inv.ctx->pool);
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      cpu_descriptor("cpu.fast.rms_norm", rms_norm::contract(), kFastPriority, "SIMD rows, all cores");
};

}  // namespace

std::unique_ptr<Provider> make_rms_norm_reference() { return std::make_unique<RmsNormReference>(); }

std::unique_ptr<Provider> make_rms_norm_fast() { return std::make_unique<RmsNormFast>(); }

}  // namespace ferrite::cpu
