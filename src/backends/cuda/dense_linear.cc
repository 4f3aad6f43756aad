// dense_linear on CUDA: gemm() (GEMV at decode, cuBLASLt bf16 / f16, SIMT f32).
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "contracts/dense_linear.h"

namespace ferrite::cuda {
namespace {

class DenseLinear final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace dense_linear;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    return gemm(state(inv), b[kX].data, b[kX].dtype, inv.batch->num_tokens(), i64(p.in_features),
                b[kWeight].data, b[kWeight].dtype, i64(p.out_features), b[kOut].data,
                b[kOut].dtype, false, b[kBias].data, b[kBias].dtype);
  }

 private:
  ProviderDescriptor desc_ = with_block_formats(cuda_descriptor("cuda.dense_linear", dense_linear::contract(),
                                             "GEMV (decode) / cuBLASLt bf16 / SIMT f32"));
};

}  // namespace

std::unique_ptr<Provider> make_dense_linear() { return std::make_unique<DenseLinear>(); }

}  // namespace ferrite::cuda
