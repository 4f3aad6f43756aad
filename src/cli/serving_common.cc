#include "cli/serving_common.h"

#include <cstdio>
#include <filesystem>

#include "cli/default_model.h"

namespace ferrite::cli {

void add_serving_flags(CLI::App* app, ServingFlags* f) {
  add_model_flags(app, &f->model, /*model_required=*/false);
  app->add_flag("--enable-prefix-cache", f->prefix_cache,
                "share full KV pages between requests with the same prefix");
  app->add_option("--max-queue", f->max_queue,
                  "requests waiting for admission before new ones get 429");
  app->add_option("--prefill-chunk", f->prefill_chunk,
                  "prompt tokens per sequence per step (0 = the token budget)");
  app->add_option("--prefix-snapshot-memory", f->snapshot_memory_fraction,
                  "hybrid models with the prefix cache: recurrent-state snapshot memory as a "
                  "fraction of the KV cache, in (0, 1]");
  app->add_option("--prefix-snapshot-interval", f->snapshot_interval_pages,
                  "hybrid models with the prefix cache: snapshot the state every N pages of a "
                  "prompt (0 = from the memory fraction)");
}

Result<std::unique_ptr<ServingModel>> open_serving_model(const ServingFlags& flags) {
  auto m = std::make_unique<ServingModel>();
  ModelFlags mf = flags.model;
  if (mf.model.empty()) {
    FERRITE_ASSIGN_OR_RETURN(DefaultModel d, default_model());
    mf.model = d.dir;
    m->name = d.name;
  } else {
    std::filesystem::path p(mf.model);
    while (!p.empty() && p.filename().empty()) p = p.parent_path();
    m->name = p.filename().string();
  }
  m->dir = mf.model;
  FERRITE_ASSIGN_OR_RETURN(RunnerOptions options, runner_options(mf));
  auto tok = Tokenizer::load(mf.model);
  if (!tok.is_ok())
    return tok.status().with_context("the model folder needs a tokenizer.json to serve text");
  m->tokenizer = std::move(tok).value();
  auto chat = ChatTemplate::load(mf.model);
  if (chat.is_ok()) {
    m->chat = std::make_unique<ChatTemplate>(std::move(chat).value());
  } else if (chat.status().code() != StatusCode::kNotFound) {
    // A broken template costs the chat API, not the server.
    std::fprintf(stderr,
                 "ferrite: warning: the model's chat template cannot be used (%s); "
                 "/v1/chat/completions will answer 400\n",
                 chat.status().message().c_str());
  }
  FERRITE_ASSIGN_OR_RETURN(m->runner, ModelRunner::open(options));
  EngineOptions eo;
  eo.prefix_cache = flags.prefix_cache;
  eo.max_waiting = flags.max_queue;
  eo.prefill_chunk = flags.prefill_chunk;
  eo.snapshot_memory_fraction = flags.snapshot_memory_fraction;
  eo.snapshot_interval_pages = flags.snapshot_interval_pages;
  FERRITE_ASSIGN_OR_RETURN(m->engine, Engine::create(*m->runner, eo));
  return m;
}

}  // namespace ferrite::cli
