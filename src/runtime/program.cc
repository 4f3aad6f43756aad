#include "runtime/program.h"

namespace ferrite {

void ProgramNode::bind(const ContractSchema& contract,
                       std::initializer_list<std::pair<std::string_view, BindingRef>> roles) {
  contract_id = contract.id();
  bindings.assign(contract.bindings().size(), BindingRef::none());
  for (const auto& [role, ref] : roles) {
    const int i = contract.binding_index(std::string(role));
    FERRITE_CHECK(i >= 0) << contract.id() << " has no binding '" << role << "'";
    bindings[i] = ref;
  }
}

const WeightDecl* ModelProgram::find_weight(const std::string& name) const {
  for (const WeightDecl& w : weights)
    if (w.name == name) return &w;
  return nullptr;
}

const ValueDecl* ModelProgram::find_value(const std::string& name) const {
  for (const ValueDecl& v : values)
    if (v.name == name) return &v;
  return nullptr;
}

const StateDecl* ModelProgram::find_state(const std::string& name) const {
  for (const StateDecl& s : states)
    if (s.name == name) return &s;
  return nullptr;
}

int64_t ModelProgram::weight_bytes() const {
  int64_t n = 0;
  for (const WeightDecl& w : weights) {
    n += dtype_bytes(w.dtype, w.shape.numel());
    // An act-order weight's permutation table: an int32 per input column per run.
    if (w.perm_rows > 0) n += w.shape.numel() / w.perm_rows * static_cast<int64_t>(sizeof(int32_t));
  }
  return n;
}

}  // namespace ferrite
