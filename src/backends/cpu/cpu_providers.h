// The CPU backend's registration table: one line per provider.
//
// Two provider sets implement every contract on CPU:
//  - reference: plain scalar code written for clarity; it is the oracle the
//    conformance suite compares every other provider against;
//  - fast: SIMD kernels on all cores, bf16/f16 weights read directly.
#pragma once

#include <memory>

#include "runtime/registry.h"

namespace ferrite {

enum class CpuProviderSet { kReference, kFast, kBoth };

// Registers the standard contracts and the chosen CPU providers.
void register_cpu_providers(Registry& registry, CpuProviderSet set = CpuProviderSet::kBoth);
std::unique_ptr<Registry> make_cpu_registry(CpuProviderSet set = CpuProviderSet::kBoth);

namespace cpu {
// One factory per provider (defined in the op's file).
std::unique_ptr<Provider> make_token_embedding_reference();
std::unique_ptr<Provider> make_rms_norm_reference();
std::unique_ptr<Provider> make_residual_add_reference();
std::unique_ptr<Provider> make_dense_linear_reference();
std::unique_ptr<Provider> make_dense_swiglu_reference();
std::unique_ptr<Provider> make_causal_paged_attention_reference();
std::unique_ptr<Provider> make_last_token_dense_linear_reference();
std::unique_ptr<Provider> make_last_token_masked_argmax_reference();
std::unique_ptr<Provider> make_last_token_sample_reference();
std::unique_ptr<Provider> make_gated_delta_recurrent_attention_reference();
std::unique_ptr<Provider> make_routed_swiglu_moe_reference();
std::unique_ptr<Provider> make_routed_shared_swiglu_moe_reference();

std::unique_ptr<Provider> make_rms_norm_fast();
std::unique_ptr<Provider> make_dense_linear_fast();
std::unique_ptr<Provider> make_dense_swiglu_fast();
std::unique_ptr<Provider> make_causal_paged_attention_fast();
std::unique_ptr<Provider> make_last_token_dense_linear_fast();
std::unique_ptr<Provider> make_gated_delta_recurrent_attention_fast();
std::unique_ptr<Provider> make_routed_swiglu_moe_fast();
std::unique_ptr<Provider> make_routed_shared_swiglu_moe_fast();
}  // namespace cpu

}  // namespace ferrite
