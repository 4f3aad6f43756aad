// The CUDA backend's StateCopier (runtime/state_copy.h), no CUDA headers:
// one kernel launch per copy on the device's stream (the stream every
// provider records the step on), device to device, never a host round trip
// or a synchronisation.
#pragma once

#include <memory>

#include "runtime/device.h"
#include "runtime/state_copy.h"

namespace ferrite {

// `device` must come from make_cuda_device and outlive the copier.
Result<std::unique_ptr<StateCopier>> make_cuda_state_copier(Device& device);

}  // namespace ferrite
