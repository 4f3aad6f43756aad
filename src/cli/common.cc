#include "cli/common.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "base/thread_pool.h"

namespace ferrite::cli {

void add_model_flags(CLI::App* app, ModelFlags* f, bool model_required) {
  auto* m = app->add_option("--model", f->model,
                            "model folder: config.json + safetensors (or only config.json "
                            "with --dummy-weights), or a GGUF file (FILE.gguf)");
  if (model_required) m->required();
  app->add_flag("--dummy-weights", f->dummy_weights,
                "random weights for the config, allocated directly (benchmarks at real sizes)");
  app->add_option("--dummy-dtype", f->dummy_dtype,
                  "dtype of dummy weights: bfloat16, float16, float32, or a GGUF block format: "
                  "q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m (q4_k with q6_k tensors)");
  app->add_option("--device", f->device, "cpu or cuda");
  app->add_option("--dtype", f->dtype, "activation dtype: auto, float32, bfloat16, float16");
  app->add_option("--providers", f->providers, "CPU provider set: fast or reference");
  app->add_option("--max-num-seqs", f->max_num_seqs, "sequences per step");
  app->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "tokens per step");
  app->add_option("--max-model-len", f->max_model_len, "context length per sequence");
  app->add_option("--page-size", f->page_size, "KV cache page size in tokens");
  app->add_option("--kv-cache-gib", f->kv_cache_gib, "memory for the KV cache, GiB");
  app->add_option("--threads", f->threads, "CPU threads (default: all)");
  app->add_option("--seed", f->seed, "seed of dummy weights");
}

static Result<DType> parse_dtype(const std::string& s, const char* flag) {
  if (s == "float32" || s == "f32") return DType::kF32;
  if (s == "bfloat16" || s == "bf16") return DType::kBF16;
  if (s == "float16" || s == "f16" || s == "half") return DType::kF16;
  return invalid_argument(
      fmt::format("{}: unknown dtype '{}' (float32, bfloat16, float16)", flag, s));
}

Result<RunnerOptions> runner_options(const ModelFlags& f) {
  RunnerOptions o;
  if (f.model.empty()) return invalid_argument("--model is required");
  o.load.model_dir = f.model;
  o.load.dummy_weights = f.dummy_weights;
  o.load.seed = f.seed;
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
  if (f.max_model_len < 2 || f.max_model_len > (1 << 22))
    return invalid_argument("--max-model-len must be in [2, 4194304]");
  if (f.page_size < 1 || f.page_size > 4096)
    return invalid_argument("--page-size must be in [1, 4096]");
  if (!(f.kv_cache_gib > 0) || f.kv_cache_gib > 4096)
    return invalid_argument("--kv-cache-gib must be positive");
  if (f.threads < 0 || f.threads > 1024) return invalid_argument("--threads must be in [0, 1024]");
  FERRITE_ASSIGN_OR_RETURN(o.tuning, Tuning::from_environment());
  if (f.threads > 0) o.tuning.threads = f.threads;
  // The process-wide pool is made at its first use, after this.
  ThreadPool::configure_global(static_cast<int>(o.tuning.threads));
  o.limits.max_sequences = f.max_num_seqs;
  o.limits.max_tokens = f.max_num_batched_tokens;
  o.limits.max_context = f.max_model_len;
  o.limits.threads = f.threads;
  o.load.program.max_context = f.max_model_len;
  o.load.program.kv_dtype = o.activation_dtype;
  o.cache.page_size = static_cast<int32_t>(f.page_size);
  o.cache.kv_memory_bytes = static_cast<int64_t>(f.kv_cache_gib * (1ll << 30));
  return o;
}

int report_error(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.to_string().c_str());
  return 1;
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
