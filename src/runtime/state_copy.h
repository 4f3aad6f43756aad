// StateCopier: the backend hook that copies recurrent state between a
// sequence's working slot and a prefix-cache snapshot row (conv state and
// delta state of every gated-delta layer at once).
//
// Copies are ordered with the step's work on the plan's device: on CUDA they
// are device-to-device copies on the step stream (no host round trip, no
// synchronisation, so they never split a captured decode graph); on CPU plain
// memcpy. A BoundPlan without a copier falls back to one
// Device::copy_on_device per state tensor.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace ferrite {

// One recurrent state tensor: `slots` is its [slots, ...] working storage,
// `snapshots` its [snapshots, ...] snapshot storage; both have rows of
// `row_bytes`.
struct StateRows {
  char* slots = nullptr;
  char* snapshots = nullptr;
  int64_t row_bytes = 0;
};

enum class StateCopyDirection { kToSnapshot, kFromSnapshot };

class StateCopier {
 public:
  virtual ~StateCopier() = default;
  // The tensors every later copy covers (called when snapshot storage is
  // bound; replaces an earlier binding).
  virtual Status bind(std::span<const StateRows> tensors) = 0;
  // Row `slot` of every bound tensor to row `snapshot` of its snapshot
  // storage (kToSnapshot), or back (kFromSnapshot).
  virtual Status copy(int32_t slot, int32_t snapshot, StateCopyDirection direction) = 0;
};

}  // namespace ferrite
