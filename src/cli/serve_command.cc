// ferrite serve [--model DIR] [--host H] [--port P] [--api-key KEY] ...
// An OpenAI-compatible server; without --model it serves the embedded
// default model (created on first use, no download).
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/serving_common.h"
#include "server/openai_server.h"

namespace ferrite::cli {

namespace {

struct ServeFlags {
  ServingFlags serving;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  bool api_key_for_health_metrics = false;
  std::vector<std::string> allowed_hosts;
  std::vector<std::string> allowed_origins;
  bool special_tokens_in_prompts = false;
  std::string served_model_name;
  size_t max_body_bytes = 8u << 20;
  int max_connections = 1024;
  double header_timeout_s = 10;
  double keep_alive_timeout_s = 5;
  double request_timeout_s = 1800;
  double shutdown_timeout_s = 10;
  bool log_requests = false;
  bool disable_log_stats = false;
  double log_stats_interval_s = 10;
};

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

int run_serve(const ServeFlags& f) {
  // Only the signal thread below sees SIGINT / SIGTERM; nobody dies of SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  if (!(f.log_stats_interval_s > 0) || f.log_stats_interval_s > 86400)
    return report_error(invalid_argument("--log-stats-interval must be in (0, 86400] seconds"));
  if (f.port < 0 || f.port > 65535)
    return report_error(invalid_argument("--port must be in [0, 65535]"));
  if (f.max_connections < 1) return report_error(invalid_argument("--max-connections must be >= 1"));
  for (double v : {f.header_timeout_s, f.keep_alive_timeout_s, f.shutdown_timeout_s})
    if (!(v > 0) || v > 86400)
      return report_error(invalid_argument("timeouts must be in (0, 86400] seconds"));
  if (!(f.request_timeout_s >= 0))
    return report_error(invalid_argument("--request-timeout must be >= 0 (0: none)"));
  auto model = open_serving_model(f.serving);
  if (!model.is_ok()) return report_error(model.status());
  ServingModel& m = **model;
  ServerOptions so;
  so.host = f.host;
  so.port = f.port;
  so.api_key = f.api_key;
  so.api_key_for_health_metrics = f.api_key_for_health_metrics;
  so.allowed_hosts = f.allowed_hosts;
  so.allowed_origins = f.allowed_origins;
  so.special_tokens_in_prompts = f.special_tokens_in_prompts;
  so.model_name = f.served_model_name.empty() ? m.name : f.served_model_name;
  so.request_timeout = std::chrono::seconds(static_cast<int64_t>(f.request_timeout_s));
  so.log_requests = f.log_requests;
  m.generation.apply(&so.sampling_defaults);
  if (m.generation.max_new_tokens) so.default_max_tokens = *m.generation.max_new_tokens;
  so.transport.max_body_bytes = f.max_body_bytes;
  so.transport.max_connections = f.max_connections;
  so.transport.head_timeout = millis(f.header_timeout_s);
  so.transport.keep_alive_timeout = millis(f.keep_alive_timeout_s);
  OpenAIServer server(*m.engine, *m.tokenizer, m.chat.get(), so);
  Status st = server.bind();
  if (!st.is_ok()) return report_error(st);

  // First signal: graceful shutdown (no new requests, running ones get
  // --shutdown-timeout to finish, then are cancelled with a clean end of
  // stream). A second signal exits at once.
  std::atomic<bool> exiting{false}, signalled{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    if (exiting) return;
    signalled = true;
    // From here a second SIGINT / SIGTERM reaches this thread's handler.
    struct sigaction now {};
    now.sa_handler = [](int) { std::_Exit(130); };
    sigaction(SIGINT, &now, nullptr);
    sigaction(SIGTERM, &now, nullptr);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    std::fprintf(stderr,
                 "ferrite serve: signal %d, shutting down (running requests get %.0f s; signal "
                 "again to exit at once)\n",
                 sig, f.shutdown_timeout_s);
    server.begin_shutdown();
    bool clean = server.drain(millis(f.shutdown_timeout_s), std::chrono::seconds(5));
    if (!clean) std::fprintf(stderr, "ferrite serve: some responses did not end in time\n");
    server.stop();
  });
  m.name = so.model_name;
  std::fprintf(stderr, "%s", startup_summary(m, "ferrite serve: ").c_str());
  std::fprintf(stderr, "ferrite serve: listening on http://%s:%d%s\n",
               so.host.find(':') != std::string::npos ? ("[" + so.host + "]").c_str()
                                                      : so.host.c_str(),
               server.port(), so.api_key.empty() ? "" : " (API key required)");
  std::fflush(stderr);
  // The periodic throughput line (as vLLM's), while there is traffic.
  std::mutex stats_mu;
  std::condition_variable stats_cv;
  bool stats_stop = false;
  std::thread stats;
  if (!f.disable_log_stats) {
    stats = std::thread([&] {
      using Clock = std::chrono::steady_clock;
      EngineMetrics prev = m.engine->metrics();
      auto t_prev = Clock::now();
      std::unique_lock<std::mutex> lock(stats_mu);
      while (!stats_cv.wait_for(lock, millis(f.log_stats_interval_s), [&] { return stats_stop; })) {
        EngineMetrics cur = m.engine->metrics();
        const auto now = Clock::now();
        const double dt = std::chrono::duration<double>(now - t_prev).count();
        const uint64_t dp = cur.prompt_tokens - prev.prompt_tokens;
        const uint64_t dg = cur.generation_tokens - prev.generation_tokens;
        if (dp || dg || cur.running || cur.waiting) {
          std::fprintf(
              stderr,
              "%s\n",
              fmt::format("ferrite serve: avg prompt throughput: {:.1f} tokens/s, avg generation "
                          "throughput: {:.1f} tokens/s, running: {} reqs, waiting: {} reqs, KV "
                          "cache usage: {:.1f}%, prefix cache hit rate: {:.1f}%",
                          dp / dt, dg / dt, cur.running, cur.waiting,
                          cur.kv_pages_total ? 100.0 * cur.kv_pages_used / cur.kv_pages_total : 0.0,
                          cur.prefix_cache_queries
                              ? 100.0 * cur.prefix_cache_hits / cur.prefix_cache_queries
                              : 0.0)
                  .c_str());
          std::fflush(stderr);
        }
        prev = std::move(cur);
        t_prev = now;
      }
    });
  }
  st = server.serve();
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats_stop = true;
  }
  stats_cv.notify_all();
  if (stats.joinable()) stats.join();
  exiting = true;
  if (!signalled) pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  m.engine->shutdown();
  if (!st.is_ok()) return report_error(st);
  std::fprintf(stderr, "ferrite serve: stopped\n");
  return 0;
}

// "a,b" and repeated flags -> one list.
CLI::Option* add_list(CLI::App* cmd, const char* name, std::vector<std::string>* out,
                      const char* help) {
  return cmd->add_option(name, *out, help)->delimiter(',');
}

}  // namespace

void register_serve(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  add_serving_flags(cmd, &f->serving);
  cmd->add_option("--host", f->host, "address to listen on (loopback unless you say otherwise)")
      ->capture_default_str();
  cmd->add_option("--port", f->port, "port (0: any free port, printed at start)")
      ->capture_default_str();
  cmd->add_option("--api-key", f->api_key,
                  "require 'Authorization: Bearer KEY' on /v1/* (or set FERRITE_API_KEY, "
                  "which keeps the key out of the process list)")
      ->envname("FERRITE_API_KEY");
  cmd->add_flag("--api-key-for-metrics", f->api_key_for_health_metrics,
                "/health and /metrics need the API key too");
  add_list(cmd, "--allowed-hosts", &f->allowed_hosts,
           "Host header names accepted, comma-separated, '*' for any (default: the bound "
           "address and the loopback names; any on 0.0.0.0 / ::)");
  add_list(cmd, "--allowed-origins", &f->allowed_origins,
           "browser origins allowed to call the API (CORS), '*' for any (default: none)");
  cmd->add_flag("--special-tokens-in-prompts", f->special_tokens_in_prompts,
                "completions prompts given as text may spell special tokens ('<|im_start|>' "
                "becomes its id); chat messages never can");
  cmd->add_option("--served-model-name", f->served_model_name,
                  "model id clients use (default: the model folder's name)");
  cmd->add_option("--max-body-bytes", f->max_body_bytes, "largest request body (413 above)")
      ->capture_default_str();
  cmd->add_option("--max-connections", f->max_connections,
                  "open client connections (503 above)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", f->header_timeout_s,
                  "seconds a client has to send a request's whole head (408 after)")
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", f->keep_alive_timeout_s,
                  "seconds an idle keep-alive connection stays open")
      ->capture_default_str();
  cmd->add_option("--request-timeout", f->request_timeout_s,
                  "seconds a generation may run before it is cancelled (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", f->shutdown_timeout_s,
                  "seconds running requests get to finish after SIGTERM / Ctrl-C")
      ->capture_default_str();
  cmd->add_flag("--log-requests", f->log_requests,
                "log every request to stderr: generations with their id, status, tokens in / "
                "out, TTFT and latency when they end");
  cmd->add_flag("--disable-log-stats", f->disable_log_stats,
                "no periodic throughput line (prompt / generation tokens/s, running, waiting, "
                "KV cache usage)");
  cmd->add_option("--log-stats-interval", f->log_stats_interval_s,
                  "seconds between throughput lines (printed while there is traffic)");
  cmd->callback([f, exit_code] { *exit_code = run_serve(*f); });
}

}  // namespace ferrite::cli
