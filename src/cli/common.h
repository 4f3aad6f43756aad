// Flags shared by the commands that load a model (generate, info, bench,
// run, serve), and their translation into RunnerOptions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/model_runner.h"

namespace ferrite::cli {

struct ModelFlags {
  std::string model;
  bool dummy_weights = false;
  std::string dummy_dtype = "bfloat16";
  std::string device = "cpu";
  std::string dtype = "auto";  // activation dtype: auto | float32 | bfloat16 | float16
  std::string providers = "fast";
  int64_t max_num_seqs = 16;
  int64_t max_num_batched_tokens = 512;
  int64_t max_model_len = 4096;
  int64_t page_size = 16;
  double kv_cache_gib = 0.5;
  int threads = 0;
  uint64_t seed = 0;
};

// Adds the flags to a subcommand; `model_required` makes --model mandatory.
void add_model_flags(CLI::App* app, ModelFlags* flags, bool model_required = true);
// Validates the flags and builds the runner options.
Result<RunnerOptions> runner_options(const ModelFlags& flags);
// Prints "error: <message>" to stderr and returns the process exit code (1).
int report_error(const Status& status);
// Parses "1,2,3" into ids; invalid_argument on anything else.
Result<std::vector<uint32_t>> parse_id_list(const std::string& text);

}  // namespace ferrite::cli
