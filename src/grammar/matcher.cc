#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

namespace ferrite::grammar {

std::shared_ptr<const TokenVocab> TokenVocab::build(const Tokenizer& tok, size_t vocab_size) {
  std::vector<std::string> bytes(vocab_size);
  const size_t n = std::min(vocab_size, tok.vocab_size());
  // Bytes of a token as it decodes after another token, so that decoders
  // that strip a leading space at the start (SentencePiece) do not hide it.
  std::optional<uint32_t> ref;
  if (auto ids = tok.encode("a", false, SpecialText::kPlain); ids.is_ok() && ids->size() == 1)
    ref = (*ids)[0];
  std::string ref_bytes;
  if (ref) {
    auto r = tok.decode_bytes(std::span<const uint32_t>(&*ref, 1), false);
    if (r.is_ok()) ref_bytes = *r;
    else ref.reset();
  }
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = static_cast<uint32_t>(i);
    if (tok.is_special(id)) continue;
    auto d = tok.decode_bytes(std::span<const uint32_t>(&id, 1), false);
    if (!d.is_ok()) continue;
    std::string s = *d;
    if (ref) {
      const uint32_t pair[2] = {*ref, id};
      auto d2 = tok.decode_bytes(std::span<const uint32_t>(pair, 2), false);
      if (d2.is_ok() && d2->size() >= ref_bytes.size() &&
          d2->compare(0, ref_bytes.size(), ref_bytes) == 0)
        s = d2->substr(ref_bytes.size());
    }
    bytes[i] = std::move(s);
  }
  return from_bytes(std::move(bytes));
}

std::shared_ptr<const TokenVocab> TokenVocab::from_bytes(std::vector<std::string> bytes) {
  auto v = std::shared_ptr<TokenVocab>(new TokenVocab());
  v->bytes_ = std::move(bytes);
  v->build_trie();
  return v;
}

void TokenVocab::build_trie() {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) ids.push_back(i);
  std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) { return bytes_[a] < bytes_[b]; });
  nodes_.assign(1, Node{});
  node_tokens_.clear();
  node_tokens_.reserve(ids.size());
  // Iterative: (node, [lo, hi) of ids sharing its prefix, depth).
  struct Work {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Work> stack{{0, 0, ids.size(), 0}};
  while (!stack.empty()) {
    Work w = stack.back();
    stack.pop_back();
    size_t i = w.lo;
    nodes_[w.node].tok_begin = static_cast<uint32_t>(node_tokens_.size());
    while (i < w.hi && bytes_[ids[i]].size() == w.depth) node_tokens_.push_back(ids[i++]);
    nodes_[w.node].tok_end = static_cast<uint32_t>(node_tokens_.size());
    max_len_ = std::max(max_len_, w.depth);
    // Children: runs of the same byte at `depth`.
    const uint32_t first = static_cast<uint32_t>(nodes_.size());
    std::vector<Work> kids;
    while (i < w.hi) {
      const uint8_t c = static_cast<uint8_t>(bytes_[ids[i]][w.depth]);
      size_t j = i;
      while (j < w.hi && static_cast<uint8_t>(bytes_[ids[j]][w.depth]) == c) ++j;
      Node child;
      child.byte = c;
      nodes_.push_back(child);
      kids.push_back({static_cast<uint32_t>(nodes_.size() - 1), i, j, w.depth + 1});
      i = j;
    }
    nodes_[w.node].first_child = first;
    nodes_[w.node].num_children = static_cast<uint32_t>(kids.size());
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
  }
}

struct CompiledGrammar::Cache {
  const TokenVocab* vocab = nullptr;
  std::unordered_map<std::string, int32_t> ids;
  std::vector<StackSet> states;
  std::vector<std::array<int32_t, 256>> next;  // -2 unknown, -1 refused
  std::unordered_map<int32_t, std::vector<uint32_t>> masks;
  size_t bytes = 0;
  Stats stats;
  StackSet tmp;
  std::string key;

  void clear() {
    ids.clear();
    states.clear();
    next.clear();
    masks.clear();
    bytes = 0;
  }
  int32_t intern(const StackSet& s) {
    s.key(&key);
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    const int32_t id = static_cast<int32_t>(states.size());
    ids.emplace(key, id);
    states.push_back(s);
    std::array<int32_t, 256> n;
    n.fill(-2);
    next.push_back(n);
    bytes += sizeof(n) + 2 * key.size() + 128;
    return id;
  }
  int32_t step(const Grammar& g, int32_t s, uint8_t b) {
    int32_t n = next[s][b];
    if (n != -2) return n;
    advance(g, states[s], b, &tmp);
    n = tmp.empty() && !tmp.accepting ? -1 : intern(tmp);
    next[s][b] = n;
    return n;
  }
};

namespace {

struct Walker {
  const Grammar& g;
  const TokenVocab& v;
  CompiledGrammar::Cache* c;
  std::span<uint32_t> mask;

  void walk(uint32_t node, int32_t sid) {
    const auto& nodes = v.nodes();
    const TokenVocab::Node& n = nodes[node];
    const auto& toks = v.node_tokens();
    for (uint32_t ch = n.first_child; ch < n.first_child + n.num_children; ++ch) {
      const TokenVocab::Node& child = nodes[ch];
      const int32_t ns = c->step(g, sid, child.byte);
      if (ns < 0) continue;
      for (uint32_t t = child.tok_begin; t < child.tok_end; ++t)
        mask[toks[t] >> 5] |= uint32_t{1} << (toks[t] & 31);
      if (child.num_children && !c->states[ns].empty()) walk(ch, ns);
    }
  }
};

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar g, size_t cache_bytes)
    : g_(std::move(g)), cache_bytes_(cache_bytes), cache_(std::make_unique<Cache>()) {}
CompiledGrammar::~CompiledGrammar() = default;

CompiledGrammar::Stats CompiledGrammar::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  Stats s = cache_->stats;
  s.states = cache_->states.size();
  return s;
}

void CompiledGrammar::token_mask(const TokenVocab& vocab, const StackSet& state,
                                 std::span<uint32_t> mask) const {
  std::lock_guard<std::mutex> l(mu_);
  Cache& c = *cache_;
  if (c.vocab != &vocab || c.bytes > cache_bytes_) {
    c.clear();
    c.vocab = &vocab;
  }
  const int32_t sid = c.intern(state);
  auto it = c.masks.find(sid);
  if (it != c.masks.end() && it->second.size() == mask.size()) {
    std::memcpy(mask.data(), it->second.data(), mask.size() * sizeof(uint32_t));
    ++c.stats.hits;
    return;
  }
  ++c.stats.misses;
  std::fill(mask.begin(), mask.end(), 0u);
  Walker w{g_, vocab, &c, mask};
  if (!state.empty()) w.walk(0, sid);
  c.masks[sid] = std::vector<uint32_t>(mask.begin(), mask.end());
  c.bytes += mask.size() * sizeof(uint32_t) + 64;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::shared_ptr<const TokenVocab> vocab,
                               std::vector<uint32_t> end_ids)
    : g_(std::move(grammar)), vocab_(std::move(vocab)), end_ids_(std::move(end_ids)) {
  initial_state(g_->grammar(), &state_);
  update_terminated();
}

void GrammarMatcher::fill_mask(std::span<uint32_t> allowed) {
  if (terminated_) {
    std::fill(allowed.begin(), allowed.end(), 0u);
    return;
  }
  g_->token_mask(*vocab_, state_, allowed);
  if (state_.accepting)
    for (uint32_t e : end_ids_)
      if (e / 32 < allowed.size()) allowed[e / 32] |= uint32_t{1} << (e % 32);
}

bool GrammarMatcher::accept(uint32_t token) {
  if (terminated_) return false;
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) {
    if (!state_.accepting) return false;
    terminated_ = true;
    return true;
  }
  if (!vocab_->usable(token)) return false;
  if (!advance_bytes(g_->grammar(), &state_, vocab_->bytes(token))) return false;
  update_terminated();
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return bytes.empty();
  if (!advance_bytes(g_->grammar(), &state_, bytes)) return false;
  update_terminated();
  return true;
}

}  // namespace ferrite::grammar
