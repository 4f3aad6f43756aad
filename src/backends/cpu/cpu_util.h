// Helpers shared by the CPU providers: reading weights of any stored dtype
// as f32, and the boilerplate of a provider descriptor.
#pragma once

#include <vector>

#include "runtime/provider.h"
#include "tensor/tensor.h"

namespace ferrite::cpu {

// Element i of a weight view as f32.
inline float weight_at(const TensorView& w, int64_t i) { return load_as_f32(w.data, w.dtype, i); }

// Row r (length n) of a [rows, n] weight as f32 (any weight format; a
// block format's rows are whole blocks).
inline void weight_row(const TensorView& w, int64_t r, int64_t n, float* out) {
  dequantize_row(w.dtype, static_cast<const char*>(w.data) + dtype_bytes(w.dtype, r * n), out, n);
}

// The weight formats of the CPU providers whose weights include matrices
// (embeddings, projections, MLPs, experts, LM head): f32, bf16, f16 and the
// GGUF block formats (q8_0, q4_0, q4_k, q5_k, q6_k) and the repacked
// Hugging Face formats (f8_e4m3_b128, u4_g128; models/hf_quant.h: read through
// the plain dequantize-a-panel path, the oracle for the CUDA kernels to come),
// in any mix across bindings. The reference reads block weights element by element as their
// dequantization defines them; the fast kernels dequantize panels of rows
// in L1 (kernels/quant.h). Providers of norms and samplers keep the
// default f32 / bf16 / f16 (GGUF files keep vectors in f32).
inline std::vector<DType> cpu_matrix_weight_formats() {
  return {DType::kF32,  DType::kBF16, DType::kF16,  DType::kQ8_0,   DType::kQ4_0,
          DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF8B128, DType::kU4G128};
}
inline ProviderDescriptor with_block_formats(ProviderDescriptor d) {
  d.weight_dtypes = cpu_matrix_weight_formats();
  return d;
}

// For providers whose products read act-order weights through their input
// permutation (weight_product.h, reference_math.h's matvec).
inline ProviderDescriptor with_input_permutation(ProviderDescriptor d) {
  d.input_permutation = true;
  return d;
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
  d.partial_out = true;  // every CPU block provider writes partial_out when bound
  d.priority = priority;
  d.summary = std::move(summary);
  return d;
}

// Priorities: the fast set wins when both are registered.
constexpr int kReferencePriority = 0;
constexpr int kFastPriority = 10;

}  // namespace ferrite::cpu
