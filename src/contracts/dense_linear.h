// dense_linear 1.0: out[t] = W x[t] (+ bias).
//   x      [tokens, in_features] activation
//   weight [out_features, in_features] weight (row-major, as stored by HF)
//   bias   [out_features] weight, optional
//   out    [tokens, out_features] activation
#pragma once

#include "contracts/contract.h"

namespace ferrite::dense_linear {

enum Binding { kX, kWeight, kBias, kOut };

struct Params {
  uint64_t in_features, out_features;
  static Params from(const Attributes& a) { return {a.u("in_features"), a.u("out_features")}; }
};

inline const ContractSchema& contract() {
  static const ContractSchema s = ContractSchema(
      "dense_linear", 1, 0,
      {{"in_features", AttrType::kUnsigned}, {"out_features", AttrType::kUnsigned}},
      {{"x", BindingKind::kActivation, Access::kRead, {"tokens", "in_features"}},
       {"weight", BindingKind::kWeight, Access::kRead, {"out_features", "in_features"}},
       {"bias", BindingKind::kWeight, Access::kRead, {"out_features"}, true},
       {"out", BindingKind::kActivation, Access::kWrite, {"tokens", "out_features"}}},
      OracleSpec{.abs_tol = 1e-4, .rel_tol = 1e-4}, "Dense matrix product.").with_params<Params>();
  return s;
}

}  // namespace ferrite::dense_linear
