// ferrite serve [--model DIR] [--host H] [--port P] [--api-key KEY] ...
// An OpenAI-compatible server; without --model it serves the embedded
// default model (created on first use, no download).
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

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
  std::string served_model_name;
  size_t max_body_bytes = 8u << 20;
  bool log_requests = false;
};

int run_serve(const ServeFlags& f) {
  // Only the signal thread below sees SIGINT / SIGTERM; nobody dies of SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  if (f.port < 0 || f.port > 65535)
    return report_error(invalid_argument("--port must be in [0, 65535]"));
  auto model = open_serving_model(f.serving);
  if (!model.is_ok()) return report_error(model.status());
  ServingModel& m = **model;
  ServerOptions so;
  so.host = f.host;
  so.port = f.port;
  so.api_key = f.api_key;
  so.model_name = f.served_model_name.empty() ? m.name : f.served_model_name;
  so.max_body_bytes = f.max_body_bytes;
  so.log_requests = f.log_requests;
  OpenAIServer server(*m.engine, *m.tokenizer, m.chat.get(), so);
  Status st = server.bind();
  if (!st.is_ok()) return report_error(st);
  std::thread signals([&server, set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "ferrite serve: signal %d, shutting down\n", sig);
    server.stop();
  });
  std::fprintf(stderr,
               "ferrite serve: model %s (%s), %d KV pages of %d tokens, prefix cache %s\n"
               "ferrite serve: listening on http://%s:%d\n",
               so.model_name.c_str(), m.dir.c_str(), m.runner->bound().pages().num_pages(),
               m.runner->bound().pages().page_size(),
               m.engine->prefix_cache_enabled() ? "on" : "off", so.host.c_str(), server.port());
  std::fflush(stderr);
  st = server.serve();
  m.engine->shutdown();
  if (signals.joinable()) {
    pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
  }
  if (!st.is_ok()) return report_error(st);
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  add_serving_flags(cmd, &f->serving);
  cmd->add_option("--host", f->host, "address to listen on");
  cmd->add_option("--port", f->port, "port (0: any free port, printed at start)");
  cmd->add_option("--api-key", f->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--served-model-name", f->served_model_name,
                  "model id clients use (default: the model folder's name)");
  cmd->add_option("--max-body-bytes", f->max_body_bytes, "largest request body (413 above)");
  cmd->add_flag("--log-requests", f->log_requests, "log every HTTP request to stderr");
  cmd->callback([f, exit_code] { *exit_code = run_serve(*f); });
}

}  // namespace ferrite::cli
