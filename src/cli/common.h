// Flags shared by the commands that load a model (generate, info, bench,
// run, serve), and their translation into RunnerOptions: the model path
// checked (a missing path, a file, a Hugging Face id each get their own
// message), the context from the model's config.json, the KV cache sized
// from the device's memory, and a check that one max-length sequence fits.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/model_runner.h"

namespace ferrite::cli {

struct ModelFlags {
  std::string model;
  bool dummy_weights = false;
  std::string dummy_dtype = "bfloat16";
  uint64_t dummy_seed = 0;
  std::string quantization;  // with --dummy-weights: fp8 | gptq-int4 | awq-int4 (hf_quant.md)
  std::string device = "cpu";
  std::string dtype = "auto";  // activation dtype: auto | float32 | bfloat16 | float16
  std::string providers = "fast";
  int64_t max_num_seqs = 16;
  int64_t max_num_batched_tokens = 512;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  bool allow_long_max_model_len = false;  // a --max-model-len above the model's
  int64_t page_size = 16;
  double kv_cache_gib = 0;  // 0: from the device's memory
  double gpu_memory_utilization = 0.9;
  int threads = 0;
  int tensor_parallel_size = 1;  // ranks (tensor parallelism; CPU: threads)
  // Not a flag: memory the engine allocates beside the KV pool, as a
  // fraction of it (hybrid prefix-cache snapshots), left out of the pool.
  double kv_side_fraction = 0;
  // Not a flag: false for commands that only plan (info): a KV cache too
  // small for one sequence is then sized to one sequence instead of an error.
  bool capacity_check = true;
};

// Adds the flags to a subcommand. `model_required` makes the model
// mandatory; `positional` also accepts it as the first positional argument
// (`ferrite serve DIR`, as `vllm serve`).
void add_model_flags(CLI::App* app, ModelFlags* flags, bool model_required = true,
                     bool positional = true);

// How the capacity was chosen, for startup summaries.
struct Capacity {
  int64_t model_max_len = 0;  // the model's max_position_embeddings
  int64_t max_model_len = 0;  // the context served
  int64_t kv_bytes = 0;       // the KV pool
  int64_t kv_tokens = 0;      // positions it holds (whole pages)
  int64_t kv_bytes_per_token = 0;
  int64_t weight_bytes = 0;
  int64_t state_bytes = 0;  // recurrent state of max_num_seqs sequences
  std::string kv_source;    // how kv_bytes was chosen, in words
  std::string device_name;
};

// Validates the flags, checks the model path, reads the model's context and
// sizes the KV cache (see the top of this file). `capacity` (optional)
// receives how.
Result<RunnerOptions> runner_options(const ModelFlags& flags, Capacity* capacity = nullptr);
// The problem with a --model path, if it has one (missing, a file, a hub id).
Status check_model_path(const std::string& path);
// Prints "error: <message>" to stderr and returns the process exit code (1).
int report_error(const Status& status);
// Parses "1,2,3" into ids; invalid_argument on anything else.
Result<std::vector<uint32_t>> parse_id_list(const std::string& text);
// The last component of a model path ("a/b/" -> "b").
std::string model_display_name(const std::string& path);
// "1.50 GiB".
std::string gib(int64_t bytes);
// A load progress bar on stderr when it is a terminal (else null): pass as
// LoadOptions::progress.
std::function<void(int64_t, int64_t)> load_progress_bar(const std::string& label);

}  // namespace ferrite::cli
