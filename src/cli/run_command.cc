// ferrite run [MODEL] ["prompt"]
//   With a prompt: one reply, streamed to stdout, then exit.
//   Without: an interactive chat (conversation history kept; /clear forgets
//   it, /exit, /bye or Ctrl-D quits; /help or /? lists the commands). On a
//   terminal: line editing and history (line_editor.h), """ ... """ for a
//   multi-line message, a tok/s line after each reply, colour. Piped stdin:
//   no prompt, no editing, no colour. Ctrl-C stops the reply being written
//   (a second Ctrl-C, or a reply that does not stop within 5 s, exits at
//   once); on an empty prompt it quits. Same engine as `ferrite serve`.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/line_editor.h"
#include "cli/serving_common.h"

namespace ferrite::cli {

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_generating{false};

void on_sigint(int) {
  if (g_generating.load() && !g_interrupted.load()) {
    g_interrupted.store(true);
    return;
  }
  // Not generating (a plain read of piped input), or a second Ctrl-C while
  // a reply is stopping: exit at once.
  const char nl[] = "\n";
  ssize_t r = write(STDOUT_FILENO, nl, 1);
  (void)r;
  _exit(130);
}

struct RunFlags {
  ServingFlags serving;
  std::vector<std::string> args;  // [MODEL] [PROMPT...]
  std::string prompt;
  std::string system;
  int32_t max_tokens = 256;
  bool ignore_eos = false;
  float temperature = 0.7f;
  float top_p = 0.95f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  bool seed_given = false;
  bool raw = false;
  std::string history_file;
  bool color_out = false, color_err = false;
  std::set<std::string> given;  // sampling flags on the command line
};

const char* kHelp =
    "Commands:\n"
    "  /help, /?      this help\n"
    "  /clear         forget the conversation\n"
    "  /exit, /bye    quit (or Ctrl-D)\n"
    "  \"\"\"            begin a multi-line message; end it with \"\"\"\n"
    "Keys: Up / Down history; Left / Right, Home / End, Ctrl-A / Ctrl-E move; Ctrl-U, Ctrl-K, "
    "Ctrl-W delete; Ctrl-L clears the screen.\n"
    "Ctrl-C stops a reply (twice: quit at once); on an empty line it quits.\n";

std::string dim(const RunFlags& f, const std::string& s) {
  return f.color_err ? "\x1b[2m" + s + "\x1b[0m" : s;
}

void print_error(const RunFlags& f, const Status& st) {
  std::string msg = "error: " + st.to_string();
  if (f.color_err) msg = "\x1b[31m" + msg + "\x1b[0m";
  std::fprintf(stderr, "%s\n", msg.c_str());
}

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
  const int64_t room = m.engine->max_context() - static_cast<int64_t>(r.prompt.size());
  if (room < 1)
    return invalid_argument(fmt::format(
        "the conversation ({} tokens) no longer fits the context of {} tokens; /clear it",
        r.prompt.size(), m.engine->max_context()));
  // Near the end of the context the reply is shorter, and says so below.
  const bool cut = room < f.max_tokens;
  r.max_tokens = static_cast<int32_t>(std::min<int64_t>(f.max_tokens, room));
  r.sampling.temperature = f.temperature;
  r.sampling.top_p = f.top_p;
  r.sampling.top_k = f.top_k;
  r.sampling.min_p = f.min_p;
  r.sampling.repetition_penalty = f.repetition_penalty;
  r.sampling.seed = f.seed_given ? f.seed : std::random_device{}();
  if (!f.ignore_eos) {
    r.stop_ids = m.tokenizer->stop_ids();
    for (int64_t id : m.runner->config().eos_token_ids)
      r.stop_ids.push_back(static_cast<uint32_t>(id));
  }
  g_interrupted = false;
  g_generating = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto stream = m.engine->submit(r);
  if (!stream.is_ok()) {
    g_generating = false;
    return stream.status();
  }
  StreamDecoder dec(*m.tokenizer, true);
  std::string out;
  bool cancelled = false;
  std::chrono::steady_clock::time_point cancel_at, first;
  int64_t tokens = 0;
  for (;;) {
    if (g_interrupted.load() && !cancelled) {
      (*stream)->cancel();
      cancelled = true;
      cancel_at = std::chrono::steady_clock::now();
    }
    if (cancelled && std::chrono::steady_clock::now() - cancel_at > std::chrono::seconds(5)) {
      std::fputs("\nferrite run: the reply did not stop within 5 s; exiting\n", stderr);
      std::fflush(nullptr);
      _exit(130);
    }
    auto u = (*stream)->next(std::chrono::milliseconds(50));
    std::string piece;
    for (const auto& t : u.tokens) {
      if (tokens++ == 0) first = std::chrono::steady_clock::now();
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
      // The engine's own times of the first and last token: the stream hands
      // tokens over in batches (a fast model's whole reply can arrive in one
      // update), so the times they were read here say little.
      const RequestTimes rt = (*stream)->times();
      const bool engine_times = rt.first_token.time_since_epoch().count() != 0 &&
                                rt.last_token.time_since_epoch().count() != 0;
      const auto first_at = engine_times ? rt.first_token : first;
      const auto last_at = engine_times ? rt.last_token : std::chrono::steady_clock::now();
      const double ttft = tokens ? std::chrono::duration<double>(first_at - t0).count() : 0;
      const double decode =
          tokens > 1 ? std::chrono::duration<double>(last_at - first_at).count() : 0;
      std::string stats = fmt::format(
          "[{} tokens, {:.1f} tok/s; prompt {} tokens, first token in {:.2f} s{}]", tokens,
          decode > 0 ? (tokens - 1) / decode : 0.0, (*stream)->prompt_tokens(), ttft,
          cut && u.finish == EngineFinish::kLength && !cancelled
              ? fmt::format("; cut at the context limit of {} tokens: /clear", m.engine->max_context())
              : "");
      std::fprintf(stderr, "%s\n", dim(f, stats).c_str());
      std::fflush(stderr);
      return out;
    }
  }
}

std::string default_history_file() {
  if (const char* h = std::getenv("FERRITE_HOME"); h && *h)
    return (std::filesystem::path(h) / "run_history").string();
  if (const char* home = std::getenv("HOME"); home && *home) {
    std::filesystem::path dir = std::filesystem::path(home) / ".cache" / "ferrite";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    return (dir / "run_history").string();
  }
  return "";
}

int run_run(RunFlags& f) {
  // Only the main thread takes SIGINT: block it before any other thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto model = open_serving_model(f.serving);
  if (!model.is_ok()) return report_error(model.status());
  ServingModel& m = **model;
  // The model's sampling defaults (generation_config.json) replace run's
  // own where no flag was given.
  const GenerationDefaults& g = m.generation;
  if (g.temperature && !f.given.count("--temperature")) f.temperature = *g.temperature;
  if (g.top_p && !f.given.count("--top-p")) f.top_p = *g.top_p;
  if (g.top_k && !f.given.count("--top-k")) f.top_k = *g.top_k;
  if (g.min_p && !f.given.count("--min-p")) f.min_p = *g.min_p;
  if (g.repetition_penalty && !f.given.count("--repetition-penalty"))
    f.repetition_penalty = *g.repetition_penalty;
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
    return g_interrupted ? 130 : 0;
  }
  LineEditor editor(f.history_file == "none" ? ""
                    : f.history_file.empty() ? default_history_file()
                                             : f.history_file);
  if (editor.interactive()) {
    std::fprintf(stderr, "%s", startup_summary(m, "ferrite run: ").c_str());
    std::fprintf(stderr, "%s\n",
                 dim(f, "Send a message (/? for help, /bye or Ctrl-D to quit, Ctrl-C stops a reply)")
                     .c_str());
  }
  const std::string prompt = f.color_out ? "\x1b[1m>>> \x1b[0m" : ">>> ";
  const std::string more = f.color_out ? "\x1b[1m... \x1b[0m" : "... ";
  std::string line;
  int rc = 0;
  for (;;) {
    LineEditor::Read got = editor.read(prompt, &line);
    if (got == LineEditor::Read::kEof) break;
    if (got == LineEditor::Read::kInterrupt) {
      rc = 130;
      break;
    }
    // """ ... """: a multi-line message.
    if (line.rfind("\"\"\"", 0) == 0) {
      std::string text = line.substr(3);
      bool closed = text.size() >= 3 && text.compare(text.size() - 3, 3, "\"\"\"") == 0;
      while (!closed) {
        std::string next;
        LineEditor::Read g = editor.read(more, &next);
        if (g != LineEditor::Read::kLine) break;
        text += "\n" + next;
        closed = next.size() >= 3 && next.compare(next.size() - 3, 3, "\"\"\"") == 0;
      }
      if (!closed) break;  // end of input inside the message
      text.resize(text.size() - 3);
      line = text;
    } else {
      editor.add_history(line);
    }
    if (line.find_first_not_of(" \t\n") == std::string::npos) continue;
    if (line == "/exit" || line == "/quit" || line == "/bye") break;
    if (line == "/help" || line == "/?") {
      std::fputs(kHelp, stdout);
      std::fflush(stdout);
      continue;
    }
    if (line == "/clear") {
      messages = nlohmann::ordered_json::array();
      if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
      std::fputs("(conversation cleared)\n", stdout);
      std::fflush(stdout);
      continue;
    }
    if (line[0] == '/' && line.find(' ') == std::string::npos) {
      std::fprintf(stderr, "unknown command '%s' (/? lists the commands)\n", line.c_str());
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", line}});
    auto r = reply(m, f, messages, line);
    if (!r.is_ok()) {
      messages.erase(messages.size() - 1);
      print_error(f, r.status());
      continue;
    }
    messages.push_back({{"role", "assistant"}, {"content", *r}});
  }
  return rc;
}

bool no_color() {
  const char* v = std::getenv("NO_COLOR");
  return v && *v;
}

}  // namespace

void register_run(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run", "chat with a model in the terminal: ferrite run [MODEL] [PROMPT]");
  add_serving_flags(cmd, &f->serving, /*positional=*/false);
  cmd->add_option("args", f->args,
                  "[MODEL] [PROMPT]: a model folder (default: the embedded model), then a "
                  "one-shot prompt (omit for an interactive chat)");
  cmd->add_option("--system", f->system, "system message");
  cmd->add_option("--max-tokens", f->max_tokens, "most tokens per reply");
  cmd->add_flag("--ignore-eos", f->ignore_eos, "replies run to --max-tokens (demos, timing)");
  cmd->add_option("--temperature", f->temperature,
                  "0 = greedy (default: the model's generation_config.json, else 0.7)");
  cmd->add_option("--top-p", f->top_p, "nucleus sampling");
  cmd->add_option("--top-k", f->top_k, "0 = off");
  cmd->add_option("--min-p", f->min_p, "0 = off");
  cmd->add_option("--repetition-penalty", f->repetition_penalty, "1 = off");
  cmd->add_option("--seed,--sampling-seed", f->seed, "seed of the sampler")
      ->default_str("random");
  cmd->add_flag("--raw", f->raw, "no chat template: the prompt is plain text");
  cmd->add_option("--history-file", f->history_file,
                  "history of the interactive chat (default: ~/.cache/ferrite/run_history; "
                  "'none': no file)");
  cmd->callback([f, exit_code, cmd] {
    // [MODEL] [PROMPT...]: one argument is the model when it names
    // something on disk or looks like a Hugging Face id, else the prompt.
    std::vector<std::string> args = f->args;
    if (f->serving.model.model.empty() && !args.empty()) {
      static const std::regex hub(R"(^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$)");
      std::error_code ec;
      if (args.size() >= 2 || std::filesystem::exists(args[0], ec) ||
          std::regex_match(args[0], hub)) {
        f->serving.model.model = args[0];
        args.erase(args.begin());
      }
    }
    f->prompt.clear();
    for (const std::string& a : args) f->prompt += (f->prompt.empty() ? "" : " ") + a;
    f->seed_given = cmd->count("--seed") > 0;
    if (f->max_tokens < 1 || f->temperature < 0 || !(f->top_p > 0 && f->top_p <= 1) ||
        f->top_k < 0 || f->min_p < 0 || f->min_p > 1 || !(f->repetition_penalty > 0)) {
      *exit_code = report_error(
          invalid_argument("--max-tokens >= 1, --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0, "
                           "0 <= --min-p <= 1, --repetition-penalty > 0"));
      return;
    }
    // Which sampling flags were given: the model's generation_config.json
    // fills in the others (run_run).
    for (const char* k :
         {"--temperature", "--top-p", "--top-k", "--min-p", "--repetition-penalty"})
      if (cmd->count(k)) f->given.insert(k);
    f->color_out = isatty(STDOUT_FILENO) && !no_color();
    f->color_err = isatty(STDERR_FILENO) && !no_color();
    *exit_code = run_run(*f);
  });
}

}  // namespace ferrite::cli
