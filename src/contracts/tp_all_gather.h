// tp_all_gather 1.0: the tensor-parallel row-wise all-gather, a node of the
// plan (runtime/tensor_parallel.h), e.g. the vocab-parallel LM head's
// logits. On every rank:
//   out[i] = concat over ranks r (rank order) of x_r[i]
// Providers call the rank's Communicator (ExecContext::comm).
//   x   [rows, width] activation, read (any dtype; rows: tokens or sequences)
//   out [rows, out_width] activation, write, out_width = world_size * width
#pragma once

#include "contracts/contract.h"

namespace ferrite::tp_all_gather {

enum Binding { kX, kOut };

struct Params {
  uint64_t width, world_size, out_width;
  static Params from(const Attributes& a) {
    return {a.u("width"), a.u("world_size"), a.u("out_width")};
  }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "tp_all_gather", 1, 0,
      {{"width", AttrType::kUnsigned},
       {"world_size", AttrType::kUnsigned},
       {"out_width", AttrType::kUnsigned}},
      {{"x", BindingKind::kActivation, Access::kRead, {"rows", "width"}},
       {"out", BindingKind::kActivation, Access::kWrite, {"rows", "out_width"}}},
      OracleSpec{.exact = true}, "Tensor-parallel row-wise all-gather (rank order).").with_params<Params>();
  return s;
}

}  // namespace ferrite::tp_all_gather
