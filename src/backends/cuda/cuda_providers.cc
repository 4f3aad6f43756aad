// The CUDA provider table: one line per provider. Each provider's file (one
// per contract: <contract>.cc, kernels under kernels/) defines its factory
// cuda::make_<name>(); its descriptor names the contract, which the registry
// learns from it.
#include <memory>

#include "backends/cuda/cuda_backend.h"
#include "runtime/provider.h"

#define FERRITE_CUDA_PROVIDERS(X)          \
  X(token_embedding)                       \
  X(rms_norm)                              \
  X(residual_add)                          \
  X(dense_linear)                          \
  X(dense_swiglu)                          \
  X(causal_paged_attention)                \
  X(last_token_dense_linear)               \
  X(last_token_masked_argmax)              \
  X(last_token_sample)                     \
  X(gated_delta_recurrent_attention)       \
  X(routed_swiglu_moe)                     \
  X(routed_shared_swiglu_moe)

namespace ferrite {

namespace cuda {
#define FERRITE_DECLARE(name) std::unique_ptr<Provider> make_##name();
FERRITE_CUDA_PROVIDERS(FERRITE_DECLARE)
#undef FERRITE_DECLARE
}  // namespace cuda

void register_cuda_providers(Registry& r) {
#define FERRITE_REGISTER(name) r.add_provider(cuda::make_##name());
  FERRITE_CUDA_PROVIDERS(FERRITE_REGISTER)
#undef FERRITE_REGISTER
}

std::unique_ptr<Registry> make_cuda_registry() {
  auto r = std::make_unique<Registry>(BackendKind::kCuda);
  register_cuda_providers(*r);
  return r;
}

}  // namespace ferrite
