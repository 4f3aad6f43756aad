// Prefix cache: full KV pages shared between sequences by content hash.
//
// A page is keyed by the hash of its tokens chained with the hash of the page
// before it, so a key names a whole prefix. The cache holds one reference to
// every page it knows; a sequence that reuses a page holds another. Pages
// whose only reference is the cache's are evictable, least recently used
// first. Keys are verified against the stored tokens, so a hash collision is
// a miss, never wrong KV.
//
// Hybrid models (recurrent state) also keep state snapshots: the conv and
// delta state of every gated-delta layer after a prefix of whole pages,
// keyed by the chain hash of the prefix's last page (the same key as that
// page). A snapshot lives only while its page entry does: evicting the page
// frees the snapshot slot. Snapshot slots are a fixed pool (BoundPlan::
// snapshot_slots()); when none is free, the least recently used snapshot
// goes. A sequence resumes only where a snapshot exists, because its KV
// pages alone cannot rebuild the recurrent state.
//
// Storage is sized once, from the pool, when the cache is made: an entry per
// page id (a page is cached under one key at most: a cached page is never
// free, so no other sequence can fill it), the pages' tokens, an
// open-addressing index from key to page, and eviction's heap. Inserting,
// matching and evicting then allocate nothing (the engine's step loop
// inserts every page a step completes).
//
// Not thread-safe: owned by the engine loop.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/memory.h"

namespace ferrite {

// How many snapshot slots a prefix cache gets and how often a prompt is
// snapshotted, from the knobs of EngineOptions: snapshot memory is at most
// `fraction` of the KV pool (at least one slot), and interval snapshots come
// every `interval_pages` pages (0: the fewest pages whose KV is at least
// state_bytes / fraction, so a cached run's snapshots cost at most `fraction`
// of its KV), rounded up to a multiple of `align_pages`.
struct SnapshotBudget {
  int32_t slots = 0;
  int32_t interval_pages = 0;
  int64_t bytes = 0;  // slots x state bytes per slot
};
SnapshotBudget snapshot_budget(double fraction, int32_t interval_pages, int32_t align_pages,
                               int32_t num_pages, int64_t kv_bytes_per_page,
                               int64_t state_bytes_per_slot);

class PrefixCache {
 public:
  // `snapshots` (null: a model without recurrent state) is the pool of
  // snapshot slots; the cache owns every slot it takes from it.
  explicit PrefixCache(PagePool& pool, StateSlots* snapshots = nullptr);
  ~PrefixCache() { clear(); }

  static constexpr uint64_t kRootHash = 0x9e3779b97f4a7c15ull;
  static uint64_t page_hash(uint64_t parent, std::span<const uint32_t> tokens);

  // Longest cached run of full pages that starts `tokens`, at most max_pages.
  // Each matched page is retained for the caller; their ids and chain hashes
  // are appended to *pages and *hashes. Returns the number of pages matched.
  int32_t match(std::span<const uint32_t> tokens, int32_t max_pages, std::vector<int32_t>* pages,
                std::vector<uint64_t>* hashes);
  // Offers a full, computed page the caller holds. The cache retains it,
  // unless the same prefix is already cached (then nothing happens).
  void insert(uint64_t hash, uint64_t parent, std::span<const uint32_t> tokens, int32_t page);
  // Releases up to n pages only the cache holds, least recently used first,
  // always the last page of a cached prefix (a page with cached successors
  // stays: dropping it would strand them). A page's snapshot goes with it.
  // Returns how many pages went back to the pool.
  int32_t evict(int32_t n);
  // Pages that evict() could free now.
  int32_t evictable() const;
  int32_t size() const { return size_; }
  // Drops every entry (pages still used by sequences stay with them) and
  // every snapshot.
  void clear();

  // --- recurrent-state snapshots ---
  // The snapshot slot keyed by `hash` (the chain hash of its prefix's last
  // page), or -1; marks it used.
  int32_t find_snapshot(uint64_t hash);
  bool has_snapshot(uint64_t hash) const {
    const int32_t page = find(hash);
    return page >= 0 && entries_[page].snapshot >= 0;
  }
  // A free snapshot slot for a new snapshot (the least recently used one is
  // dropped when none is free); -1 when the cache has no snapshot slots. The
  // caller fills it and gives it to insert_snapshot().
  int32_t take_snapshot_slot();
  // Keys a filled slot by the chain hash of its prefix's last page. The page
  // must be cached (else, or when that prefix already has a snapshot, the
  // slot goes back to the pool and false is returned).
  bool insert_snapshot(uint64_t hash, int32_t slot);
  int32_t snapshots() const { return snapshot_count_; }

 private:
  // The entry of one page id (cached or not).
  struct Entry {
    bool cached = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    uint64_t last_use = 0;
    int32_t children = 0;   // cached pages whose parent this is
    int32_t snapshot = -1;  // the snapshot slot keyed by this page's hash, or -1
    uint64_t snapshot_use = 0;
  };
  // The cached page keyed by `hash`, or -1.
  int32_t find(uint64_t hash) const;
  void index_insert(int32_t page);
  void index_erase(int32_t page);
  size_t home(uint64_t hash) const { return static_cast<size_t>(hash * 0x9e3779b97f4a7c15ull >> 7) & mask_; }
  std::span<const uint32_t> tokens_of(int32_t page) const {
    const size_t ps = static_cast<size_t>(pool_.page_size());
    return std::span<const uint32_t>(tokens_).subspan(static_cast<size_t>(page) * ps, ps);
  }
  void drop_snapshot(int32_t page);
  void drop(int32_t page);
  PagePool& pool_;
  StateSlots* snapshots_;
  std::vector<Entry> entries_;     // by page id
  std::vector<uint32_t> tokens_;   // [pages, page_size]: a cached page's tokens
  std::vector<int32_t> index_;     // open addressing (linear probing): page or -1
  size_t mask_ = 0;
  int32_t size_ = 0;
  int32_t snapshot_count_ = 0;
  std::vector<std::pair<uint64_t, int32_t>> heap_;  // evict(): (last_use, page)
  uint64_t clock_ = 0;
};

}  // namespace ferrite
