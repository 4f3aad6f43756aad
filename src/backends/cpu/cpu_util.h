// Helpers shared by the CPU providers: reading weights of any stored dtype
// as f32, and the boilerplate of a provider descriptor.
#pragma once

#include <vector>

#include "runtime/provider.h"
#include "tensor/tensor.h"

namespace ferrite::cpu {

// Element i of a weight view as f32.
inline float weight_at(const TensorView& w, int64_t i) { return load_as_f32(w.data, w.dtype, i); }

// Row r (length n) of a [rows, n] weight as f32.
inline void weight_row(const TensorView& w, int64_t r, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = load_as_f32(w.data, w.dtype, r * n + i);
}

inline ProviderDescriptor cpu_descriptor(std::string name, const ContractSchema& contract,
                                         int priority, std::string summary,
                                         bool paged_kv = false) {
  ProviderDescriptor d;
  d.name = std::move(name);
  d.contract = &contract;
  d.contract_id = contract.id();
  d.contract_major = contract.major();
  d.backend = BackendKind::kCpu;
  d.activation_dtypes = {DType::kF32};
  d.weight_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  d.paged_kv = paged_kv;
  d.priority = priority;
  d.summary = std::move(summary);
  return d;
}

// Priorities: the fast set wins when both are registered.
constexpr int kReferencePriority = 0;
constexpr int kFastPriority = 10;

}  // namespace ferrite::cpu
