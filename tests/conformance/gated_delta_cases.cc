// Cases of gated_delta_recurrent_attention:
//  - a mixed step batch (a fresh 70-token prefill crossing a 64-token chunk
//    boundary, a single decode token and a 5-token chunk continuing from
//    random conv and delta states), for a Qwen3-Next-like shape (2 key heads,
//    4 value heads) and a single-head shape with a kernel of 3, with f32 and
//    bf16 weights;
//  - chunked-form cases: one step with spans of 1, 15, 16, 63, 64, 65 and 200
//    tokens (around the recurrent / chunked switch at 16 tokens and the
//    64-token chunk edges), some fresh and some continuing a sequence from a
//    non-zero state, for GQA with dk = dv = 128 (several 32-column state
//    slices), a small shape with dv not a multiple of 32, and a k_head_dim
//    that is not a multiple of 4 (the CUDA provider's recurrent fallback).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "contracts/gated_delta_recurrent_attention.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {

struct Shape5 {
  const char* name;
  int64_t hidden, k_heads, v_heads, k_dim, v_dim, kernel;
};

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

struct Seq {
  int32_t tokens, pos, slot;
};

// One step of `seqs` over `slots` state slots, random conv and delta states
// except the `fresh` slots (zeroed); A_log and dt_bias drawn from the given
// ranges (they set how fast the state decays).
Case make_case(std::string name, const Shape5& s, DType wt, const std::vector<Seq>& seqs,
               int64_t slots, const std::vector<int64_t>& fresh, float a_lo, float a_hi,
               float dt_lo, float dt_hi, CaseRng& rng) {
  Case c;
  c.name = std::move(name);
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
  for (const Seq& q : seqs) add_sequence(c, q.tokens, q.pos, {}, q.slot);
  const int64_t tokens = c.batch.num_tokens();
  const float sh = 1.0f / std::sqrt(static_cast<float>(s.hidden));
  const float so = 1.0f / std::sqrt(static_cast<float>(vd));
  HostTensor conv_state =
      random_tensor(rng, DType::kF32, {slots, s.kernel - 1, conv_dim}, -1, 1, false);
  HostTensor delta_state =
      random_tensor(rng, DType::kF32, {slots, s.v_heads, s.k_dim, s.v_dim}, -0.5f, 0.5f, false);
  for (int64_t slot : fresh) {
    for (HostTensor* t : {&conv_state, &delta_state}) {
      const int64_t per = static_cast<int64_t>(t->bytes.size()) / t->shape[0];
      std::fill(t->bytes.begin() + slot * per, t->bytes.begin() + (slot + 1) * per, 0);
    }
  }
  c.bindings = {
      random_tensor(rng, DType::kF32, {tokens, s.hidden}, -1, 1, true),
      random_tensor(rng, wt, {s.hidden}, -0.3f, 0.3f, false),
      random_tensor(rng, wt, {conv_dim, s.hidden}, -2 * sh, 2 * sh, false),
      random_tensor(rng, wt, {vd, s.hidden}, -2 * sh, 2 * sh, false),
      random_tensor(rng, wt, {s.v_heads, s.hidden}, -2 * sh, 2 * sh, false),
      random_tensor(rng, wt, {s.v_heads, s.hidden}, -2 * sh, 2 * sh, false),
      random_tensor(rng, wt, {conv_dim, s.kernel}, -0.6f, 0.6f, false),
      random_tensor(rng, wt, {s.v_heads}, a_lo, a_hi, false),    // A_log
      random_tensor(rng, wt, {s.v_heads}, dt_lo, dt_hi, false),  // dt_bias
      random_tensor(rng, wt, {s.v_dim}, 0.7f, 1.3f, false),      // gated norm
      random_tensor(rng, wt, {s.hidden, vd}, -so, so, false),
      std::move(conv_state),
      std::move(delta_state),
  };
  return c;
}

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
      // A: prefill of 70 from 0 in slot 2 (fresh); B: decode at 37 in slot
      // 0; C: 5 tokens at 10 in slot 3. Slot 1 is unused. A = 1 .. 15.
      out.push_back(make_case(std::string(s.name) + "_" + std::string(dtype_name(wt)), s, wt,
                              {{70, 0, 2}, {1, 37, 0}, {5, 10, 3}}, 4, {2}, 0.0f, 2.7f, 0.5f,
                              1.5f, rng));
    }
  }
  // Chunked-form cases (f32 weights; activations as the suite converts them).
  const Shape5 chunk_shapes[] = {
      {"chunked_gqa_dk128", 64, 1, 2, 128, 128, 4},
      {"chunked_small_dv24", 32, 2, 4, 16, 24, 4},
      {"chunked_dk10", 32, 1, 2, 10, 12, 3},
  };
  CaseRng crng(23);
  for (const Shape5& s : chunk_shapes) {
    // Slots 0, 2, 4, 6 fresh, the others continue from a random state.
    // A = exp(A_log) in 0.05 .. 2: decays slow enough that the state
    // carries across whole 64-token chunks.
    out.push_back(make_case(s.name, s, DType::kF32,
                            {{200, 0, 0}, {1, 90, 1}, {65, 300, 3}, {15, 0, 2}, {64, 12, 5},
                             {16, 0, 4}, {63, 7, 7}, {64, 0, 6}},
                            8, {0, 2, 4, 6}, -3.0f, 0.7f, -2.0f, 0.5f, crng));
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(gated_delta_recurrent_attention_cases);

}  // namespace ferrite::conformance
