// ferrite generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT | --chat TEXT)
//                  --max-tokens N [--json]
// With --prompt or --chat the model folder's tokenizer encodes the input (and
// its chat template renders --chat as one user turn with the generation
// prompt), and the output is printed as text.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "engine/generator.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite::cli {

namespace {

struct GenerateFlags {
  ModelFlags model;
  std::string prompt_ids;
  std::string prompt;
  std::string chat;
  std::string system;
  bool enable_thinking = true;
  int32_t max_tokens = 16;
  bool json = false;
  bool ignore_eos = false;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t sampling_seed = 0;
  int32_t prefill_chunk = 0;
};

int run_generate(const GenerateFlags& f) {
  auto options = runner_options(f.model);
  if (!options.is_ok()) return report_error(options.status());
  const int given = !f.prompt_ids.empty() + !f.prompt.empty() + !f.chat.empty();
  if (given != 1)
    return report_error(invalid_argument("give exactly one of --prompt-ids, --prompt, --chat"));
  std::unique_ptr<Tokenizer> tokenizer;
  Result<std::vector<uint32_t>> ids = invalid_argument("no prompt");
  if (!f.prompt_ids.empty()) {
    ids = parse_id_list(f.prompt_ids);
    if (!ids.is_ok()) return report_error(ids.status().with_context("--prompt-ids"));
  } else {
    auto tok = Tokenizer::load(f.model.model);
    if (!tok.is_ok())
      return report_error(tok.status().with_context("--prompt/--chat need the model's tokenizer"));
    tokenizer = std::move(tok).value();
    if (!f.prompt.empty()) {
      // As transformers' tokenizer(text): the file decides about BOS.
      ids = tokenizer->encode(f.prompt, /*add_special_tokens=*/true);
    } else {
      auto tmpl = ChatTemplate::load(f.model.model);
      if (!tmpl.is_ok()) return report_error(tmpl.status().with_context("--chat"));
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
      messages.push_back({{"role", "user"}, {"content", f.chat}});
      nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
      if (!f.enable_thinking) kwargs["enable_thinking"] = false;
      // The template writes the special tokens; the messages stay text.
      ids = tmpl->render_tokens(*tokenizer, messages, nullptr, /*add_generation_prompt=*/true,
                                kwargs);
      if (!ids.is_ok()) return report_error(ids.status().with_context("--chat"));
    }
    if (!ids.is_ok()) return report_error(ids.status());
  }
  if (f.max_tokens < 0) return report_error(invalid_argument("--max-tokens must be >= 0"));
  if (f.temperature < 0 || !(f.top_p > 0 && f.top_p <= 1) || f.min_p < 0 || f.min_p > 1 ||
      f.top_k < 0 || !(f.repetition_penalty > 0))
    return report_error(invalid_argument(
        "sampling flags out of range (temperature >= 0, 0 < top-p <= 1, 0 <= min-p <= 1, "
        "top-k >= 0, repetition-penalty > 0)"));
  auto runner = ModelRunner::open(*options);
  if (!runner.is_ok()) return report_error(runner.status());

  GenerationRequest req;
  req.prompt = *ids;
  req.max_tokens = f.max_tokens;
  req.sampling.temperature = f.temperature;
  req.sampling.top_k = f.top_k;
  req.sampling.top_p = f.top_p;
  req.sampling.min_p = f.min_p;
  req.sampling.repetition_penalty = f.repetition_penalty;
  req.sampling.seed = f.sampling_seed;
  if (!f.ignore_eos) {
    for (int64_t id : (*runner)->config().eos_token_ids)
      req.stop_ids.push_back(static_cast<uint32_t>(id));
    if (tokenizer)
      req.stop_ids.insert(req.stop_ids.end(), tokenizer->stop_ids().begin(),
                          tokenizer->stop_ids().end());
  }

  GenerationStats stats;
  auto results = generate(**runner, {req}, nullptr, &stats, f.prefill_chunk);
  if (!results.is_ok()) return report_error(results.status());
  const GenerationResult& r = (*results)[0];
  std::string text;
  if (tokenizer) {
    auto decoded = tokenizer->decode(r.tokens, /*skip_special_tokens=*/true);
    if (!decoded.is_ok()) return report_error(decoded.status());
    text = std::move(decoded).value();
  }
  if (f.json) {
    nlohmann::json j;
    j["output_tokens"] = r.tokens;
    if (tokenizer) j["text"] = text;
    j["prompt_tokens"] = req.prompt.size();
    j["finish_reason"] = std::string(engine_finish_name(r.finish));
    j["prefill_tokens_per_s"] =
        stats.prefill_seconds > 0 ? stats.prefill_tokens / stats.prefill_seconds : 0.0;
    j["decode_tokens_per_s"] =
        stats.decode_seconds > 0 ? stats.decode_tokens / stats.decode_seconds : 0.0;
    std::printf("%s\n", j.dump().c_str());
  } else if (tokenizer) {
    std::printf("%s\n", text.c_str());
    std::fprintf(stderr, "finish_reason=%s prompt=%zu generated=%zu\n",
                 std::string(engine_finish_name(r.finish)).c_str(), req.prompt.size(),
                 r.tokens.size());
  } else {
    std::string s;
    for (uint32_t t : r.tokens) s += (s.empty() ? "" : ",") + std::to_string(t);
    std::printf("%s\n", s.c_str());
    std::fprintf(stderr, "finish_reason=%s prompt=%zu generated=%zu\n",
                 std::string(engine_finish_name(r.finish)).c_str(), req.prompt.size(),
                 r.tokens.size());
  }
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "generate tokens from a prompt");
  add_model_flags(cmd, &f->model);
  cmd->add_option("--prompt-ids", f->prompt_ids, "prompt token ids, e.g. 1,2,3");
  cmd->add_option("--prompt", f->prompt, "prompt text (needs the model's tokenizer)");
  cmd->add_option("--chat", f->chat, "a user message, rendered with the model's chat template");
  cmd->add_option("--system", f->system, "system message for --chat");
  cmd->add_flag("!--no-thinking", f->enable_thinking, "--chat: enable_thinking=false");
  cmd->add_option("--max-tokens", f->max_tokens, "tokens to generate");
  cmd->add_flag("--json", f->json, "print one JSON object with output_tokens");
  cmd->add_flag("--ignore-eos", f->ignore_eos, "do not stop at the end-of-sequence token");
  cmd->add_option("--temperature", f->temperature, "0 = greedy");
  cmd->add_option("--top-k", f->top_k, "0 = off");
  cmd->add_option("--top-p", f->top_p, "1 = off");
  cmd->add_option("--min-p", f->min_p, "0 = off");
  cmd->add_option("--repetition-penalty", f->repetition_penalty, "1 = off");
  cmd->add_option("--seed,--sampling-seed", f->sampling_seed, "seed of the sampler");
  cmd->add_option("--prefill-chunk", f->prefill_chunk, "prompt tokens per step (0 = budget)");
  cmd->callback([f, exit_code] { *exit_code = run_generate(*f); });
}

}  // namespace ferrite::cli
