// dense_linear on CPU.
#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/reference_math.h"
#include "contracts/dense_linear.h"

namespace ferrite::cpu {
namespace {

class DenseLinearReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace dense_linear;
    const Params p = Params::from(inv.signature->attrs);
    const int64_t in = static_cast<int64_t>(p.in_features);
    const int64_t out = static_cast<int64_t>(p.out_features);
    const float* x = inv.bindings[kX].as<float>();
    float* y = inv.bindings[kOut].as<float>();
    for (int32_t t = 0; t < inv.batch->num_tokens(); ++t)
      ref::matvec(x + t * in, inv.bindings[kWeight], in, out, y + t * out, &inv.bindings[kBias]);
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      cpu_descriptor("cpu.reference.dense_linear", "dense_linear", kReferencePriority, "scalar");
};

}  // namespace

std::unique_ptr<Provider> make_dense_linear_reference() {
  return std::make_unique<DenseLinearReference>();
}

}  // namespace ferrite::cpu
