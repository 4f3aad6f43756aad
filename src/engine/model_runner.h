// ModelRunner: one loaded model on one device: the resolved plan bound with
// its weights, KV pages and state slots. The same runner serves `generate`,
// `serve` and `bench`.
#pragma once

#include <memory>
#include <string>

#include "models/loader.h"
#include "runtime/executor.h"
#include "runtime/registry.h"
#include "runtime/tuning.h"

namespace ferrite {

struct RunnerOptions {
  LoadOptions load;
  std::string device = "cpu";      // "cpu" | "cuda"
  std::string providers = "fast";  // CPU provider set: "fast" | "reference"
  DType activation_dtype = DType::kF32;
  Tuning tuning;  // knobs (runtime/tuning.h): CPU threads, CUDA graphs, profiling
  StepLimits limits;
  CacheConfig cache;
};

// What `ferrite info` prints; available without allocating any weight.
struct PlanReport {
  ModelConfig config;
  // The plan's nodes point into this program and its providers into this
  // registry: the report keeps both alive.
  std::shared_ptr<const ModelProgram> program;
  std::shared_ptr<const Registry> registry;
  ResolvedPlan plan;
  int64_t weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;  // all layers, K and V
  int64_t state_bytes_per_sequence = 0;
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
};

// Device and registry for a backend name ("cpu", "cuda").
Result<std::unique_ptr<Device>> make_device(const std::string& name);
Result<std::unique_ptr<Registry>> make_registry(const std::string& device,
                                                const std::string& providers);

}  // namespace ferrite
