// Registry: the composition root of a backend (its contracts and providers).
// CapabilityCatalog: what a registry can run, derived from it, never kept by
// hand in a second list.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/provider.h"

namespace ferrite {

struct Capability {
  std::string contract_id;
  std::string contract_version;
  std::string provider;
  std::vector<DType> activation_dtypes;
  std::vector<DType> weight_dtypes;
  bool paged_kv = false;
  bool deterministic = true;
  bool replay_safe = true;
  int priority = 0;
};

class CapabilityCatalog {
 public:
  explicit CapabilityCatalog(std::vector<Capability> entries) : entries_(std::move(entries)) {}
  const std::vector<Capability>& entries() const { return entries_; }
  bool has_contract(const std::string& id) const;
  std::string to_string() const;  // a table, one provider per line

 private:
  std::vector<Capability> entries_;
};

class Registry {
 public:
  explicit Registry(BackendKind backend) : backend_(backend) {}
  BackendKind backend() const { return backend_; }
  void add_contract(const ContractSchema* schema);
  // Adds the provider and, when new, the contract its descriptor names.
  void add_provider(std::unique_ptr<Provider> provider);
  const ContractSchema* contract(const std::string& id) const;
  // Providers of a contract, highest priority first.
  std::vector<const Provider*> providers_for(const std::string& contract_id) const;
  const std::vector<std::unique_ptr<Provider>>& providers() const { return providers_; }
  // The contracts whose weights this backend multiplies through an input
  // permutation (act-order 4-bit: some provider of the contract declares
  // input_permutation). The loader keeps GPTQ desc_act modules in 4 bits
  // where every node that reads them has such a contract and expands the
  // others to 16 bits (LoadOptions::act_order_contracts, models/hf_quant.h);
  // a node whose providers cannot is refused by the plan.
  std::set<std::string> input_permutation_contracts() const {
    std::set<std::string> out;
    for (const auto& p : providers_)
      if (p->descriptor().input_permutation) out.insert(p->descriptor().contract_id);
    return out;
  }
  CapabilityCatalog catalog() const;

 private:
  BackendKind backend_;
  std::vector<const ContractSchema*> contracts_;
  std::vector<std::unique_ptr<Provider>> providers_;
};

}  // namespace ferrite
