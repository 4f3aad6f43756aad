// A byte-level context-free grammar and its pushdown matcher state.
//
// Grammar: rules of alternatives, each alternative a sequence of elements
// (a set of bytes, or a reference to a rule), flattened into one array in
// which every alternative ends with kEnd. Built only through Builder, whose
// forms are right-recursive (star, repeat, opt), so no rule is left-recursive.
//
// StackSet: the matcher state, llama.cpp style: a set of stacks of positions
// into the element array, every stack's top a byte-set element (expansion
// replaces a top reference by its alternatives and pops finished ones; a
// reference in tail position is not pushed, so loops do not grow stacks).
// `accepting`: the empty stack is in the set (the grammar may end here).
// Bytes, not characters: UTF-8 characters are sequences of byte sets, so a
// token that ends inside a character leaves the state inside it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferrite::grammar {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
  bool empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
};

enum class ElemType : uint8_t { kEnd, kBytes, kRef };
struct Elem {
  ElemType type = ElemType::kEnd;
  uint32_t value = 0;  // kBytes: index into sets; kRef: rule id
  bool operator==(const Elem&) const = default;
};

struct Grammar {
  std::vector<Elem> elems;
  std::vector<std::vector<uint32_t>> alts;  // rule -> start position of each alternative
  std::vector<ByteSet> sets;
  uint32_t root = 0;
  size_t num_rules() const { return alts.size(); }
};

// Builds a Grammar. Seq: a pending sequence of elements.
class Builder {
 public:
  using Seq = std::vector<Elem>;
  uint32_t declare();  // a rule without alternatives yet (for recursion)
  void define(uint32_t rule, std::vector<Seq> alternatives);
  Seq bytes(const ByteSet& s);
  Seq byte(uint8_t b);
  Seq lit(std::string_view s);
  static Seq ref(uint32_t rule) { return {Elem{ElemType::kRef, rule}}; }
  Seq alt(std::vector<Seq> alternatives);  // one alternative: inline
  Seq opt(Seq s) { return alt({std::move(s), {}}); }
  Seq star(Seq s);                          // s must not match the empty string
  Seq plus(Seq s);
  Seq repeat(const Seq& s, int64_t min, int64_t max);  // max < 0: unbounded
  static Seq cat(std::initializer_list<Seq> parts);
  static void append(Seq& a, const Seq& b) { a.insert(a.end(), b.begin(), b.end()); }
  size_t num_rules() const { return rules_.size(); }
  Grammar finish(uint32_t root);

 private:
  std::vector<std::vector<Seq>> rules_;
  std::vector<ByteSet> sets_;
};

class StackSet {
 public:
  void clear() {
    data_.clear();
    ends_.clear();
    hashes_.clear();
    accepting = false;
  }
  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  // Stack i, bottom first.
  const uint32_t* begin(size_t i) const { return data_.data() + (i ? ends_[i - 1] : 0); }
  const uint32_t* end(size_t i) const { return data_.data() + ends_[i]; }
  uint32_t top(size_t i) const { return data_[ends_[i] - 1]; }
  void add(const uint32_t* b, const uint32_t* e);  // deduplicated
  // A canonical byte key of the whole set (for mask caches).
  void key(std::string* out) const;
  bool accepting = false;

 private:
  std::vector<uint32_t> data_, ends_;
  std::vector<uint64_t> hashes_;
};

// The initial state of `g` (its root expanded).
void initial_state(const Grammar& g, StackSet* out);
// The state after byte `b`: *out is cleared and filled (out != &in).
void advance(const Grammar& g, const StackSet& in, uint8_t b, StackSet* out);
// Convenience: feeds `bytes`; false (and *st unchanged) if one is refused.
bool advance_bytes(const Grammar& g, StackSet* st, std::string_view bytes);

}  // namespace ferrite::grammar
