#include "contracts/standard_contracts.h"

#include "contracts/causal_paged_attention.h"
#include "contracts/dense_linear.h"
#include "contracts/dense_swiglu.h"
#include "contracts/gated_delta_recurrent_attention.h"
#include "contracts/last_token_dense_linear.h"
#include "contracts/last_token_masked_argmax.h"
#include "contracts/last_token_sample.h"
#include "contracts/residual_add.h"
#include "contracts/rms_norm.h"
#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"
#include "contracts/token_embedding.h"

namespace ferrite {

const std::vector<const ContractSchema*>& standard_contracts() {
  static const std::vector<const ContractSchema*> all = {
      &token_embedding::contract(),
      &rms_norm::contract(),
      &residual_add::contract(),
      &dense_linear::contract(),
      &dense_swiglu::contract(),
      &causal_paged_attention::contract(),
      &gated_delta_recurrent_attention::contract(),
      &routed_swiglu_moe::contract(),
      &routed_shared_swiglu_moe::contract(),
      &last_token_dense_linear::contract(),
      &last_token_masked_argmax::contract(),
      &last_token_sample::contract(),
  };
  return all;
}

const ContractSchema* find_contract(std::string_view id) {
  for (const ContractSchema* c : standard_contracts())
    if (c->id() == id) return c;
  return nullptr;
}

}  // namespace ferrite
