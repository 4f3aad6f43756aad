// rms_norm on CUDA: one block per row, f32 sums.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/rms_norm.h"

namespace ferrite::cuda {
namespace {

class RmsNorm final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace rms_norm;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    profile_mark(stream_of(inv), "final_norm", state(inv).capturing);
    return launch_rms_norm(stream_of(inv), b[kX].data, b[kOut].data, b[kX].dtype,
                           b[kWeight].data, b[kWeight].dtype, inv.batch->num_tokens(),
                           i64(p.hidden_size), static_cast<float>(p.eps), p.zero_centred);
  }

 private:
  ProviderDescriptor desc_ =
      cuda_descriptor("cuda.rms_norm", rms_norm::contract(), "one block per row, f32 sums");
};

}  // namespace

std::unique_ptr<Provider> make_rms_norm() { return std::make_unique<RmsNorm>(); }

}  // namespace ferrite::cuda
