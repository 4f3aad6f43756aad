#include "engine/prefix_cache.h"

#include <algorithm>

#include "base/hash.h"

namespace ferrite {

uint64_t PrefixCache::page_hash(uint64_t parent, std::span<const uint32_t> tokens) {
  return fnv1a(tokens.data(), tokens.size_bytes(), hash_combine(kFnvOffset, parent));
}

int32_t PrefixCache::match(std::span<const uint32_t> tokens, int32_t max_pages,
                           std::vector<int32_t>* pages, std::vector<uint64_t>* hashes) {
  const size_t ps = static_cast<size_t>(pool_.page_size());
  uint64_t parent = hashes->empty() ? kRootHash : hashes->back();
  int32_t matched = 0;
  size_t begin = hashes->size() * ps;
  ++clock_;
  while (matched < max_pages && begin + ps <= tokens.size()) {
    auto page_tokens = tokens.subspan(begin, ps);
    uint64_t h = page_hash(parent, page_tokens);
    auto it = entries_.find(h);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(page_tokens.begin(), page_tokens.end(), it->second.tokens.begin()))
      break;
    it->second.last_use = clock_;
    pool_.retain(it->second.page);
    pages->push_back(it->second.page);
    hashes->push_back(h);
    parent = h;
    begin += ps;
    ++matched;
  }
  return matched;
}

void PrefixCache::insert(uint64_t hash, uint64_t parent, std::span<const uint32_t> tokens,
                         int32_t page) {
  auto [it, inserted] = entries_.try_emplace(hash);
  if (!inserted) {
    it->second.last_use = ++clock_;
    return;
  }
  it->second.page = page;
  it->second.parent = parent;
  it->second.tokens.assign(tokens.begin(), tokens.end());
  it->second.last_use = ++clock_;
  pool_.retain(page);
}

int32_t PrefixCache::evictable() const {
  int32_t n = 0;
  for (const auto& [h, e] : entries_)
    if (pool_.refcount(e.page) == 1) ++n;
  return n;
}

int32_t PrefixCache::evict(int32_t n) {
  if (n <= 0) return 0;
  std::vector<std::pair<uint64_t, uint64_t>> candidates;  // (last_use, hash)
  for (const auto& [h, e] : entries_)
    if (pool_.refcount(e.page) == 1) candidates.emplace_back(e.last_use, h);
  std::sort(candidates.begin(), candidates.end());
  int32_t freed = 0;
  for (const auto& [use, h] : candidates) {
    if (freed >= n) break;
    auto it = entries_.find(h);
    pool_.release(it->second.page);
    entries_.erase(it);
    ++freed;
  }
  return freed;
}

void PrefixCache::clear() {
  for (auto& [h, e] : entries_) pool_.release(e.page);
  entries_.clear();
}

}  // namespace ferrite
