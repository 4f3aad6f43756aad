// TokenConstraint: a per-sequence restriction of the next token, the seam
// between grammar-constrained decoding (src/grammar, JSON schema, tools) and
// the scheduler / sampler. The engine owns one per constrained sequence
// (EngineRequest::constraint); on the engine thread, for every step in which
// the sequence draws a token, it
//   1. asks fill_mask() for the set of allowed ids (built on the host while
//      the device runs the previous step where the scheduler can overlap),
//   2. passes the mask to the sampler contracts (last_token_masked_argmax /
//      last_token_sample take a per-sequence mask), so a disallowed id can
//      never be drawn, on any backend,
//   3. calls accept() with the drawn id, and
//   4. finishes the sequence with "stop" when is_terminated() says the
//      grammar admits nothing more (a complete JSON value with no possible
//      continuation), without drawing another token.
// Tokens recomputed after a preemption are replayed, not re-accepted.
#pragma once

#include <cstdint>
#include <span>

namespace ferrite {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Writes the allowed next ids as a bitmap: bit (id % 32) of
  // allowed[id / 32], allowed.size() == (vocab_size + 31) / 32, every bit
  // beyond vocab_size zero. A constraint in an accepting state that may
  // also end here sets the bits of the sequence's end ids (its stop ids).
  // At least one bit is set unless is_terminated().
  virtual void fill_mask(std::span<uint32_t> allowed) = 0;

  // Advances past the drawn id. False when the id was not allowed (the
  // engine then finishes the sequence with an internal error).
  virtual bool accept(uint32_t token) = 0;

  // True once nothing but the end may follow (the engine stops at once).
  virtual bool is_terminated() const = 0;
};

}  // namespace ferrite
