// ferrite run [--model DIR] ["prompt"]
//   With a prompt: one reply, streamed to stdout, then exit.
//   Without: an interactive chat (conversation history kept; /clear forgets
//   it, /exit or Ctrl-D quits). Ctrl-C stops the reply being written without
//   quitting; at the prompt it quits. Same engine as `ferrite serve`.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/serving_common.h"

namespace ferrite::cli {

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_generating{false};

void on_sigint(int) {
  if (g_generating.load()) {
    g_interrupted.store(true);
  } else {
    const char nl[] = "\n";
    ssize_t r = write(STDOUT_FILENO, nl, 1);
    (void)r;
    _exit(130);
  }
}

struct RunFlags {
  ServingFlags serving;
  std::string prompt;
  std::string system;
  int32_t max_tokens = 256;
  bool ignore_eos = false;
  float temperature = 0.7f;
  float top_p = 0.95f;
  int32_t top_k = 0;
  float repetition_penalty = 1.0f;
  int64_t sampling_seed = -1;
  bool raw = false;
};

// Generates one reply to `messages`, streaming it to stdout. Returns the text.
Result<std::string> reply(ServingModel& m, const RunFlags& f,
                          const nlohmann::ordered_json& messages, const std::string& raw_prompt) {
  std::vector<uint32_t> ids;
  if (m.chat && !f.raw) {
    // What the user typed stays text: only the template's markup becomes
    // special tokens.
    FERRITE_ASSIGN_OR_RETURN(ids, m.chat->render_tokens(*m.tokenizer, messages, nullptr, true));
  } else {
    FERRITE_ASSIGN_OR_RETURN(ids, m.tokenizer->encode(raw_prompt, true));
  }
  EngineRequest r;
  r.prompt = std::move(ids);
  int64_t room = m.engine->max_context() - static_cast<int64_t>(r.prompt.size());
  if (room < 1) return invalid_argument("the conversation no longer fits the context; /clear it");
  r.max_tokens = static_cast<int32_t>(std::min<int64_t>(f.max_tokens, room));
  r.sampling.temperature = f.temperature;
  r.sampling.top_p = f.top_p;
  r.sampling.top_k = f.top_k;
  r.sampling.repetition_penalty = f.repetition_penalty;
  r.sampling.seed =
      f.sampling_seed >= 0 ? static_cast<uint64_t>(f.sampling_seed) : std::random_device{}();
  if (!f.ignore_eos) {
    r.stop_ids = m.tokenizer->stop_ids();
    for (int64_t id : m.runner->config().eos_token_ids)
      r.stop_ids.push_back(static_cast<uint32_t>(id));
  }
  g_interrupted = false;
  g_generating = true;
  auto stream = m.engine->submit(r);
  if (!stream.is_ok()) {
    g_generating = false;
    return stream.status();
  }
  StreamDecoder dec(*m.tokenizer, true);
  std::string out;
  bool cancelled = false;
  for (;;) {
    if (g_interrupted.load() && !cancelled) {
      (*stream)->cancel();
      cancelled = true;
    }
    auto u = (*stream)->next(std::chrono::milliseconds(50));
    std::string piece;
    for (const auto& t : u.tokens) {
      auto s = dec.push(t.token);
      if (s.is_ok()) piece += *s;
    }
    if (u.finished) piece += dec.finish();
    if (!piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      out += piece;
    }
    if (u.finished) {
      g_generating = false;
      if (u.finish == EngineFinish::kError) return u.error;
      if (u.finish == EngineFinish::kCancelled) std::fputs(" [stopped]", stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
      return out;
    }
  }
}

int run_run(const RunFlags& f) {
  // Only the main thread takes SIGINT: block it before any other thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto model = open_serving_model(f.serving);
  if (!model.is_ok()) return report_error(model.status());
  ServingModel& m = **model;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read returns
  sigaction(SIGINT, &sa, nullptr);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  if (!f.prompt.empty()) {
    messages.push_back({{"role", "user"}, {"content", f.prompt}});
    auto r = reply(m, f, messages, f.prompt);
    if (!r.is_ok()) return report_error(r.status());
    return 0;
  }
  std::fprintf(stderr,
               "ferrite run: %s. /clear forgets the conversation, /exit or Ctrl-D quits, "
               "Ctrl-C stops a reply.\n",
               m.name.c_str());
  std::string line;
  for (;;) {
    std::fputs(">>> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) {
      std::fputs("\n", stdout);
      break;
    }
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit" || line == "/bye") break;
    if (line == "/clear") {
      messages = nlohmann::ordered_json::array();
      if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
      std::fputs("(conversation cleared)\n", stdout);
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", line}});
    auto r = reply(m, f, messages, line);
    if (!r.is_ok()) {
      messages.erase(messages.size() - 1);
      std::fprintf(stderr, "error: %s\n", r.status().to_string().c_str());
      continue;
    }
    messages.push_back({{"role", "assistant"}, {"content", *r}});
  }
  return 0;
}

}  // namespace

void register_run(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "chat with a model in the terminal");
  add_serving_flags(cmd, &f->serving);
  cmd->add_option("prompt", f->prompt, "one-shot prompt (omit for an interactive chat)");
  cmd->add_option("--system", f->system, "system message");
  cmd->add_option("--max-tokens", f->max_tokens, "most tokens per reply");
  cmd->add_flag("--ignore-eos", f->ignore_eos, "replies run to --max-tokens (demos, timing)");
  cmd->add_option("--temperature", f->temperature, "0 = greedy");
  cmd->add_option("--top-p", f->top_p, "nucleus sampling");
  cmd->add_option("--top-k", f->top_k, "0 = off");
  cmd->add_option("--repetition-penalty", f->repetition_penalty, "1 = off");
  cmd->add_option("--sampling-seed", f->sampling_seed, "seed of the sampler (-1: random)");
  cmd->add_flag("--raw", f->raw, "no chat template: the prompt is plain text");
  cmd->callback([f, exit_code] {
    if (f->max_tokens < 1 || f->temperature < 0 || !(f->top_p > 0 && f->top_p <= 1) ||
        f->top_k < 0 || !(f->repetition_penalty > 0)) {
      *exit_code = report_error(
          invalid_argument("--max-tokens >= 1, --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0, "
                           "--repetition-penalty > 0"));
      return;
    }
    *exit_code = run_run(*f);
  });
}

}  // namespace ferrite::cli
