// Memory of a bound plan: the KV page pool and the recurrent state slots.
// All storage is allocated on the plan's device at bind time, sized from
// the plan; nothing is allocated per step (a step's scratch is the plan's
// workspace buffer, carved by the provider that runs).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "runtime/device.h"

namespace ferrite {

// Fixed-size KV pages handed out by id. Page ids index every KV state tensor
// ([pages, page_size, ...]) of the model at once. Reference counts let the
// prefix cache share full pages between sequences.
class PagePool {
 public:
  void init(int32_t num_pages, int32_t page_size);
  int32_t page_size() const { return page_size_; }
  int32_t num_pages() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t free_pages() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_pages() const { return num_pages() - free_pages(); }
  // Pages needed to hold `positions` positions.
  int32_t pages_for(int64_t positions) const {
    return static_cast<int32_t>((positions + page_size_ - 1) / page_size_);
  }
  // resource_exhausted when fewer than n pages are free (nothing is taken).
  Status allocate(int32_t n, std::vector<int32_t>* out);
  void retain(int32_t page);
  void release(int32_t page);  // back to the free list at refcount 0
  void release_all(const std::vector<int32_t>& pages);
  int32_t refcount(int32_t page) const { return refcount_[page]; }

 private:
  int32_t page_size_ = 16;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;
};

// Per-sequence recurrent state slots (conv state, delta state).
class StateSlots {
 public:
  void init(int32_t num_slots);
  int32_t num_slots() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t free_slots() const { return static_cast<int32_t>(free_.size()); }
  Result<int32_t> allocate();
  void release(int32_t slot);

 private:
  std::vector<bool> in_use_;
  std::vector<int32_t> free_;
};

}  // namespace ferrite
