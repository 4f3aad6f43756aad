// Cases of gated_delta_recurrent_attention: a mixed step batch (a fresh
// 70-token prefill crossing a 64-token chunk boundary, a single decode token
// and a 5-token chunk continuing from random conv and delta states), for a
// Qwen3-Next-like shape (2 key heads, 4 value heads) and a single-head shape
// with a kernel of 3, with f32 and bf16 weights.
#include <cmath>

#include "contracts/gated_delta_recurrent_attention.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {

struct Shape5 {
  const char* name;
  int64_t hidden, k_heads, v_heads, k_dim, v_dim, kernel;
};

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

}  // namespace

std::vector<Case> gated_delta_recurrent_attention_cases() {
  const Shape5 shapes[] = {
      {"grouped_2x4", 64, 2, 4, 16, 16, 4},
      {"single_head_k3", 48, 1, 1, 32, 8, 3},
  };
  std::vector<Case> out;
  CaseRng rng(11);
  for (const Shape5& s : shapes) {
    for (DType wt : {DType::kBF16, DType::kF32}) {
      Case c;
      c.name = std::string(s.name) + "_" + std::string(dtype_name(wt));
      c.contract = &gated_delta_recurrent_attention::contract();
      c.attrs.set("hidden_size", u(s.hidden))
          .set("num_k_heads", u(s.k_heads))
          .set("num_v_heads", u(s.v_heads))
          .set("k_head_dim", u(s.k_dim))
          .set("v_head_dim", u(s.v_dim))
          .set("conv_kernel", u(s.kernel))
          .set("eps", 1e-6)
          .set("zero_centred", true);
      const int64_t conv_dim = 2 * s.k_heads * s.k_dim + s.v_heads * s.v_dim;
      const int64_t vd = s.v_heads * s.v_dim;
      const int64_t slots = 4;
      // A: prefill of 70 from 0 in slot 2 (zeroed below); B: decode at 37 in
      // slot 0; C: 5 tokens at 10 in slot 3. Slot 1 is unused.
      add_sequence(c, 70, 0, {}, 2);
      add_sequence(c, 1, 37, {}, 0);
      add_sequence(c, 5, 10, {}, 3);
      const int64_t tokens = c.batch.num_tokens();
      const float sh = 1.0f / std::sqrt(static_cast<float>(s.hidden));
      const float so = 1.0f / std::sqrt(static_cast<float>(vd));
      HostTensor conv_state =
          random_tensor(rng, DType::kF32, {slots, s.kernel - 1, conv_dim}, -1, 1, false);
      HostTensor delta_state =
          random_tensor(rng, DType::kF32, {slots, s.v_heads, s.k_dim, s.v_dim}, -0.5f, 0.5f, false);
      auto zero_slot = [](HostTensor& t, int64_t slot) {
        const int64_t per = t.bytes.size() / t.shape[0];
        std::fill(t.bytes.begin() + slot * per, t.bytes.begin() + (slot + 1) * per, 0);
      };
      zero_slot(conv_state, 2);
      zero_slot(delta_state, 2);
      c.bindings = {
          random_tensor(rng, DType::kF32, {tokens, s.hidden}, -1, 1, true),
          random_tensor(rng, wt, {s.hidden}, -0.3f, 0.3f, false),
          random_tensor(rng, wt, {conv_dim, s.hidden}, -2 * sh, 2 * sh, false),
          random_tensor(rng, wt, {vd, s.hidden}, -2 * sh, 2 * sh, false),
          random_tensor(rng, wt, {s.v_heads, s.hidden}, -2 * sh, 2 * sh, false),
          random_tensor(rng, wt, {s.v_heads, s.hidden}, -2 * sh, 2 * sh, false),
          random_tensor(rng, wt, {conv_dim, s.kernel}, -0.6f, 0.6f, false),
          random_tensor(rng, wt, {s.v_heads}, 0.0f, 2.7f, false),  // A = 1 .. 15
          random_tensor(rng, wt, {s.v_heads}, 0.5f, 1.5f, false),  // dt_bias
          random_tensor(rng, wt, {s.v_dim}, 0.7f, 1.3f, false),    // gated norm
          random_tensor(rng, wt, {s.hidden, vd}, -so, so, false),
          std::move(conv_state),
          std::move(delta_state),
      };
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace ferrite::conformance
