#include "engine/prefix_cache.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "base/hash.h"

namespace ferrite {

SnapshotBudget snapshot_budget(double fraction, int32_t interval_pages, int32_t align_pages,
                               int32_t num_pages, int64_t kv_bytes_per_page,
                               int64_t state_bytes_per_slot) {
  SnapshotBudget b;
  if (state_bytes_per_slot <= 0 || kv_bytes_per_page <= 0 || num_pages <= 0 || !(fraction > 0))
    return b;
  align_pages = std::max(align_pages, 1);
  const double pool_bytes = static_cast<double>(num_pages) * static_cast<double>(kv_bytes_per_page);
  const double slots = std::floor(fraction * pool_bytes / static_cast<double>(state_bytes_per_slot));
  b.slots = static_cast<int32_t>(std::clamp(slots, 1.0, static_cast<double>(num_pages)));
  int64_t k = interval_pages;
  if (k <= 0)
    k = static_cast<int64_t>(std::ceil(static_cast<double>(state_bytes_per_slot) /
                                       (fraction * static_cast<double>(kv_bytes_per_page))));
  k = std::max<int64_t>(k, 1);
  k = (k + align_pages - 1) / align_pages * align_pages;
  b.interval_pages = static_cast<int32_t>(std::min<int64_t>(k, 1 << 30));
  b.bytes = static_cast<int64_t>(b.slots) * state_bytes_per_slot;
  return b;
}

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
  auto p = entries_.find(parent);
  if (p != entries_.end()) ++p->second.children;
}

int32_t PrefixCache::evictable() const {
  int32_t n = 0;
  for (const auto& [h, e] : entries_)
    if (pool_.refcount(e.page) == 1) ++n;
  return n;
}

int32_t PrefixCache::evict(int32_t n) {
  if (n <= 0) return 0;
  // Least recently used last pages of cached prefixes first; dropping one
  // may make its parent the last page of its prefix.
  using Item = std::pair<uint64_t, uint64_t>;  // (last_use, hash)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> leaves;
  for (const auto& [h, e] : entries_)
    if (e.children == 0 && pool_.refcount(e.page) == 1) leaves.emplace(e.last_use, h);
  int32_t freed = 0;
  while (freed < n && !leaves.empty()) {
    const uint64_t h = leaves.top().second;
    leaves.pop();
    auto it = entries_.find(h);
    const uint64_t parent = it->second.parent;
    drop_snapshot(h);
    pool_.release(it->second.page);
    entries_.erase(it);
    ++freed;
    auto p = entries_.find(parent);
    if (p != entries_.end() && --p->second.children == 0 && pool_.refcount(p->second.page) == 1)
      leaves.emplace(p->second.last_use, parent);
  }
  return freed;
}

void PrefixCache::clear() {
  for (auto& [h, e] : entries_) pool_.release(e.page);
  entries_.clear();
  for (auto& [h, s] : snaps_) snapshots_->release(s.slot);
  snaps_.clear();
}

int32_t PrefixCache::find_snapshot(uint64_t hash) {
  auto it = snaps_.find(hash);
  if (it == snaps_.end()) return -1;
  it->second.last_use = ++clock_;
  return it->second.slot;
}

int32_t PrefixCache::take_snapshot_slot() {
  if (!snapshots_ || snapshots_->num_slots() == 0) return -1;
  if (snapshots_->free_slots() == 0) {
    auto lru = std::min_element(snaps_.begin(), snaps_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    if (lru == snaps_.end()) return -1;
    drop_snapshot(lru->first);
  }
  auto slot = snapshots_->allocate();
  return slot.is_ok() ? *slot : -1;
}

bool PrefixCache::insert_snapshot(uint64_t hash, int32_t slot) {
  if (!entries_.count(hash) || snaps_.count(hash)) {
    snapshots_->release(slot);
    return false;
  }
  snaps_[hash] = Snapshot{slot, ++clock_};
  return true;
}

void PrefixCache::drop_snapshot(uint64_t hash) {
  auto it = snaps_.find(hash);
  if (it == snaps_.end()) return;
  snapshots_->release(it->second.slot);
  snaps_.erase(it);
}

}  // namespace ferrite
