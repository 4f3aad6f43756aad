#include "runtime/provider.h"

#include <algorithm>

#include "base/hash.h"

namespace ferrite {

uint64_t ProviderDescriptor::fingerprint() const {
  uint64_t h = fnv1a(name);
  h = fnv1a(contract_id, h);
  h = hash_combine(h, static_cast<uint64_t>(contract_major));
  for (DType t : activation_dtypes) h = hash_combine(h, static_cast<uint64_t>(t));
  for (DType t : weight_dtypes) h = hash_combine(h, static_cast<uint64_t>(t) + 1000);
  if (partial_out) h = hash_combine(h, 0x7061727469616cull);
  if (input_permutation) h = hash_combine(h, 0x7065726d757465ull);
  return h;
}

Status Provider::supports(const NodeSignature& node) const {
  const ProviderDescriptor& d = descriptor();
  if (node.contract->id() != d.contract_id || node.contract->major() != d.contract_major)
    return unsupported(d.name + ": implements " + d.contract_id + " " +
                       std::to_string(d.contract_major) + ".x");
  auto has = [](const std::vector<DType>& v, DType t) {
    return std::find(v.begin(), v.end(), t) != v.end();
  };
  if (!has(d.activation_dtypes, node.activation_dtype))
    return unsupported(d.name + ": no " + std::string(dtype_name(node.activation_dtype)) +
                       " activations");
  const auto& specs = node.contract->bindings();
  for (size_t i = 0; i < specs.size() && i < node.binding_dtypes.size(); ++i) {
    if (specs[i].role == "partial_out" && node.binding_dtypes[i] && !d.partial_out)
      return unsupported(d.name + ": no partial_out (tensor-parallel) output");
    if (specs[i].kind != BindingKind::kWeight || !node.binding_dtypes[i]) continue;
    if (i < node.binding_permuted.size() && node.binding_permuted[i] && !d.input_permutation)
      return unsupported(d.name + ": no act-order (input-permuted) 4-bit weights for '" +
                         specs[i].role + "'");
    if (!has(d.weight_dtypes, *node.binding_dtypes[i]))
      return unsupported(d.name + ": no " + std::string(dtype_name(*node.binding_dtypes[i])) +
                         " weights for '" + specs[i].role + "'");
  }
  return Status::ok();
}

}  // namespace ferrite
