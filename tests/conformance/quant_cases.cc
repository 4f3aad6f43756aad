// Cases with weights in the GGUF block formats (q8_0, q4_0, q4_k, q5_k,
// q6_k). The reference provider reads the blocks as their dequantization
// defines them (tensor/dtype.h), so every provider that accepts a format is
// compared with the reference on the same dequantized weights.
//
//  - dedicated cases with rows of whole 256-element blocks for every format:
//    dense_linear, dense_swiglu (and a Q4_K_M-style mix: q4_k gate / up,
//    q6_k down), last_token_dense_linear, token_embedding;
//  - every case of the projection-heavy contracts (attention, gated delta,
//    MoE) re-quantized: each weight of rank >= 2 whose rows are whole blocks
//    of the format is quantized from its values (norms, biases, the conv
//    kernel and ragged rows stay as they are: mixed bindings, as in GGUF
//    files).
#include <cmath>

#include "contracts/dense_linear.h"
#include "contracts/dense_swiglu.h"
#include "contracts/last_token_dense_linear.h"
#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"
#include "contracts/token_embedding.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

// The generators of the projection-heavy contracts (their own files).
std::vector<Case> causal_paged_attention_cases();
std::vector<Case> gated_delta_recurrent_attention_cases();
std::vector<Case> routed_swiglu_moe_cases();
std::vector<Case> routed_shared_swiglu_moe_cases();

namespace {

constexpr DType kBlockTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                 DType::kQ6_K};
uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

HostTensor quantized(const HostTensor& t, DType to) {
  const int64_t n = t.shape.numel();
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = load_as_f32(t.bytes.data(), t.dtype, i);
  HostTensor q = t;
  q.dtype = to;
  q.bytes.assign(dtype_bytes(to, n), 0);
  quantize_row(to, v.data(), q.bytes.data(), n);
  return q;
}

// The case with its block-compatible matrices in `to`; false when none is.
bool requantize(Case& c, DType to) {
  bool any = false;
  const auto& specs = c.contract->bindings();
  for (size_t b = 0; b < specs.size() && b < c.bindings.size(); ++b) {
    HostTensor& t = c.bindings[b];
    if (specs[b].kind != BindingKind::kWeight || !t.present() || t.shape.rank() < 2) continue;
    if (t.shape[t.shape.rank() - 1] % dtype_block_elems(to) != 0) continue;
    t = quantized(t, to);
    any = true;
  }
  c.name += std::string("_as_") + std::string(dtype_name(to));
  return any;
}

HostTensor qtensor(CaseRng& rng, DType t, Shape shape, float lo, float hi) {
  return quantized(random_tensor(rng, DType::kF32, shape, lo, hi, false), t);
}

// MoE with rows of whole 256-element blocks: 8 experts top-2, hidden 256,
// intermediate 256 (shared: 256), a decode step, a few tokens and a short prefill; router
// and norms f32 (as GGUF files keep them), experts (and the shared expert)
// in `wt`, the down projections in `down` (Q4_K_M mixes q6_k in).
Case moe_case(bool shared, DType wt, DType down, std::vector<int32_t> seqs, CaseRng& rng) {
  const int64_t H = 256, E = 8, I = 256, Is = 256;
  Case c;
  c.name = shared ? "shared_moe" : "moe";
  int64_t tokens = 0;
  for (int32_t n : seqs) tokens += n;
  // (A few tokens: the CUDA provider's fused decode launches, which take up
  // to Tuning::cuda_moe_fused_tokens; ten or more: one launch per stage.)
  c.name += seqs.size() == 1 ? "_h256_e8_top2_decode_"
            : tokens <= 8    ? "_h256_e8_top2_few_"
                             : "_h256_e8_top2_prefill_";
  c.name += dtype_name(wt);
  if (down != wt) {
    c.name += "_down_";
    c.name += dtype_name(down);
  }
  c.contract = shared ? &routed_shared_swiglu_moe::contract() : &routed_swiglu_moe::contract();
  c.attrs.set("hidden_size", u(H))
      .set("num_experts", u(E))
      .set("top_k", u(2))
      .set("intermediate_size", u(I))
      .set("normalize_topk", true)
      .set("eps", 1e-6)
      .set("zero_centred", shared);
  if (shared) c.attrs.set("shared_intermediate_size", u(Is));
  int32_t pos = 0;
  for (int32_t n : seqs) {
    add_sequence(c, n, pos);
    pos += 20;
  }
  const int64_t T = c.batch.num_tokens();
  const float sh = 1.0f / std::sqrt(float(H)), si = 1.0f / std::sqrt(float(I));
  c.bindings = {
      random_tensor(rng, DType::kF32, {T, H}, -1, 1, true),
      random_tensor(rng, DType::kF32, {H}, shared ? -0.3f : 0.7f, shared ? 0.3f : 1.3f, false),
      random_tensor(rng, DType::kF32, {E, H}, -4 * sh, 4 * sh, false),
      qtensor(rng, wt, {E, 2, I, H}, -2 * sh, 2 * sh), qtensor(rng, down, {E, H, I}, -si, si)};
  if (shared) {
    c.bindings.push_back(random_tensor(rng, DType::kF32, {1, H}, -2 * sh, 2 * sh, false));
    c.bindings.push_back(qtensor(rng, wt, {Is, H}, -2 * sh, 2 * sh));
    c.bindings.push_back(qtensor(rng, wt, {Is, H}, -2 * sh, 2 * sh));
    c.bindings.push_back(qtensor(rng, down, {H, Is}, -si, si));
  }
  return c;
}

}  // namespace

std::vector<Case> quantized_cases() {
  // Made once per process: every provider's test asks for all cases.
  static const std::vector<Case> cases = [] {
    std::vector<Case> out;
    CaseRng rng(41);
    for (DType wt : kBlockTypes) {
      const std::string f(dtype_name(wt));
      // Odd shapes too: 3 blocks of 32 (no whole 64-element vector), 3
      // blocks of 256, and 2 / 17 tokens (no whole token tile). 2,048
      // inputs: rows of 16-byte multiples in every format (q6_k's first;
      // the bulk-copy decode GEMV, quant_gemv_stream.cu).
      const int64_t odd = dtype_block_elems(wt) == 32 ? 96 : 768;
      for (int64_t in : {int64_t{256}, int64_t{512}, odd, int64_t{2048}}) {
        for (int32_t tokens : {1, 2, 3, 17, 19}) {
          if ((tokens == 2 || tokens == 17) != (in == odd)) continue;
          Case c;
          c.name = "dense_in" + std::to_string(in) + "_t" + std::to_string(tokens) + "_" + f;
          c.contract = &dense_linear::contract();
          c.attrs.set("in_features", u(in)).set("out_features", u(40));
          add_sequence(c, tokens, 0);
          const float s = 1.0f / std::sqrt(static_cast<float>(in));
          c.bindings = {random_tensor(rng, DType::kF32, {tokens, in}, -1, 1, true),
                        qtensor(rng, wt, {40, in}, -s, s),
                        tokens == 3 ? random_tensor(rng, DType::kF32, {40}, -0.5f, 0.5f, false)
                                    : HostTensor{},
                        zeros(DType::kF32, {tokens, 40}, true)};
          out.push_back(std::move(c));
        }
      }
      // A batch of 70 tokens x 130 outputs with a bias: two token tiles of
      // 64 and a partial one of the bf16 tile (quant_tile.cu; the cuda_alt
      // backend), three row
      // tiles, rows of 2 blocks of 256.
      {
        const int64_t in = 512, outs = 130;
        const int32_t tokens = 70;
        Case c;
        c.name = "dense_in512_o130_t70_bias_" + f;
        c.contract = &dense_linear::contract();
        c.attrs.set("in_features", u(in)).set("out_features", u(outs));
        add_sequence(c, tokens, 0);
        const float s = 1.0f / std::sqrt(static_cast<float>(in));
        c.bindings = {random_tensor(rng, DType::kF32, {tokens, in}, -1, 1, true),
                      qtensor(rng, wt, {outs, in}, -s, s),
                      random_tensor(rng, DType::kF32, {outs}, -0.5f, 0.5f, false),
                      zeros(DType::kF32, {tokens, outs}, true)};
        out.push_back(std::move(c));
      }
      // SwiGLU, all three matrices in the format, and the Q4_K_M-style mix.
      for (bool mixed : {false, true}) {
        if (mixed && wt != DType::kQ4_K) continue;
        for (int32_t tokens : {1, 9}) {
          const int64_t h = 256, im = 512;
          Case c;
          c.name =
              "swiglu_h256_i512_t" + std::to_string(tokens) + "_" + f + (mixed ? "_q6_k_down" : "");
          c.contract = &dense_swiglu::contract();
          c.attrs.set("hidden_size", u(h)).set("intermediate_size", u(im)).set("eps", 1e-6);
          add_sequence(c, tokens, 0);
          const float sh = 1.0f / std::sqrt(float(h)), si = 1.0f / std::sqrt(float(im));
          c.bindings = {random_tensor(rng, DType::kF32, {tokens, h}, -2, 2, true),
                        random_tensor(rng, DType::kF32, {h}, 0.7f, 1.3f, false),
                        qtensor(rng, wt, {im, h}, -2 * sh, 2 * sh),
                        qtensor(rng, wt, {im, h}, -2 * sh, 2 * sh),
                        qtensor(rng, mixed ? DType::kQ6_K : wt, {h, im}, -si, si)};
          out.push_back(std::move(c));
        }
      }
      {
        Case c;
        c.name = "lm_head_h256_v100_" + f;
        c.contract = &last_token_dense_linear::contract();
        c.attrs.set("hidden_size", u(256)).set("vocab_size", u(100));
        add_sequence(c, 5, 0);
        add_sequence(c, 1, 30);
        add_sequence(c, 3, 7);
        c.bindings = {random_tensor(rng, DType::kF32, {9, 256}, -1, 1, true),
                      qtensor(rng, wt, {100, 256}, -0.1f, 0.1f),
                      zeros(DType::kF32, {3, 100}, false)};
        out.push_back(std::move(c));
      }
      {
        Case c;
        c.name = "embedding_v40_h256_" + f;
        c.contract = &token_embedding::contract();
        c.attrs.set("vocab_size", u(40)).set("hidden_size", u(256));
        add_sequence(c, 4, 0);
        add_sequence(c, 2, 9);
        std::vector<uint32_t> ids = {0, 39, 7, 7, 13, 1};
        c.batch.token_ids = ids;
        c.bindings = {u32_tensor(ids), qtensor(rng, wt, {40, 256}, -2, 2),
                      zeros(DType::kF32, {6, 256}, true)};
        out.push_back(std::move(c));
      }
    }
    for (bool shared : {false, true}) {
      for (DType wt : kBlockTypes) {
        out.push_back(moe_case(shared, wt, wt, {1}, rng));
        out.push_back(moe_case(shared, wt, wt, {9, 1}, rng));
      }
      out.push_back(moe_case(shared, DType::kQ4_K, DType::kQ6_K, {9, 1}, rng));
      out.push_back(moe_case(shared, DType::kQ4_K, DType::kQ6_K, {3, 2}, rng));
      out.push_back(moe_case(shared, DType::kQ8_0, DType::kQ8_0, {3, 2}, rng));
    }
    // The projection-heavy contracts' own cases, re-quantized.
    for (auto gen : {causal_paged_attention_cases, gated_delta_recurrent_attention_cases,
                     routed_swiglu_moe_cases, routed_shared_swiglu_moe_cases}) {
      for (const Case& base : gen()) {
        // One weight type of each base case is enough (f32 where there is one).
        if (base.bindings.size() > 2 && base.bindings[2].dtype != DType::kF32) continue;
        for (DType wt : kBlockTypes) {
          Case c = base;
          if (requantize(c, wt)) out.push_back(std::move(c));
        }
      }
    }
    return out;
  }();
  return cases;
}
FERRITE_CONFORMANCE_CASES(quantized_cases);

}  // namespace ferrite::conformance

#include <gtest/gtest.h>

namespace ferrite::conformance {
namespace {

// Every block format a provider lists is exercised by at least one case of
// its contract that the provider accepts (a format listed but never tested
// fails here).
TEST(ConformanceSuite, EveryListedBlockFormatHasCases) {
  const std::vector<Case> cases = all_cases();
  for (const Backend& b : available_backends()) {
    for (const auto& p : b.registry->providers()) {
      const ProviderDescriptor& d = p->descriptor();
      for (DType f : d.weight_dtypes) {
        if (!dtype_is_quantized(f)) continue;
        bool covered = false;
        for (const Case& c : cases) {
          if (c.contract->id() != d.contract_id) continue;
          bool has = false;
          for (const HostTensor& t : c.bindings) has |= t.present() && t.dtype == f;
          if (!has) continue;
          for (DType act : d.activation_dtypes) {
            if (p->supports(signature_for(c, c.bindings, act)).is_ok()) covered = true;
          }
          if (covered) break;
        }
        EXPECT_TRUE(covered) << b.name << "/" << d.name << " lists " << dtype_name(f)
                             << " weights but no case exercises them";
      }
    }
  }
}

}  // namespace
}  // namespace ferrite::conformance
