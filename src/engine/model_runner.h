// ModelRunner: one loaded model on one device: the resolved plan bound with
// its weights, KV pages and state slots. The same runner serves `generate`,
// `serve` and `bench`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/loader.h"
#include "runtime/communicator.h"
#include "runtime/executor.h"
#include "runtime/registry.h"
#include "runtime/tuning.h"

namespace ferrite {

class ThreadPool;

struct RunnerOptions {
  LoadOptions load;
  std::string device = "cpu";      // "cpu" | "cuda"
  std::string providers = "fast";  // CPU provider set: "fast" | "reference"
  DType activation_dtype = DType::kF32;
  Tuning tuning;  // knobs (runtime/tuning.h): CPU threads, CUDA graphs, profiling
  StepLimits limits;
  CacheConfig cache;
  // Ranks the model is split across (runtime/tensor_parallel.h); on CPU
  // they are threads, each with threads / tensor_parallel CPU workers.
  int tensor_parallel = 1;
};

// What `ferrite info` prints; available without allocating any weight.
struct PlanReport {
  ModelConfig config;
  // The plan's nodes point into this program and its providers into this
  // registry: the report keeps both alive.
  std::shared_ptr<const ModelProgram> program;
  std::shared_ptr<const Registry> registry;
  ResolvedPlan plan;
  // Sums over the ranks (tensor parallelism); each rank holds 1/world of
  // them (replicated weights counted on every rank).
  int64_t weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;  // all layers, K and V
  int64_t state_bytes_per_sequence = 0;
  int world_size = 1;
  // A quantized Hugging Face checkpoint's scheme (models/hf_quant.h), e.g.
  // "gptq int4, group 128, sym"; empty otherwise.
  std::string quantization;
  std::string catalog;
  std::string to_string() const;
};

class ModelRunner {
 public:
  static Result<std::unique_ptr<ModelRunner>> open(const RunnerOptions& options);
  // Plans without touching weight memory (header reads only).
  static Result<PlanReport> plan_only(const RunnerOptions& options);

  BoundPlan& bound() { return *bound_; }
  const ModelConfig& config() const { return source_.config; }
  const ModelProgram& program() const { return bound_->program(); }
  const RunnerOptions& options() const { return options_; }
  Device& device() { return *device_; }
  const PlanReport& report() const { return report_; }
  const ExecContext& exec_context() const { return ctx_; }

 private:
  RunnerOptions options_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Registry> registry_;
  ModelSource source_;
  PlanReport report_;
  ExecContext ctx_;
  std::unique_ptr<BoundPlan> bound_;
  // Backend execution state behind the plan's ExecContext (CUDA: stream,
  // cuBLASLt, binding buffer, graphs); released before the plan.
  std::shared_ptr<void> backend_state_;
  // Tensor parallelism: the ranks' communicator endpoints and CPU pools,
  // which the plan's ranks use: ~ModelRunner releases the backend state,
  // then the plan, then these.
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<ThreadPool>> rank_pools_;

 public:
  ~ModelRunner();
};

// Device and registry for a backend name ("cpu", "cuda").
Result<std::unique_ptr<Device>> make_device(const std::string& name);
Result<std::unique_ptr<Registry>> make_registry(const std::string& device,
                                                const std::string& providers);

}  // namespace ferrite
