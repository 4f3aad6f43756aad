// The CPU provider table: one line per provider. Each provider's file (one
// per contract: <contract>.cc) defines its factory cpu::make_<name>(); its
// descriptor names the contract, which the registry learns from it.
#include "backends/cpu/cpu_providers.h"

#include "contracts/standard_contracts.h"

// X(name, sets): sets is kRef (reference set only), kFast (fast set only) or
// kShared (the reference provider, which the fast set reuses where the op is
// trivially memory bound: embedding gather, residual add, the sampler).
#define FERRITE_CPU_PROVIDERS(X)                         \
  X(token_embedding_reference, kShared)                  \
  X(rms_norm_reference, kRef)                            \
  X(residual_add_reference, kShared)                     \
  X(dense_linear_reference, kRef)                        \
  X(dense_swiglu_reference, kRef)                        \
  X(causal_paged_attention_reference, kRef)              \
  X(last_token_dense_linear_reference, kRef)             \
  X(last_token_masked_argmax_reference, kShared)         \
  X(last_token_sample_reference, kShared)                \
  X(gated_delta_recurrent_attention_reference, kRef)     \
  X(routed_swiglu_moe_reference, kRef)                   \
  X(routed_shared_swiglu_moe_reference, kRef)            \
  X(tp_all_reduce_sum, kShared)                          \
  X(tp_all_gather, kShared)                              \
  X(rms_norm_fast, kFast)                                \
  X(dense_linear_fast, kFast)                            \
  X(dense_swiglu_fast, kFast)                            \
  X(causal_paged_attention_fast, kFast)                  \
  X(last_token_dense_linear_fast, kFast)                 \
  X(gated_delta_recurrent_attention_fast, kFast)         \
  X(routed_swiglu_moe_fast, kFast)                       \
  X(routed_shared_swiglu_moe_fast, kFast)

namespace ferrite {

namespace cpu {
#define FERRITE_DECLARE(name, sets) std::unique_ptr<Provider> make_##name();
FERRITE_CPU_PROVIDERS(FERRITE_DECLARE)
#undef FERRITE_DECLARE
}  // namespace cpu

namespace {
enum Sets { kRef, kFast, kShared };
bool in_set(Sets sets, CpuProviderSet set) {
  switch (sets) {
    case kRef: return set != CpuProviderSet::kFast;
    case kFast: return set != CpuProviderSet::kReference;
    case kShared: return true;
  }
  return false;
}
}  // namespace

void register_cpu_providers(Registry& r, CpuProviderSet set) {
#define FERRITE_REGISTER(name, sets) \
  if (in_set(sets, set)) r.add_provider(cpu::make_##name());
  FERRITE_CPU_PROVIDERS(FERRITE_REGISTER)
#undef FERRITE_REGISTER
}

std::unique_ptr<Registry> make_cpu_registry(CpuProviderSet set) {
  auto r = std::make_unique<Registry>(BackendKind::kCpu);
  register_cpu_providers(*r, set);
  return r;
}

// The standard contract set: every contract the reference set implements.
const std::vector<const ContractSchema*>& standard_contracts() {
  static const std::vector<const ContractSchema*> all = [] {
    std::vector<const ContractSchema*> v;
    Registry r(BackendKind::kCpu);
    register_cpu_providers(r, CpuProviderSet::kReference);
    for (const auto& p : r.providers()) v.push_back(p->descriptor().contract);
    return v;
  }();
  return all;
}

const ContractSchema* find_contract(std::string_view id) {
  for (const ContractSchema* c : standard_contracts())
    if (c->id() == id) return c;
  return nullptr;
}

}  // namespace ferrite
