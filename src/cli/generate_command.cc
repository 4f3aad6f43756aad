// ferrite generate --model DIR --prompt-ids 1,2,3 --max-tokens N [--json]
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "engine/generator.h"

namespace ferrite::cli {

namespace {

struct GenerateFlags {
  ModelFlags model;
  std::string prompt_ids;
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
  auto ids = parse_id_list(f.prompt_ids);
  if (!ids.is_ok()) return report_error(ids.status().with_context("--prompt-ids"));
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
  if (!f.ignore_eos)
    for (int64_t id : (*runner)->config().eos_token_ids) req.stop_ids.push_back(static_cast<uint32_t>(id));

  GenerationStats stats;
  auto results = generate(**runner, {req}, nullptr, &stats, f.prefill_chunk);
  if (!results.is_ok()) return report_error(results.status());
  const GenerationResult& r = (*results)[0];
  if (f.json) {
    nlohmann::json j;
    j["output_tokens"] = r.tokens;
    j["prompt_tokens"] = req.prompt.size();
    j["finish_reason"] = std::string(finish_reason_name(r.finish));
    j["prefill_tokens_per_s"] =
        stats.prefill_seconds > 0 ? stats.prefill_tokens / stats.prefill_seconds : 0.0;
    j["decode_tokens_per_s"] =
        stats.decode_seconds > 0 ? stats.decode_tokens / stats.decode_seconds : 0.0;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::string s;
    for (uint32_t t : r.tokens) s += (s.empty() ? "" : ",") + std::to_string(t);
    std::printf("%s\n", s.c_str());
    std::fprintf(stderr, "finish_reason=%s prompt=%zu generated=%zu\n",
                 std::string(finish_reason_name(r.finish)).c_str(), req.prompt.size(),
                 r.tokens.size());
  }
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "generate tokens from a prompt");
  add_model_flags(cmd, &f->model);
  cmd->add_option("--prompt-ids", f->prompt_ids, "prompt token ids, e.g. 1,2,3")->required();
  cmd->add_option("--max-tokens", f->max_tokens, "tokens to generate");
  cmd->add_flag("--json", f->json, "print one JSON object with output_tokens");
  cmd->add_flag("--ignore-eos", f->ignore_eos, "do not stop at the end-of-sequence token");
  cmd->add_option("--temperature", f->temperature, "0 = greedy");
  cmd->add_option("--top-k", f->top_k, "0 = off");
  cmd->add_option("--top-p", f->top_p, "1 = off");
  cmd->add_option("--min-p", f->min_p, "0 = off");
  cmd->add_option("--repetition-penalty", f->repetition_penalty, "1 = off");
  cmd->add_option("--sampling-seed", f->sampling_seed, "seed of the sampler");
  cmd->add_option("--prefill-chunk", f->prefill_chunk, "prompt tokens per step (0 = budget)");
  cmd->callback([f, exit_code] { *exit_code = run_generate(*f); });
}

}  // namespace ferrite::cli
