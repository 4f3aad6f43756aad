// Cases of routed_swiglu_moe and routed_shared_swiglu_moe (the shared
// variant adds a sigmoid-gated shared expert to every case):
//  - two sequences (9 tokens and 1 token) over 8 experts, top-2 and top-3,
//    with and without renormalisation, plain and zero-centred norms, f32,
//    bf16 and f16 weights;
//  - decode (1 token, 128 experts, top-8: 120 experts receive nothing) and
//    6 tokens of the same shape;
//  - a few tokens over 16 experts, top-1;
//  - long prefills (>= 300 tokens): 16 experts top-2 with hidden 72 and
//    intermediate 40 (many rows per expert: the CUDA provider's 64-row
//    tensor-core tiles, partial column tiles and a k tail), 128 experts
//    top-8 (multi-chunk device sort), 16 experts top-1 where expert 5's
//    router row equals expert 4's, so ties (to the lower id) leave expert 5
//    without tokens.
// Each activation dtype (f32, bf16, f16) runs every case; expert weights of
// the activation's type take the CUDA tensor-core path, others the SIMT one.
#include <cmath>
#include <cstring>

#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

struct MoeShape {
  std::string name;
  int64_t hidden, experts, inter, top_k;
  bool normalize;
  std::vector<int32_t> sequences;  // token counts
  int64_t dup_router_row = -1;     // this expert's router row copies the previous one's
};

Case moe_case(const MoeShape& m, bool shared, DType wt, CaseRng& rng) {
  const int64_t hidden = m.hidden, experts = m.experts, inter = m.inter, shared_inter = 48;
  const bool zc = shared;
  Case c;
  c.name = m.name + "_" + std::string(dtype_name(wt));
  c.contract = shared ? &routed_shared_swiglu_moe::contract() : &routed_swiglu_moe::contract();
  c.attrs.set("hidden_size", u(hidden))
      .set("num_experts", u(experts))
      .set("top_k", u(m.top_k))
      .set("intermediate_size", u(inter))
      .set("normalize_topk", m.normalize)
      .set("eps", 1e-6)
      .set("zero_centred", zc);
  if (shared) c.attrs.set("shared_intermediate_size", u(shared_inter));
  int32_t pos = 0;
  for (int32_t n : m.sequences) {
    add_sequence(c, n, pos);
    pos += 20;
  }
  const int64_t tokens = c.batch.num_tokens();
  const float sh = 1.0f / std::sqrt(static_cast<float>(hidden));
  const float si = 1.0f / std::sqrt(static_cast<float>(inter));
  HostTensor router = random_tensor(rng, wt, {experts, hidden}, -4 * sh, 4 * sh, false);
  if (m.dup_router_row > 0) {
    const size_t row = dtype_bytes(wt, hidden);
    std::memcpy(router.bytes.data() + m.dup_router_row * row,
                router.bytes.data() + (m.dup_router_row - 1) * row, row);
  }
  c.bindings = {
      random_tensor(rng, DType::kF32, {tokens, hidden}, -1, 1, true),
      random_tensor(rng, wt, {hidden}, zc ? -0.3f : 0.7f, zc ? 0.3f : 1.3f, false),
      std::move(router),
      random_tensor(rng, wt, {experts, 2, inter, hidden}, -2 * sh, 2 * sh, false),
      random_tensor(rng, wt, {experts, hidden, inter}, -si, si, false),
  };
  if (shared) {
    const float ss = 1.0f / std::sqrt(static_cast<float>(shared_inter));
    c.bindings.push_back(random_tensor(rng, wt, {1, hidden}, -2 * sh, 2 * sh, false));
    c.bindings.push_back(random_tensor(rng, wt, {shared_inter, hidden}, -2 * sh, 2 * sh, false));
    c.bindings.push_back(random_tensor(rng, wt, {shared_inter, hidden}, -2 * sh, 2 * sh, false));
    c.bindings.push_back(random_tensor(rng, wt, {hidden, shared_inter}, -ss, ss, false));
  }
  return c;
}

std::vector<Case> moe_cases(bool shared) {
  std::vector<Case> out;
  CaseRng rng(shared ? 13 : 12);
  for (int64_t top_k : {2, 3})
    for (bool normalize : {true, false})
      for (DType wt : {DType::kBF16, DType::kF16, DType::kF32}) {
        const MoeShape m{"e8_top" + std::to_string(top_k) + (normalize ? "_norm" : "_raw"),
                         64, 8, 32, top_k, normalize, {9, 1}};
        out.push_back(moe_case(m, shared, wt, rng));
      }
  const std::vector<MoeShape> shapes = {
      {"decode_e128_top8", 64, 128, 32, 8, true, {1}},
      // 48 pairs: the CUDA provider's one-block routing + sort (a warp takes
      // up to 32).
      {"few_e128_top8", 64, 128, 32, 8, true, {4, 2}},
      {"few_e16_top1", 64, 16, 32, 1, false, {3, 2}},
      {"prefill_e16_top2_h72_i40", 72, 16, 40, 2, true, {300, 20}},
      {"prefill_e128_top8", 64, 128, 32, 8, true, {300}},
      {"prefill_e16_top1_empty_expert", 64, 16, 32, 1, false, {320}, 5},
  };
  for (const MoeShape& m : shapes)
    for (DType wt : {DType::kBF16, DType::kF16}) out.push_back(moe_case(m, shared, wt, rng));
  return out;
}

}  // namespace

std::vector<Case> routed_swiglu_moe_cases() { return moe_cases(false); }
FERRITE_CONFORMANCE_CASES(routed_swiglu_moe_cases);
std::vector<Case> routed_shared_swiglu_moe_cases() { return moe_cases(true); }
FERRITE_CONFORMANCE_CASES(routed_shared_swiglu_moe_cases);

}  // namespace ferrite::conformance
