// residual_add on CUDA: element-wise.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "contracts/residual_add.h"

namespace ferrite::cuda {
namespace {

class ResidualAdd final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace residual_add;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    return launch_add(stream_of(inv), b[kA].data, b[kB].data, b[kOut].data, b[kA].dtype,
                      inv.batch->num_tokens() * i64(p.hidden_size));
  }

 private:
  ProviderDescriptor desc_ = cuda_descriptor("cuda.residual_add", residual_add::contract(), "element-wise");
};

}  // namespace

std::unique_ptr<Provider> make_residual_add() { return std::make_unique<ResidualAdd>(); }

}  // namespace ferrite::cuda
