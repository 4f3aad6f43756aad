// Cases of routed_swiglu_moe and routed_shared_swiglu_moe: two sequences
// (9 tokens and 1 token) routed over 8 experts, top-2 and top-3, with and
// without renormalisation, plain and zero-centred norms, f32 and bf16
// weights; the shared variant adds a sigmoid-gated shared expert.
#include <cmath>

#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

std::vector<Case> moe_cases(bool shared) {
  const int64_t hidden = 64, experts = 8, inter = 32, shared_inter = 48;
  std::vector<Case> out;
  CaseRng rng(shared ? 13 : 12);
  for (int64_t top_k : {2, 3}) {
    for (bool normalize : {true, false}) {
      for (DType wt : {DType::kBF16, DType::kF32}) {
        const bool zc = shared;
        Case c;
        c.name = "e8_top" + std::to_string(top_k) + (normalize ? "_norm_" : "_raw_") +
                 std::string(dtype_name(wt));
        c.contract =
            shared ? &routed_shared_swiglu_moe::contract() : &routed_swiglu_moe::contract();
        c.attrs.set("hidden_size", u(hidden))
            .set("num_experts", u(experts))
            .set("top_k", u(top_k))
            .set("intermediate_size", u(inter))
            .set("normalize_topk", normalize)
            .set("eps", 1e-6)
            .set("zero_centred", zc);
        if (shared) c.attrs.set("shared_intermediate_size", u(shared_inter));
        add_sequence(c, 9, 0);
        add_sequence(c, 1, 20);
        const int64_t tokens = c.batch.num_tokens();
        const float sh = 1.0f / std::sqrt(static_cast<float>(hidden));
        const float si = 1.0f / std::sqrt(static_cast<float>(inter));
        c.bindings = {
            random_tensor(rng, DType::kF32, {tokens, hidden}, -1, 1, true),
            random_tensor(rng, wt, {hidden}, zc ? -0.3f : 0.7f, zc ? 0.3f : 1.3f, false),
            random_tensor(rng, wt, {experts, hidden}, -4 * sh, 4 * sh, false),
            random_tensor(rng, wt, {experts, 2, inter, hidden}, -2 * sh, 2 * sh, false),
            random_tensor(rng, wt, {experts, hidden, inter}, -si, si, false),
        };
        if (shared) {
          const float ss = 1.0f / std::sqrt(static_cast<float>(shared_inter));
          c.bindings.push_back(random_tensor(rng, wt, {1, hidden}, -2 * sh, 2 * sh, false));
          c.bindings.push_back(
              random_tensor(rng, wt, {shared_inter, hidden}, -2 * sh, 2 * sh, false));
          c.bindings.push_back(
              random_tensor(rng, wt, {shared_inter, hidden}, -2 * sh, 2 * sh, false));
          c.bindings.push_back(random_tensor(rng, wt, {hidden, shared_inter}, -ss, ss, false));
        }
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Case> routed_swiglu_moe_cases() { return moe_cases(false); }
std::vector<Case> routed_shared_swiglu_moe_cases() { return moe_cases(true); }

}  // namespace ferrite::conformance
