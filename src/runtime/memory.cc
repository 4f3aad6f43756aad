#include "runtime/memory.h"

#include <string>

namespace ferrite {

void PagePool::init(int32_t num_pages, int32_t page_size) {
  FERRITE_CHECK(page_size > 0);
  page_size_ = page_size;
  refcount_.assign(num_pages, 0);
  free_.clear();
  // Hand out low ids first (pop from the back).
  for (int32_t i = num_pages - 1; i >= 0; --i) free_.push_back(i);
}

Status PagePool::allocate(int32_t n, std::vector<int32_t>* out) {
  if (n > free_pages())
    return resource_exhausted("KV cache: need " + std::to_string(n) + " pages, " +
                              std::to_string(free_pages()) + " free of " +
                              std::to_string(num_pages()));
  for (int32_t i = 0; i < n; ++i) {
    int32_t p = free_.back();
    free_.pop_back();
    refcount_[p] = 1;
    out->push_back(p);
  }
  return Status::ok();
}

void PagePool::retain(int32_t page) {
  FERRITE_CHECK(refcount_[page] > 0) << "retain of free page " << page;
  ++refcount_[page];
}

void PagePool::release(int32_t page) {
  FERRITE_CHECK(refcount_[page] > 0) << "double release of page " << page;
  if (--refcount_[page] == 0) free_.push_back(page);
}

void PagePool::release_all(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) release(p);
}

void StateSlots::init(int32_t num_slots) {
  in_use_.assign(num_slots, false);
  free_.clear();
  for (int32_t i = num_slots - 1; i >= 0; --i) free_.push_back(i);
}

Result<int32_t> StateSlots::allocate() {
  if (free_.empty())
    return resource_exhausted("recurrent state: all " + std::to_string(num_slots()) +
                              " slots are in use");
  int32_t s = free_.back();
  free_.pop_back();
  in_use_[s] = true;
  return s;
}

void StateSlots::release(int32_t slot) {
  FERRITE_CHECK(in_use_[slot]) << "double release of state slot " << slot;
  in_use_[slot] = false;
  free_.push_back(slot);
}

}  // namespace ferrite
