#include "server/request_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

namespace ferrite {

namespace {

using json = nlohmann::ordered_json;

// Nesting depth of a JSON text, outside strings; stops early past `limit`
// (so a 1 MB "[[[[..." costs one pass and no recursion in the JSON parser).
int json_depth(std::string_view body, int limit) {
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

// Optional number field in [lo, hi]; null counts as absent.
std::optional<ApiError> get_float(const json& j, const char* key, double lo, double hi,
                                  float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad_request(fmt::format("'{}' must be a number", key), key);
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v), key);
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> get_int(const json& j, const char* key, int64_t lo, int64_t hi,
                                int64_t* out, bool* present = nullptr) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer())
    return bad_request(fmt::format("'{}' must be an integer", key), key);
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return bad_request(fmt::format("'{}' is out of range", key), key);
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    return bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v), key);
  *out = v;
  if (present) *present = true;
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_request(fmt::format("'{}' must be a boolean", key), key);
  *out = it->get<bool>();
  return std::nullopt;
}

#define API_TRY(expr)                 \
  do {                                \
    if (auto e_ = (expr)) return *e_; \
  } while (0)

ApiError too_long(const RequestContext& ctx, const char* param, std::string what) {
  return ApiError{400,
                  fmt::format("This model's maximum context length is {} tokens; {}",
                              ctx.max_context, what),
                  "invalid_request_error", param, "context_length_exceeded"};
}

// The chat messages as the template sees them (text parts joined).
std::optional<ApiError> chat_messages(const RequestContext& ctx, const json& body,
                                      json* messages, size_t* text_bytes) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    return bad_request("'messages' must be a non-empty array", "messages");
  if (it->size() > ctx.limits.max_messages)
    return bad_request(fmt::format("at most {} messages per request", ctx.limits.max_messages),
                       "messages");
  *messages = json::array();
  *text_bytes = 0;
  for (const json& m : *it) {
    if (!m.is_object()) return bad_request("each message must be an object", "messages");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return bad_request("each message needs a string 'role'", "messages");
    std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      return bad_request("unknown message role '" + r + "'", "messages");
    for (const char* k : {"tool_calls", "function_call"})
      if (auto t = m.find(k); t != m.end() && !t->is_null() && !(t->is_array() && t->empty()))
        return bad_request(fmt::format("messages with '{}' are not supported yet (tool calling)",
                                       k),
                           "messages");
    std::string content;
    auto c = m.find("content");
    if (c != m.end() && c->is_string()) {
      content = c->get<std::string>();
    } else if (c != m.end() && c->is_array()) {
      for (const json& part : *c) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string() ||
            part["type"].get<std::string>() != "text" || !part.contains("text") ||
            !part["text"].is_string())
          return bad_request("only text content parts are supported", "messages");
        content += part["text"].get<std::string>();
      }
    } else if (c != m.end() && !c->is_null()) {
      return bad_request("'content' must be a string or an array of text parts", "messages");
    }
    *text_bytes += content.size();
    messages->push_back({{"role", r == "developer" ? "system" : r}, {"content", content}});
  }
  return std::nullopt;
}

// Every top-level field must be one the server implements, or one that
// changes nothing here; a field that would change the answer but is not
// implemented yet is a 400 naming it (never silently ignored).
std::optional<ApiError> check_fields(const json& body, bool chat_api) {
  static const std::set<std::string> kCommon = {
      "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
      "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed",
      "ignore_eos", "stop", "logprobs", "n",
      // Accepted and without effect on the answer.
      "user", "metadata", "service_tier", "store"};
  static const std::set<std::string> kChat = {"messages", "max_completion_tokens",
                                              "top_logprobs", "chat_template_kwargs",
                                              "response_format", "tool_choice", "tools",
                                              "logit_bias", "parallel_tool_calls"};
  static const std::set<std::string> kCompletions = {"prompt", "echo", "best_of", "suffix",
                                                     "logit_bias"};
  for (const auto& [key, value] : body.items()) {
    if (kCommon.count(key) || (chat_api ? kChat : kCompletions).count(key)) continue;
    if (key == "functions" || key == "function_call")
      return bad_request(fmt::format("'{}' is not supported yet (tool calling)", key), key);
    return bad_request(fmt::format("unknown or unsupported field '{}'", key.substr(0, 64)),
                       key.substr(0, 64));
  }
  auto present = [&](const char* k) {
    auto it = body.find(k);
    return it != body.end() && !it->is_null();
  };
  // Known fields whose default is all the server does so far.
  if (present("tools") && !(body["tools"].is_array() && body["tools"].empty()))
    return bad_request("'tools' is not supported yet (tool calling)", "tools");
  if (present("tool_choice") && body["tool_choice"] != "none" && body["tool_choice"] != "auto")
    return bad_request("'tool_choice' is not supported yet (tool calling)", "tool_choice");
  if (present("parallel_tool_calls") && !body["parallel_tool_calls"].is_boolean())
    return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
  if (present("response_format")) {
    const json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      return bad_request("'response_format' must be an object with a string 'type'",
                         "response_format");
    if (rf["type"] != "text")
      return bad_request(fmt::format("response_format type '{}' is not supported yet",
                                     rf["type"].get<std::string>().substr(0, 64)),
                         "response_format");
  }
  if (present("logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    return bad_request("'logit_bias' is not supported yet", "logit_bias");
  if (present("echo") && body["echo"] != false)
    return bad_request("'echo' is not supported yet", "echo");
  if (present("best_of") && body["best_of"] != 1)
    return bad_request("'best_of' other than 1 is not supported", "best_of");
  if (present("suffix")) return bad_request("'suffix' is not supported", "suffix");
  if (present("store") && body["store"] != false)
    return bad_request("'store' is not supported (no response is kept)", "store");
  return std::nullopt;
}

}  // namespace

size_t max_prompt_bytes_for(const Tokenizer& tokenizer, int64_t max_context) {
  size_t longest = 1;
  for (size_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const uint32_t i = static_cast<uint32_t>(id);
    auto s = tokenizer.decode_bytes(std::span<const uint32_t>(&i, 1), false);
    if (s.is_ok()) longest = std::max(longest, s->size());
  }
  // A token can also be produced from more text than it decodes to (a
  // normalizer may drop characters); 4x covers the NFC / whitespace
  // normalizers of the supported tokenizers with room to spare.
  return static_cast<size_t>(std::max<int64_t>(1, max_context)) * longest * 4;
}

std::optional<ApiError> parse_request(const RequestContext& ctx, std::string_view body_text,
                                      bool chat_api, ParsedRequest* p) {
  p->chat = chat_api;
  const int depth_limit = ctx.limits.max_json_depth;
  if (json_depth(body_text, depth_limit) > depth_limit)
    return bad_request(fmt::format("the JSON body nests deeper than {} levels", depth_limit));
  json body = json::parse(body_text.begin(), body_text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (body.is_discarded()) return bad_request("the body is not valid JSON (or not valid UTF-8)");
  if (!body.is_object()) return bad_request("the body must be a JSON object");
  API_TRY(check_fields(body, chat_api));
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'model' must be a string", "model");
    std::string m = it->get<std::string>();
    if (m != ctx.model_name)
      return ApiError{404, fmt::format("The model '{}' does not exist", m),
                      "invalid_request_error", "model", "model_not_found"};
  }
  int64_t n = 1;
  API_TRY(get_int(body, "n", 1, ctx.limits.max_n, &n));
  API_TRY(get_bool(body, "stream", &p->stream));
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("'stream_options' must be an object", "stream_options");
    API_TRY(get_bool(*it, "include_usage", &p->include_usage));
  }
  // Prompt.
  std::vector<uint32_t> prompt;
  const char* prompt_param = chat_api ? "messages" : "prompt";
  if (chat_api) {
    if (!ctx.chat) return bad_request("this model has no chat template; use /v1/completions");
    json messages;
    size_t text_bytes = 0;
    API_TRY(chat_messages(ctx, body, &messages, &text_bytes));
    if (text_bytes > ctx.max_prompt_bytes)
      return too_long(ctx, "messages",
                      fmt::format("the messages have {} bytes of text, more than any prompt "
                                  "that fits",
                                  text_bytes));
    json kwargs = json::object();
    if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
      if (!k->is_object())
        return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      kwargs = *k;  // e.g. {"enable_thinking": false}; data: never special tokens
    }
    auto ids = ctx.chat->render_tokens(*ctx.tokenizer, messages, nullptr, true, kwargs);
    if (!ids.is_ok()) return bad_request("chat template: " + ids.status().message(), "messages");
    prompt = std::move(ids).value();
  } else {
    auto it = body.find("prompt");
    if (it == body.end()) return bad_request("'prompt' is required", "prompt");
    const json* pr = &*it;
    if (pr->is_array() && pr->size() == 1 && (*pr)[0].is_string()) pr = &(*pr)[0];
    if (pr->is_string()) {
      const std::string& text = pr->get_ref<const std::string&>();
      if (text.size() > ctx.max_prompt_bytes)
        return too_long(ctx, "prompt",
                        fmt::format("the prompt has {} bytes, more than any prompt that fits",
                                    text.size()));
      auto ids = ctx.tokenizer->encode(
          text, true, ctx.special_tokens_in_prompts ? SpecialText::kParse : SpecialText::kPlain);
      if (!ids.is_ok()) return bad_request(ids.status().message(), "prompt");
      prompt = std::move(ids).value();
    } else if (pr->is_array() && !pr->empty() && (*pr)[0].is_number()) {
      if (static_cast<int64_t>(pr->size()) >= ctx.max_context)
        return too_long(ctx, "prompt", fmt::format("the prompt has {} tokens", pr->size()));
      for (const json& t : *pr) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size)
          return bad_request("'prompt' token ids must be integers in the vocabulary", "prompt");
        prompt.push_back(static_cast<uint32_t>(t.get<int64_t>()));
      }
    } else {
      return bad_request(
          "'prompt' must be a string, one string in an array, or an array of token ids", "prompt");
    }
  }
  if (prompt.empty()) return bad_request("the prompt is empty", prompt_param);
  const int64_t ctx_len = ctx.max_context;
  if (static_cast<int64_t>(prompt.size()) >= ctx_len)
    return too_long(ctx, prompt_param, fmt::format("the prompt has {} tokens", prompt.size()));
  // Generation length.
  int64_t max_tokens = ctx_len - static_cast<int64_t>(prompt.size());
  int64_t mt = 0;
  bool given = false;
  API_TRY(get_int(body, "max_tokens", 1, ctx_len, &mt, &given));
  API_TRY(get_int(body, "max_completion_tokens", 1, ctx_len, &mt, &given));
  // As vLLM: prompt + max_tokens beyond the context is a 400, not a clamp.
  if (given && mt > max_tokens)
    return too_long(ctx, body.contains("max_tokens") ? "max_tokens" : "max_completion_tokens",
                    fmt::format("however, you requested {} tokens ({} in the {}, {} in the "
                                "completion); reduce the length of the {} or the completion",
                                static_cast<int64_t>(prompt.size()) + mt, prompt.size(),
                                chat_api ? "messages" : "prompt", mt,
                                chat_api ? "messages" : "prompt"));
  if (given) max_tokens = mt;
  if (!given && ctx.default_max_tokens > 0)
    max_tokens = std::min<int64_t>(max_tokens, ctx.default_max_tokens);
  p->max_tokens_given = given;
  // Sampling.
  SamplingParams& s = p->engine.sampling;
  s = ctx.sampling_defaults;
  API_TRY(get_float(body, "temperature", 0, 2, &s.temperature));
  API_TRY(get_float(body, "top_p", 0, 1, &s.top_p));
  if (s.top_p <= 0) return bad_request("'top_p' must be in (0, 1]", "top_p");
  int64_t top_k = 0;
  API_TRY(get_int(body, "top_k", -1, 1 << 20, &top_k));
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  API_TRY(get_float(body, "min_p", 0, 1, &s.min_p));
  API_TRY(get_float(body, "presence_penalty", -2, 2, &s.presence_penalty));
  API_TRY(get_float(body, "frequency_penalty", -2, 2, &s.frequency_penalty));
  API_TRY(get_float(body, "repetition_penalty", 0.01, 10, &s.repetition_penalty));
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad_request("'seed' must be an integer", "seed");
    s.seed =
        it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  } else {
    s.seed = random_request_seed();
  }
  bool ignore_eos = false;
  API_TRY(get_bool(body, "ignore_eos", &ignore_eos));
  // Stop strings.
  const size_t max_stops = ctx.limits.max_stop_strings;
  const size_t max_stop_bytes = ctx.limits.max_stop_bytes;
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p->stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= max_stops) {
      for (const json& st : *it) {
        if (!st.is_string())
          return bad_request("'stop' must be a string or an array of strings", "stop");
        p->stop.push_back(st.get<std::string>());
      }
    } else {
      return bad_request(
          fmt::format("'stop' must be a string or an array of at most {} strings", max_stops),
          "stop");
    }
    for (const std::string& st : p->stop)
      if (st.empty() || st.size() > max_stop_bytes)
        return bad_request(fmt::format("stop strings must be 1 to {} bytes", max_stop_bytes),
                           "stop");
  }
  // Logprobs.
  const int64_t max_lp = ctx.limits.max_logprobs;
  if (chat_api) {
    bool lp = false;
    API_TRY(get_bool(body, "logprobs", &lp));
    int64_t top = 0;
    bool top_given = false;
    API_TRY(get_int(body, "top_logprobs", 0, max_lp, &top, &top_given));
    if (top_given && !lp)
      return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (lp) p->logprobs = static_cast<int32_t>(top);
  } else {
    int64_t lp = -1;
    bool given_lp = false;
    API_TRY(get_int(body, "logprobs", 0, max_lp, &lp, &given_lp));
    if (given_lp) p->logprobs = static_cast<int32_t>(lp);
  }
  p->engine.prompt = std::move(prompt);
  p->engine.max_tokens = static_cast<int32_t>(max_tokens);
  p->engine.logprobs = p->logprobs;
  if (!ignore_eos) p->engine.stop_ids = ctx.stop_ids;
  return std::nullopt;
}

std::string random_request_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

uint64_t random_request_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

std::string api_error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ferrite
