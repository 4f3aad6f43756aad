// The block contracts' tensor-parallel output (partial_out, the optional
// last binding: attention 1.1, dense_swiglu 1.1, the MoE contracts 1.1,
// gated delta 1.2): a few cases of each block with partial_out bound, so
// every provider that writes it (ProviderDescriptor::partial_out) is held to
// the reference's contribution (and hidden left unchanged); providers
// without it are not asked (supports() refuses).
#include <set>

#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

std::vector<Case> causal_paged_attention_cases();
std::vector<Case> gated_delta_recurrent_attention_cases();
std::vector<Case> routed_swiglu_moe_cases();
std::vector<Case> routed_shared_swiglu_moe_cases();
std::vector<Case> dense_swiglu_cases();

std::vector<Case> partial_out_cases() {
  std::vector<Case> out;
  for (auto gen : {causal_paged_attention_cases, gated_delta_recurrent_attention_cases,
                   routed_swiglu_moe_cases, routed_shared_swiglu_moe_cases, dense_swiglu_cases}) {
    int taken = 0;
    for (Case& c : gen()) {
      if (taken == 3) break;
      const int index = c.contract->binding_index("partial_out");
      FERRITE_CHECK(index >= 0) << c.contract->id();
      const Shape hidden = c.bindings.at(0).shape;  // [tokens, hidden_size] in every block
      c.bindings.resize(c.contract->bindings().size());
      c.bindings[index] = zeros(DType::kF32, hidden, true);
      c.name += "_partial_out";
      out.push_back(std::move(c));
      ++taken;
    }
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(partial_out_cases);

}  // namespace ferrite::conformance
