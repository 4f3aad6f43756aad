// The planner resolves a ModelProgram against a registry: one provider per
// node, workspace sizes, a plan fingerprint. It runs before any weight is
// allocated; a program that needs a capability the backend lacks fails here
// with ONE error listing every missing piece.
#pragma once

#include <string>
#include <vector>

#include "runtime/program.h"
#include "runtime/registry.h"
#include "runtime/tuning.h"

namespace ferrite {

struct PlanOptions {
  DType activation_dtype = DType::kF32;
  StepLimits limits;
  // Provider name substrings to prefer (e.g. "reference" for the oracle set).
  std::string prefer;
  // The knobs the bound plan runs with (part of the fingerprint).
  Tuning tuning;
};

struct PlannedNode {
  const ProgramNode* node = nullptr;
  NodeSignature signature;
  const Provider* provider = nullptr;
  int64_t workspace_bytes = 0;
};

struct ResolvedPlan {
  BackendKind backend = BackendKind::kCpu;
  DType activation_dtype = DType::kF32;
  StepLimits limits;
  std::vector<PlannedNode> nodes;
  // Sampler stage: greedy and stochastic choice over the logits.
  PlannedNode argmax;
  PlannedNode sampler;
  int64_t workspace_bytes = 0;  // max over nodes (nodes run one after another)
  int tensor_parallel = 1;      // ranks (the program's split, runtime/tensor_parallel.h)
  uint64_t fingerprint = 0;
  // "node -> provider" lines.
  std::string to_string() const;
};

Result<ResolvedPlan> plan_program(const ModelProgram& program, const Registry& registry,
                                  const PlanOptions& options);

}  // namespace ferrite
