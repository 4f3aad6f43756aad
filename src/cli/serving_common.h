// What `ferrite serve` and `ferrite run` share: the model (or the embedded
// default model), its tokenizer and chat template, and one Engine.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
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
};

void add_serving_flags(CLI::App* app, ServingFlags* flags);

struct ServingModel {
  std::string dir;
  std::string name;  // the served model name
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;  // null when the model has none
  std::unique_ptr<Engine> engine;
};

// Loads the model of the flags (the default model without --model) and
// starts its engine.
Result<std::unique_ptr<ServingModel>> open_serving_model(const ServingFlags& flags);

}  // namespace ferrite::cli
