#include "server/openai_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <set>

#include "server/chat_output.h"
#include "server/stream_text.h"

namespace ferrite {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Compares a presented secret with the expected one in time that depends
// only on the expected one's length (no early exit on the first mismatch).
bool secret_equals(const std::string& presented, const std::string& expected) {
  volatile unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  const size_t n = presented.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char p = n ? static_cast<unsigned char>(presented[i % n]) : 0;
    diff = diff | static_cast<unsigned char>(p ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

// A Prometheus label value: backslash, quote and newline escaped.
std::string label_value(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// Metrics label for a request path: one of the routes, never the raw path
// (a client could otherwise grow /metrics without bound or inject lines).
const char* route_label(const std::string& path) {
  static const char* kRoutes[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models",
                                  "/health", "/metrics"};
  for (const char* r : kRoutes)
    if (path == r) return r;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{model}";
  return "other";
}

// "host", "host:port", "[v6]", "[v6]:port" -> the host part, lower-cased.
std::string host_part(std::string_view h) {
  std::string_view name = h;
  if (!h.empty() && h.front() == '[') {
    size_t close = h.find(']');
    name = close == std::string_view::npos ? h : h.substr(1, close - 1);
  } else if (size_t colon = h.rfind(':'); colon != std::string_view::npos &&
                                          h.find(':') == colon) {
    name = h.substr(0, colon);
  }
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_loopback_name(const std::string& h) {
  return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0 ||
         (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0);
}

// What --log-requests and the request-level histograms need of one
// generation (touched by its handler thread only).
struct RequestTrace {
  std::string id;
  std::string endpoint;
  Clock::time_point start = Clock::now(), first{};
  std::string finish = "abort";  // until the response says otherwise
  void token_seen() {
    if (first == Clock::time_point{}) first = Clock::now();
  }
};

std::string finish_name(EngineFinish f, bool stopped) {
  if (stopped || f == EngineFinish::kStop) return "stop";
  return "length";
}

}  // namespace

// vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, ... while <= max.
static std::vector<double> one_two_five_buckets(int64_t max) {
  std::vector<double> b;
  for (int64_t e = 1; e <= max; e *= 10)
    for (int64_t m : {1, 2, 5})
      if (m * e <= max) b.push_back(static_cast<double>(m * e));
  return b;
}

struct OpenAIServer::Impl {
  Engine& engine;
  const Tokenizer& tokenizer;
  const ChatTemplate* chat;
  ServerOptions options;
  RequestContext request_ctx;
  grammar::GrammarCache grammars;
  std::shared_ptr<const grammar::TokenVocab> vocab;  // structured outputs
  std::unique_ptr<HttpTransport> http;
  std::set<std::string> allowed_hosts;  // host parts; empty with any_host
  bool any_host = false;
  std::atomic<bool> draining{false};

  mutable std::mutex counters_mu;
  std::map<std::pair<std::string, int>, uint64_t> http_requests;  // (route, status)
  std::atomic<uint64_t> client_disconnects{0};
  std::atomic<uint64_t> request_timeouts{0};
  // Request-level token histograms measured here (vLLM's names and
  // buckets: 1, 2, 5, 10, 20, 50, ... up to the context); the timing ones
  // are the engine's (EngineMetrics).
  mutable std::mutex request_hist_mu;
  Histogram prompt_len{one_two_five_buckets(engine.max_context())};
  Histogram output_len{one_two_five_buckets(engine.max_context())};
  void request_done(const RequestTrace& t, const RequestStream& s, int64_t completion_tokens);

  std::mutex streams_mu;
  std::condition_variable streams_cv;
  std::set<std::shared_ptr<RequestStream>> streams;  // generations being written

  Impl(Engine& e, const Tokenizer& t, const ChatTemplate* c, ServerOptions o)
      : engine(e), tokenizer(t), chat(c), options(std::move(o)) {
    request_ctx.tokenizer = &tokenizer;
    request_ctx.chat = chat;
    request_ctx.model_name = options.model_name;
    request_ctx.vocab_size = engine.runner().program().vocab_size;
    request_ctx.max_context = engine.max_context();
    request_ctx.stop_ids = tokenizer.stop_ids();
    for (int64_t id : engine.runner().config().eos_token_ids)
      if (std::find(request_ctx.stop_ids.begin(), request_ctx.stop_ids.end(), id) ==
          request_ctx.stop_ids.end())
        request_ctx.stop_ids.push_back(static_cast<uint32_t>(id));
    request_ctx.max_prompt_bytes = max_prompt_bytes_for(tokenizer, engine.max_context());
    request_ctx.special_tokens_in_prompts = options.special_tokens_in_prompts;
    request_ctx.limits = options.limits;
    request_ctx.sampling_defaults = options.sampling_defaults;
    request_ctx.default_max_tokens = options.default_max_tokens;
    request_ctx.grammars = &grammars;
    if (chat) chat_template_features(*chat, &request_ctx);
    vocab = grammar::TokenVocab::build(tokenizer, static_cast<size_t>(request_ctx.vocab_size));

    for (const std::string& h : options.allowed_hosts) {
      if (h == "*") any_host = true;
      allowed_hosts.insert(host_part(h));
    }
    if (options.allowed_hosts.empty()) {
      const std::string bound = host_part(options.host);
      if (bound.empty() || bound == "0.0.0.0" || bound == "::") {
        any_host = true;  // reachable under names we cannot know
      } else if (!is_loopback_name(bound)) {
        allowed_hosts.insert(bound);
      }
    }
  }

  bool host_allowed(const std::string& host_header) const {
    if (any_host || host_header.empty()) return true;  // HTTP/1.0 clients may omit it
    std::string h = host_part(host_header);
    if (allowed_hosts.count(h)) return true;
    return options.allowed_hosts.empty() && is_loopback_name(h);
  }

  bool origin_allowed(const std::string& origin) const {
    for (const std::string& o : options.allowed_origins)
      if (o == "*" || o == origin) return true;
    return false;
  }

  void count(const std::string& path, int status) {
    std::lock_guard<std::mutex> lock(counters_mu);
    ++http_requests[{route_label(path), status}];
  }

  void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(api_error_body(e), "application/json");
  }

  // Pre-routing checks; true when `res` already holds the answer.
  bool refuse(const httplib::Request& req, httplib::Response& res);
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat_api,
                       bool responses_api = false);
  template <typename Choices, typename Usage, typename Pump, typename Releaser>
  void handle_responses(httplib::Response& res, std::shared_ptr<ParsedRequest> p, Choices choices,
                        const std::string& id, int64_t created, Usage usage, Pump pump,
                        Releaser releaser);
  std::string metrics_text() const;
  void track(const std::shared_ptr<RequestStream>& s) {
    std::lock_guard<std::mutex> lock(streams_mu);
    streams.insert(s);
  }
  void untrack(const std::shared_ptr<RequestStream>& s) {
    {
      std::lock_guard<std::mutex> lock(streams_mu);
      streams.erase(s);
    }
    streams_cv.notify_all();
  }
};

bool OpenAIServer::Impl::refuse(const httplib::Request& req, httplib::Response& res) {
  auto fail = [&](ApiError e) {
    send_error(res, e);
    count(req.path, e.status);
    return true;
  };
  if (!host_allowed(req.get_header_value("Host")))
    return fail(ApiError{421,
                         "the Host header does not name this server (start it with "
                         "--allowed-hosts to accept other names)",
                         "invalid_request_error", {}, "host_not_allowed"});
  const std::string origin = req.get_header_value("Origin");
  if (!origin.empty()) {
    if (!origin_allowed(origin))
      return fail(ApiError{403,
                           "cross-origin requests are refused (start the server with "
                           "--allowed-origins to allow this origin)",
                           "invalid_request_error", {}, "origin_not_allowed"});
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    if (req.method == "OPTIONS") {  // CORS preflight
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
      res.status = 204;
      return true;
    }
  }
  const bool v1 = req.path.rfind("/v1/", 0) == 0;
  const bool guarded =
      v1 || (options.api_key_for_health_metrics && (req.path == "/health" || req.path == "/metrics"));
  if (!options.api_key.empty() && guarded) {
    const std::string auth = req.get_header_value("Authorization");
    const std::string presented = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : std::string();
    if (!secret_equals(presented, options.api_key))
      return fail(ApiError{
          401, "Invalid or missing API key", "invalid_request_error", {}, "invalid_api_key"});
  }
  if (req.method == "POST") {
    std::string type = req.get_header_value("Content-Type");
    type = type.substr(0, type.find(';'));
    while (!type.empty() && type.back() == ' ') type.pop_back();
    for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (type != "application/json")
      return fail(ApiError{415, "request bodies must be JSON with Content-Type: application/json",
                           "invalid_request_error", {}, "unsupported_media_type"});
  }
  return false;
}

namespace {

// One choice of a request: its sequence and what turns its tokens into text.
struct Choice {
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<TextStream> text;
  std::unique_ptr<ChatOutput> out;
  std::optional<RequestStream::Update> pending;  // read before the writer started
  bool done = false;
  bool echoed = false;
  EngineFinish finish = EngineFinish::kLength;
  std::string text_total;  // completions
  json entries = json::array();
  size_t text_offset = 0;
};

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

// A streamed chunk's "tool_calls": a call's first delta carries index, id,
// type and name; later ones the index and the next piece of the arguments
// (OpenAI's streaming form). Deltas with nothing to show are left out.
json tool_call_deltas_json(const std::vector<ToolCallDelta>& calls) {
  json out = json::array();
  for (const ToolCallDelta& c : calls) {
    if (c.id.empty() && c.arguments.empty()) continue;
    json w = {{"index", c.index}};
    if (!c.id.empty()) {
      w["id"] = c.id;
      w["type"] = "function";
      w["function"] = {{"name", c.name}, {"arguments", c.arguments}};
    } else {
      w["function"] = {{"arguments", c.arguments}};
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

void OpenAIServer::Impl::handle_generate(const httplib::Request& req, httplib::Response& res,
                                         bool chat_api, bool responses_api) {
  const std::string endpoint =
      responses_api ? "/v1/responses" : chat_api ? "/v1/chat/completions" : "/v1/completions";
  if (draining) {
    send_error(res, ApiError{503, "the server is shutting down", "server_error", {},
                             "server_shutdown"});
    count(endpoint, 503);
    return;
  }
  auto p = std::make_shared<ParsedRequest>();
  std::optional<ApiError> perr = responses_api
                                     ? parse_responses_request(request_ctx, req.body, p.get())
                                     : parse_request(request_ctx, req.body, chat_api, p.get());
  if (perr) {
    send_error(res, *perr);
    count(endpoint, perr->status);
    return;
  }
  auto choices = std::make_shared<std::vector<Choice>>(p->n);
  auto abandon = [&](size_t upto) {
    for (size_t k = 0; k < upto; ++k) {
      (*choices)[k].stream->cancel();
      untrack((*choices)[k].stream);
    }
  };
  const auto started = Clock::now();
  for (int32_t i = 0; i < p->n; ++i) {
    EngineRequest r = p->engine;
    r.sampling.seed = p->engine.sampling.seed + static_cast<uint64_t>(i);
    r.constraint = make_constraint(*p, vocab, request_ctx.stop_ids);
    auto submitted = engine.submit(std::move(r));
    if (!submitted.is_ok()) {
      abandon(i);
      const Status& st = submitted.status();
      ApiError e;
      if (st.code() == StatusCode::kResourceExhausted) {
        e = ApiError{429, st.message(), "rate_limit_exceeded", {}, "queue_full"};
        res.set_header("Retry-After", "1");
      } else if (st.code() == StatusCode::kInvalidArgument) {
        e = bad_request(st.message());
      } else {
        e = ApiError{503, st.message(), "server_error", {}, {}};
      }
      send_error(res, e);
      count(endpoint, e.status);
      return;
    }
    Choice& c = (*choices)[i];
    c.stream = std::move(submitted).value();
    track(c.stream);
    c.text = std::make_unique<TextStream>(tokenizer, p->stop, chat_api, p->logprobs);
    c.out = std::make_unique<ChatOutput>(p->reasoning, p->reasoning_open, p->tool_format);
    // n > 1 with the prefix cache: the other choices start once the first
    // has computed the prompt, so they share its KV pages.
    if (i == 0 && p->n > 1 && engine.prefix_cache_enabled()) {
      while (Clock::now() - started < std::chrono::seconds(60)) {
        RequestStream::Update u = c.stream->next(std::chrono::milliseconds(100));
        if (!u.tokens.empty() || u.finished) {
          c.pending = std::move(u);
          break;
        }
      }
    }
  }
  count(endpoint, 200);
  const std::string id = random_request_id(responses_api ? "resp_" : chat_api ? "chatcmpl-" : "cmpl-");
  const int64_t created = unix_time();
  const std::string model = options.model_name;
  const std::string object =
      chat_api ? (p->stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  auto usage = [choices, responses_api] {
    int64_t completion = 0;
    for (const Choice& c : *choices) completion += c.text->completion_tokens();
    const Choice& c0 = (*choices)[0];
    const int64_t prompt = c0.stream->prompt_tokens();
    if (responses_api)
      return json{{"input_tokens", prompt},
                  {"input_tokens_details", {{"cached_tokens", c0.stream->cached_tokens()}}},
                  {"output_tokens", completion},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", prompt + completion}};
    return json{{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", c0.stream->cached_tokens()}}}};
  };
  auto* self = this;
  auto trace = std::make_shared<RequestTrace>();
  trace->id = id;
  trace->endpoint = endpoint;
  auto releaser = [choices, self, trace](bool success) {
    if (!success) ++self->client_disconnects;
    int64_t completion = 0;
    for (Choice& c : *choices) {
      c.stream->cancel();  // no-op when it already finished
      self->untrack(c.stream);
      completion += c.text->completion_tokens();
    }
    self->request_done(*trace, *(*choices)[0].stream, completion);
  };
  const auto timeout = options.request_timeout;
  auto timed_out = std::make_shared<bool>(false);
  // Cancels a generation past the request timeout (checked while waiting).
  auto check_timeout = [choices, started, timeout, timed_out, self] {
    if (timeout.count() > 0 && !*timed_out && Clock::now() - started > timeout) {
      *timed_out = true;
      ++self->request_timeouts;
      for (Choice& c : *choices) c.stream->cancel();
    }
  };
  // Why a stream was cut short by the server (shutdown, timeout), if it was.
  auto cut_short = [timed_out, self, timeout](const RequestStream::Update& u,
                                              const TextStream& t) -> std::optional<ApiError> {
    if (!u.finished || t.stopped()) return std::nullopt;
    if (u.finish == EngineFinish::kError)
      return ApiError{500, u.error.message(), "server_error", {}, {}};
    if (u.finish != EngineFinish::kCancelled) return std::nullopt;
    if (*timed_out)
      return ApiError{504, fmt::format("the request ran past the server's timeout of {} s",
                                       timeout.count()),
                      "server_error", {}, "request_timeout"};
    if (self->draining)
      return ApiError{503, "the server shut down before the request finished", "server_error",
                      {}, "server_shutdown"};
    return std::nullopt;
  };
  // Reads the choices until all are done. on_piece(i, choice, text, entries,
  // finished) consumes what arrived (false: the client went away); on_idle()
  // keeps the connection checked. *error: why the server cut the request.
  using PieceFn = std::function<bool(size_t, Choice&, const std::string&, json&, bool)>;
  auto finish_reason = [](const Choice& c) -> std::string {
    // A call cut short by max_tokens finishes as "length" (its arguments are
    // incomplete); otherwise any call makes it "tool_calls".
    if (!c.out->calls().empty() && !c.out->call_cut_short()) return "tool_calls";
    return finish_name(c.finish, c.text->stopped());
  };
  auto pump = [choices, check_timeout, cut_short, trace, finish_reason](const PieceFn& on_piece,
                                                  const std::function<bool()>& on_idle,
                                                  std::optional<ApiError>* error) -> bool {
    auto idle_since = Clock::now();
    const auto wait = std::chrono::milliseconds(std::max<int64_t>(2, 100 / choices->size()));
    for (;;) {
      bool all_done = true, any = false;
      for (size_t i = 0; i < choices->size(); ++i) {
        Choice& c = (*choices)[i];
        if (c.done) continue;
        all_done = false;
        RequestStream::Update u;
        if (c.pending) {
          u = std::move(*c.pending);
          c.pending.reset();
        } else {
          u = c.stream->next(wait);
        }
        check_timeout();
        if (u.tokens.empty() && !u.finished) continue;
        any = true;
        if (!u.tokens.empty()) trace->token_seen();
        if (auto err = cut_short(u, *c.text)) {
          trace->finish = err->code.empty() ? "error" : err->code;
          *error = err;
          for (Choice& o : *choices) o.stream->cancel();
          return true;
        }
        json entries = json::array();
        std::string piece = c.text->consume(u, &entries);
        const bool fin = u.finished || c.text->stopped();
        if (fin) {
          c.done = true;
          c.finish = u.finished ? u.finish : EngineFinish::kStop;
          if (c.text->stopped()) c.stream->cancel();
        }
        if (!on_piece(i, c, piece, entries, fin)) {
          for (Choice& o : *choices) o.stream->cancel();
          return false;
        }
        if (fin && i == 0) trace->finish = finish_reason(c);
      }
      if (all_done) return true;
      if (any) {
        idle_since = Clock::now();
      } else if (Clock::now() - idle_since > std::chrono::milliseconds(200)) {
        if (!on_idle()) {
          for (Choice& o : *choices) o.stream->cancel();
          return false;
        }
        idle_since = Clock::now();
      }
    }
  };

  if (responses_api) {
    handle_responses(res, p, choices, id, created, usage, pump, releaser);
    return;
  }

  if (p->stream) {
    auto provider = [=](size_t, httplib::DataSink& sink) -> bool {
      auto write = [&](const json& chunk) {
        std::string s = sse_event(chunk);
        return sink.write(s.data(), s.size());
      };
      auto chunk_of = [&](size_t index, json delta_or_text, json logprobs, json finish) {
        json c = {{"index", index}};
        if (chat_api)
          c["delta"] = std::move(delta_or_text);
        else
          c["text"] = std::move(delta_or_text);
        c["logprobs"] = std::move(logprobs);
        c["finish_reason"] = std::move(finish);
        json chunk = {{"id", id},
                      {"object", object},
                      {"created", created},
                      {"model", model},
                      {"choices", json::array({c})}};
        if (p->include_usage) chunk["usage"] = nullptr;
        return chunk;
      };
      if (chat_api)
        for (size_t i = 0; i < choices->size(); ++i)
          if (!write(chunk_of(i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)))
            return false;
      PieceFn on_piece = [&](size_t i, Choice& c, const std::string& piece, json& entries,
                             bool fin) -> bool {
        json lp = nullptr;
        if (p->logprobs >= 0 && !entries.empty())
          lp = chat_api ? json{{"content", entries}} : completion_logprobs(entries, c.text_offset);
        if (!chat_api) {
          std::string t = piece;
          if (p->echo && !c.echoed) {
            t = p->echo_text + t;
            c.echoed = true;
          }
          c.text_offset += piece.size();
          if ((!t.empty() || !lp.is_null()) && !write(chunk_of(i, t, lp, nullptr))) return false;
        } else {
          ChatOutput::Delta d = c.out->feed(piece);
          if (fin) d.append(c.out->finish());
          if (!d.reasoning.empty() &&
              !write(chunk_of(i, {{"reasoning_content", d.reasoning}}, d.content.empty() ? lp : json(nullptr), nullptr)))
            return false;
          if (!d.reasoning.empty() && d.content.empty()) lp = nullptr;
          if ((!d.content.empty() || !lp.is_null()) &&
              !write(chunk_of(i, {{"content", d.content}}, lp, nullptr)))
            return false;
          if (json calls = tool_call_deltas_json(d.calls);
              !calls.empty() && !write(chunk_of(i, {{"tool_calls", std::move(calls)}}, nullptr, nullptr)))
            return false;
        }
        if (fin && !write(chunk_of(i, chat_api ? json::object() : json(""), nullptr, finish_reason(c))))
          return false;
        return true;
      };
      std::optional<ApiError> err;
      if (!pump(on_piece, [&] { return sink.write(": ping\n\n", 8); }, &err)) return false;
      if (err) {
        write(json::parse(api_error_body(*err)));
        sink.write("data: [DONE]\n\n", 14);
        sink.done();
        return true;
      }
      bool ok = true;
      if (p->include_usage) {
        json chunk = {{"id", id},       {"object", object},         {"created", created},
                      {"model", model}, {"choices", json::array()}, {"usage", usage()}};
        ok = write(chunk);
      }
      ok = ok && sink.write("data: [DONE]\n\n", 14);
      if (!ok) return false;
      sink.done();
      return true;
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", provider, releaser);
    return;
  }

  // Whole response: chunked too, with JSON whitespace while idle so that a
  // client that went away is noticed.
  auto provider = [=](size_t, httplib::DataSink& sink) -> bool {
    PieceFn on_piece = [&](size_t, Choice& c, const std::string& piece, json& entries,
                           bool fin) -> bool {
      for (json& e : entries) c.entries.push_back(std::move(e));
      if (chat_api) {
        c.out->feed(piece);
        if (fin) c.out->finish();
      } else {
        c.text_total += piece;
      }
      return true;
    };
    std::optional<ApiError> err;
    if (!pump(on_piece, [&] { return sink.write(" ", 1); }, &err)) return false;
    if (err) {
      std::string s = api_error_body(*err);
      sink.write(s.data(), s.size());
      sink.done();
      return true;
    }
    json list = json::array();
    for (size_t i = 0; i < choices->size(); ++i) {
      Choice& ch = (*choices)[i];
      json c = {{"index", i}};
      if (chat_api) {
        json msg = {{"role", "assistant"}};
        const bool calls = !ch.out->calls().empty();
        const std::string& content = ch.out->content();
        msg["content"] = calls && content.find_first_not_of(" \t\r\n") == std::string::npos
                             ? json(nullptr)
                             : json(content);
        if (!ch.out->reasoning().empty()) msg["reasoning_content"] = ch.out->reasoning();
        if (calls) msg["tool_calls"] = tool_calls_json(ch.out->calls());
        c["message"] = msg;
        c["logprobs"] = p->logprobs >= 0 ? json{{"content", ch.entries}} : json(nullptr);
      } else {
        c["text"] = (p->echo ? p->echo_text : std::string()) + ch.text_total;
        c["logprobs"] = p->logprobs >= 0 ? completion_logprobs(ch.entries, 0) : json(nullptr);
      }
      c["finish_reason"] = finish_reason(ch);
      list.push_back(c);
    }
    json out = {{"id", id},
                {"object", object},
                {"created", created},
                {"model", model},
                {"choices", list},
                {"usage", usage()}};
    std::string s = out.dump(-1, ' ', false, json::error_handler_t::replace);
    if (!sink.write(s.data(), s.size())) return false;
    sink.done();
    return true;
  };
  res.set_chunked_content_provider("application/json", provider, releaser);
}

void OpenAIServer::Impl::request_done(const RequestTrace& t, const RequestStream& s,
                                      int64_t completion_tokens) {
  const auto end = Clock::now();
  const bool any = t.first != Clock::time_point{};
  const double latency = std::chrono::duration<double>(end - t.start).count();
  const double ttft = any ? std::chrono::duration<double>(t.first - t.start).count() : 0;
  {
    std::lock_guard<std::mutex> lock(request_hist_mu);
    prompt_len.observe(s.prompt_tokens());
    output_len.observe(static_cast<double>(completion_tokens));
  }
  if (options.log_requests)
    std::fprintf(stderr,
                 "ferrite serve: %s POST %s 200 prompt_tokens=%d cached_tokens=%d "
                 "completion_tokens=%lld finish=%s ttft=%.3fs latency=%.3fs\n",
                 t.id.c_str(), t.endpoint.c_str(), s.prompt_tokens(), s.cached_tokens(),
                 static_cast<long long>(completion_tokens), t.finish.c_str(), ttft, latency);
}

template <typename Choices, typename Usage, typename Pump, typename Releaser>
void OpenAIServer::Impl::handle_responses(httplib::Response& res, std::shared_ptr<ParsedRequest> p,
                                          Choices choices, const std::string& id,
                                          int64_t created, Usage usage, Pump pump,
                                          Releaser releaser) {
  const std::string model = options.model_name;
  const std::string suffix = id.substr(5);
  auto base = [=](const std::string& status) {
    json r = {{"id", id},         {"object", "response"},     {"created_at", created},
              {"status", status}, {"error", nullptr},         {"incomplete_details", nullptr}};
    for (const auto& [k, v] : p->responses_echo.items()) r[k] = v;
    r["model"] = model;
    r["output"] = json::array();
    r["previous_response_id"] = nullptr;
    r["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
    r["store"] = false;
    r["truncation"] = "disabled";
    r["usage"] = nullptr;
    r["user"] = nullptr;
    return r;
  };
  auto message_item = [=](const std::string& text, const std::string& status) {
    return json{{"type", "message"},
                {"id", "msg_" + suffix},
                {"status", status},
                {"role", "assistant"},
                {"content", status == "in_progress"
                                ? json::array()
                                : json::array({{{"type", "output_text"},
                                                {"text", text},
                                                {"annotations", json::array()}}})}};
  };
  auto reasoning_item = [=](const std::string& text) {
    return json{{"type", "reasoning"},
                {"id", "rs_" + suffix},
                {"summary", json::array()},
                {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  };
  auto call_item = [](const ToolCall& c, const std::string& status) {
    return json{{"type", "function_call"},
                {"id", "fc_" + c.id.substr(5)},
                {"call_id", c.id},
                {"name", c.name},
                {"arguments", status == "in_progress" ? std::string() : c.arguments},
                {"status", status}};
  };
  auto final_response = [=]() {
    Choice& c = (*choices)[0];
    const bool calls = !c.out->calls().empty();
    const bool incomplete = !calls && c.finish == EngineFinish::kLength;
    json r = base(incomplete ? "incomplete" : "completed");
    if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (!c.out->reasoning().empty()) r["output"].push_back(reasoning_item(c.out->reasoning()));
    const std::string& content = c.out->content();
    if (!calls || content.find_first_not_of(" \t\r\n") != std::string::npos)
      r["output"].push_back(message_item(content, "completed"));
    for (const ToolCall& t : c.out->calls()) r["output"].push_back(call_item(t, "completed"));
    r["usage"] = usage();
    return r;
  };
  using PieceFn = std::function<bool(size_t, Choice&, const std::string&, json&, bool)>;
  if (!p->stream) {
    auto provider = [=](size_t, httplib::DataSink& sink) -> bool {
      PieceFn on_piece = [&](size_t, Choice& c, const std::string& piece, json&, bool fin) {
        c.out->feed(piece);
        if (fin) c.out->finish();
        return true;
      };
      std::optional<ApiError> err;
      if (!pump(on_piece, [&] { return sink.write(" ", 1); }, &err)) return false;
      std::string s = err ? api_error_body(*err)
                          : final_response().dump(-1, ' ', false, json::error_handler_t::replace);
      if (!sink.write(s.data(), s.size())) return false;
      sink.done();
      return true;
    };
    res.set_chunked_content_provider("application/json", provider, releaser);
    return;
  }
  auto provider = [=](size_t, httplib::DataSink& sink) -> bool {
    int64_t seq = 0;
    auto event = [&](const std::string& type, json data) {
      json e = {{"type", type}, {"sequence_number", seq++}};
      e.update(data);
      std::string s = "event: " + type + "\ndata: " +
                      e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
      return sink.write(s.data(), s.size());
    };
    if (!event("response.created", {{"response", base("in_progress")}}) ||
        !event("response.in_progress", {{"response", base("in_progress")}}))
      return false;
    int64_t next_index = 0, reasoning_index = -1, message_index = -1;
    std::vector<int64_t> call_output_index;  // tool call -> its output_index
    bool reasoning_closed = false;
    std::string reasoning, text;
    const std::string msg_id = "msg_" + suffix;
    auto close_reasoning = [&]() {
      if (reasoning_index < 0 || reasoning_closed) return true;
      reasoning_closed = true;
      return event("response.output_item.done",
                   {{"output_index", reasoning_index}, {"item", reasoning_item(reasoning)}});
    };
    PieceFn on_piece = [&](size_t, Choice& c, const std::string& piece, json&, bool fin) -> bool {
      ChatOutput::Delta d = c.out->feed(piece);
      if (fin) d.append(c.out->finish());
      if (!d.reasoning.empty()) {
        if (reasoning_index < 0) {
          reasoning_index = next_index++;
          json item = reasoning_item("");
          item["content"] = json::array();
          if (!event("response.output_item.added", {{"output_index", reasoning_index}, {"item", item}}))
            return false;
        }
        reasoning += d.reasoning;
        if (!event("response.reasoning_text.delta", {{"item_id", "rs_" + suffix},
                                                     {"output_index", reasoning_index},
                                                     {"content_index", 0},
                                                     {"delta", d.reasoning}}))
          return false;
      }
      if (!d.content.empty()) {
        if (!close_reasoning()) return false;
        if (message_index < 0) {
          message_index = next_index++;
          if (!event("response.output_item.added", {{"output_index", message_index},
                                                   {"item", message_item("", "in_progress")}}) ||
              !event("response.content_part.added",
                     {{"item_id", msg_id}, {"output_index", message_index}, {"content_index", 0},
                      {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}}))
            return false;
        }
        text += d.content;
        if (!event("response.output_text.delta", {{"item_id", msg_id},
                                                  {"output_index", message_index},
                                                  {"content_index", 0},
                                                  {"delta", d.content},
                                                  {"logprobs", json::array()}}))
          return false;
      }
      for (const ToolCallDelta& t : d.calls) {
        if (!close_reasoning()) return false;
        if (!t.id.empty()) {
          call_output_index.resize(t.index + 1, -1);
          call_output_index[t.index] = next_index++;
          if (!event("response.output_item.added", {{"output_index", call_output_index[t.index]},
                                                   {"item", call_item({t.id, t.name, ""}, "in_progress")}}))
            return false;
        }
        const ToolCall& call = c.out->calls()[t.index];
        const int64_t idx = call_output_index[t.index];
        const std::string item_id = "fc_" + call.id.substr(5);
        if (!t.arguments.empty() &&
            !event("response.function_call_arguments.delta",
                   {{"item_id", item_id}, {"output_index", idx}, {"delta", t.arguments}}))
          return false;
        if (t.done &&
            (!event("response.function_call_arguments.done",
                    {{"item_id", item_id}, {"output_index", idx}, {"arguments", call.arguments}}) ||
             !event("response.output_item.done", {{"output_index", idx}, {"item", call_item(call, "completed")}})))
          return false;
      }
      return true;
    };
    std::optional<ApiError> err;
    if (!pump(on_piece, [&] { return sink.write(": ping\n\n", 8); }, &err)) return false;
    if (err) {
      json r = base("failed");
      r["error"] = {{"code", err->code.empty() ? "server_error" : err->code}, {"message", err->message}};
      event("response.failed", {{"response", r}});
      sink.done();
      return true;
    }
    if (!close_reasoning()) return false;
    if (message_index >= 0) {
      json part = {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
      if (!event("response.output_text.done", {{"item_id", msg_id}, {"output_index", message_index},
                                               {"content_index", 0}, {"text", text}, {"logprobs", json::array()}}) ||
          !event("response.content_part.done", {{"item_id", msg_id}, {"output_index", message_index},
                                                {"content_index", 0}, {"part", part}}) ||
          !event("response.output_item.done", {{"output_index", message_index},
                                               {"item", message_item(text, "completed")}}))
        return false;
    }
    json r = final_response();
    const std::string type = r["status"] == "incomplete" ? "response.incomplete" : "response.completed";
    if (!event(type, {{"response", r}})) return false;
    sink.done();
    return true;
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", provider, releaser);
}

std::string OpenAIServer::Impl::metrics_text() const {
  EngineMetrics m = engine.metrics();
  std::string s;
  auto counter = [&](const char* name, const char* help, double v) {
    s += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    s += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    s += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      s += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cum);
    }
    s += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                     h.sum, name, h.count);
  };
  counter("ferrite_requests_submitted_total", "Requests accepted by the engine.",
          m.requests_submitted);
  s += "# HELP ferrite_requests_finished_total Requests finished, by reason.\n"
       "# TYPE ferrite_requests_finished_total counter\n";
  for (int i = 0; i < 4; ++i)
    s += fmt::format("ferrite_requests_finished_total{{reason=\"{}\"}} {}\n",
                     engine_finish_name(static_cast<EngineFinish>(i)), m.requests_finished[i]);
  counter("ferrite_requests_rejected_total", "Requests refused because the queue was full.",
          m.requests_rejected);
  counter("ferrite_prompt_tokens_total", "Prompt tokens of admitted requests.", m.prompt_tokens);
  counter("ferrite_generation_tokens_total", "Generated tokens.", m.generation_tokens);
  counter("ferrite_preemptions_total", "Sequences preempted (recomputed later).", m.preemptions);
  counter("ferrite_prefix_cache_queries_total", "Tokens looked up in the prefix cache.",
          m.prefix_cache_queries);
  counter("ferrite_prefix_cache_hits_total", "Tokens found in the prefix cache.",
          m.prefix_cache_hits);
  counter("ferrite_engine_steps_total", "Engine steps run.", m.steps);
  counter("ferrite_engine_step_seconds_total", "Seconds in forward passes and sampling.",
          m.step_seconds);
  counter("ferrite_client_disconnects_total", "Responses abandoned by their client.",
          client_disconnects.load());
  counter("ferrite_request_timeouts_total", "Generations cancelled by --request-timeout.",
          request_timeouts.load());
  const TransportStats& t = http->stats();
  counter("ferrite_http_connections_total", "TCP connections accepted.",
          t.connections_accepted.load());
  counter("ferrite_http_connections_rejected_total",
          "Connections refused with 503 at --max-connections.", t.connections_rejected.load());
  counter("ferrite_http_request_timeouts_total",
          "Requests whose head or body did not arrive in time (408).", t.head_timeouts.load());
  counter("ferrite_http_malformed_requests_total",
          "Requests refused by the transport (400, 411, 413, 414, 431, 501).",
          t.malformed.load());
  counter("ferrite_http_idle_closed_total", "Keep-alive connections closed while idle.",
          t.idle_closed.load());
  gauge("ferrite_http_connections_open", "Open client connections.", t.connections_open.load());
  gauge("ferrite_http_requests_in_flight", "Requests being handled.", t.requests_in_flight.load());
  gauge("ferrite_num_requests_running", "Sequences in the running batch.", m.running);
  gauge("ferrite_num_requests_waiting", "Requests waiting for admission (queue depth).", m.waiting);
  gauge("ferrite_kv_pages_used", "KV cache pages in use (sequences and prefix cache).",
        m.kv_pages_used);
  gauge("ferrite_kv_pages_total", "KV cache pages.", m.kv_pages_total);
  gauge("ferrite_prefix_cache_pages", "Pages held by the prefix cache.", m.prefix_cache_pages);
  gauge("ferrite_prefix_cache_snapshots",
        "Recurrent-state snapshots held by the prefix cache (hybrid models).",
        m.prefix_cache_snapshots);
  gauge("ferrite_prefix_cache_snapshot_slots",
        "Snapshot slots reserved for the prefix cache (hybrid models).",
        m.prefix_cache_snapshot_slots);
  histogram("ferrite_time_to_first_token_seconds", "Time to first token.", m.ttft);
  histogram("ferrite_inter_token_latency_seconds", "Time between tokens of a sequence.", m.itl);
  histogram("ferrite_e2e_request_latency_seconds", "Request latency, submit to finish.", m.e2e);
  // vLLM's names (docs/serving.md, "Metrics"), labelled with the model.
  const std::string model = "model_name=\"" + label_value(options.model_name) + "\"";
  auto vgauge = [&](const char* name, const char* help, double v) {
    s += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{{{}}} {}\n", name, help, name, name,
                     model, v);
  };
  auto vcounter = [&](const char* name, const char* help, double v) {
    s += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{{}}} {}\n", name, help, name, name,
                     model, v);
  };
  auto vhistogram = [&](const char* name, const char* help, const Histogram& h) {
    s += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      s += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, model, h.bounds[i], cum);
    }
    s += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name,
                     model, h.count, name, model, h.sum, name, model, h.count);
  };
  const double kv_usage =
      m.kv_pages_total > 0 ? static_cast<double>(m.kv_pages_used) / m.kv_pages_total : 0.0;
  vgauge("vllm:num_requests_running", "Requests in the running batch.", m.running);
  vgauge("vllm:num_requests_waiting", "Requests waiting for admission.", m.waiting);
  vgauge("vllm:kv_cache_usage_perc", "Fraction of the KV cache in use (1 = full).", kv_usage);
  vgauge("vllm:gpu_cache_usage_perc", "Same as vllm:kv_cache_usage_perc (older name).", kv_usage);
  vcounter("vllm:prompt_tokens_total", "Prompt tokens of admitted requests.", m.prompt_tokens);
  vcounter("vllm:generation_tokens_total", "Generated tokens.", m.generation_tokens);
  vcounter("vllm:num_preemptions_total", "Sequences preempted (recomputed later).",
           m.preemptions);
  vcounter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
           m.prefix_cache_queries);
  vcounter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
           m.prefix_cache_hits);
  s += "# HELP vllm:request_success_total Finished requests, by finish reason.\n"
       "# TYPE vllm:request_success_total counter\n";
  {
    static const char* kReason[4] = {"length", "stop", "abort", "error"};
    for (int i = 0; i < 4; ++i)
      s += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", model,
                       kReason[i], m.requests_finished[i]);
  }
  // vLLM's buckets; the intervals of each request from the engine's record
  // of it (RequestTimes: submit, first scheduled, first and last token).
  vhistogram("vllm:time_to_first_token_seconds", "Time to first token, submit to first token.",
             m.vllm_ttft);
  vhistogram("vllm:inter_token_latency_seconds", "Time between tokens of a sequence.",
             m.vllm_itl);
  vhistogram("vllm:time_per_output_token_seconds",
             "Same as vllm:inter_token_latency_seconds (older name).", m.vllm_itl);
  vhistogram("vllm:request_time_per_output_token_seconds",
             "Per request: decode time / (generated tokens - 1).", m.vllm_request_tpot);
  vhistogram("vllm:e2e_request_latency_seconds", "Request latency, submit to finish.",
             m.vllm_e2e);
  vhistogram("vllm:request_queue_time_seconds",
             "Time in the WAITING phase: submit to first scheduled.", m.vllm_queue);
  vhistogram("vllm:request_inference_time_seconds",
             "Time in the RUNNING phase: first scheduled to last token.", m.vllm_inference);
  vhistogram("vllm:request_prefill_time_seconds",
             "Time in the PREFILL phase: first scheduled to first token.", m.vllm_prefill);
  vhistogram("vllm:request_decode_time_seconds",
             "Time in the DECODE phase: first token to last token.", m.vllm_decode);
  {
    std::lock_guard<std::mutex> lock(request_hist_mu);
    vhistogram("vllm:request_prompt_tokens", "Prompt tokens per request.", prompt_len);
    vhistogram("vllm:request_generation_tokens", "Generated tokens per request.", output_len);
  }
  {
    std::lock_guard<std::mutex> lock(counters_mu);
    s += "# HELP ferrite_http_requests_total HTTP requests, by route and status.\n"
         "# TYPE ferrite_http_requests_total counter\n";
    for (const auto& [k, v] : http_requests)
      s += fmt::format("ferrite_http_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n",
                       label_value(k.first), k.second, v);
  }
  return s;
}

OpenAIServer::OpenAIServer(Engine& engine, const Tokenizer& tokenizer, const ChatTemplate* chat,
                           ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, chat, std::move(options))) {}

OpenAIServer::~OpenAIServer() { stop(); }

std::string OpenAIServer::metrics_text() const { return impl_->metrics_text(); }

Status OpenAIServer::bind() {
  Impl* im = impl_.get();
  const auto& limits = im->engine.runner().bound().plan().limits;
  TransportOptions to = im->options.transport;
  to.host = im->options.host;
  to.port = im->options.port;
  int threads = im->options.http_threads;
  // A handler thread per request in flight: every sequence that can run,
  // plus room for quick requests (models, metrics, refusals) beside them.
  if (threads <= 0)
    threads = static_cast<int>(std::min<int64_t>(4096, limits.max_sequences + 64));
  to.workers = threads;
  im->http = std::make_unique<HttpTransport>(to);
  HttpTransport& http = *im->http;

  http.set_pre_routing_handler([im](const httplib::Request& req, httplib::Response& res) {
    return im->refuse(req, res) ? httplib::Server::HandlerResponse::Handled
                                : httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([im](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (HttpTransport::body_over_limit()) res.status = 413;
    ApiError e{res.status, fmt::format("HTTP {}", res.status), "invalid_request_error", {}, {}};
    if (res.status == 404) {
      e.message = "Not found: " + req.method + " " + req.path;
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = fmt::format("the request body exceeds {} bytes", im->options.transport.max_body_bytes);
    } else if (res.status >= 500) {
      e.type = "server_error";
    }
    res.set_content(api_error_body(e), "application/json");
  });
  http.set_exception_handler(
      [im](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "ferrite serve: %s %s: %s\n", req.method.c_str(),
                       route_label(req.path), e.what());
        } catch (...) {
        }
        im->send_error(res, ApiError{500, what, "server_error", {}, {}});
      });
  if (im->options.log_requests) {
    // The route, never the raw path or headers (no key or body in logs).
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      const std::string route = route_label(req.path);
      // Generations that ran are logged with their tokens and timings
      // when they end (request_done).
      if (res.status == 200 && (route == "/v1/chat/completions" || route == "/v1/completions"))
        return;
      std::fprintf(stderr, "ferrite serve: %s %s %d\n", req.method.c_str(), route.c_str(),
                   res.status);
    });
  }

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http.Get("/metrics", [im](const httplib::Request&, httplib::Response& res) {
    res.set_content(im->metrics_text(), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [im](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", im->options.model_name},
              {"object", "model"},
              {"created", unix_time()},
              {"owned_by", "ferrite"},
              {"max_model_len", im->engine.max_context()}};
    res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(),
                    "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [im](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    if (!valid_utf8(name)) {
      im->send_error(res, bad_request("the model id is not valid UTF-8", "model"));
      return;
    }
    if (name != im->options.model_name) {
      im->send_error(res, ApiError{404,
                                   "The model '" + name.substr(0, 256) + "' does not exist",
                                   "invalid_request_error", "model", "model_not_found"});
      return;
    }
    json m = {{"id", im->options.model_name},
              {"object", "model"},
              {"created", unix_time()},
              {"owned_by", "ferrite"},
              {"max_model_len", im->engine.max_context()}};
    res.set_content(m.dump(), "application/json");
  });
  http.Post("/v1/chat/completions", [im](const httplib::Request& req, httplib::Response& res) {
    im->handle_generate(req, res, true);
  });
  http.Post("/v1/completions", [im](const httplib::Request& req, httplib::Response& res) {
    im->handle_generate(req, res, false);
  });
  http.Post("/v1/responses", [im](const httplib::Request& req, httplib::Response& res) {
    im->handle_generate(req, res, true, true);
  });
  http.Options(R"(/.*)", [](const httplib::Request&, httplib::Response& res) {
    res.status = 204;  // reached only for allowed origins (refuse() answers the rest)
  });

  FERRITE_RETURN_IF_ERROR(http.bind());
  port_ = http.port();
  return Status::ok();
}

Status OpenAIServer::serve() { return impl_->http->serve(); }

void OpenAIServer::begin_shutdown() {
  impl_->draining = true;
  if (impl_->http) impl_->http->stop_accepting();
}

bool OpenAIServer::drain(std::chrono::milliseconds grace, std::chrono::milliseconds cancel_wait) {
  Impl* im = impl_.get();
  std::unique_lock<std::mutex> lock(im->streams_mu);
  if (im->streams_cv.wait_for(lock, grace, [&] { return im->streams.empty(); })) return true;
  for (const auto& s : im->streams) s->cancel();
  return im->streams_cv.wait_for(lock, cancel_wait, [&] { return im->streams.empty(); });
}

void OpenAIServer::stop() {
  if (impl_ && impl_->http) impl_->http->stop();
}

}  // namespace ferrite
