// Cases with weights in the repacked Hugging Face formats (f8_e4m3_b128 from
// FP8 checkpoints, u4_g128 from GPTQ / AWQ / compressed-tensors int4;
// tensor/dtype.h, models/hf_quant.h). The reference provider reads the blocks
// as their dequantization defines them, so every provider that accepts a
// format is compared with the reference on the same dequantized weights:
//
//  - dense_linear, dense_swiglu, last_token_dense_linear, token_embedding and
//    the routed (+ shared) MoE with rows of whole 128-element blocks;
//  - the projection-heavy contracts' own cases (attention, gated delta,
//    MoE) re-quantized where a weight's rows are whole 128-element blocks
//    (norms, biases, the conv kernel and other rows stay as they are: mixed
//    bindings, as in the checkpoints, whose LM head, routers and small
//    projections stay bf16).
#include <cmath>

#include "contracts/dense_linear.h"
#include "contracts/dense_swiglu.h"
#include "contracts/last_token_dense_linear.h"
#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"
#include "contracts/token_embedding.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

std::vector<Case> causal_paged_attention_cases();
std::vector<Case> gated_delta_recurrent_attention_cases();
std::vector<Case> routed_swiglu_moe_cases();
std::vector<Case> routed_shared_swiglu_moe_cases();

namespace {

constexpr DType kHfFormats[] = {DType::kF8B128, DType::kU4G128};
uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

HostTensor as_format(const HostTensor& t, DType to) {
  const int64_t n = t.shape.numel();
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = load_as_f32(t.bytes.data(), t.dtype, i);
  HostTensor q = t;
  q.dtype = to;
  q.bytes.assign(dtype_bytes(to, n), 0);
  quantize_row(to, v.data(), q.bytes.data(), n);
  return q;
}

HostTensor qt(CaseRng& rng, DType t, Shape shape, float lo, float hi) {
  return as_format(random_tensor(rng, DType::kF32, shape, lo, hi, false), t);
}

Case moe(bool shared, DType wt, std::vector<int32_t> seqs, CaseRng& rng) {
  const int64_t H = 256, E = 4, I = 128, Is = 128;
  Case c;
  c.name = std::string(shared ? "hf_shared_moe" : "hf_moe") +
           (seqs.size() == 1 ? "_h256_e4_decode_" : "_h256_e4_prefill_") +
           std::string(dtype_name(wt));
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
  c.bindings = {random_tensor(rng, DType::kF32, {T, H}, -1, 1, true),
                random_tensor(rng, DType::kF32, {H}, 0.7f, 1.3f, false),
                random_tensor(rng, DType::kBF16, {E, H}, -4 * sh, 4 * sh, false),
                qt(rng, wt, {E, 2, I, H}, -2 * sh, 2 * sh), qt(rng, wt, {E, H, I}, -si, si)};
  if (shared) {
    c.bindings.push_back(random_tensor(rng, DType::kBF16, {1, H}, -2 * sh, 2 * sh, false));
    c.bindings.push_back(qt(rng, wt, {Is, H}, -2 * sh, 2 * sh));
    c.bindings.push_back(qt(rng, wt, {Is, H}, -2 * sh, 2 * sh));
    c.bindings.push_back(qt(rng, wt, {H, Is}, -si, si));
  }
  return c;
}

}  // namespace

std::vector<Case> hf_quant_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> out;
    CaseRng rng(1313);
    for (DType wt : kHfFormats) {
      const std::string f(dtype_name(wt));
      // 70 tokens: the bf16 tile's token tiles of 64 (quant_tile.cu; the
      // cuda_alt backend),
      // with a last k step of one 128-block. 4 tokens of 1,024 inputs: rows
      // of 16-byte multiples in both formats (the bulk-copy decode GEMV,
      // quant_gemv_stream.cu; 256 inputs take it for u4_g128 only).
      for (int32_t tokens : {1, 3, 4, 19, 70}) {
        const int64_t in = tokens == 3 || tokens == 70 ? 384 : tokens == 4 ? 1024 : 256;
        Case c;
        c.name = "hf_dense_in" + std::to_string(in) + "_t" + std::to_string(tokens) + "_" + f;
        c.contract = &dense_linear::contract();
        c.attrs.set("in_features", u(in)).set("out_features", u(40));
        add_sequence(c, tokens, 0);
        const float s = 1.0f / std::sqrt(static_cast<float>(in));
        c.bindings = {random_tensor(rng, DType::kF32, {tokens, in}, -1, 1, true),
                      qt(rng, wt, {40, in}, -s, s),
                      tokens == 3 ? random_tensor(rng, DType::kF32, {40}, -0.5f, 0.5f, false)
                                  : HostTensor{},
                      zeros(DType::kF32, {tokens, 40}, true)};
        out.push_back(std::move(c));
      }
      for (int32_t tokens : {1, 9}) {
        const int64_t h = 256, im = 384;
        Case c;
        c.name = "hf_swiglu_h256_i384_t" + std::to_string(tokens) + "_" + f;
        c.contract = &dense_swiglu::contract();
        c.attrs.set("hidden_size", u(h)).set("intermediate_size", u(im)).set("eps", 1e-6);
        add_sequence(c, tokens, 0);
        const float sh = 1.0f / std::sqrt(float(h)), si = 1.0f / std::sqrt(float(im));
        c.bindings = {random_tensor(rng, DType::kF32, {tokens, h}, -2, 2, true),
                      random_tensor(rng, DType::kBF16, {h}, 0.7f, 1.3f, false),
                      qt(rng, wt, {im, h}, -2 * sh, 2 * sh), qt(rng, wt, {im, h}, -2 * sh, 2 * sh),
                      qt(rng, wt, {h, im}, -si, si)};
        out.push_back(std::move(c));
      }
      {
        Case c;
        c.name = "hf_lm_head_h256_v100_" + f;
        c.contract = &last_token_dense_linear::contract();
        c.attrs.set("hidden_size", u(256)).set("vocab_size", u(100));
        add_sequence(c, 5, 0);
        add_sequence(c, 1, 30);
        c.bindings = {random_tensor(rng, DType::kF32, {6, 256}, -1, 1, true),
                      qt(rng, wt, {100, 256}, -0.1f, 0.1f), zeros(DType::kF32, {2, 100}, false)};
        out.push_back(std::move(c));
      }
      {
        Case c;
        c.name = "hf_embedding_v40_h128_" + f;
        c.contract = &token_embedding::contract();
        c.attrs.set("vocab_size", u(40)).set("hidden_size", u(128));
        add_sequence(c, 4, 0);
        std::vector<uint32_t> ids = {0, 39, 7, 7};
        c.batch.token_ids = ids;
        c.bindings = {u32_tensor(ids), qt(rng, wt, {40, 128}, -2, 2),
                      zeros(DType::kF32, {4, 128}, true)};
        out.push_back(std::move(c));
      }
      for (bool shared : {false, true}) {
        out.push_back(moe(shared, wt, {1}, rng));
        out.push_back(moe(shared, wt, {9, 1}, rng));
      }
    }
    for (auto gen : {causal_paged_attention_cases, gated_delta_recurrent_attention_cases,
                     routed_swiglu_moe_cases, routed_shared_swiglu_moe_cases}) {
      for (const Case& base : gen()) {
        if (base.bindings.size() > 2 && base.bindings[2].dtype != DType::kF32) continue;
        for (DType wt : kHfFormats) {
          Case c = base;
          bool any = false;
          const auto& specs = c.contract->bindings();
          for (size_t b = 0; b < specs.size(); ++b) {
            HostTensor& t = c.bindings[b];
            if (specs[b].kind != BindingKind::kWeight || !t.present() || t.shape.rank() < 2)
              continue;
            if (t.shape[t.shape.rank() - 1] % dtype_block_elems(wt) != 0) continue;
            t = as_format(t, wt);
            any = true;
          }
          c.name += std::string("_as_") + std::string(dtype_name(wt));
          if (any) out.push_back(std::move(c));
        }
      }
    }
    // Act-order (GPTQ desc_act kept in 4 bits): every u4_g128 matrix of the
    // product contracts again, its columns stored in a random order per
    // module (per expert matrix of the stacked MoE weights: one permutation
    // per run of shape[-2] rows). The reference runs on the natural-order
    // f32 weights they stand for (conformance_test.cc), so each provider's
    // permuted product is checked against an ordinary one.
    const size_t plain = out.size();
    for (size_t i = 0; i < plain; ++i) {
      const std::string& id = out[i].contract->id();
      if (id == "token_embedding" || id == "last_token_dense_linear") continue;
      Case c = out[i];
      bool any = false;
      for (HostTensor& t : c.bindings) {
        if (!t.present() || t.dtype != DType::kU4G128 || t.shape.rank() < 2) continue;
        const int64_t module_rows = t.shape[t.shape.rank() - 2];
        t = with_random_input_perm(rng, std::move(t), module_rows);
        any = true;
      }
      c.name += "_actorder";
      if (any) out.push_back(std::move(c));
    }
    return out;
  }();
  return cases;
}
FERRITE_CONFORMANCE_CASES(hf_quant_cases);

}  // namespace ferrite::conformance
