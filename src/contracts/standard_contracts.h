// The standard contract set: every contract a model program may use.
#pragma once

#include <string_view>
#include <vector>

#include "contracts/contract.h"

namespace ferrite {

const std::vector<const ContractSchema*>& standard_contracts();
// nullptr when unknown.
const ContractSchema* find_contract(std::string_view id);

}  // namespace ferrite
