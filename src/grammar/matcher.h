// Grammar-constrained decoding: the token vocabulary as a byte trie, a
// compiled grammar with its per-state mask cache, and GrammarMatcher, the
// TokenConstraint (runtime/token_constraint.h) the engine drives.
//
// A token is allowed when the grammar can consume all of its bytes from the
// current state (the state may then sit inside a UTF-8 character or a JSON
// token: tokens span grammar symbols freely). The mask is built by walking
// the token trie against the state, pruning a subtree as soon as its prefix
// is refused, and cached per state in the CompiledGrammar (shared by every
// sequence using it, so the 64 streams of one schema build each mask once).
// Special tokens are never allowed, except the end ids, which are allowed
// exactly when the grammar may end.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "runtime/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace ferrite::grammar {

class TokenVocab {
 public:
  // `vocab_size`: the model's (ids at or past the tokenizer's are never allowed).
  static std::shared_ptr<const TokenVocab> build(const Tokenizer& tokenizer, size_t vocab_size);
  // From explicit token bytes ("" = never allowed), for tests.
  static std::shared_ptr<const TokenVocab> from_bytes(std::vector<std::string> bytes);
  size_t vocab_size() const { return bytes_.size(); }
  const std::string& bytes(uint32_t id) const { return bytes_[id]; }
  bool usable(uint32_t id) const { return id < bytes_.size() && !bytes_[id].empty(); }

  struct Node {
    uint32_t first_child = 0;
    uint32_t num_children = 0;
    uint32_t tok_begin = 0, tok_end = 0;  // into node_tokens
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<uint32_t>& node_tokens() const { return node_tokens_; }
  size_t max_token_bytes() const { return max_len_; }

 private:
  void build_trie();
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> node_tokens_;
  size_t max_len_ = 0;
};

// A grammar plus what masks need: a lazily built DFA over the matcher states
// (a StackSet is a deterministic function of the bytes read, so states are
// interned and their byte transitions memoized: walking the token trie then
// costs an array lookup per node once the states are known) and the mask of
// each state. Thread-safe; shared by every matcher of the grammar. Both
// caches are dropped together when they outgrow `cache_bytes`.
class CompiledGrammar {
 public:
  explicit CompiledGrammar(Grammar g, size_t cache_bytes = size_t{32} << 20);
  ~CompiledGrammar();
  const Grammar& grammar() const { return g_; }
  // The allowed non-end tokens from `state` (every word of `mask` written).
  void token_mask(const TokenVocab& vocab, const StackSet& state, std::span<uint32_t> mask) const;
  struct Stats {
    uint64_t hits = 0, misses = 0, states = 0;
  };
  Stats stats() const;
  struct Cache;  // matcher.cc

 private:
  Grammar g_;
  size_t cache_bytes_;
  mutable std::mutex mu_;
  std::unique_ptr<Cache> cache_;
};

class GrammarMatcher : public TokenConstraint {
 public:
  GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                 std::shared_ptr<const TokenVocab> vocab, std::vector<uint32_t> end_ids);
  void fill_mask(std::span<uint32_t> allowed) override;
  bool accept(uint32_t token) override;
  bool is_terminated() const override { return terminated_; }
  // The grammar may end here (end ids allowed).
  bool can_end() const { return state_.accepting; }
  // Feeds raw bytes (tests, forced prefixes); false if refused.
  bool accept_bytes(std::string_view bytes);
  const StackSet& state() const { return state_; }

 private:
  void update_terminated() { terminated_ = terminated_ || state_.empty(); }
  std::shared_ptr<const CompiledGrammar> g_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<uint32_t> end_ids_;
  StackSet state_;
  bool terminated_ = false;
};

}  // namespace ferrite::grammar

namespace ferrite::grammar {

// Compiled grammars by key (e.g. the schema's compact JSON), least recently
// used dropped past `capacity`. Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  // The cached grammar of `key`, else build() compiled and cached (errors
  // are not cached).
  template <typename F>
  Result<std::shared_ptr<const CompiledGrammar>> get(const std::string& key, F&& build) {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->first == key) {
          auto v = it->second;
          entries_.splice(entries_.begin(), entries_, it);
          return v;
        }
    }
    Result<Grammar> g = build();
    if (!g.is_ok()) return g.status();
    auto cg = std::make_shared<const CompiledGrammar>(std::move(g).value());
    std::lock_guard<std::mutex> l(mu_);
    entries_.emplace_front(key, cg);
    if (entries_.size() > capacity_) entries_.pop_back();
    return cg;
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> entries_;
};

}  // namespace ferrite::grammar
