#include "engine/model_runner.h"

#include <fmt/format.h>

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/kernels/quant_dot.h"
#include "backends/cpu/state_copy.h"
#include "base/thread_pool.h"
#ifdef FERRITE_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/state_copy.h"
#endif

namespace ferrite {

Result<std::unique_ptr<Device>> make_device(const std::string& name) {
  if (name == "cpu") return make_cpu_device();
  if (name == "cuda") {
#ifdef FERRITE_HAVE_CUDA
    return make_cuda_device(0);
#else
    return unsupported("this build of ferrite has no CUDA backend (device 'cuda')");
#endif
  }
  return invalid_argument("unknown device '" + name + "' (cpu, cuda)");
}

Result<std::unique_ptr<Registry>> make_registry(const std::string& device,
                                                const std::string& providers) {
  if (device == "cuda") {
#ifdef FERRITE_HAVE_CUDA
    return make_cuda_registry();
#else
    return unsupported("this build of ferrite has no CUDA backend (device 'cuda')");
#endif
  }
  if (device != "cpu") return unsupported("no provider registry for device '" + device + "'");
  if (providers == "fast") return make_cpu_registry(CpuProviderSet::kFast);
  if (providers == "reference") return make_cpu_registry(CpuProviderSet::kReference);
  return invalid_argument("unknown provider set '" + providers + "' (fast, reference)");
}

namespace {

// `program` must outlive the report's plan (the report keeps it alive).
Result<PlanReport> make_report(const ModelConfig& config,
                               std::shared_ptr<const ModelProgram> program,
                               const Registry& registry, const RunnerOptions& options) {
  PlanReport r;
  r.config = config;
  r.program = program;
  PlanOptions po;
  po.activation_dtype = options.activation_dtype;
  po.limits = options.limits;
  po.tuning = options.tuning;
  if (!options.load.program.allow_long_context)
    po.limits.max_context =
        std::min<int64_t>(options.limits.max_context, config.max_position_embeddings);
  FERRITE_ASSIGN_OR_RETURN(r.plan, plan_program(*program, registry, po));
  r.weight_bytes = program->weight_bytes();
  for (const StateDecl& s : program->states) {
    int64_t bytes = dtype_bytes(s.dtype, s.shape.numel());
    if (s.kind == StateKind::kKvPages)
      r.kv_bytes_per_token += bytes;
    else
      r.state_bytes_per_sequence += bytes;
  }
  r.catalog = registry.catalog().to_string();
  return r;
}

std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", v, units[u]);
}

// One line per kind of layer: the hybrid plan (which mixer per layer, as a
// pattern of L = linear attention / F = full attention) and the MLP kind.
std::string layer_summary(const ModelProgram& p) {
  std::string pattern;
  int64_t full = 0, linear = 0, moe = 0, dense = 0;
  std::string moe_desc;
  for (const ProgramNode& n : p.nodes) {
    if (n.contract_id == "causal_paged_attention") {
      ++full;
      pattern += 'F';
    } else if (n.contract_id == "gated_delta_recurrent_attention") {
      ++linear;
      pattern += 'L';
    } else if (n.contract_id == "dense_swiglu") {
      ++dense;
    } else if (n.contract_id == "routed_swiglu_moe" ||
               n.contract_id == "routed_shared_swiglu_moe") {
      ++moe;
      if (moe_desc.empty()) {
        moe_desc = fmt::format(
            "{} experts, top-{}{}, expert width {}", n.attrs.u("num_experts"), n.attrs.u("top_k"),
            n.attrs.b("normalize_topk") ? " renormalised" : "", n.attrs.u("intermediate_size"));
        if (n.attrs.has("shared_intermediate_size"))
          moe_desc += fmt::format(", shared expert {}", n.attrs.u("shared_intermediate_size"));
      }
    }
  }
  std::string s;
  if (linear > 0) {
    s += fmt::format("hybrid: {} linear-attention (gated delta) + {} full-attention layers: {}\n",
                     linear, full, pattern);
  }
  if (moe > 0) {
    s += fmt::format("MLP: {} MoE layers ({}){}\n", moe, moe_desc,
                     dense ? fmt::format(", {} dense", dense) : std::string());
  }
  return s;
}

}  // namespace

std::string PlanReport::to_string() const {
  std::string s;
  s += fmt::format(
      "model: {} ({} layers, hidden {}, {} heads / {} KV heads, head_dim {}, vocab {})\n",
      config.model_type, config.num_layers, config.hidden_size, config.num_heads,
      config.num_kv_heads, config.head_dim, config.vocab_size);
  s += fmt::format("backend: {}, activations {}, plan fingerprint {:016x}\n",
                   backend_name(plan.backend), dtype_name(plan.activation_dtype), plan.fingerprint);
  if (config.multimodal)
    s += "multimodal checkpoint: the language model is loaded; images are not supported\n";
  if (program) s += layer_summary(*program);
  s += "plan (node -> provider):\n" + plan.to_string();
  s += fmt::format("weights: {}\n", human_bytes(weight_bytes));
  s += fmt::format(
      "KV cache: {} per token ({} for one {}-token sequence)\n", human_bytes(kv_bytes_per_token),
      human_bytes(kv_bytes_per_token * plan.limits.max_context), plan.limits.max_context);
  if (state_bytes_per_sequence)
    s += fmt::format("recurrent state: {} per sequence ({} for {} sequences)\n",
                     human_bytes(state_bytes_per_sequence),
                     human_bytes(state_bytes_per_sequence * plan.limits.max_sequences),
                     plan.limits.max_sequences);
  s += fmt::format("workspace: {}\n", human_bytes(plan.workspace_bytes));
  const int64_t seqs = plan.limits.max_sequences;
  s += fmt::format(
      "memory estimate: {} (weights + KV for {} full {}-token sequences + state + "
      "workspace)\n",
      human_bytes(weight_bytes +
                  seqs * (kv_bytes_per_token * plan.limits.max_context + state_bytes_per_sequence) +
                  plan.workspace_bytes),
      seqs, plan.limits.max_context);
  return s;
}

Result<PlanReport> ModelRunner::plan_only(const RunnerOptions& options) {
  FERRITE_ASSIGN_OR_RETURN(ModelSource src, open_model(options.load));
  FERRITE_ASSIGN_OR_RETURN(std::shared_ptr<const Registry> registry,
                           make_registry(options.device, options.providers));
  auto program = std::make_shared<const ModelProgram>(std::move(src.program));
  FERRITE_ASSIGN_OR_RETURN(PlanReport report,
                           make_report(src.config, std::move(program), *registry, options));
  report.registry = std::move(registry);
  return report;
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::open(const RunnerOptions& options) {
  auto r = std::unique_ptr<ModelRunner>(new ModelRunner());
  r->options_ = options;
  ThreadPool::configure_global(static_cast<int>(options.tuning.threads));
  cpu::set_quant_matmul_mode(options.tuning.cpu_quant_dot,
                             static_cast<int>(options.tuning.cpu_quant_isa));
  FERRITE_ASSIGN_OR_RETURN(r->device_, make_device(options.device));
  FERRITE_ASSIGN_OR_RETURN(r->registry_, make_registry(options.device, options.providers));
  FERRITE_ASSIGN_OR_RETURN(r->source_, open_model(options.load));
  // The plan is resolved before any weight is allocated.
  // The runner's program lives in source_; the report does not own it.
  std::shared_ptr<const ModelProgram> program(std::shared_ptr<const ModelProgram>(),
                                              &r->source_.program);
  FERRITE_ASSIGN_OR_RETURN(r->report_,
                           make_report(r->source_.config, program, *r->registry_, options));
  FERRITE_ASSIGN_OR_RETURN(auto weights,
                           materialize_weights(r->source_, *r->device_, options.load));
  ExecContext ctx;
  ctx.device = r->device_.get();
  ctx.pool = &ThreadPool::global();
#ifdef FERRITE_HAVE_CUDA
  if (options.device == "cuda") {
    CudaExecOptions co;
    co.graphs = options.tuning.cuda_graphs;
    co.profile = options.tuning.profile;
    co.ncu_decode_step = options.tuning.ncu_decode_step;
    co.max_tokens = r->report_.plan.limits.max_tokens;
    co.max_sequences = r->report_.plan.limits.max_sequences;
    co.max_context = r->report_.plan.limits.max_context;
    co.page_size = options.cache.page_size;
    FERRITE_ASSIGN_OR_RETURN(r->backend_state_, make_cuda_exec_context(*r->device_, co, &ctx));
  }
#endif
  r->ctx_ = ctx;
  FERRITE_ASSIGN_OR_RETURN(r->bound_,
                           BoundPlan::bind(r->report_.plan, r->source_.program, std::move(weights),
                                           *r->device_, ctx, options.cache));
  // Prefix-cache state snapshots are copied by the backend (one launch on
  // the step stream on CUDA, memcpy over the pool on CPU).
  if (options.device == "cpu") r->bound_->set_state_copier(make_cpu_state_copier(ctx.pool));
#ifdef FERRITE_HAVE_CUDA
  if (options.device == "cuda") {
    FERRITE_ASSIGN_OR_RETURN(auto copier, make_cuda_state_copier(*r->device_));
    r->bound_->set_state_copier(std::move(copier));
  }
#endif
  return r;
}

}  // namespace ferrite
