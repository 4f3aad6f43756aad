#include "engine/prefix_cache.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
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

PrefixCache::PrefixCache(PagePool& pool, StateSlots* snapshots)
    : pool_(pool), snapshots_(snapshots) {
  const size_t pages = static_cast<size_t>(std::max(pool.num_pages(), 0));
  entries_.resize(pages);
  tokens_.resize(pages * static_cast<size_t>(pool.page_size()));
  size_t cap = 16;
  while (cap < 2 * pages) cap *= 2;  // load factor <= 1/2
  index_.assign(cap, -1);
  mask_ = cap - 1;
  heap_.reserve(pages);
}

int32_t PrefixCache::find(uint64_t hash) const {
  for (size_t i = home(hash);; i = (i + 1) & mask_) {
    const int32_t page = index_[i];
    if (page < 0) return -1;
    if (entries_[page].hash == hash) return page;
  }
}

void PrefixCache::index_insert(int32_t page) {
  size_t i = home(entries_[page].hash);
  while (index_[i] >= 0) i = (i + 1) & mask_;
  index_[i] = page;
}

void PrefixCache::index_erase(int32_t page) {
  size_t i = home(entries_[page].hash);
  while (index_[i] != page) i = (i + 1) & mask_;
  // Backward-shift deletion: later pages of the probe run move into the
  // hole unless their home lies cyclically in (hole, their slot].
  index_[i] = -1;
  for (size_t j = (i + 1) & mask_; index_[j] >= 0; j = (j + 1) & mask_) {
    const size_t k = home(entries_[index_[j]].hash);
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    index_[i] = index_[j];
    index_[j] = -1;
    i = j;
  }
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
    const int32_t page = find(h);
    if (page < 0 || entries_[page].parent != parent ||
        !std::equal(page_tokens.begin(), page_tokens.end(), tokens_of(page).begin()))
      break;
    entries_[page].last_use = clock_;
    pool_.retain(page);
    pages->push_back(page);
    hashes->push_back(h);
    parent = h;
    begin += ps;
    ++matched;
  }
  return matched;
}

void PrefixCache::insert(uint64_t hash, uint64_t parent, std::span<const uint32_t> tokens,
                         int32_t page) {
  const int32_t existing = find(hash);
  if (existing >= 0) {
    entries_[existing].last_use = ++clock_;
    return;
  }
  FERRITE_CHECK(page >= 0 && page < static_cast<int32_t>(entries_.size()) &&
                !entries_[page].cached && tokens.size() == static_cast<size_t>(pool_.page_size()))
      << "prefix cache: page " << page << " offered twice or out of range";
  Entry& e = entries_[page];
  e = Entry{};
  e.cached = true;
  e.hash = hash;
  e.parent = parent;
  e.last_use = ++clock_;
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(page) * pool_.page_size());
  index_insert(page);
  ++size_;
  pool_.retain(page);
  const int32_t p = find(parent);
  if (p >= 0) ++entries_[p].children;
}

int32_t PrefixCache::evictable() const {
  int32_t n = 0;
  for (int32_t page = 0; page < static_cast<int32_t>(entries_.size()); ++page)
    if (entries_[page].cached && pool_.refcount(page) == 1) ++n;
  return n;
}

void PrefixCache::drop(int32_t page) {
  drop_snapshot(page);
  index_erase(page);
  entries_[page].cached = false;
  --size_;
  pool_.release(page);
}

int32_t PrefixCache::evict(int32_t n) {
  if (n <= 0) return 0;
  // Least recently used last pages of cached prefixes first; dropping one
  // may make its parent the last page of its prefix. A min-heap in heap_
  // (reserved for every page: no allocation).
  auto later = [](const std::pair<uint64_t, int32_t>& a, const std::pair<uint64_t, int32_t>& b) {
    return a > b;
  };
  heap_.clear();
  for (int32_t page = 0; page < static_cast<int32_t>(entries_.size()); ++page) {
    const Entry& e = entries_[page];
    if (e.cached && e.children == 0 && pool_.refcount(page) == 1) heap_.emplace_back(e.last_use, page);
  }
  std::make_heap(heap_.begin(), heap_.end(), later);
  int32_t freed = 0;
  while (freed < n && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const int32_t page = heap_.back().second;
    heap_.pop_back();
    const uint64_t parent = entries_[page].parent;
    drop(page);
    ++freed;
    const int32_t p = find(parent);
    if (p >= 0 && --entries_[p].children == 0 && pool_.refcount(p) == 1) {
      heap_.emplace_back(entries_[p].last_use, p);
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  }
  return freed;
}

void PrefixCache::clear() {
  for (int32_t page = 0; page < static_cast<int32_t>(entries_.size()); ++page) {
    Entry& e = entries_[page];
    if (!e.cached) continue;
    drop_snapshot(page);
    e.cached = false;
    pool_.release(page);
  }
  std::fill(index_.begin(), index_.end(), -1);
  size_ = 0;
}

int32_t PrefixCache::find_snapshot(uint64_t hash) {
  const int32_t page = find(hash);
  if (page < 0 || entries_[page].snapshot < 0) return -1;
  entries_[page].snapshot_use = ++clock_;
  return entries_[page].snapshot;
}

int32_t PrefixCache::take_snapshot_slot() {
  if (!snapshots_ || snapshots_->num_slots() == 0) return -1;
  if (snapshots_->free_slots() == 0) {
    int32_t lru = -1;
    for (int32_t page = 0; page < static_cast<int32_t>(entries_.size()); ++page) {
      const Entry& e = entries_[page];
      if (e.cached && e.snapshot >= 0 &&
          (lru < 0 || e.snapshot_use < entries_[lru].snapshot_use))
        lru = page;
    }
    if (lru < 0) return -1;
    drop_snapshot(lru);
  }
  auto slot = snapshots_->allocate();
  return slot.is_ok() ? *slot : -1;
}

bool PrefixCache::insert_snapshot(uint64_t hash, int32_t slot) {
  const int32_t page = find(hash);
  if (page < 0 || entries_[page].snapshot >= 0) {
    snapshots_->release(slot);
    return false;
  }
  entries_[page].snapshot = slot;
  entries_[page].snapshot_use = ++clock_;
  ++snapshot_count_;
  return true;
}

void PrefixCache::drop_snapshot(int32_t page) {
  Entry& e = entries_[page];
  if (e.snapshot < 0) return;
  snapshots_->release(e.snapshot);
  e.snapshot = -1;
  --snapshot_count_;
}

}  // namespace ferrite
