#include "engine/model_runner.h"

#include <fmt/format.h>

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/kernels/quant_dot.h"
#include "backends/cpu/state_copy.h"
#include "base/thread_pool.h"
#include "models/hf_quant.h"
#include "runtime/tensor_parallel.h"
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
  const int world = program->tensor_parallel;
  r.world_size = world;
  r.weight_bytes = program->weight_bytes() * world;
  for (const StateDecl& s : program->states) {
    int64_t bytes = dtype_bytes(s.dtype, s.shape.numel()) * world;
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
  if (!quantization.empty()) s += fmt::format("quantization: {}\n", quantization);
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
  if (world_size > 1) {
    const int64_t w = world_size;
    s += fmt::format(
        "tensor parallel: {} ranks, per rank: weights {}, KV cache {} per token ({} for one "
        "{}-token sequence){}, workspace {}; the figures above are the sums over the ranks\n",
        w, human_bytes(weight_bytes / w), human_bytes(kv_bytes_per_token / w),
        human_bytes(kv_bytes_per_token / w * plan.limits.max_context), plan.limits.max_context,
        state_bytes_per_sequence
            ? fmt::format(", recurrent state {} per sequence",
                          human_bytes(state_bytes_per_sequence / w))
            : std::string(),
        human_bytes(plan.workspace_bytes));
  }
  const int64_t seqs = plan.limits.max_sequences;
  s += fmt::format(
      "memory estimate: {} (weights + KV for {} full {}-token sequences + state + "
      "workspace)\n",
      human_bytes(weight_bytes +
                  seqs * (kv_bytes_per_token * plan.limits.max_context + state_bytes_per_sequence) +
                  plan.workspace_bytes * world_size),
      seqs, plan.limits.max_context);
  return s;
}

namespace {

// Opens the model and splits its program for the options' ranks (before any
// weight is allocated). Act-order 4-bit checkpoints stay in 4 bits when the
// backend's providers take an input permutation.
Result<ModelSource> open_source(const RunnerOptions& options, const Registry& registry) {
  LoadOptions load = options.load;
  load.act_order_contracts = registry.input_permutation_contracts();
  FERRITE_ASSIGN_OR_RETURN(ModelSource src, open_model(load));
  if (options.tensor_parallel != 1) {
    if (src.gguf && !options.load.dummy_weights)
      return unsupported(fmt::format(
          "--tensor-parallel-size {}: tensor parallelism does not load GGUF files yet "
          "(safetensors folders and --dummy-weights do)",
          options.tensor_parallel));
    FERRITE_ASSIGN_OR_RETURN(src.program, split_program(src.program, options.tensor_parallel));
    for (const WeightDecl& w : src.program.weights)
      if (w.perm_rows > 0 && w.shard.split())
        return unsupported(fmt::format(
            "--tensor-parallel-size {}: tensor parallelism does not split act-order 4-bit "
            "weights yet ('{}' has a permuted g_idx); run it on one rank",
            options.tensor_parallel, w.name));
  }
  return src;
}

}  // namespace

ModelRunner::~ModelRunner() {
  backend_state_.reset();
  bound_.reset();
}

Result<PlanReport> ModelRunner::plan_only(const RunnerOptions& options) {
  FERRITE_ASSIGN_OR_RETURN(std::shared_ptr<const Registry> registry,
                           make_registry(options.device, options.providers));
  FERRITE_ASSIGN_OR_RETURN(ModelSource src, open_source(options, *registry));
  auto program = std::make_shared<const ModelProgram>(std::move(src.program));
  FERRITE_ASSIGN_OR_RETURN(PlanReport report,
                           make_report(src.config, std::move(program), *registry, options));
  report.registry = std::move(registry);
  if (src.hf_quant) report.quantization = src.hf_quant->scheme().description;
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
  FERRITE_ASSIGN_OR_RETURN(r->source_, open_source(options, *r->registry_));
  // The plan is resolved before any weight is allocated.
  // The runner's program lives in source_; the report does not own it.
  std::shared_ptr<const ModelProgram> program(std::shared_ptr<const ModelProgram>(),
                                              &r->source_.program);
  FERRITE_ASSIGN_OR_RETURN(r->report_,
                           make_report(r->source_.config, program, *r->registry_, options));
  const int world = r->source_.program.tensor_parallel;
  std::vector<std::unique_ptr<WeightStore>> weights(world);
  for (int rank = 0; rank < world; ++rank) {
    FERRITE_ASSIGN_OR_RETURN(weights[rank],
                             materialize_weights(r->source_, *r->device_, options.load, rank));
  }
  ExecContext ctx;
  ctx.device = r->device_.get();
  ctx.pool = &ThreadPool::global();
  if (world > 1) {
    // Ranks are threads (the planner refuses tensor parallelism off CPU):
    // each its own pool of threads / world workers (at least 1), and its
    // endpoint of the in-process communicator.
    FERRITE_ASSIGN_OR_RETURN(r->comms_, make_cpu_communicators(world));
    const int per_rank = std::max(1, ThreadPool::global().size() / world);
    for (int rank = 0; rank < world; ++rank)
      r->rank_pools_.push_back(std::make_unique<ThreadPool>(per_rank));
    ctx.pool = r->rank_pools_[0].get();
    ctx.comm = r->comms_[0].get();
  }
#ifdef FERRITE_HAVE_CUDA
  if (options.device == "cuda") {
    CudaExecOptions co;
    co.graphs = options.tuning.cuda_graphs;
    co.profile = options.tuning.profile;
    co.quant_dot = options.tuning.cuda_quant_dot;
    co.quant_fused = options.tuning.cuda_quant_fused;
    co.quant_fused_fp8 = options.tuning.cuda_quant_fused_fp8;
    co.quant_stream_tokens = options.tuning.cuda_quant_stream_tokens;
    co.quant_mma_fp8 = options.tuning.cuda_quant_mma_fp8;
    co.quant_mma_u4 = options.tuning.cuda_quant_mma_u4;
    co.quant_mma_smem_kib = options.tuning.cuda_quant_mma_smem_kib;
    co.quant_mma_fp8_act = options.tuning.cuda_quant_mma_fp8_act;
    co.moe_mma_fp8 = options.tuning.cuda_moe_mma_fp8;
    co.moe_mma_u4 = options.tuning.cuda_moe_mma_u4;
    co.quant_stream_blocks = options.tuning.cuda_quant_stream_blocks;
    co.quant_stream_item_steps = options.tuning.cuda_quant_stream_item_steps;
    co.quant_stream_mixed = options.tuning.cuda_quant_stream_mixed;
    co.moe_dequant = options.tuning.cuda_moe_dequant;
    co.moe_fused_tokens = options.tuning.cuda_moe_fused_tokens;
    co.moe_gate_up_warp_outputs = options.tuning.cuda_moe_gate_up_warp_outputs;
    co.moe_route_in_router = options.tuning.cuda_moe_route_in_router;
    co.moe_route_block = options.tuning.cuda_moe_route_block;
    co.moe_route_in_experts = options.tuning.cuda_moe_route_in_experts;
    co.moe_down_form = options.tuning.cuda_moe_down_form;
    co.moe_down_pdl_trigger = options.tuning.cuda_moe_down_pdl_trigger;
    co.pdl_trigger_small = options.tuning.cuda_pdl_trigger_small;
    co.moe_shared_in_experts = options.tuning.cuda_moe_shared_in_experts;
    co.gated_delta_fused_norm = options.tuning.cuda_gated_delta_fused_norm;
    co.gated_delta_pdl = options.tuning.cuda_gated_delta_pdl;
    co.gated_delta_conv_in_projection = options.tuning.cuda_gated_delta_conv_in_projection;
    co.decode_split_positions = options.tuning.cuda_decode_split_positions;
    co.decode_reduce_scatter = options.tuning.cuda_decode_reduce_scatter;
    co.decode_cluster = options.tuning.cuda_decode_cluster;
    co.decode_cluster_knobs = {
        .late_stores = options.tuning.cuda_decode_cluster_late_stores,
        .staged_pages = options.tuning.cuda_decode_cluster_staged_pages,
        .bulk_copies = options.tuning.cuda_decode_cluster_bulk_copies,
        .copy_warps = options.tuning.cuda_decode_cluster_copy_warps,
        .rope_table = options.tuning.cuda_decode_cluster_rope_table};
    co.cluster_trace = options.tuning.cuda_cluster_trace;
    co.decode_colocate = options.tuning.cuda_decode_colocate;
    co.decode_colocate_min_mib = options.tuning.cuda_decode_colocate_min_mib;
    co.decode_mma_tokens = options.tuning.cuda_decode_mma_tokens;
    co.rope_token_warps = options.tuning.cuda_rope_token_warps;
    co.prefill_short_tiles = options.tuning.cuda_prefill_short_tiles;
    co.dequant_slice_mib = options.tuning.cuda_dequant_slice_mib;
    co.quant_tile_tokens = options.tuning.cuda_quant_tile_tokens;
    co.quant_mmq_tokens = options.tuning.cuda_quant_mmq_tokens;
    co.quant_mmq_min_tokens = options.tuning.cuda_quant_mmq_min_tokens;
    co.quant_mmq_waves = options.tuning.cuda_quant_mmq_waves;
    co.quant_mmq_share_act = options.tuning.cuda_quant_mmq_share_act;
    co.u4_tile_tokens = options.tuning.cuda_u4_tile_tokens;
    co.u4_tile_wgmma = options.tuning.cuda_u4_tile_wgmma;
    co.fp8_lt_tokens = options.tuning.cuda_fp8_lt_tokens;
    co.ncu_decode_step = options.tuning.ncu_decode_step;
    co.max_tokens = r->report_.plan.limits.max_tokens;
    co.max_sequences = r->report_.plan.limits.max_sequences;
    co.max_context = r->report_.plan.limits.max_context;
    co.page_size = options.cache.page_size;
    FERRITE_ASSIGN_OR_RETURN(r->backend_state_, make_cuda_exec_context(*r->device_, co, &ctx));
  }
#endif
  r->ctx_ = ctx;
  std::vector<RankBinding> ranks(world);
  for (int rank = 0; rank < world; ++rank) {
    ranks[rank].device = r->device_.get();
    ranks[rank].ctx = ctx;
    if (world > 1) {
      ranks[rank].ctx.pool = r->rank_pools_[rank].get();
      ranks[rank].ctx.comm = r->comms_[rank].get();
    }
    ranks[rank].weights = std::move(weights[rank]);
  }
  FERRITE_ASSIGN_OR_RETURN(r->bound_, BoundPlan::bind(r->report_.plan, r->source_.program,
                                                       std::move(ranks), options.cache));
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
