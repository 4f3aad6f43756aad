// residual_add on CPU (element-wise; the reference is already memory bound).
#include "contracts/residual_add.h"

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/cpu_util.h"

namespace ferrite::cpu {
namespace {

class ResidualAddReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace residual_add;
    const int64_t n = inv.batch->num_tokens() *
                      static_cast<int64_t>(inv.signature->params<Params>().hidden_size);
    const float* a = inv.bindings[kA].as<float>();
    const float* b = inv.bindings[kB].as<float>();
    float* out = inv.bindings[kOut].as<float>();
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ = cpu_descriptor("cpu.reference.residual_add", residual_add::contract(),
                                            kReferencePriority, "element-wise add");
};

}  // namespace

std::unique_ptr<Provider> make_residual_add_reference() {
  return std::make_unique<ResidualAddReference>();
}

}  // namespace ferrite::cpu
