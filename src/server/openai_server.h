// OpenAI-compatible HTTP server on top of the Engine API (never the device):
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
//   GET /health, GET /metrics (Prometheus text).
// HTTP threads (cpp-httplib) parse and validate requests, render the chat
// template, tokenize, submit to the Engine and stream its tokens back as
// text (SSE when "stream": true). Stop strings are matched on the text; the
// characters that could still become a stop string are held back, so a
// partial stop string never reaches the client. A client that goes away is
// noticed at the next write (tokens, or an SSE comment / JSON whitespace sent
// every 200 ms while idle) and its sequence is cancelled at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (see OpenAIServer::port())
  std::string api_key;  // non-empty: /v1/* needs "Authorization: Bearer KEY"
  std::string model_name = "ferrite";
  size_t max_body_bytes = 8u << 20;
  int max_json_depth = 64;
  int http_threads = 0;  // 0: enough for the engine's queue and sequences
  bool log_requests = false;
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
