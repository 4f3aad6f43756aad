#include "grammar/grammar.h"

#include <cstring>

namespace ferrite::grammar {

uint32_t Builder::declare() {
  rules_.emplace_back();
  return static_cast<uint32_t>(rules_.size() - 1);
}

void Builder::define(uint32_t rule, std::vector<Seq> alternatives) {
  rules_[rule] = std::move(alternatives);
}

Builder::Seq Builder::bytes(const ByteSet& s) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i] == s) return {Elem{ElemType::kBytes, static_cast<uint32_t>(i)}};
  sets_.push_back(s);
  return {Elem{ElemType::kBytes, static_cast<uint32_t>(sets_.size() - 1)}};
}

Builder::Seq Builder::byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

Builder::Seq Builder::lit(std::string_view s) {
  Seq out;
  for (char c : s) append(out, byte(static_cast<uint8_t>(c)));
  return out;
}

Builder::Seq Builder::alt(std::vector<Seq> alternatives) {
  if (alternatives.size() == 1) return std::move(alternatives[0]);
  uint32_t r = declare();
  define(r, std::move(alternatives));
  return ref(r);
}

Builder::Seq Builder::star(Seq s) {
  uint32_t r = declare();
  append(s, ref(r));
  define(r, {std::move(s), {}});
  return ref(r);
}

Builder::Seq Builder::plus(Seq s) {
  if (s.size() > 1) {
    uint32_t r = declare();
    define(r, {std::move(s)});
    s = ref(r);
  }
  return cat({s, star(s)});
}

Builder::Seq Builder::repeat(const Seq& s0, int64_t min, int64_t max) {
  Seq s = s0;
  if (s.size() > 1 && (min > 1 || max != min)) {
    uint32_t r = declare();
    define(r, {s0});
    s = ref(r);
  }
  Seq out;
  for (int64_t i = 0; i < min; ++i) append(out, s);
  if (max < 0) {
    append(out, star(s));
  } else if (max > min) {
    // R_1 ::= s | "", R_k ::= s R_{k-1} | "".
    Seq prev;
    for (int64_t k = 1; k <= max - min; ++k) {
      uint32_t r = declare();
      Seq first = cat({s, prev});
      define(r, {std::move(first), {}});
      prev = ref(r);
    }
    append(out, prev);
  }
  return out;
}

Builder::Seq Builder::cat(std::initializer_list<Seq> parts) {
  Seq out;
  for (const Seq& p : parts) append(out, p);
  return out;
}

Grammar Builder::finish(uint32_t root) {
  Grammar g;
  g.sets = sets_;
  g.root = root;
  g.alts.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const Seq& a : rules_[r]) {
      g.alts[r].push_back(static_cast<uint32_t>(g.elems.size()));
      g.elems.insert(g.elems.end(), a.begin(), a.end());
      g.elems.push_back(Elem{ElemType::kEnd, 0});
    }
  }
  return g;
}

namespace {

uint64_t hash_span(const uint32_t* b, const uint32_t* e) {
  uint64_t h = 1469598103934665603ull;
  for (; b != e; ++b) h = (h ^ *b) * 1099511628211ull;
  return h;
}

constexpr size_t kMaxStackDepth = 2048;

// Expands `st` until its top is a byte set (added to *out) or it is empty
// (accepting). `budget` bounds the work of one expansion (a grammar bug
// such as a nullable loop must not hang the engine thread).
void expand(const Grammar& g, std::vector<uint32_t>& st, StackSet* out, int& budget, int depth) {
  for (;;) {
    if (st.empty()) {
      out->accepting = true;
      return;
    }
    const uint32_t pos = st.back();
    const Elem& e = g.elems[pos];
    if (e.type == ElemType::kEnd) {
      st.pop_back();
      continue;
    }
    if (e.type == ElemType::kBytes) {
      out->add(st.data(), st.data() + st.size());
      return;
    }
    if (--budget <= 0 || depth > 512 || st.size() > kMaxStackDepth) return;
    st.pop_back();
    if (g.elems[pos + 1].type != ElemType::kEnd) st.push_back(pos + 1);
    const std::vector<uint32_t>& alts = g.alts[e.value];
    if (alts.empty()) return;
    if (alts.size() == 1) {
      st.push_back(alts[0]);
      continue;
    }
    const std::vector<uint32_t> saved = st;
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i) st = saved;
      st.push_back(alts[i]);
      expand(g, st, out, budget, depth + 1);
    }
    return;
  }
}

}  // namespace

void StackSet::add(const uint32_t* b, const uint32_t* e) {
  const uint64_t h = hash_span(b, e);
  const size_t n = static_cast<size_t>(e - b);
  for (size_t i = 0; i < ends_.size(); ++i) {
    if (hashes_[i] != h) continue;
    const uint32_t* ob = begin(i);
    if (static_cast<size_t>(end(i) - ob) == n && std::memcmp(ob, b, n * sizeof(uint32_t)) == 0)
      return;
  }
  data_.insert(data_.end(), b, e);
  ends_.push_back(static_cast<uint32_t>(data_.size()));
  hashes_.push_back(h);
}

void StackSet::key(std::string* out) const {
  out->clear();
  out->push_back(accepting ? 'A' : 'N');
  for (size_t i = 0; i < ends_.size(); ++i) {
    const uint32_t n = static_cast<uint32_t>(end(i) - begin(i));
    out->append(reinterpret_cast<const char*>(&n), sizeof n);
    out->append(reinterpret_cast<const char*>(begin(i)), n * sizeof(uint32_t));
  }
}

void initial_state(const Grammar& g, StackSet* out) {
  out->clear();
  std::vector<uint32_t> st;
  int budget = 1 << 20;
  for (uint32_t a : g.alts[g.root]) {
    st.assign(1, a);
    expand(g, st, out, budget, 0);
  }
}

void advance(const Grammar& g, const StackSet& in, uint8_t b, StackSet* out) {
  out->clear();
  thread_local std::vector<uint32_t> st;
  int budget = 1 << 20;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t top = in.top(i);
    if (!g.sets[g.elems[top].value].test(b)) continue;
    st.assign(in.begin(i), in.end(i));
    st.back() = top + 1;
    expand(g, st, out, budget, 0);
  }
}

bool advance_bytes(const Grammar& g, StackSet* st, std::string_view bytes) {
  StackSet a = *st, b;
  for (char c : bytes) {
    advance(g, a, static_cast<uint8_t>(c), &b);
    if (b.empty() && !b.accepting) return false;
    std::swap(a, b);
  }
  *st = std::move(a);
  return true;
}

}  // namespace ferrite::grammar
