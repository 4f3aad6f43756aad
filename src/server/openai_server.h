// OpenAI-compatible HTTP server on top of the Engine API (never the device):
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
//   GET /v1/models/{id}, GET /health, GET /metrics (Prometheus text).
// The transport (http_transport.h) owns sockets, deadlines and connection
// limits; handlers parse and validate a request (request_parser.h), submit
// it to the Engine and stream its tokens back as text (stream_text.h; SSE
// when "stream": true). A client that goes away is noticed at the next write
// (tokens, or an SSE comment / JSON whitespace sent every 200 ms while idle)
// and its sequence is cancelled at once.
//
// Security defaults: loopback only unless ServerOptions::host says
// otherwise; the API key (constant-time compare) guards /v1/* and, when
// asked, /health and /metrics; the Host header must name this server
// (DNS rebinding) and a request carrying a browser Origin not in
// allowed_origins is refused (no CORS unless asked); POST bodies must be
// application/json (a web page cannot send one without a CORS preflight).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http_transport.h"
#include "server/request_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (see OpenAIServer::port())
  std::string api_key;  // non-empty: /v1/* needs "Authorization: Bearer KEY"
  bool api_key_for_health_metrics = false;  // /health and /metrics need it too
  std::string model_name = "ferrite";
  // Host header values accepted ("name" or "name:port"; "*" accepts any).
  // Empty: the loopback names when bound to loopback, the bound address and
  // the loopback names for another address, any Host on a wildcard address.
  std::vector<std::string> allowed_hosts;
  // Origins a browser page may call from (CORS); "*" allows any. Empty: a
  // request with an Origin header is refused.
  std::vector<std::string> allowed_origins;
  bool special_tokens_in_prompts = false;  // completions: parse "<|...|>" text
  // A generation running longer is cancelled and ends with an error (0: none).
  std::chrono::seconds request_timeout{1800};
  int http_threads = 0;  // 0: enough for the engine's queue and sequences
  bool log_requests = false;
  RequestLimits limits;
  // Sampling of fields a request leaves out (generation_config.json).
  SamplingParams sampling_defaults = RequestContext{}.sampling_defaults;
  int64_t default_max_tokens = 0;  // > 0: max_tokens when not given
  TransportOptions transport;  // host / port / workers are set from the above
};

class OpenAIServer {
 public:
  // `chat` may be null (then /v1/chat/completions answers 400).
  OpenAIServer(Engine& engine, const Tokenizer& tokenizer, const ChatTemplate* chat,
               ServerOptions options);
  ~OpenAIServer();
  // Binds the socket (port() is valid afterwards).
  Status bind();
  // Serves until stop(); call bind() first.
  Status serve();
  // Graceful shutdown, step 1: no new connections or generations (503);
  // what runs goes on.
  void begin_shutdown();
  // Step 2: waits up to `grace` for the running generations, then cancels
  // the rest (their streams end cleanly with an error event) and waits up to
  // `cancel_wait` for the responses to be written. True if all ended.
  bool drain(std::chrono::milliseconds grace, std::chrono::milliseconds cancel_wait);
  // Ends serve().
  void stop();
  int port() const { return port_; }

  // Prometheus text of the engine's and the server's counters.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace ferrite
