#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/pipeline.h"
#include "tokenizer/unicode.h"

namespace ferrite::tokenizer {
namespace {

uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }

}  // namespace

Result<Bpe> Bpe::create(std::unordered_map<std::string, uint32_t> vocab,
                        const std::vector<std::pair<std::string, std::string>>& merges,
                        BpeOptions options) {
  Bpe bpe;
  bpe.options_ = options;
  uint32_t max_id = 0;
  for (const auto& [token, id] : vocab) max_id = std::max(max_id, id);
  bpe.id_to_token_.assign(vocab.empty() ? 0 : size_t{max_id} + 1, std::string());
  bpe.has_id_.assign(bpe.id_to_token_.size(), false);
  bpe.vocab_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    bpe.id_to_token_[id] = token;
    bpe.has_id_[id] = true;
    bpe.vocab_.emplace(token, id);
  }
  bpe.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = bpe.token_to_id(a), ib = bpe.token_to_id(b), ir = bpe.token_to_id(a + b);
    if (!ia || !ib || !ir) {
      return data_loss("BPE merge " + std::to_string(rank) + " ('" + a + "', '" + b +
                       "') uses a token that is not in the vocab");
    }
    // The first (lowest-rank) occurrence of a pair wins.
    bpe.merges_.emplace(pair_key(*ia, *ib), Merge{static_cast<uint32_t>(rank), *ir});
  }
  const auto& table = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    auto id = bpe.token_to_id(table[b]);
    bpe.byte_ids_[b] = id ? int64_t{*id} : -1;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto fid = bpe.token_to_id(name);
    bpe.fallback_ids_[b] = fid ? int64_t{*fid} : -1;
  }
  return bpe;
}

std::optional<uint32_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(uint32_t id) const {
  if (id >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void Bpe::merge_symbols(std::vector<uint32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  if (n == 2) {  // common short case without the queue
    auto it = merges_.find(pair_key(symbols[0], symbols[1]));
    if (it != merges_.end()) symbols = {it->second.result};
    return;
  }
  // Doubly linked list over `symbols`; a queue of candidate merges ordered by
  // (rank, position). Stale entries are skipped when popped.
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    uint32_t left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(symbols[pos], symbols[next[pos]]));
    if (it != merges_.end()) {
      queue.push({it->second.rank, pos, symbols[pos], symbols[next[pos]]});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    int32_t r = next[c.pos];
    if (!alive[c.pos] || r < 0 || symbols[c.pos] != c.left || symbols[r] != c.right) continue;
    symbols[c.pos] = merges_.find(pair_key(c.left, c.right))->second.result;
    alive[r] = false;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) symbols[w++] = symbols[i];
  symbols.resize(w);
}

Status Bpe::encode_word(std::string_view word, bool byte_level, std::vector<uint32_t>& out) const {
  if (word.empty()) return Status::ok();
  std::vector<uint32_t> symbols;
  symbols.reserve(word.size());
  if (byte_level) {
    const auto& table = byte_to_unicode();
    if (options_.ignore_merges) {
      std::string mapped;
      mapped.reserve(word.size() * 2);
      for (unsigned char b : word) mapped += table[b];
      if (auto id = token_to_id(mapped)) {
        out.push_back(*id);
        return Status::ok();
      }
    }
    for (unsigned char b : word) {
      if (byte_ids_[b] < 0) {
        return invalid_argument("byte-level vocab lacks the symbol for byte " + std::to_string(b));
      }
      symbols.push_back(static_cast<uint32_t>(byte_ids_[b]));
    }
  } else {
    if (options_.ignore_merges) {
      if (auto id = token_to_id(word)) {
        out.push_back(*id);
        return Status::ok();
      }
    }
    bool last_unk = false;
    size_t pos = 0;
    while (pos < word.size()) {
      size_t start = pos;
      next_code_point(word, pos);
      std::string_view ch = word.substr(start, pos - start);
      if (auto id = token_to_id(ch)) {
        symbols.push_back(*id);
        last_unk = false;
        continue;
      }
      if (options_.byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char b) {
            return fallback_ids_[static_cast<unsigned char>(b)] >= 0;
          })) {
        for (unsigned char b : ch) symbols.push_back(static_cast<uint32_t>(fallback_ids_[b]));
        last_unk = false;
        continue;
      }
      if (!options_.unk_id) {
        return invalid_argument("character '" + std::string(ch) +
                                "' is not in the vocab and the tokenizer has no unk token");
      }
      if (!(options_.fuse_unk && last_unk)) symbols.push_back(*options_.unk_id);
      last_unk = true;
    }
  }
  merge_symbols(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  return Status::ok();
}

}  // namespace ferrite::tokenizer
