// Provider: one backend's implementation of one contract.
//
// The descriptor says what the provider accepts (activation and weight
// dtypes), what storage it needs, how big its scratch workspace is as a
// function of the step limits, and its execution semantics. `encode` records
// the work of a whole step batch: every sequence in one or a few launches.
//
// Providers are immutable after registration and may be shared by several
// bound plans; everything per-step comes in the Invocation.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/status.h"
#include "contracts/contract.h"
#include "runtime/device.h"
#include "runtime/step_batch.h"
#include "tensor/tensor.h"

namespace ferrite {

class ThreadPool;
class Communicator;

// Upper bounds of one step, fixed when a plan is bound.
struct StepLimits {
  int64_t max_tokens = 512;    // packed tokens per step
  int64_t max_sequences = 64;  // sequences per step
  int64_t max_context = 4096;  // positions per sequence
  int64_t threads = 0;         // CPU worker threads (0: the global pool)
};

struct ProviderDescriptor {
  std::string name;         // "cpu.fast.dense_linear"
  // The contract it implements: the registry learns its contract set from
  // its providers (no second list). contract_id / contract_major are its.
  const ContractSchema* contract = nullptr;
  std::string contract_id;  // "dense_linear"
  int contract_major = 1;
  BackendKind backend = BackendKind::kCpu;
  std::vector<DType> activation_dtypes;  // accepted activation element types
  std::vector<DType> weight_dtypes;      // accepted weight element types
  bool paged_kv = false;                 // binds KV state as pages + block tables
  bool deterministic = true;             // same inputs -> same bits, whatever the batch
  bool replay_safe = true;               // may be captured in a graph and replayed
  int priority = 0;                      // the planner prefers the highest
  // Writes the optional partial_out binding of the block contracts (their
  // tensor-parallel output, runtime/tensor_parallel.h) when it is bound: the
  // default supports() refuses such a node for a provider without it.
  bool partial_out = false;
  // Multiplies act-order 4-bit weights (TensorView::input_perm): each
  // product reads its activations through the weight's input permutation.
  // The default supports() refuses a node with such a weight otherwise.
  bool input_permutation = false;
  std::string summary;                   // one line for `ferrite info`
  uint64_t fingerprint() const;
};

// What the planner knows about a node before any weight exists: the contract,
// its attributes, the activation dtype and each binding's dtype (nullopt when
// an optional binding is absent).
struct NodeSignature {
  const ContractSchema* contract = nullptr;
  Attributes attrs;
  DType activation_dtype = DType::kF32;
  std::vector<std::optional<DType>> binding_dtypes;  // schema binding order
  // Per binding (schema order; may be shorter): a weight whose columns are
  // stored permuted (act-order 4-bit, TensorView::input_perm).
  std::vector<bool> binding_permuted;

  // The contract's typed parameters (ContractSchema::with_params), parsed
  // from `attrs` once by resolve_params(): the planner calls it when it makes
  // a signature (so supports(), workspace_bytes() and every encode() read
  // the same struct and no step looks attributes up by name). Whoever builds
  // a signature by hand (the conformance suite) calls it after setting attrs.
  void resolve_params() { typed_params_ = contract ? contract->parse_params(attrs) : nullptr; }
  // P must be the contract's Params (checked: a provider reading another
  // contract's struct, or a signature never resolved, is a bug).
  template <class P>
  const P& params() const {
    FERRITE_CHECK(typed_params_ && contract->params_tag() == &kParamsTag<P>)
        << "node signature of " << (contract ? contract->id() : "?")
        << ": typed params not resolved or of another contract";
    return *static_cast<const P*>(typed_params_.get());
  }

 private:
  std::shared_ptr<const void> typed_params_;
};

// A backend hook run once per step before any node: e.g. the CUDA backend
// uploads the step's metadata (token -> sequence, positions, block tables,
// state slots) into its small per-step binding buffer, which its providers
// then read (and which CUDA graph replays read at fixed addresses).
class StepPreparer {
 public:
  virtual ~StepPreparer() = default;
  virtual Status prepare(const StepBatch& batch) = 0;
};

// A backend hook that runs the nodes of a step itself: the CUDA backend pads
// decode steps to a batch-size bucket and replays a captured graph of
// `encode_nodes` (which records every node of the plan for the batch it is
// given). When set, the executor calls it instead of preparer + nodes; it
// must prepare the step metadata itself.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual Status run(const StepBatch& batch,
                     const std::function<Status(const StepBatch&)>& encode_nodes) = 0;
};

// Backend execution context: the thread pool on CPU, the stream on CUDA.
struct ExecContext {
  Device* device = nullptr;
  ThreadPool* pool = nullptr;
  void* stream = nullptr;
  StepPreparer* preparer = nullptr;  // optional
  StepRunner* runner = nullptr;      // optional (graph replay)
  void* backend = nullptr;           // optional backend-private state
  // Tensor parallelism: the rank's endpoint of the plan's group (the
  // tp_* collective contracts call it); null when the plan has one rank.
  Communicator* comm = nullptr;
  int rank = 0;
};

struct Invocation {
  const NodeSignature* signature = nullptr;
  // Schema binding order; absent: data == nullptr. A view of views the
  // executor resolved when the plan was bound (nothing is built per step).
  std::span<const TensorView> bindings;
  const StepBatch* batch = nullptr;
  const SamplingBatch* sampling = nullptr;  // sampler contracts only
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  ExecContext* ctx = nullptr;
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual const ProviderDescriptor& descriptor() const = 0;
  // OK when this provider can run the node; else the reason (one line). The
  // default checks contract id/major and the dtypes against the descriptor.
  virtual Status supports(const NodeSignature& node) const;
  // Scratch bytes one invocation needs at most under `limits`.
  virtual int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const {
    return 0;
  }
  virtual Status encode(const Invocation& inv) const = 0;
};

}  // namespace ferrite
