// tp_all_reduce_sum 1.0: the tensor-parallel all-reduce, a node of the plan
// (runtime/tensor_parallel.h) so that a backend capturing a step (CUDA
// graphs) captures it too. In place, on every rank:
//   x = sum over ranks r of x_r           (runtime/communicator.h: the CPU
//                                          group adds in rank order)
// Providers call the rank's Communicator (ExecContext::comm).
//   x [rows, width] activation, read-write (rows: the step's tokens or sequences)
#pragma once

#include "contracts/contract.h"

namespace ferrite::tp_all_reduce_sum {

enum Binding { kX };

struct Params {
  uint64_t width, world_size;
  static Params from(const Attributes& a) { return {a.u("width"), a.u("world_size")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "tp_all_reduce_sum", 1, 0,
      {{"width", AttrType::kUnsigned}, {"world_size", AttrType::kUnsigned}},
      {{"x", BindingKind::kActivation, Access::kReadWrite, {"rows", "width"}}},
      OracleSpec{.abs_tol = 1e-6, .rel_tol = 1e-6},
      "Tensor-parallel all-reduce (sum over ranks), in place.").with_params<Params>();
  return s;
}

}  // namespace ferrite::tp_all_reduce_sum
