// Memory of a bound plan: the per-step arena, the KV page pool and the
// recurrent state slots. All storage is allocated on the plan's device at
// bind time, sized from the plan; nothing is allocated per step.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "runtime/device.h"

namespace ferrite {

// Bump allocator over one device buffer, reset at every step.
class LinearArena {
 public:
  LinearArena() = default;
  Status init(Device& device, int64_t bytes);
  // 256-byte aligned; checks capacity (the plan sized it, so overflow is a bug).
  void* allocate(int64_t bytes);
  void reset() { used_ = 0; }
  int64_t capacity() const { return static_cast<int64_t>(buffer_.size()); }
  int64_t high_water() const { return high_water_; }

 private:
  DeviceBuffer buffer_;
  int64_t used_ = 0;
  int64_t high_water_ = 0;
};

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
