// The CUDA backend's provider factories (one per contract; defined in the
// providers_*.cc files) and its registration table.
#pragma once

#include <memory>

#include "backends/cuda/cuda_common.h"
#include "runtime/provider.h"

namespace ferrite::cuda {

std::unique_ptr<Provider> make_token_embedding();
std::unique_ptr<Provider> make_rms_norm();
std::unique_ptr<Provider> make_residual_add();
std::unique_ptr<Provider> make_dense_linear();
std::unique_ptr<Provider> make_dense_swiglu();
std::unique_ptr<Provider> make_causal_paged_attention();
std::unique_ptr<Provider> make_last_token_dense_linear();
std::unique_ptr<Provider> make_last_token_masked_argmax();
std::unique_ptr<Provider> make_last_token_sample();
std::unique_ptr<Provider> make_gated_delta_recurrent_attention();
std::unique_ptr<Provider> make_routed_swiglu_moe();
std::unique_ptr<Provider> make_routed_shared_swiglu_moe();

}  // namespace ferrite::cuda
