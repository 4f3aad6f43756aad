// The CPU registration table.
#include "backends/cpu/cpu_providers.h"

#include "contracts/standard_contracts.h"

namespace ferrite {

void register_cpu_providers(Registry& r, CpuProviderSet set) {
  for (const ContractSchema* c : standard_contracts()) r.add_contract(c);
  if (set != CpuProviderSet::kFast) {
    r.add_provider(cpu::make_token_embedding_reference());
    r.add_provider(cpu::make_rms_norm_reference());
    r.add_provider(cpu::make_residual_add_reference());
    r.add_provider(cpu::make_dense_linear_reference());
    r.add_provider(cpu::make_dense_swiglu_reference());
    r.add_provider(cpu::make_causal_paged_attention_reference());
    r.add_provider(cpu::make_last_token_dense_linear_reference());
    r.add_provider(cpu::make_last_token_masked_argmax_reference());
    r.add_provider(cpu::make_last_token_sample_reference());
    r.add_provider(cpu::make_gated_delta_recurrent_attention_reference());
    r.add_provider(cpu::make_routed_swiglu_moe_reference());
    r.add_provider(cpu::make_routed_shared_swiglu_moe_reference());
  }
  if (set != CpuProviderSet::kReference) {
    // The fast set reuses the reference where the op is trivially memory
    // bound (embedding gather, residual add, sampler) and registers its own
    // providers for the rest.
    r.add_provider(cpu::make_rms_norm_fast());
    r.add_provider(cpu::make_dense_linear_fast());
    r.add_provider(cpu::make_dense_swiglu_fast());
    r.add_provider(cpu::make_causal_paged_attention_fast());
    r.add_provider(cpu::make_last_token_dense_linear_fast());
    r.add_provider(cpu::make_gated_delta_recurrent_attention_fast());
    r.add_provider(cpu::make_routed_swiglu_moe_fast());
    r.add_provider(cpu::make_routed_shared_swiglu_moe_fast());
    if (set == CpuProviderSet::kFast) {
      r.add_provider(cpu::make_token_embedding_reference());
      r.add_provider(cpu::make_residual_add_reference());
      r.add_provider(cpu::make_last_token_masked_argmax_reference());
      r.add_provider(cpu::make_last_token_sample_reference());
    }
  }
}

std::unique_ptr<Registry> make_cpu_registry(CpuProviderSet set) {
  auto r = std::make_unique<Registry>(BackendKind::kCpu);
  register_cpu_providers(*r, set);
  return r;
}

}  // namespace ferrite
