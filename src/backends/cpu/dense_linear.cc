// dense_linear on CPU.
#include "contracts/dense_linear.h"

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/weight_product.h"
#include "backends/cpu/reference_math.h"

namespace ferrite::cpu {
namespace {

class DenseLinearReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace dense_linear;
    const Params& p = inv.signature->params<Params>();
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
      with_input_permutation(with_block_formats(cpu_descriptor("cpu.reference.dense_linear", dense_linear::contract(), kReferencePriority, "scalar")));
};

class DenseLinearFast final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace dense_linear;
    const Params& p = inv.signature->params<Params>();
    const int64_t in = static_cast<int64_t>(p.in_features);
    const int64_t out = static_cast<int64_t>(p.out_features);
    const int64_t tokens = inv.batch->num_tokens();
    const TensorView& w = inv.bindings[kWeight];
    float* y = inv.bindings[kOut].as<float>();
    weight_product(inv.bindings[kX].as<float>(), tokens, in, w, out, y, /*accumulate=*/false,
                   inv.ctx->pool);
    const TensorView& bias = inv.bindings[kBias];
    if (bias.data)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t o = 0; o < out; ++o) y[t * out + o] += weight_at(bias, o);
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(cpu_descriptor("cpu.fast.dense_linear", dense_linear::contract(), kFastPriority,
                                            "SIMD GEMV/GEMM on stored weights")));
};

}  // namespace

std::unique_ptr<Provider> make_dense_linear_reference() {
  return std::make_unique<DenseLinearReference>();
}

std::unique_ptr<Provider> make_dense_linear_fast() { return std::make_unique<DenseLinearFast>(); }

}  // namespace ferrite::cpu
