// The NCCL communicator (runtime/communicator.h), built with the CUDA
// backend when libnccl is found (FERRITE_HAVE_NCCL).
//
// One process, one thread per GPU: Ferrite is one binary with one scheduler,
// and its executor already runs the ranks of a plan as threads (one per
// rank, each driving its own device and stream), so the group is made with
// ncclCommInitAll over the plan's devices and rank r's thread calls only
// endpoint r. One process per GPU (vLLM's workers) would add an IPC channel
// for every step's batch and a second copy of the scheduler state, for no
// gain on one host. NVLink SHARP / multicast (NVLS) is switched off
// (NCCL_NVLS_ENABLE=0, set before the group is made): the lent machines do
// not support it reliably.
//
// Not yet run on a two-GPU machine: the planner refuses tensor parallelism
// on the CUDA backend until it is (runtime/tensor_parallel.h).
#pragma once

#include <memory>
#include <vector>

#include "runtime/communicator.h"

namespace ferrite {

// One endpoint per entry of `devices` (CUDA device ordinals, rank order).
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    const std::vector<int>& devices);

}  // namespace ferrite
