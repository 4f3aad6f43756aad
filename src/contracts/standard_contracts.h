// The standard contract set: every contract a model program may use. It is
// not a second list: it is the set of contracts the CPU reference providers
// implement (the conformance oracle covers every contract), collected from
// their descriptors by backends/cpu/cpu_providers.cc, which defines these.
#pragma once

#include <string_view>
#include <vector>

#include "contracts/contract.h"

namespace ferrite {

const std::vector<const ContractSchema*>& standard_contracts();
// nullptr when unknown.
const ContractSchema* find_contract(std::string_view id);

}  // namespace ferrite
