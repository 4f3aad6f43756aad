// last_token_sample 1.2: stochastic choice per sequence.
//   logits   [sequences, vocab_size] f32, read only
//   tokens   [sequences] u32 out
//   logprobs [sequences] f32 out, optional: log-probability of the chosen id
//            under the model's distribution (log-softmax of the raw logits,
//            as last_token_masked_argmax computes it).
//   allowed  [sequences, vocab_words] u32, optional (1.1): the per-sequence
//            allowed-id bitmap of last_token_masked_argmax; disallowed ids
//            are removed before every filter (top_k counts allowed ids).
//            Logprobs stay those of the unconstrained distribution.
//   top_ids, top_logprobs [sequences, top_n] out, optional (1.2): as in
//            last_token_masked_argmax (SamplingBatch::logprobs too).
// Per sequence (SamplingBatch): temperature (0 means greedy, identical to
// last_token_masked_argmax), top_k (0: off),
// top_p (1: off), min_p (0: off), repetition / presence / frequency penalties
// applied first, and a seed: the same seed and step give the same draw on
// every backend (counter-based RNG keyed by seed and step index).
#pragma once

#include "contracts/contract.h"

namespace ferrite::last_token_sample {

enum Binding { kLogits, kValidMask, kTokens, kLogprobs, kAllowed, kTopIds, kTopLogprobs };

struct Params {
  uint64_t vocab_size;
  static Params from(const Attributes& a) { return {a.u("vocab_size")}; }
};

// The draw of a sequence at a step: a counter-based RNG (splitmix64 of
// seed + golden-ratio step counter) mapped to [0, 1) with 53 bits. Every
// backend uses this function, so seeded sampling is reproducible across
// devices.
inline double uniform01(uint64_t seed, uint64_t step) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (step + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "last_token_sample", 1, 2, {{"vocab_size", AttrType::kUnsigned}},
      {{"logits", BindingKind::kActivation, Access::kRead, {"sequences", "vocab_size"}},
       {"valid_mask", BindingKind::kWeight, Access::kRead, {"vocab_size"}, true},
       {"tokens", BindingKind::kActivation, Access::kWrite, {"sequences"}},
       {"logprobs", BindingKind::kActivation, Access::kWrite, {"sequences"}, true},
       {"allowed", BindingKind::kActivation, Access::kRead, {"sequences", "vocab_words"}, true},
       {"top_ids", BindingKind::kActivation, Access::kWrite, {"sequences", "top_n"}, true},
       {"top_logprobs", BindingKind::kActivation, Access::kWrite, {"sequences", "top_n"}, true}},
      OracleSpec{.exact = true},
      "Temperature / top-k / top-p / min-p sampling with seeded counter RNG.").with_params<Params>();
  return s;
}

}  // namespace ferrite::last_token_sample
