// Prefix cache: full KV pages shared between sequences by content hash.
//
// A page is keyed by the hash of its tokens chained with the hash of the page
// before it, so a key names a whole prefix. The cache holds one reference to
// every page it knows; a sequence that reuses a page holds another. Pages
// whose only reference is the cache's are evictable, least recently used
// first. Keys are verified against the stored tokens, so a hash collision is
// a miss, never wrong KV.
//
// Not thread-safe: owned by the engine loop.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/memory.h"

namespace ferrite {

class PrefixCache {
 public:
  explicit PrefixCache(PagePool& pool) : pool_(pool) {}
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
  // Releases up to n pages only the cache holds, least recently used first.
  // Returns how many pages went back to the pool.
  int32_t evict(int32_t n);
  // Pages that evict() could free now.
  int32_t evictable() const;
  int32_t size() const { return static_cast<int32_t>(entries_.size()); }
  // Drops every entry (pages still used by sequences stay with them).
  void clear();

 private:
  struct Entry {
    int32_t page = -1;
    uint64_t parent = 0;
    std::vector<uint32_t> tokens;
    uint64_t last_use = 0;
  };
  PagePool& pool_;
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace ferrite
