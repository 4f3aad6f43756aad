#include "cli/serving_common.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/default_model.h"

namespace ferrite::cli {

void add_serving_flags(CLI::App* app, ServingFlags* f, bool positional) {
  add_model_flags(app, &f->model, /*model_required=*/false, positional);
  app->add_flag("--enable-prefix-caching,--enable-prefix-cache", f->prefix_cache,
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
  app->add_option("--chat-template", f->chat_template,
                  "chat template: a Jinja file, or the template itself (default: the model's)");
  app->add_option("--generation-config", f->generation_config,
                  "sampling defaults for fields a request leaves out: auto (the model's "
                  "generation_config.json), vllm (none: OpenAI's defaults), or a folder / file");
}

void GenerationDefaults::apply(SamplingParams* s) const {
  if (temperature) s->temperature = *temperature;
  if (top_p) s->top_p = *top_p;
  if (top_k) s->top_k = *top_k;
  if (min_p) s->min_p = *min_p;
  if (repetition_penalty) s->repetition_penalty = *repetition_penalty;
}

std::string GenerationDefaults::to_string() const {
  std::string s;
  auto add = [&](const char* k, std::string v) { s += (s.empty() ? "" : ", ") + (k + (" " + v)); };
  if (temperature) add("temperature", fmt::format("{:g}", *temperature));
  if (top_p) add("top_p", fmt::format("{:g}", *top_p));
  if (top_k) add("top_k", std::to_string(*top_k));
  if (min_p) add("min_p", fmt::format("{:g}", *min_p));
  if (repetition_penalty) add("repetition_penalty", fmt::format("{:g}", *repetition_penalty));
  if (max_new_tokens) add("max_tokens", std::to_string(*max_new_tokens));
  return s;
}

Result<GenerationDefaults> load_generation_defaults(const std::string& mode,
                                                    const std::string& model_dir) {
  namespace fs = std::filesystem;
  GenerationDefaults g;
  if (mode == "vllm") return g;
  fs::path file;
  if (mode == "auto" || mode.empty()) {
    file = fs::path(model_dir) / "generation_config.json";
    if (!fs::exists(file)) return g;
  } else {
    file = fs::is_directory(mode) ? fs::path(mode) / "generation_config.json" : fs::path(mode);
    if (!fs::exists(file))
      return not_found(fmt::format("--generation-config: no {} (auto, vllm, or a folder / file)",
                                   file.string()));
  }
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(fmt::format("{} is not a JSON object", file.string()));
  auto num = [&](const char* key, double lo, double hi) -> Result<std::optional<double>> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::optional<double>();
    if (!it->is_number() || !(it->get<double>() >= lo && it->get<double>() <= hi))
      return invalid_argument(
          fmt::format("{}: '{}' must be a number in [{:g}, {:g}]", file.string(), key, lo, hi));
    return std::optional<double>(it->get<double>());
  };
  FERRITE_ASSIGN_OR_RETURN(auto t, num("temperature", 0, 100));
  FERRITE_ASSIGN_OR_RETURN(auto p, num("top_p", 0, 1));
  FERRITE_ASSIGN_OR_RETURN(auto k, num("top_k", -1, 1 << 20));
  FERRITE_ASSIGN_OR_RETURN(auto mp, num("min_p", 0, 1));
  FERRITE_ASSIGN_OR_RETURN(auto rp, num("repetition_penalty", 0.01, 10));
  FERRITE_ASSIGN_OR_RETURN(auto mn, num("max_new_tokens", 1, 1 << 22));
  if (t) g.temperature = static_cast<float>(*t);
  if (p && *p > 0) g.top_p = static_cast<float>(*p);
  if (k) g.top_k = *k < 0 ? 0 : static_cast<int32_t>(*k);
  if (mp) g.min_p = static_cast<float>(*mp);
  if (rp) g.repetition_penalty = static_cast<float>(*rp);
  if (mn) g.max_new_tokens = static_cast<int64_t>(*mn);
  g.source = file.string();
  return g;
}

namespace {

// --chat-template: a file, or (with a '{' in it, as vLLM) the template
// itself; the special-token strings come from the model's
// tokenizer_config.json as ChatTemplate::load would give them.
Result<ChatTemplate> load_chat_template_flag(const std::string& flag,
                                             const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::string source = flag;
  if (fs::is_regular_file(flag)) {
    std::ifstream in(flag);
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
  } else if (flag.find('{') == std::string::npos) {
    return not_found("--chat-template: no file " + flag +
                     " (give a Jinja file, or the template itself)");
  }
  nlohmann::ordered_json specials = nlohmann::ordered_json::object();
  std::ifstream tc(fs::path(model_dir) / "tokenizer_config.json");
  if (tc) {
    std::stringstream ss;
    ss << tc.rdbuf();
    auto j = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k.size() < 6 || k.compare(k.size() - 6, 6, "_token") != 0) continue;
        if (v.is_string()) specials[k] = v;
        if (v.is_object() && v.contains("content") && v["content"].is_string())
          specials[k] = v["content"];
      }
    }
  }
  auto t = ChatTemplate::from_source(source, specials);
  if (!t.is_ok()) return t.status().with_context("--chat-template");
  return t;
}

}  // namespace

Result<std::unique_ptr<ServingModel>> open_serving_model(const ServingFlags& flags) {
  const auto t0 = std::chrono::steady_clock::now();
  auto m = std::make_unique<ServingModel>();
  ModelFlags mf = flags.model;
  if (mf.model.empty()) {
    FERRITE_ASSIGN_OR_RETURN(DefaultModel d, default_model());
    mf.model = d.dir;
    m->name = d.name;
  } else {
    m->name = model_display_name(mf.model);
  }
  m->dir = mf.model;
  if (flags.prefix_cache) mf.kv_side_fraction = flags.snapshot_memory_fraction;
  // Path, context and capacity first: a wrong path or a KV cache too small
  // for one sequence is said before anything is loaded.
  FERRITE_ASSIGN_OR_RETURN(RunnerOptions options, runner_options(mf, &m->capacity));
  FERRITE_ASSIGN_OR_RETURN(m->generation,
                           load_generation_defaults(flags.generation_config, mf.model));
  auto tok = Tokenizer::load(mf.model);
  if (!tok.is_ok())
    return tok.status().with_context("the model folder needs a tokenizer.json to serve text");
  m->tokenizer = std::move(tok).value();
  if (!flags.chat_template.empty()) {
    FERRITE_ASSIGN_OR_RETURN(ChatTemplate t, load_chat_template_flag(flags.chat_template, mf.model));
    m->chat = std::make_unique<ChatTemplate>(std::move(t));
  } else {
    auto chat = ChatTemplate::load(mf.model);
    if (chat.is_ok()) {
      m->chat = std::make_unique<ChatTemplate>(std::move(chat).value());
    } else if (chat.status().code() != StatusCode::kNotFound) {
      // A broken template costs the chat API, not the server.
      std::fprintf(stderr,
                   "ferrite: warning: the model's chat template cannot be used (%s); "
                   "/v1/chat/completions will answer 400 (--chat-template gives another)\n",
                   chat.status().message().c_str());
    }
  }
  FERRITE_ASSIGN_OR_RETURN(m->runner, ModelRunner::open(options));
  EngineOptions eo;
  eo.prefix_cache = flags.prefix_cache;
  eo.max_waiting = flags.max_queue;
  eo.prefill_chunk = flags.prefill_chunk;
  eo.snapshot_memory_fraction = flags.snapshot_memory_fraction;
  eo.snapshot_interval_pages = flags.snapshot_interval_pages;
  FERRITE_ASSIGN_OR_RETURN(m->engine, Engine::create(*m->runner, eo));
  m->load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::string startup_summary(ServingModel& m, const std::string& prefix) {
  ModelRunner& r = *m.runner;
  const Capacity& c = m.capacity;
  const RunnerOptions& o = r.options();
  std::map<std::string, int64_t> formats;  // weight dtype -> bytes
  for (const WeightDecl& w : r.program().weights)
    formats[std::string(dtype_name(w.dtype))] += dtype_bytes(w.dtype, w.shape.numel());
  std::string fmts;
  for (const auto& [name, bytes] : formats)
    fmts += fmt::format("{}{} {}", fmts.empty() ? "" : ", ", name, gib(bytes));
  const int32_t pages = r.bound().pages().num_pages();
  const int32_t page_size = r.bound().pages().page_size();
  std::string s;
  s += fmt::format("{}model {} ({}), family {}{}\n", prefix, m.name, m.dir,
                   r.config().model_type, o.load.dummy_weights ? ", dummy weights" : "");
  s += fmt::format("{}weights {} ({}), activations {}, KV cache {}\n", prefix, gib(c.weight_bytes),
                   fmts, dtype_name(o.activation_dtype), dtype_name(o.load.program.kv_dtype));
  s += fmt::format(
      "{}KV cache {} = {} tokens in {} pages of {} (from {}){}\n", prefix,
      gib(static_cast<int64_t>(pages) * page_size * c.kv_bytes_per_token),
      static_cast<int64_t>(pages) * page_size, pages, page_size, c.kv_source,
      c.state_bytes ? fmt::format(", recurrent state {}", gib(c.state_bytes)) : "");
  s += fmt::format(
      "{}max context {} tokens{}, max {} sequences, {} tokens per step, prefix cache {}\n",
      prefix, c.max_model_len,
      c.max_model_len == c.model_max_len ? std::string(" (the model's)")
      : c.max_model_len > c.model_max_len
          ? fmt::format(" (above the model's {}: --allow-long-max-model-len)", c.model_max_len)
          : fmt::format(" (the model's: {})", c.model_max_len),
      o.limits.max_sequences, o.limits.max_tokens,
      m.engine->prefix_cache_enabled() ? "on" : "off");
  if (!m.generation.empty())
    s += fmt::format("{}sampling defaults from {}: {}\n", prefix, m.generation.source,
                     m.generation.to_string());
  s += fmt::format("{}device {}, loaded in {:.1f} s\n", prefix, c.device_name, m.load_seconds);
  return s;
}

}  // namespace ferrite::cli
