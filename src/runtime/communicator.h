// Communicator: the collectives of tensor parallelism. This header is the
// spec; implementations: an in-process CPU one (ranks are threads of one
// process, communicator_cpu.cc) and NCCL (communicator_nccl.{h,cc}, one
// process, one thread per GPU: built with the CUDA backend).
//
// A group of `world_size()` endpoints, one per rank; rank r's endpoint is
// used by rank r's thread only. The plan places every collective as a node
// (contracts tp_all_reduce_sum / tp_all_gather, runtime/tensor_parallel.h):
// a provider calls its rank's endpoint, never a hidden side call, so a
// backend that captures a step in a graph (CUDA) captures the collectives
// with it.
//
// Rules every implementation keeps:
// - SPMD: every rank calls the same collectives in the same order with the
//   same op, element count, rows, dtype and root. The CPU group checks this
//   and fails every rank with internal_error naming both calls when they
//   disagree; NCCL cannot check and hangs or corrupts (the plan is the same
//   on every rank, so its nodes always agree).
// - Buffers: `data` / `send` / `recv` are device memory of the rank's device
//   (host memory for the CPU group); `send` and `recv` do not overlap.
// - Ordering: `stream` is the rank's execution stream (ExecContext::stream;
//   null on CPU). NCCL enqueues on it and returns (asynchronous, capturable);
//   the CPU group returns when the result is in the rank's buffer and every
//   other rank has finished reading it (a collective is a barrier).
// - Determinism: the CPU all-reduce adds the ranks' values in rank order,
//   ((x_0 + x_1) + x_2) + ..., in f32 (bf16 / f16 values widened, the sum
//   rounded once), whichever thread computes which element: its result does
//   not depend on timing and is bitwise the same on every rank. NCCL's
//   all-reduce is identical on every rank and run to run for one topology,
//   algorithm and protocol, but its order is NCCL's (not rank order).
// - Errors: abort() (any rank) wakes every rank blocked in a collective of
//   the group with `cancelled`; later collectives of the group fail the
//   same way. A rank that fails before a collective aborts the group so the
//   others do not wait forever.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ferrite {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string_view kind() const = 0;  // "cpu", "nccl"

  // In place: the `count` elements at `data` (f32, bf16 or f16) become,
  // on every rank, the element-wise sum over the ranks.
  virtual Status all_reduce_sum(void* data, int64_t count, DType dtype, void* stream) = 0;

  // Row-wise all-gather: `send` holds [rows, count] elements; afterwards
  // `recv` holds [rows, world_size * count] on every rank: row i is row i
  // of rank 0's send, then rank 1's, ... (rows = 1: the plain all-gather,
  // rank-major). Any dtype (bytes are copied).
  virtual Status all_gather(const void* send, void* recv, int64_t rows, int64_t count,
                            DType dtype, void* stream) = 0;

  // The `count` elements at rank `root`'s `data` copied to every rank's
  // `data`. Any dtype.
  virtual Status broadcast(void* data, int64_t count, DType dtype, int root, void* stream) = 0;

  // Fails every pending and later collective of the group (see above).
  virtual void abort() = 0;
};

// The in-process CPU group: `world_size` endpoints (index = rank) sharing
// one rendezvous. Ranks are threads; each calls only its endpoint. The
// endpoints share state and may be destroyed in any order.
Result<std::vector<std::unique_ptr<Communicator>>> make_cpu_communicators(int world_size);

// Largest world size the planner and the CPU group accept.
inline constexpr int kMaxTensorParallel = 64;

}  // namespace ferrite
