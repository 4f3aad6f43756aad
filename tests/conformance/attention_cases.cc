// Cases of causal_paged_attention: a mixed step batch (a fresh prefill, a
// single decode token over a long cached context, a prompt chunk in the
// middle of a sequence) over shuffled pages pre-filled with random KV, for
// Llama, Qwen3 (q/k norms, bias) and Qwen3-Next (output gate, partial RoPE,
// zero-centred norms) flavours and Llama-3 rope scaling. The long flavours
// (head_dim 128 and 256) put a 130-token prompt and a 40-token chunk over a
// 60-token prefix in the step: the CUDA flash prefill path (runs of >= 16
// tokens, bf16 / f16) over several query and key tiles.
//
// Each flavour also has a decode step (`_decode`): four sequences of one
// token each at positions 0, 37, 130 and 600: on the "cuda" backend the
// tensor-core decode kernel (head_dim 64 / 128; 256 takes the fused one),
// on "cuda_alt" the fused decode kernel (8 query heads per KV head: two
// blocks per KV head), whose KV splits start above 512 positions.
#include <algorithm>
#include <numeric>

#include "contracts/causal_paged_attention.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {

struct Flavor {
  const char* name;
  int64_t hidden, heads, kv_heads, head_dim;
  double partial;
  bool qk_norm, output_gate, zero_centred, bias;
  const char* scaling;
  bool long_prefill = false;
};

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

}  // namespace

std::vector<Case> causal_paged_attention_cases() {
  const Flavor flavors[] = {
      {"llama", 64, 4, 2, 16, 1.0, false, false, false, false, "none"},
      {"llama3_scaled", 64, 4, 4, 16, 1.0, false, false, false, false, "llama3"},
      {"qwen3_bias", 48, 6, 2, 8, 1.0, true, false, false, true, "none"},
      {"qwen3_next", 64, 4, 2, 32, 0.25, true, true, true, false, "none"},
      {"mha_hd64", 128, 2, 2, 64, 1.0, false, false, false, false, "none"},
      {"gqa_hd128_long", 64, 4, 2, 128, 1.0, true, false, false, false, "none", true},
      {"next_hd256_long", 64, 4, 1, 256, 0.25, true, true, true, false, "none", true},
      {"bias_gate_hd64", 96, 6, 2, 64, 0.5, true, true, false, true, "none"},
      {"gqa8_hd128", 64, 8, 1, 128, 1.0, true, false, false, false, "none"},
  };
  std::vector<Case> out;
  CaseRng rng(7);
  for (const Flavor& f : flavors) {
    for (DType wt : {DType::kBF16, DType::kF32}) {
      for (bool decode : {false, true}) {
        Case c;
        c.name = std::string(f.name) + (decode ? "_decode_" : "_") + std::string(dtype_name(wt));
        c.contract = &causal_paged_attention::contract();
        const int64_t page_size = 8, pages = decode ? 100 : f.long_prefill ? 40 : 24;
        const int64_t q_rows = f.heads * f.head_dim * (f.output_gate ? 2 : 1);
        const int64_t kv_rows = f.kv_heads * f.head_dim;
        int64_t rope_dim = static_cast<int64_t>(f.head_dim * f.partial);
        c.attrs.set("hidden_size", u(f.hidden))
            .set("num_heads", u(f.heads))
            .set("num_kv_heads", u(f.kv_heads))
            .set("head_dim", u(f.head_dim))
            .set("rope_dim", u(rope_dim))
            .set("rope_theta", 10000.0)
            .set("rope_scaling", std::string(f.scaling))
            .set("rope_factor", 8.0)
            .set("rope_low_freq_factor", 1.0)
            .set("rope_high_freq_factor", 4.0)
            .set("rope_original_max_positions", u(64))
            .set("qk_norm", f.qk_norm)
            .set("output_gate", f.output_gate)
            .set("zero_centred", f.zero_centred)
            .set("attention_bias", f.bias)
            .set("eps", 1e-6)
            .set("max_context", u(page_size * pages));
        // Shuffled pages: sequence A (prefill 20 from 0), B (decode 1 at 37),
        // C (chunk of 5 at 10); long: A (prefill 130 from 0), B, C (chunk of
        // 40 at 60).
        std::vector<int32_t> perm(pages);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng.engine());
        auto pages_from = [&](int first, int count) {
          return std::vector<int32_t>(perm.begin() + first, perm.begin() + first + count);
        };
        if (decode) {
          add_sequence(c, 1, 0, pages_from(0, 1));
          add_sequence(c, 1, 37, pages_from(1, 5));
          add_sequence(c, 1, 130, pages_from(6, 17));
          add_sequence(c, 1, 600, pages_from(23, 76));
        } else if (f.long_prefill) {
          add_sequence(c, 130, 0, pages_from(0, 17));
          add_sequence(c, 1, 37, pages_from(17, 5));
          add_sequence(c, 40, 60, pages_from(22, 13));
        } else {
          add_sequence(c, 20, 0, pages_from(0, 3));
          add_sequence(c, 1, 37, pages_from(3, 5));
          add_sequence(c, 5, 10, pages_from(8, 2));
        }
        const int64_t tokens = c.batch.num_tokens();
        const Shape kv_shape{pages, page_size, f.kv_heads, f.head_dim};
        const float sh = 1.0f / std::sqrt(static_cast<float>(f.hidden));
        const float so = 1.0f / std::sqrt(static_cast<float>(f.heads * f.head_dim));
        auto norm_w = [&](Shape s) {
          return random_tensor(rng, wt, s, f.zero_centred ? -0.3f : 0.7f,
                               f.zero_centred ? 0.3f : 1.3f, false);
        };
        c.bindings = {
            random_tensor(rng, DType::kF32, {tokens, f.hidden}, -1, 1, true),
            norm_w({f.hidden}),
            random_tensor(rng, wt, {q_rows, f.hidden}, -2 * sh, 2 * sh, false),
            random_tensor(rng, wt, {kv_rows, f.hidden}, -2 * sh, 2 * sh, false),
            random_tensor(rng, wt, {kv_rows, f.hidden}, -2 * sh, 2 * sh, false),
            random_tensor(rng, wt, {f.hidden, f.heads * f.head_dim}, -so, so, false),
            f.qk_norm ? norm_w({f.head_dim}) : HostTensor{},
            f.qk_norm ? norm_w({f.head_dim}) : HostTensor{},
            f.bias ? random_tensor(rng, wt, {q_rows}, -0.2f, 0.2f, false) : HostTensor{},
            f.bias ? random_tensor(rng, wt, {kv_rows}, -0.2f, 0.2f, false) : HostTensor{},
            f.bias ? random_tensor(rng, wt, {kv_rows}, -0.2f, 0.2f, false) : HostTensor{},
            random_tensor(rng, DType::kF32, kv_shape, -1, 1, true),
            random_tensor(rng, DType::kF32, kv_shape, -1, 1, true),
        };
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(causal_paged_attention_cases);

}  // namespace ferrite::conformance
