#include "runtime/registry.h"

#include <fmt/format.h>

#include <algorithm>

namespace ferrite {

bool CapabilityCatalog::has_contract(const std::string& id) const {
  for (const Capability& c : entries_)
    if (c.contract_id == id) return true;
  return false;
}

static std::string dtype_list(const std::vector<DType>& v) {
  std::string s;
  for (DType t : v) {
    if (!s.empty()) s += ",";
    s += dtype_name(t);
  }
  return s.empty() ? "-" : s;
}

std::string CapabilityCatalog::to_string() const {
  std::string s = fmt::format("{:<28} {:<5} {:<36} {:<10} {:<16} {}\n", "contract", "ver",
                              "provider", "act", "weights", "flags");
  for (const Capability& c : entries_) {
    std::string flags;
    if (c.paged_kv) flags += "paged ";
    if (c.deterministic) flags += "deterministic ";
    if (c.replay_safe) flags += "replay";
    s += fmt::format("{:<28} {:<5} {:<36} {:<10} {:<16} {}\n", c.contract_id, c.contract_version,
                     c.provider, dtype_list(c.activation_dtypes), dtype_list(c.weight_dtypes),
                     flags);
  }
  return s;
}

void Registry::add_contract(const ContractSchema* schema) {
  FERRITE_CHECK(contract(schema->id()) == nullptr) << "duplicate contract " << schema->id();
  contracts_.push_back(schema);
}

void Registry::add_provider(std::unique_ptr<Provider> provider) {
  const ProviderDescriptor& d = provider->descriptor();
  if (d.contract && contract(d.contract->id()) == nullptr) add_contract(d.contract);
  FERRITE_CHECK(contract(d.contract_id) != nullptr)
      << d.name << ": contract " << d.contract_id << " not registered";
  FERRITE_CHECK(d.backend == backend_) << d.name << " registered on the wrong backend";
  for (const auto& p : providers_)
    FERRITE_CHECK(p->descriptor().name != d.name) << "duplicate provider " << d.name;
  providers_.push_back(std::move(provider));
}

const ContractSchema* Registry::contract(const std::string& id) const {
  for (const ContractSchema* c : contracts_)
    if (c->id() == id) return c;
  return nullptr;
}

std::vector<const Provider*> Registry::providers_for(const std::string& contract_id) const {
  std::vector<const Provider*> out;
  for (const auto& p : providers_)
    if (p->descriptor().contract_id == contract_id) out.push_back(p.get());
  std::stable_sort(out.begin(), out.end(), [](const Provider* a, const Provider* b) {
    return a->descriptor().priority > b->descriptor().priority;
  });
  return out;
}

CapabilityCatalog Registry::catalog() const {
  std::vector<Capability> entries;
  for (const auto& p : providers_) {
    const ProviderDescriptor& d = p->descriptor();
    const ContractSchema* c = contract(d.contract_id);
    entries.push_back({d.contract_id, c->version_string(), d.name, d.activation_dtypes,
                       d.weight_dtypes, d.paged_kv, d.deterministic, d.replay_safe, d.priority});
  }
  return CapabilityCatalog(std::move(entries));
}

}  // namespace ferrite
