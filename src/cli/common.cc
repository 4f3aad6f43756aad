#include "cli/common.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "models/model_config.h"

#ifdef FERRITE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "base/thread_pool.h"
#include "models/dummy_formats.h"

namespace ferrite::cli {

void add_model_flags(CLI::App* app, ModelFlags* f, bool model_required, bool positional) {
  auto* m = app->add_option(
      positional ? "model,-m,--model" : "-m,--model", f->model,
      std::string("model folder: config.json + safetensors + tokenizer.json (or only "
                  "config.json with --dummy-weights), or a GGUF file (FILE.gguf)") +
          (model_required ? "" : "; default: the embedded model, ferrite-tiny"));
  if (model_required) m->required();
  app->add_flag("--dummy-weights", f->dummy_weights,
                "random weights for the config, allocated directly (benchmarks at real sizes)");
  app->add_option("--dummy-dtype", f->dummy_dtype,
                  "dtype of dummy weights: bfloat16, float16, float32, or a GGUF block format: "
                  "q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m (q4_k with q6_k tensors)");
  app->add_option("--dummy-seed", f->dummy_seed, "seed of dummy weights");
  app->add_option("--quantization", f->quantization,
                  "with --dummy-weights: random weights in the format of a quantized Hugging "
                  "Face checkpoint: fp8 (e4m3, 128-element scale blocks), gptq-int4, awq-int4 "
                  "(4-bit, group 128); LM head, embeddings and routers stay bf16 (docs/hf_quant.md)");
  app->add_option("--device", f->device, "cpu or cuda");
  app->add_option("--dtype", f->dtype,
                  "activation (and KV cache) dtype: auto (float32 on cpu, bfloat16 on cuda), "
                  "float32, bfloat16, float16");
  app->add_option("--providers", f->providers, "CPU provider set: fast or reference");
  app->add_option("--max-num-seqs", f->max_num_seqs, "sequences per step");
  app->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "tokens per step");
  app->add_option("--max-model-len", f->max_model_len,
                  "context length per sequence, prompt + output (0: the model's "
                  "max_position_embeddings; above it only with --allow-long-max-model-len)");
  app->add_flag("--allow-long-max-model-len", f->allow_long_max_model_len,
                "allow a --max-model-len above the model's max_position_embeddings (positions "
                "the model was not trained on: its output there is often garbage; as vLLM's "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)");
  app->add_option("--page-size", f->page_size, "KV cache page size in tokens");
  app->add_option("--kv-cache-gib", f->kv_cache_gib,
                  "memory for the KV cache, GiB (0: from the device's memory: "
                  "--gpu-memory-utilization on cuda; on cpu what --max-num-seqs full sequences "
                  "need, at most half of the available RAM)");
  app->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                  "cuda: fraction of the GPU's memory for this server (weights, KV cache, "
                  "work buffers), as vLLM");
  app->add_option("--threads", f->threads, "CPU threads (0: all)");
  app->add_option("--tensor-parallel-size,--tp", f->tensor_parallel_size,
                  "ranks the model is split across (tensor parallelism, docs/"
                  "tensor_parallel.md); cpu: ranks are threads, sharing --threads");
}

static Result<DType> parse_dtype(const std::string& s, const char* flag) {
  if (s == "float32" || s == "f32") return DType::kF32;
  if (s == "bfloat16" || s == "bf16") return DType::kBF16;
  if (s == "float16" || s == "f16" || s == "half") return DType::kF16;
  return invalid_argument(
      fmt::format("{}: unknown dtype '{}' (float32, bfloat16, float16)", flag, s));
}

std::string model_display_name(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

std::string gib(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b < (1ll << 30)) return fmt::format("{:.2f} MiB", b / (1 << 20));
  return fmt::format("{:.2f} GiB", b / (1ll << 30));
}

Status check_model_path(const std::string& path) {
  namespace fs = std::filesystem;
  const char* folder = "a model is a folder holding config.json, *.safetensors and "
                       "tokenizer.json";
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    // "org/name": one slash, no path-like start.
    static const std::regex hub(R"(^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$)");
    if (std::regex_match(path, hub))
      return not_found(fmt::format(
          "'{}' looks like a Hugging Face model id, and there is no such local folder; Ferrite "
          "does not download models: pass a local folder (for example `huggingface-cli "
          "download {} --local-dir DIR`, then --model DIR)",
          path, path));
    return not_found(fmt::format("model path '{}' does not exist ({})", path, folder));
  }
  if (fs::is_regular_file(st)) {
    const std::string ext = fs::path(path).extension().string();
    if (ext == ".gguf" || ext == ".GGUF") return Status::ok();  // a GGUF model (gguf_model.h)
    return invalid_argument(fmt::format("'{}' is a file; {}", path, folder));
  }
  if (!fs::is_directory(st)) return invalid_argument(fmt::format("'{}': {}", path, folder));
  if (!fs::exists(fs::path(path) / "config.json", ec))
    return not_found(fmt::format(
        "'{}' has no config.json ({}; `ferrite create-model --out DIR` writes a small one)", path,
        folder));
  return Status::ok();
}

namespace {

// MemAvailable of /proc/meminfo (free + reclaimable), else free pages.
int64_t available_ram() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

struct DeviceMemory {
  int64_t free = 0, total = 0;
  std::string name;
};

Result<DeviceMemory> device_memory(const std::string& device) {
  auto dev = make_device(device);
  if (!dev.is_ok()) {
    if (device != "cuda") return dev.status();
#ifdef FERRITE_HAVE_CUDA
    return unavailable(fmt::format(
        "--device cuda: no usable NVIDIA GPU ({}); check `nvidia-smi`, or run on the CPU with "
        "--device cpu (the default)",
        dev.status().message()));
#else
    return unsupported(
        "--device cuda: this build of ferrite has no CUDA backend (scripts/build.sh compiles it "
        "where nvcc is installed); run on the CPU with --device cpu (the default)");
#endif
  }
  DeviceMemory m;
  m.name = (*dev)->name();
  m.free = (*dev)->free_memory();
  m.total = m.free;
#ifdef FERRITE_HAVE_CUDA
  if (device == "cuda") {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) == cudaSuccess) {
      m.free = static_cast<int64_t>(f);
      m.total = static_cast<int64_t>(t);
    }
  }
#endif
  return m;
}

}  // namespace

Result<RunnerOptions> runner_options(const ModelFlags& f, Capacity* capacity) {
  RunnerOptions o;
  if (f.model.empty()) return invalid_argument("a model is required (--model DIR)");
  FERRITE_RETURN_IF_ERROR(check_model_path(f.model));
  o.load.model_dir = f.model;
  o.load.dummy_weights = f.dummy_weights;
  o.load.seed = f.dummy_seed;
  // Dummy weights may also be in a GGUF block format (q8_0, q4_0, q4_k,
  // q5_k, q6_k; q4_k_m: llama.cpp's mix of q4_k and q6_k).
  if (f.dummy_dtype == "q4_k_m") {
    o.load.dummy_dtype = DType::kQ4_K;
    o.load.dummy_k_m_mix = true;
  } else if (auto q = dtype_from_name(f.dummy_dtype); q && dtype_is_quantized(*q)) {
    o.load.dummy_dtype = *q;
  } else {
    FERRITE_ASSIGN_OR_RETURN(o.load.dummy_dtype, parse_dtype(f.dummy_dtype, "--dummy-dtype"));
  }
  if (!f.quantization.empty()) {
    const std::optional<DType> q = hf_quantization_format(f.quantization);
    if (!q)
      return invalid_argument("--quantization must be fp8, gptq-int4 or awq-int4, got '" +
                              f.quantization + "'");
    if (!f.dummy_weights)
      return invalid_argument(
          "--quantization needs --dummy-weights (a quantized checkpoint's config.json says its "
          "quantization itself)");
    o.load.dummy_dtype = *q;
  }
  o.device = f.device;
  o.providers = f.providers;
  if (f.dtype == "auto") {
    o.activation_dtype = f.device == "cpu" ? DType::kF32 : DType::kBF16;
  } else {
    FERRITE_ASSIGN_OR_RETURN(o.activation_dtype, parse_dtype(f.dtype, "--dtype"));
  }
  if (f.max_num_seqs < 1 || f.max_num_seqs > 4096)
    return invalid_argument("--max-num-seqs must be in [1, 4096]");
  if (f.max_num_batched_tokens < 1 || f.max_num_batched_tokens > (1 << 20))
    return invalid_argument("--max-num-batched-tokens must be in [1, 1048576]");
  if (f.max_model_len != 0 && (f.max_model_len < 2 || f.max_model_len > (1 << 22)))
    return invalid_argument("--max-model-len must be 0 (the model's) or in [2, 4194304]");
  if (f.page_size < 1 || f.page_size > 4096)
    return invalid_argument("--page-size must be in [1, 4096]");
  if (!(f.kv_cache_gib >= 0) || f.kv_cache_gib > 4096)
    return invalid_argument("--kv-cache-gib must be in [0, 4096] (0: from the device's memory)");
  if (!(f.gpu_memory_utilization > 0) || f.gpu_memory_utilization > 1)
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  if (f.threads < 0 || f.threads > 1024) return invalid_argument("--threads must be in [0, 1024]");
  if (f.tensor_parallel_size < 1 || f.tensor_parallel_size > kMaxTensorParallel)
    return invalid_argument(
        fmt::format("--tensor-parallel-size must be in [1, {}]", kMaxTensorParallel));
  o.tensor_parallel = f.tensor_parallel_size;
  FERRITE_ASSIGN_OR_RETURN(o.tuning, Tuning::from_environment());
  if (f.threads > 0) o.tuning.threads = f.threads;
  // The process-wide pool is made at its first use, after this.
  ThreadPool::configure_global(static_cast<int>(o.tuning.threads));

  // The context: the model's unless asked for less.
  int64_t model_len = 0;
  if (std::filesystem::is_directory(f.model)) {
    FERRITE_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(f.model));
    model_len = config.max_position_embeddings;
  } else {  // a GGUF file: its metadata give the config
    RunnerOptions probe = o;
    probe.limits.max_sequences = f.max_num_seqs;
    probe.limits.max_tokens = f.max_num_batched_tokens;
    probe.limits.max_context = probe.load.program.max_context = 1 << 22;
    FERRITE_ASSIGN_OR_RETURN(PlanReport pr, ModelRunner::plan_only(probe));
    model_len = pr.config.max_position_embeddings;
  }
  int64_t max_len = f.max_model_len == 0 ? model_len : f.max_model_len;
  if (max_len > model_len && !f.allow_long_max_model_len)
    return invalid_argument(fmt::format(
        "--max-model-len {} is longer than the model's context of {} tokens "
        "(max_position_embeddings in {}{}): pass --max-model-len {} or less, or add "
        "--allow-long-max-model-len to use positions the model was not trained on (its "
        "output there is often garbage)",
        max_len, model_len, f.model,
        std::filesystem::is_directory(f.model) ? "/config.json" : "", model_len));
  if (max_len > model_len)
    std::fprintf(stderr,
                 "warning: --max-model-len %lld is longer than the model's context of %lld "
                 "tokens (--allow-long-max-model-len): output past %lld tokens may be garbage\n",
                 static_cast<long long>(max_len), static_cast<long long>(model_len),
                 static_cast<long long>(model_len));
  o.load.program.allow_long_context = max_len > model_len;
  o.limits.max_sequences = f.max_num_seqs;
  o.limits.max_tokens = f.max_num_batched_tokens;
  o.limits.max_context = max_len;
  o.limits.threads = f.threads;
  o.load.program.max_context = max_len;
  o.load.program.kv_dtype = o.activation_dtype;
  o.cache.page_size = static_cast<int32_t>(f.page_size);
  o.load.progress = load_progress_bar(model_display_name(f.model));

  // The KV cache: what is left of the device's memory after the weights and
  // work buffers (the plan knows every size before anything is allocated).
  FERRITE_ASSIGN_OR_RETURN(DeviceMemory mem, device_memory(f.device));
  FERRITE_ASSIGN_OR_RETURN(PlanReport plan, ModelRunner::plan_only(o));
  const int64_t page_bytes = plan.kv_bytes_per_token * f.page_size;
  const int64_t pages_per_seq = (max_len + f.page_size - 1) / f.page_size;
  const int64_t one_seq = pages_per_seq * page_bytes;
  const int64_t state = plan.state_bytes_per_sequence * f.max_num_seqs;
  const int64_t fixed = plan.weight_bytes + plan.plan.workspace_bytes + state;
  const double side =
      1.0 + (plan.state_bytes_per_sequence > 0 ? std::max(0.0, f.kv_side_fraction) : 0.0);
  int64_t kv = 0;
  std::string source;
  bool from_gpu = false;
  if (f.kv_cache_gib > 0) {
    kv = static_cast<int64_t>(f.kv_cache_gib * (1ll << 30));
    source = "--kv-cache-gib";
  } else if (f.device == "cuda") {
    // As vLLM: this server may use --gpu-memory-utilization of the GPU,
    // less what others already hold; 1 GiB stays for cuBLASLt, CUDA graphs
    // and the step buffers.
    from_gpu = true;
    const int64_t budget = static_cast<int64_t>(f.gpu_memory_utilization * mem.total) -
                           (mem.total - mem.free) - fixed - (1ll << 30);
    kv = static_cast<int64_t>(std::max<int64_t>(0, budget) / side);
    source = fmt::format("--gpu-memory-utilization {:.2f} of {} ({} free)",
                         f.gpu_memory_utilization, gib(mem.total), gib(mem.free));
    if (budget <= 0)
      return resource_exhausted(fmt::format(
          "--device cuda: the weights and work buffers ({}) leave no room for a KV cache in "
          "{:.2f} of the GPU's {} ({} free): raise --gpu-memory-utilization, or use a smaller "
          "model or dtype",
          gib(fixed), f.gpu_memory_utilization, gib(mem.total), gib(mem.free)));
  } else {
    // CPU: what --max-num-seqs full-length sequences need, at most half of
    // the available RAM less the weights (memory is shared with the rest of
    // the machine; untouched pages cost nothing until used).
    const int64_t need = f.max_num_seqs * one_seq;
    const int64_t budget = available_ram() / 2 - fixed;
    kv = std::min<int64_t>(need, static_cast<int64_t>(std::max<int64_t>(0, budget) / side));
    source = kv == need ? fmt::format("{} sequences of {} tokens", f.max_num_seqs, max_len)
                        : fmt::format("half of the available RAM ({}) less the weights",
                                      gib(available_ram()));
  }
  if (page_bytes > 0) {
    kv = kv / page_bytes * page_bytes;
    if (kv < one_seq && !f.capacity_check) {
      kv = one_seq;
      source = "one sequence (planning only)";
    }
    if (kv < one_seq) {
      const int64_t fits = kv / page_bytes * f.page_size;
      const std::string more =
          from_gpu ? std::string("a higher --gpu-memory-utilization, or --kv-cache-gib")
                   : fmt::format("--kv-cache-gib {:.2f}",
                                 std::ceil(100.0 * one_seq / (1ll << 30)) / 100);
      return resource_exhausted(fmt::format(
          "the KV cache ({}, from {}) holds {} tokens, less than one sequence of the context, "
          "{} tokens ({} needed): {}give the cache more memory with {}",
          gib(kv), source, fits, max_len, gib(one_seq),
          fits >= 2 ? fmt::format("pass --max-model-len {} or less, or ", fits) : "", more));
    }
  }
  o.cache.kv_memory_bytes = std::max<int64_t>(kv, 1);
  if (capacity) {
    capacity->model_max_len = model_len;
    capacity->max_model_len = max_len;
    capacity->kv_bytes = kv;
    capacity->kv_bytes_per_token = plan.kv_bytes_per_token;
    capacity->kv_tokens = page_bytes > 0 ? kv / page_bytes * f.page_size : 0;
    capacity->weight_bytes = plan.weight_bytes;
    capacity->state_bytes = state;
    capacity->kv_source = source;
    capacity->device_name = mem.name;
  }
  return o;
}

int report_error(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.to_string().c_str());
  return 1;
}

std::function<void(int64_t, int64_t)> load_progress_bar(const std::string& label) {
  if (!isatty(STDERR_FILENO)) return nullptr;
  struct State {
    int shown = -1;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  };
  auto st = std::make_shared<State>();
  return [st, label](int64_t done, int64_t total) {
    const int pct = total > 0 ? static_cast<int>(100 * done / total) : 100;
    if (pct == st->shown) return;
    st->shown = pct;
    const int width = 30, filled = pct * width / 100;
    std::string bar(filled, '#');
    bar += std::string(width - filled, '.');
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - st->start)
                         .count();
    std::fprintf(stderr, "\r\033[Kloading %s [%s] %3d%% %.2f/%.2f GiB %.1f s", label.c_str(),
                 bar.c_str(), pct, done / double(1ll << 30), total / double(1ll << 30), s);
    if (done >= total) std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  };
}

Result<std::vector<uint32_t>> parse_id_list(const std::string& text) {
  std::vector<uint32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty() || item.size() > 10 ||
        item.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument("token ids must be non-negative integers separated by commas, got '" +
                              item + "'");
    uint64_t v = std::stoull(item);
    if (v > 0xffffffffull) return invalid_argument("token id " + item + " is too large");
    ids.push_back(static_cast<uint32_t>(v));
    i = j + 1;
  }
  if (ids.empty()) return invalid_argument("no token ids given");
  return ids;
}

}  // namespace ferrite::cli
