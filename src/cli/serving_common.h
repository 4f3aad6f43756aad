// What `ferrite serve` and `ferrite run` share: the model (or the embedded
// default model), its tokenizer and chat template, its sampling defaults
// (generation_config.json), one Engine, and the startup summary.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "cli/common.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite::cli {

struct ServingFlags {
  ModelFlags model;
  bool prefix_cache = false;
  int32_t max_queue = 1024;
  int32_t prefill_chunk = 0;
  double snapshot_memory_fraction = EngineOptions{}.snapshot_memory_fraction;
  int32_t snapshot_interval_pages = EngineOptions{}.snapshot_interval_pages;
  std::string chat_template;               // a file, or the template itself
  std::string generation_config = "auto";  // auto | vllm | PATH
};

// `positional`: the model may be given as the first positional argument.
void add_serving_flags(CLI::App* app, ServingFlags* flags, bool positional = true);

// The sampling defaults of the model's generation_config.json (vLLM's set:
// temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens).
struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<int64_t> max_new_tokens;
  std::string source;  // the file read ("" when none)
  bool empty() const {
    return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_new_tokens;
  }
  // Applies the fields that are set over `s`.
  void apply(SamplingParams* s) const;
  std::string to_string() const;  // "temperature 0.6, top_p 0.95, ..."
};
// --generation-config: "auto" reads <model>/generation_config.json (absent:
// no defaults), "vllm" reads none, anything else is a folder holding one or
// the file itself.
Result<GenerationDefaults> load_generation_defaults(const std::string& mode,
                                                    const std::string& model_dir);

struct ServingModel {
  std::string dir;
  std::string name;  // the served model name
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;  // null when the model has none
  std::unique_ptr<Engine> engine;
  Capacity capacity;
  GenerationDefaults generation;
  double load_seconds = 0;
};

// Loads the model of the flags (the default model without --model) and
// starts its engine.
Result<std::unique_ptr<ServingModel>> open_serving_model(const ServingFlags& flags);

// The startup summary: model, family, dtypes, weights, KV cache, context,
// sequences, device, load time; each line starts with `prefix`.
std::string startup_summary(ServingModel& m, const std::string& prefix);

}  // namespace ferrite::cli
