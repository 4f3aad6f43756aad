// The CPU backend's StateCopier (runtime/state_copy.h): plain memcpy of the
// rows, split over the thread pool (a large model's state is tens of MiB).
#pragma once

#include <memory>

#include "runtime/state_copy.h"

namespace ferrite {

class ThreadPool;

// `pool` may be null (the copy then runs on the caller).
std::unique_ptr<StateCopier> make_cpu_state_copier(ThreadPool* pool);

}  // namespace ferrite
