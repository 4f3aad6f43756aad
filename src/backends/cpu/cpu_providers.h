// The CPU backend's composition root.
//
// Two provider sets implement every contract on CPU:
//  - reference: plain scalar code written for clarity; it is the oracle the
//    conformance suite compares every other provider against, so it covers
//    every contract (the standard contract set is the reference set's);
//  - fast: SIMD kernels on all cores, bf16/f16 weights read directly.
// The table of providers is in cpu_providers.cc (one line per provider).
#pragma once

#include <memory>

#include "runtime/registry.h"

namespace ferrite {

enum class CpuProviderSet { kReference, kFast, kBoth };

// Registers the chosen CPU providers (and, through them, their contracts).
void register_cpu_providers(Registry& registry, CpuProviderSet set = CpuProviderSet::kBoth);
std::unique_ptr<Registry> make_cpu_registry(CpuProviderSet set = CpuProviderSet::kBoth);

}  // namespace ferrite
