#include "server/openai_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

namespace ferrite {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// An error in OpenAI's shape, with its HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

std::string error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", err}}.dump();
}

ApiError bad(std::string message, std::string param = {}) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), {}};
}

// Nesting depth of a JSON text, outside strings; stops early past `limit`.
int json_depth(const std::string& body, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (char c : body) {
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Optional number field in [lo, hi]; null counts as absent.
std::optional<ApiError> get_float(const json& j, const char* key, double lo, double hi,
                                  float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad(fmt::format("'{}' must be a number", key), key);
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v), key);
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> get_int(const json& j, const char* key, int64_t lo, int64_t hi,
                                int64_t* out, bool* present = nullptr) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return bad(fmt::format("'{}' must be an integer", key), key);
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return bad(fmt::format("'{}' is out of range", key), key);
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    return bad(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v), key);
  *out = v;
  if (present) *present = true;
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad(fmt::format("'{}' must be a boolean", key), key);
  *out = it->get<bool>();
  return std::nullopt;
}

#define API_TRY(expr)                 \
  do {                                \
    if (auto e_ = (expr)) return *e_; \
  } while (0)

// Holds back text that may still turn into a stop string.
class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Text safe to emit; *hit when a stop string matched (the text before it
  // is returned, the rest is dropped).
  std::string feed(const std::string& s, bool* hit) {
    held_ += s;
    size_t best = std::string::npos;
    for (const std::string& st : stops_) best = std::min(best, held_.find(st));
    if (best != std::string::npos) {
      *hit = true;
      std::string out = held_.substr(0, best);
      held_.clear();
      return out;
    }
    size_t keep = 0;
    for (const std::string& st : stops_) {
      for (size_t k = std::min(st.size() - 1, held_.size()); k > keep; --k) {
        if (held_.compare(held_.size() - k, k, st, 0, k) == 0) {
          keep = k;
          break;
        }
      }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }
  std::string flush() { return std::exchange(held_, std::string()); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

// One parsed request.
struct Parsed {
  bool chat = true;
  bool stream = false;
  bool include_usage = false;
  std::vector<std::string> stop;
  EngineRequest engine;
  int32_t logprobs = -1;  // -1 none, else top-k
  bool max_tokens_given = false;
};

}  // namespace

struct OpenAIServer::Impl {
  Engine& engine;
  const Tokenizer& tokenizer;
  const ChatTemplate* chat;
  ServerOptions options;
  httplib::Server http;
  std::vector<uint32_t> stop_ids;
  std::atomic<int64_t> active_http{0};
  mutable std::mutex counters_mu;
  std::map<std::string, uint64_t> http_requests;  // "endpoint,code" -> count
  std::atomic<uint64_t> client_disconnects{0};

  Impl(Engine& e, const Tokenizer& t, const ChatTemplate* c, ServerOptions o)
      : engine(e), tokenizer(t), chat(c), options(std::move(o)) {
    stop_ids = tokenizer.stop_ids();
    for (int64_t id : engine.runner().config().eos_token_ids)
      if (std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end())
        stop_ids.push_back(static_cast<uint32_t>(id));
  }

  void count(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(counters_mu);
    ++http_requests[fmt::format("{},{}", endpoint, status)];
  }

  void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
  }

  std::optional<ApiError> parse(const httplib::Request& req, bool chat_api, Parsed* p);
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat_api);
  std::string metrics_text() const;
};

std::optional<ApiError> OpenAIServer::Impl::parse(const httplib::Request& req, bool chat_api,
                                                  Parsed* p) {
  p->chat = chat_api;
  if (json_depth(req.body, options.max_json_depth) > options.max_json_depth)
    return bad(fmt::format("the JSON body nests deeper than {} levels", options.max_json_depth));
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return bad("the body is not valid JSON (or not valid UTF-8)");
  if (!body.is_object()) return bad("the body must be a JSON object");
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad("'model' must be a string", "model");
    std::string m = it->get<std::string>();
    if (m != options.model_name)
      return ApiError{404, fmt::format("The model '{}' does not exist", m), "invalid_request_error",
                      "model", "model_not_found"};
  }
  int64_t n = 1;
  API_TRY(get_int(body, "n", 1, 1, &n));
  API_TRY(get_bool(body, "stream", &p->stream));
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad("'stream_options' must be an object", "stream_options");
    API_TRY(get_bool(*it, "include_usage", &p->include_usage));
  }
  // Prompt.
  std::vector<uint32_t> prompt;
  if (chat_api) {
    if (!chat) return bad("this model has no chat template; use /v1/completions");
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty())
      return bad("'messages' must be a non-empty array", "messages");
    json messages = json::array();
    for (const json& m : *it) {
      if (!m.is_object()) return bad("each message must be an object", "messages");
      auto role = m.find("role");
      if (role == m.end() || !role->is_string())
        return bad("each message needs a string 'role'", "messages");
      std::string r = role->get<std::string>();
      if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
        return bad("unknown message role '" + r + "'", "messages");
      std::string content;
      auto c = m.find("content");
      if (c != m.end() && c->is_string()) {
        content = c->get<std::string>();
      } else if (c != m.end() && c->is_array()) {
        for (const json& part : *c) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
              !part["text"].is_string())
            return bad("only text content parts are supported", "messages");
          content += part["text"].get<std::string>();
        }
      } else if (c != m.end() && !c->is_null()) {
        return bad("'content' must be a string or an array of text parts", "messages");
      }
      messages.push_back({{"role", r == "developer" ? "system" : r}, {"content", content}});
    }
    auto text = chat->render(messages, nullptr, true);
    if (!text.is_ok()) return bad("chat template: " + text.status().message(), "messages");
    auto ids = tokenizer.encode(*text, false);
    if (!ids.is_ok()) return bad(ids.status().message(), "messages");
    prompt = std::move(ids).value();
  } else {
    auto it = body.find("prompt");
    if (it == body.end()) return bad("'prompt' is required", "prompt");
    const json* pr = &*it;
    if (pr->is_array() && pr->size() == 1 && (*pr)[0].is_string()) pr = &(*pr)[0];
    if (pr->is_string()) {
      auto ids = tokenizer.encode(pr->get<std::string>(), true);
      if (!ids.is_ok()) return bad(ids.status().message(), "prompt");
      prompt = std::move(ids).value();
    } else if (pr->is_array() && !pr->empty() && (*pr)[0].is_number()) {
      const int64_t vocab = engine.runner().program().vocab_size;
      for (const json& t : *pr) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
          return bad("'prompt' token ids must be integers in the vocabulary", "prompt");
        prompt.push_back(static_cast<uint32_t>(t.get<int64_t>()));
      }
    } else {
      return bad("'prompt' must be a string, one string in an array, or an array of token ids",
                 "prompt");
    }
  }
  if (prompt.empty()) return bad("the prompt is empty", chat_api ? "messages" : "prompt");
  const int64_t ctx = engine.max_context();
  if (static_cast<int64_t>(prompt.size()) >= ctx)
    return ApiError{400,
                    fmt::format("This model's maximum context length is {} tokens; the prompt "
                                "has {} tokens",
                                ctx, prompt.size()),
                    "invalid_request_error", chat_api ? "messages" : "prompt",
                    "context_length_exceeded"};
  // Generation length.
  int64_t max_tokens = ctx - static_cast<int64_t>(prompt.size());
  int64_t mt = 0;
  bool given = false;
  API_TRY(get_int(body, "max_tokens", 1, ctx, &mt, &given));
  API_TRY(get_int(body, "max_completion_tokens", 1, ctx, &mt, &given));
  if (given) max_tokens = std::min<int64_t>(mt, ctx - static_cast<int64_t>(prompt.size()));
  p->max_tokens_given = given;
  // Sampling.
  SamplingParams& s = p->engine.sampling;
  s.temperature = 1.0f;
  API_TRY(get_float(body, "temperature", 0, 2, &s.temperature));
  API_TRY(get_float(body, "top_p", 0, 1, &s.top_p));
  if (s.top_p <= 0) return bad("'top_p' must be in (0, 1]", "top_p");
  int64_t top_k = 0;
  API_TRY(get_int(body, "top_k", -1, 1 << 20, &top_k));
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  API_TRY(get_float(body, "min_p", 0, 1, &s.min_p));
  API_TRY(get_float(body, "presence_penalty", -2, 2, &s.presence_penalty));
  API_TRY(get_float(body, "frequency_penalty", -2, 2, &s.frequency_penalty));
  API_TRY(get_float(body, "repetition_penalty", 0.01, 10, &s.repetition_penalty));
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("'seed' must be an integer", "seed");
    s.seed =
        it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  } else {
    s.seed = random_seed();
  }
  bool ignore_eos = false;
  API_TRY(get_bool(body, "ignore_eos", &ignore_eos));
  // Stop strings.
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p->stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 16) {
      for (const json& st : *it) {
        if (!st.is_string()) return bad("'stop' must be a string or an array of strings", "stop");
        p->stop.push_back(st.get<std::string>());
      }
    } else {
      return bad("'stop' must be a string or an array of at most 16 strings", "stop");
    }
    for (const std::string& st : p->stop)
      if (st.empty() || st.size() > 1024)
        return bad("stop strings must be 1 to 1024 bytes", "stop");
  }
  // Logprobs.
  if (chat_api) {
    bool lp = false;
    API_TRY(get_bool(body, "logprobs", &lp));
    int64_t top = 0;
    bool top_given = false;
    API_TRY(get_int(body, "top_logprobs", 0, 20, &top, &top_given));
    if (top_given && !lp) return bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (lp) p->logprobs = static_cast<int32_t>(top);
  } else {
    int64_t lp = -1;
    bool given_lp = false;
    API_TRY(get_int(body, "logprobs", 0, 20, &lp, &given_lp));
    if (given_lp) p->logprobs = static_cast<int32_t>(lp);
  }
  p->engine.prompt = std::move(prompt);
  p->engine.max_tokens = static_cast<int32_t>(max_tokens);
  p->engine.logprobs = p->logprobs;
  if (!ignore_eos) p->engine.stop_ids = stop_ids;
  return std::nullopt;
}

namespace {

// Turns engine tokens into text, stop-string aware; builds logprobs.
class Session {
 public:
  Session(const Tokenizer& tok, const Parsed& p)
      : tok_(tok), decoder_(tok, true), stop_(p.stop), chat_(p.chat), logprobs_(p.logprobs) {}

  // Consumes one update; returns the text to emit now, appends logprob
  // entries (chat: content items; completions: handled by the caller).
  std::string consume(const RequestStream::Update& u, json* lp_entries) {
    std::string text;
    for (const TokenOutput& t : u.tokens) {
      if (stopped_) break;
      ++completion_tokens_;
      auto piece = decoder_.push(t.token);
      std::string s = piece.is_ok() ? *piece : std::string();
      bool hit = false;
      text += stop_.feed(s, &hit);
      if (logprobs_ >= 0 && lp_entries) lp_entries->push_back(logprob_entry(t));
      if (hit) stopped_ = true;
    }
    if (u.finished && !stopped_) {
      bool hit = false;
      text += stop_.feed(decoder_.finish(), &hit);
      if (hit)
        stopped_ = true;
      else
        text += stop_.flush();
    }
    return text;
  }
  bool stopped() const { return stopped_; }
  int32_t completion_tokens() const { return completion_tokens_; }

  std::string token_text(uint32_t id) const {
    auto s = tok_.decode(std::span<const uint32_t>(&id, 1), false);
    return s.is_ok() ? *s : std::string();
  }
  json bytes_of(uint32_t id) const {
    auto s = tok_.decode_bytes(std::span<const uint32_t>(&id, 1), false);
    json b = json::array();
    if (s.is_ok())
      for (unsigned char c : *s) b.push_back(static_cast<int>(c));
    return b;
  }
  json logprob_entry(const TokenOutput& t) const {
    if (chat_) {
      json top = json::array();
      for (const TokenLogprob& a : t.top)
        top.push_back(
            {{"token", token_text(a.token)}, {"logprob", a.logprob}, {"bytes", bytes_of(a.token)}});
      return {{"token", token_text(t.token)},
              {"logprob", t.logprob},
              {"bytes", bytes_of(t.token)},
              {"top_logprobs", top}};
    }
    json top = json::object();
    for (const TokenLogprob& a : t.top) top[token_text(a.token)] = a.logprob;
    return {{"token", token_text(t.token)}, {"logprob", t.logprob}, {"top", top}};
  }

 private:
  const Tokenizer& tok_;
  StreamDecoder decoder_;
  StopFilter stop_;
  bool chat_;
  int32_t logprobs_;
  bool stopped_ = false;
  int32_t completion_tokens_ = 0;
};

// Completions-API logprobs object from per-token entries.
json completion_logprobs(const json& entries, size_t text_offset_base) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = text_offset_base;
  for (const json& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    tops.push_back(e["top"]);
    offs.push_back(off);
    off += e["token"].get<std::string>().size();
  }
  return {
      {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

std::string finish_name(EngineFinish f, bool stopped) {
  if (stopped || f == EngineFinish::kStop) return "stop";
  return "length";
}

}  // namespace

void OpenAIServer::Impl::handle_generate(const httplib::Request& req, httplib::Response& res,
                                         bool chat_api) {
  const std::string endpoint = chat_api ? "/v1/chat/completions" : "/v1/completions";
  auto p = std::make_shared<Parsed>();
  if (auto e = parse(req, chat_api, p.get())) {
    send_error(res, *e);
    count(endpoint, e->status);
    return;
  }
  auto submitted = engine.submit(p->engine);
  if (!submitted.is_ok()) {
    const Status& st = submitted.status();
    ApiError e;
    if (st.code() == StatusCode::kResourceExhausted) {
      e = ApiError{429, st.message(), "rate_limit_exceeded", {}, "queue_full"};
      res.set_header("Retry-After", "1");
    } else if (st.code() == StatusCode::kInvalidArgument) {
      e = bad(st.message());
    } else {
      e = ApiError{503, st.message(), "server_error", {}, {}};
    }
    send_error(res, e);
    count(endpoint, e.status);
    return;
  }
  count(endpoint, 200);
  std::shared_ptr<RequestStream> stream = std::move(submitted).value();
  const std::string id = random_id(chat_api ? "chatcmpl-" : "cmpl-");
  const int64_t created = unix_time();
  const std::string model = options.model_name;
  const std::string object =
      chat_api ? (p->stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  auto session = std::make_shared<Session>(tokenizer, *p);
  auto usage = [stream, session] {
    return json{{"prompt_tokens", stream->prompt_tokens()},
                {"completion_tokens", session->completion_tokens()},
                {"total_tokens", stream->prompt_tokens() + session->completion_tokens()},
                {"prompt_tokens_details", {{"cached_tokens", stream->cached_tokens()}}}};
  };
  auto* self = this;
  auto releaser = [stream, self](bool success) {
    if (!success) ++self->client_disconnects;
    stream->cancel();  // no-op when it already finished
  };

  if (p->stream) {
    auto provider = [=](size_t, httplib::DataSink& sink) -> bool {
      auto write = [&](const json& chunk) {
        std::string s = "data: " + chunk.dump() + "\n\n";
        return sink.write(s.data(), s.size());
      };
      auto choice = [&](json delta_or_text, json logprobs, json finish) {
        json c = {{"index", 0}};
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
      if (chat_api && !write(choice({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) {
        stream->cancel();
        return false;
      }
      size_t text_offset = 0;
      auto idle_since = Clock::now();
      for (;;) {
        RequestStream::Update u = stream->next(std::chrono::milliseconds(100));
        if (u.tokens.empty() && !u.finished) {
          if (Clock::now() - idle_since > std::chrono::milliseconds(200)) {
            // An SSE comment: detects a client that went away.
            if (!sink.write(": ping\n\n", 8)) {
              stream->cancel();
              return false;
            }
            idle_since = Clock::now();
          }
          continue;
        }
        idle_since = Clock::now();
        if (u.finished && u.finish == EngineFinish::kError && !session->stopped()) {
          json err =
              json::parse(error_body(ApiError{500, u.error.message(), "server_error", {}, {}}));
          write(err);
          sink.write("data: [DONE]\n\n", 14);
          sink.done();
          return true;
        }
        json entries = json::array();
        std::string text = session->consume(u, &entries);
        bool done = u.finished || session->stopped();
        if (!text.empty() || !entries.empty()) {
          json lp = nullptr;
          if (p->logprobs >= 0)
            lp = chat_api ? json{{"content", entries}} : completion_logprobs(entries, text_offset);
          text_offset += text.size();
          json delta = chat_api ? json{{"content", text}} : json(text);
          if (!write(choice(delta, lp, nullptr))) {
            stream->cancel();
            return false;
          }
        }
        if (done) {
          if (session->stopped()) stream->cancel();
          std::string reason = finish_name(u.finish, session->stopped());
          bool ok = write(choice(chat_api ? json::object() : json(""), nullptr, reason));
          if (ok && p->include_usage) {
            json chunk = {{"id", id},       {"object", object},         {"created", created},
                          {"model", model}, {"choices", json::array()}, {"usage", usage()}};
            ok = write(chunk);
          }
          ok = ok && sink.write("data: [DONE]\n\n", 14);
          if (!ok) return false;
          sink.done();
          return true;
        }
      }
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", provider, releaser);
    return;
  }

  // Whole response: chunked too, with JSON whitespace while idle so that a
  // client that went away is noticed.
  auto provider = [=](size_t, httplib::DataSink& sink) -> bool {
    std::string text;
    json entries = json::array();
    EngineFinish finish = EngineFinish::kLength;
    auto idle_since = Clock::now();
    for (;;) {
      RequestStream::Update u = stream->next(std::chrono::milliseconds(100));
      if (u.tokens.empty() && !u.finished) {
        if (Clock::now() - idle_since > std::chrono::milliseconds(200)) {
          if (!sink.write(" ", 1)) {
            stream->cancel();
            return false;
          }
          idle_since = Clock::now();
        }
        continue;
      }
      if (u.finished && u.finish == EngineFinish::kError && !session->stopped()) {
        std::string s = error_body(ApiError{500, u.error.message(), "server_error", {}, {}});
        sink.write(s.data(), s.size());
        sink.done();
        return true;
      }
      text += session->consume(u, &entries);
      if (u.finished || session->stopped()) {
        finish = u.finish;
        break;
      }
    }
    if (session->stopped()) stream->cancel();
    json c = {{"index", 0}};
    if (chat_api) {
      c["message"] = {{"role", "assistant"}, {"content", text}};
      c["logprobs"] = p->logprobs >= 0 ? json{{"content", entries}} : json(nullptr);
    } else {
      c["text"] = text;
      c["logprobs"] = p->logprobs >= 0 ? completion_logprobs(entries, 0) : json(nullptr);
    }
    c["finish_reason"] = finish_name(finish, session->stopped());
    json out = {{"id", id},
                {"object", object},
                {"created", created},
                {"model", model},
                {"choices", json::array({c})},
                {"usage", usage()}};
    std::string s = out.dump();
    if (!sink.write(s.data(), s.size())) return false;
    sink.done();
    return true;
  };
  res.set_chunked_content_provider("application/json", provider, releaser);
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
  gauge("ferrite_num_requests_running", "Sequences in the running batch.", m.running);
  gauge("ferrite_num_requests_waiting", "Requests waiting for admission (queue depth).", m.waiting);
  gauge("ferrite_kv_pages_used", "KV cache pages in use (sequences and prefix cache).",
        m.kv_pages_used);
  gauge("ferrite_kv_pages_total", "KV cache pages.", m.kv_pages_total);
  gauge("ferrite_prefix_cache_pages", "Pages held by the prefix cache.", m.prefix_cache_pages);
  histogram("ferrite_time_to_first_token_seconds", "Time to first token.", m.ttft);
  histogram("ferrite_inter_token_latency_seconds", "Time between tokens of a sequence.", m.itl);
  histogram("ferrite_e2e_request_latency_seconds", "Request latency, submit to finish.", m.e2e);
  {
    std::lock_guard<std::mutex> lock(counters_mu);
    s += "# HELP ferrite_http_requests_total HTTP requests, by endpoint and status.\n"
         "# TYPE ferrite_http_requests_total counter\n";
    for (const auto& [k, v] : http_requests) {
      size_t comma = k.find(',');
      s += fmt::format("ferrite_http_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n",
                       k.substr(0, comma), k.substr(comma + 1), v);
    }
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
  httplib::Server& http = im->http;
  const auto& limits = im->engine.runner().bound().plan().limits;
  int threads = im->options.http_threads;
  if (threads <= 0)
    threads = static_cast<int>(
        std::min<int64_t>(4096, limits.max_sequences + 64 + std::min<int64_t>(256, 1024)));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(im->options.max_body_bytes);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_max_count(1000);
  http.set_tcp_nodelay(true);  // tokens leave as soon as they are written

  http.set_pre_routing_handler([im](const httplib::Request& req, httplib::Response& res) {
    if (!im->options.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
      std::string auth = req.get_header_value("Authorization");
      if (auth != "Bearer " + im->options.api_key) {
        im->send_error(
            res,
            ApiError{
                401, "Invalid or missing API key", "invalid_request_error", {}, "invalid_api_key"});
        im->count(req.path, 401);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([im](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, fmt::format("HTTP {}", res.status), "invalid_request_error", {}, {}};
    if (res.status == 404) {
      e.message = "Not found: " + req.method + " " + req.path;
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message =
          req.get_header_value("Content-Type").find("x-www-form-urlencoded") != std::string::npos
              ? "form-encoded bodies are limited to 8 KiB; send JSON with "
                "Content-Type: application/json"
              : fmt::format("the request body exceeds {} bytes", im->options.max_body_bytes);
    } else if (res.status >= 500) {
      e.type = "server_error";
    }
    res.set_content(error_body(e), "application/json");
  });
  http.set_exception_handler(
      [im](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        im->send_error(res, ApiError{500, what, "server_error", {}, {}});
      });
  if (im->options.log_requests) {
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s -> %d\n", req.method.c_str(), req.path.c_str(), res.status);
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
    if (req.matches[1] != im->options.model_name) {
      im->send_error(res,
                     ApiError{404, "The model '" + std::string(req.matches[1]) + "' does not exist",
                              "invalid_request_error", "model", "model_not_found"});
      return;
    }
    json m = {{"id", im->options.model_name},
              {"object", "model"},
              {"created", unix_time()},
              {"owned_by", "ferrite"}};
    res.set_content(m.dump(), "application/json");
  });
  http.Post("/v1/chat/completions", [im](const httplib::Request& req, httplib::Response& res) {
    im->handle_generate(req, res, true);
  });
  http.Post("/v1/completions", [im](const httplib::Request& req, httplib::Response& res) {
    im->handle_generate(req, res, false);
  });

  int port = im->options.port;
  if (port == 0) {
    port = http.bind_to_any_port(im->options.host.c_str());
    if (port < 0) return unavailable("cannot bind " + im->options.host);
  } else if (!http.bind_to_port(im->options.host.c_str(), port)) {
    return unavailable(fmt::format("cannot listen on {}:{}", im->options.host, port));
  }
  port_ = port;
  return Status::ok();
}

Status OpenAIServer::serve() {
  if (!impl_->http.listen_after_bind()) return unavailable("the HTTP server stopped with an error");
  return Status::ok();
}

void OpenAIServer::stop() {
  if (impl_ && impl_->http.is_running()) impl_->http.stop();
}

}  // namespace ferrite
