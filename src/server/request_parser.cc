#include "server/request_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "grammar/json_schema.h"

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

// Optional string field; absent or null leaves *out as is (the default). A
// value of another type is a 400 naming `param` (json::value would throw).
std::optional<ApiError> get_string(const json& j, const char* key, std::string* out,
                                   const char* param) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return bad_request(fmt::format("'{}' must be a string", key), param);
  *out = it->get<std::string>();
  return std::nullopt;
}

// A field's string value, or "" when it is absent or of another type: for
// tests like "type is 'function'", where any other value is rejected anyway.
std::string string_or_empty(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
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

// The text of a message's content (a string, null, or text parts).
std::optional<ApiError> content_text(const json& m, std::string* out) {
  out->clear();
  auto c = m.find("content");
  if (c == m.end() || c->is_null()) return std::nullopt;
  if (c->is_string()) {
    *out = c->get<std::string>();
    return std::nullopt;
  }
  if (c->is_array()) {
    for (const json& part : *c) {
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string() ||
          !part.contains("text") || !part["text"].is_string())
        return bad_request("only text content parts are supported", "messages");
      const std::string t = part["type"].get<std::string>();
      if (t != "text" && t != "input_text" && t != "output_text")
        return bad_request("only text content parts are supported", "messages");
      *out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return bad_request("'content' must be a string or an array of text parts", "messages");
}

std::string hermes_call_text(const std::string& name, const json& arguments) {
  json call = {{"name", name}, {"arguments", arguments}};
  return "<tool_call>\n" + call.dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n</tool_call>";
}

// The chat messages as the template sees them (text parts joined; tool
// calls with their arguments as objects, as templates expect).
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
    if (auto t = m.find("function_call"); t != m.end() && !t->is_null())
      return bad_request("'function_call' messages are deprecated; use 'tool_calls'", "messages");
    std::string content;
    API_TRY(content_text(m, &content));
    *text_bytes += content.size();
    json out = {{"role", r == "developer" ? "system" : r}, {"content", content}};
    if (auto t = m.find("tool_calls"); t != m.end() && !t->is_null()) {
      if (r != "assistant" || !t->is_array())
        return bad_request("'tool_calls' must be an array on an assistant message", "messages");
      json calls = json::array();
      for (const json& c : *t) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
            !c["function"].contains("name") || !c["function"]["name"].is_string())
          return bad_request("each tool call needs a 'function' with a string 'name'",
                             "messages");
        const json& f = c["function"];
        json args = json::object();
        if (f.contains("arguments") && f["arguments"].is_string()) {
          const std::string& a = f["arguments"].get_ref<const std::string&>();
          *text_bytes += a.size();
          // The arguments are JSON text inside a string: the body's depth
          // check did not see their nesting, and the template walks them.
          if (json_depth(a, ctx.limits.max_json_depth) > ctx.limits.max_json_depth)
            return bad_request(fmt::format("tool call arguments nest deeper than {} levels",
                                           ctx.limits.max_json_depth),
                               "messages");
          args = json::parse(a, nullptr, false);
          if (args.is_discarded()) args = a;
        } else if (f.contains("arguments") && !f["arguments"].is_null()) {
          args = f["arguments"];
        }
        json call = {{"id", c.contains("id") && c["id"].is_string() ? c["id"] : json("call_0")},
                     {"type", "function"},
                     {"function", {{"name", f["name"]}, {"arguments", args}}}};
        calls.push_back(call);
      }
      if (ctx.template_renders_tools) {
        out["tool_calls"] = calls;
      } else {
        std::string text = content;
        for (const json& c : calls)
          text += (text.empty() ? "" : "\n") +
                  hermes_call_text(c["function"]["name"].get<std::string>(), c["function"]["arguments"]);
        out["content"] = text;
      }
    }
    if (r == "tool") {
      if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string()) out["tool_call_id"] = *id;
      if (auto n = m.find("name"); n != m.end() && n->is_string()) out["name"] = *n;
      if (!ctx.template_renders_tools) {
        out = {{"role", "user"}, {"content", "<tool_response>\n" + content + "\n</tool_response>"}};
      }
    }
    messages->push_back(std::move(out));
  }
  return std::nullopt;
}

bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      return false;
  return true;
}

// tools + tool_choice: the tools for the template (null when none apply)
// and the functions a constrained call may use (empty: unconstrained).
std::optional<ApiError> parse_tools(const json& body, json* tools, json* forced) {
  *tools = nullptr;
  *forced = json::array();
  json list = json::array();
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return bad_request("'tools' must be an array", "tools");
    if (it->size() > 128) return bad_request("at most 128 tools", "tools");
    for (const json& t : *it) {
      if (!t.is_object() || string_or_empty(t, "type") != "function" || !t.contains("function") ||
          !t["function"].is_object())
        return bad_request("each tool must be {\"type\": \"function\", \"function\": {...}}", "tools");
      const json& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() ||
          !valid_function_name(f["name"].get<std::string>()))
        return bad_request("a function name must be 1 to 64 letters, digits, '_', '-' or '.'",
                           "tools");
      if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
        return bad_request("function 'parameters' must be a JSON schema object", "tools");
      list.push_back(t);
    }
  }
  std::string mode = list.empty() ? "none" : "auto";
  std::string named;
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      mode = it->get<std::string>();
      if (mode != "none" && mode != "auto" && mode != "required")
        return bad_request("'tool_choice' must be none, auto, required or a function",
                           "tool_choice");
    } else if (it->is_object() && string_or_empty(*it, "type") == "function" && it->contains("function") &&
               (*it)["function"].is_object() && (*it)["function"].contains("name") &&
               (*it)["function"]["name"].is_string()) {
      mode = "named";
      named = (*it)["function"]["name"].get<std::string>();
    } else {
      return bad_request("'tool_choice' must be none, auto, required or "
                         "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                         "tool_choice");
    }
    if (mode != "none" && list.empty())
      return bad_request("'tool_choice' needs 'tools'", "tool_choice");
  }
  if (mode == "none") return std::nullopt;
  *tools = list;
  if (mode == "required") *forced = list;
  if (mode == "named") {
    for (const json& t : list)
      if (t["function"]["name"] == named) forced->push_back(t);
    if (forced->empty())
      return bad_request(fmt::format("'tool_choice' names '{}', which is not in 'tools'",
                                     named.substr(0, 64)),
                         "tool_choice");
  }
  return std::nullopt;
}

// The grammar of one call of one of `functions` in the model's syntax.
Result<grammar::Grammar> tool_call_grammar(const json& functions, ToolCallFormat format) {
  grammar::JsonGrammar jg;
  grammar::Builder& b = jg.builder();
  std::vector<grammar::Builder::Seq> alts;
  for (const json& t : functions) {
    const json& f = t["function"];
    json params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"]
                                                                          : json::object();
    if (!params.contains("type") && !params.contains("properties") && !params.contains("$ref") &&
        !params.contains("anyOf"))
      params["type"] = "object";
    auto v = jg.value(params, params);
    if (!v.is_ok())
      return invalid_argument(fmt::format("function '{}': {}", f["name"].get<std::string>(),
                                          v.status().message()));
    const std::string name = f["name"].get<std::string>();
    if (format == ToolCallFormat::kLlama3Json)
      alts.push_back(grammar::Builder::cat({b.lit("{\"name\": "), jg.string_literal(name),
                                            b.lit(", \"parameters\": "), *v, b.lit("}")}));
    else
      alts.push_back(grammar::Builder::cat({b.lit("<tool_call>\n{\"name\": "),
                                            jg.string_literal(name), b.lit(", \"arguments\": "), *v,
                                            b.lit("}\n</tool_call>")}));
  }
  return jg.finish(b.alt(std::move(alts)));
}

Result<std::shared_ptr<const grammar::CompiledGrammar>> cached_grammar(
    const RequestContext& ctx, const std::string& key,
    const std::function<Result<grammar::Grammar>()>& build) {
  if (ctx.grammars) return ctx.grammars->get(key, build);
  Result<grammar::Grammar> g = build();
  if (!g.is_ok()) return g.status();
  return std::make_shared<const grammar::CompiledGrammar>(std::move(g).value());
}

// response_format -> the grammar (null for text).
std::optional<ApiError> parse_response_format(const RequestContext& ctx, const json& body,
                                              std::shared_ptr<const grammar::CompiledGrammar>* g) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return std::nullopt;
  const json& rf = *it;
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    return bad_request("'response_format' must be an object with a string 'type'",
                       "response_format");
  const std::string type = rf["type"].get<std::string>();
  Result<std::shared_ptr<const grammar::CompiledGrammar>> r =
      std::shared_ptr<const grammar::CompiledGrammar>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    r = cached_grammar(ctx, "json_object", [] { return Result<grammar::Grammar>(grammar::json_object_grammar()); });
  } else if (type == "json_schema") {
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
      return bad_request("response_format json_schema needs a 'json_schema' object",
                         "response_format");
    const json& js = rf["json_schema"];
    if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
      return bad_request("'json_schema.strict' must be a boolean", "response_format");
    json schema = js.contains("schema") ? js["schema"] : json::object();
    if (!schema.is_object() && !schema.is_boolean())
      return bad_request("'json_schema.schema' must be a JSON schema object", "response_format");
    const std::string key = "schema:" + schema.dump();
    r = cached_grammar(ctx, key, [&] { return grammar::json_schema_grammar(schema); });
  } else {
    return bad_request(fmt::format("response_format type '{}' is not supported (text, "
                                   "json_object, json_schema)",
                                   type.substr(0, 64)),
                       "response_format");
  }
  if (!r.is_ok()) return bad_request("response_format: " + r.status().message(), "response_format");
  *g = std::move(r).value();
  return std::nullopt;
}

std::string tools_system_prompt(const json& tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const json& t : tools) s += "\n" + t.dump(-1, ' ', false, json::error_handler_t::replace);
  s += "\n</tools>\n\nFor each function call, return a json object with function name and "
       "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
       "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  return s;
}

// Every top-level field must be one the server implements, or one that
// changes nothing here; a field that would change the answer but is not
// implemented yet is a 400 naming it (never silently ignored).
std::optional<ApiError> check_fields(const json& body, bool chat_api) {
  static const std::set<std::string> kCommon = {
      "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
      "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed",
      "ignore_eos", "stop", "logprobs", "n", "response_format",
      // Accepted and without effect on the answer.
      "user", "metadata", "service_tier", "store"};
  static const std::set<std::string> kChat = {"messages", "max_completion_tokens",
                                              "top_logprobs", "chat_template_kwargs",
                                              "tool_choice", "tools",
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
  if (present("parallel_tool_calls") && !body["parallel_tool_calls"].is_boolean())
    return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
  if (present("logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    return bad_request("'logit_bias' is not supported yet", "logit_bias");
  if (present("echo") && !body["echo"].is_boolean())
    return bad_request("'echo' must be a boolean", "echo");
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
  p->n = static_cast<int32_t>(n);
  // Structured output: response_format, or a forced tool call.
  API_TRY(parse_response_format(ctx, body, &p->grammar));
  json tools = nullptr, forced = json::array();
  if (chat_api) API_TRY(parse_tools(body, &tools, &forced));
  if (!forced.empty()) {
    const ToolCallFormat fmt = ctx.tool_format;
    auto g = cached_grammar(ctx,
                            fmt::format("tools:{}:{}", static_cast<int>(fmt), forced.dump()),
                            [&] { return tool_call_grammar(forced, fmt); });
    if (!g.is_ok()) return bad_request("tools: " + g.status().message(), "tools");
    p->grammar = std::move(g).value();
  }
  if (!tools.is_null()) p->tool_format = ctx.tool_format;
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
    for (const char* key : {"enable_thinking", "reasoning_effort"})
      if (auto k = body.find(key); k != body.end() && !k->is_null() && !kwargs.contains(key))
        kwargs[key] = *k;
    // A constrained answer is the JSON itself: no think block before it.
    if (p->grammar && ctx.reasoning && !kwargs.contains("enable_thinking"))
      kwargs["enable_thinking"] = false;
    json template_tools = nullptr;
    if (!tools.is_null()) {
      if (ctx.template_renders_tools) {
        template_tools = tools;
      } else {
        // The template knows no tools: describe them in the system prompt.
        const std::string sys = tools_system_prompt(tools);
        if (!messages.empty() && messages[0]["role"] == "system")
          messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + sys;
        else
          messages.insert(messages.begin(), json{{"role", "system"}, {"content", sys}});
      }
    }
    auto ids = ctx.chat->render_tokens(*ctx.tokenizer, messages, template_tools, true, kwargs);
    if (!ids.is_ok()) return bad_request("chat template: " + ids.status().message(), "messages");
    prompt = std::move(ids).value();
    if (ctx.reasoning && !p->grammar) {
      p->reasoning = true;
      const size_t tail = std::min<size_t>(prompt.size(), 4);
      auto t = ctx.tokenizer->decode(
          std::span<const uint32_t>(prompt.data() + prompt.size() - tail, tail), false);
      if (t.is_ok()) {
        std::string_view v = *t;
        while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
        p->reasoning_open = v.size() >= 7 && v.substr(v.size() - 7) == "<think>";
      }
    }
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
      p->echo_text = text;
    } else if (pr->is_array() && !pr->empty() && (*pr)[0].is_number()) {
      if (static_cast<int64_t>(pr->size()) >= ctx.max_context)
        return too_long(ctx, "prompt", fmt::format("the prompt has {} tokens", pr->size()));
      for (const json& t : *pr) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size)
          return bad_request("'prompt' token ids must be integers in the vocabulary", "prompt");
        prompt.push_back(static_cast<uint32_t>(t.get<int64_t>()));
      }
      auto text = ctx.tokenizer->decode(prompt, true);
      if (text.is_ok()) p->echo_text = *text;
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
    p->seed_given = true;
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
  if (!chat_api) API_TRY(get_bool(body, "echo", &p->echo));
  if (!p->echo) p->echo_text.clear();
  return std::nullopt;
}

std::shared_ptr<TokenConstraint> make_constraint(const ParsedRequest& p,
                                                 std::shared_ptr<const grammar::TokenVocab> vocab,
                                                 const std::vector<uint32_t>& end_ids) {
  if (!p.grammar || !vocab) return nullptr;
  return std::make_shared<grammar::GrammarMatcher>(p.grammar, std::move(vocab), end_ids);
}

void chat_template_features(const ChatTemplate& chat, RequestContext* ctx) {
  const std::string& src = chat.source();
  ctx->template_renders_tools = src.find("tools") != std::string::npos;
  ctx->reasoning = src.find("<think>") != std::string::npos;
  if (src.find("<tool_call>") != std::string::npos)
    ctx->tool_format = ToolCallFormat::kHermes;
  else if (ctx->template_renders_tools && (src.find("<|python_tag|>") != std::string::npos ||
                                           src.find("\"parameters\"") != std::string::npos ||
                                           src.find("<|eom_id|>") != std::string::npos))
    ctx->tool_format = ToolCallFormat::kLlama3Json;
  else
    ctx->tool_format = ToolCallFormat::kHermes;
  if (ctx->tool_format == ToolCallFormat::kHermes && src.find("<tool_call>") == std::string::npos)
    ctx->template_renders_tools = false;  // mentions tools but not in a syntax we parse
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

namespace ferrite {

std::optional<ApiError> parse_responses_request(const RequestContext& ctx,
                                                std::string_view body_text, ParsedRequest* p) {
  const int depth_limit = ctx.limits.max_json_depth;
  if (json_depth(body_text, depth_limit) > depth_limit)
    return bad_request(fmt::format("the JSON body nests deeper than {} levels", depth_limit));
  json body = json::parse(body_text.begin(), body_text.end(), nullptr, false);
  if (body.is_discarded()) return bad_request("the body is not valid JSON (or not valid UTF-8)");
  if (!body.is_object()) return bad_request("the body must be a JSON object");
  static const std::set<std::string> kFields = {
      "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
      "tools", "tool_choice", "text", "parallel_tool_calls", "store", "metadata", "user",
      "previous_response_id", "reasoning", "truncation", "include", "seed", "top_k",
      "service_tier", "stream_options"};
  for (const auto& [key, value] : body.items())
    if (!kFields.count(key))
      return bad_request(fmt::format("unknown or unsupported field '{}'", key.substr(0, 64)),
                         key.substr(0, 64));
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null())
    return bad_request(
        "'previous_response_id' is not supported: this server stores no responses (store: "
        "false semantics); send the whole conversation in 'input'",
        "previous_response_id");
  if (body.contains("store") && !body["store"].is_null() && !body["store"].is_boolean())
    return bad_request("'store' must be a boolean", "store");
  if (body.contains("truncation") && !body["truncation"].is_null() &&
      body["truncation"] != "disabled" && body["truncation"] != "auto")
    return bad_request("'truncation' must be 'disabled' or 'auto'", "truncation");
  json chat = json::object();
  for (const char* k : {"model", "temperature", "top_p", "stream", "parallel_tool_calls",
                        "seed", "top_k", "stream_options"})
    if (body.contains(k)) chat[k] = body[k];
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null())
    chat["max_tokens"] = body["max_output_tokens"];
  json messages = json::array();
  if (auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'instructions' must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", *it}});
  }
  auto in = body.find("input");
  if (in == body.end() || in->is_null()) return bad_request("'input' is required", "input");
  if (in->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *in}});
  } else if (in->is_array()) {
    for (const json& item : *in) {
      if (!item.is_object()) return bad_request("each input item must be an object", "input");
      std::string type = "message";
      API_TRY(get_string(item, "type", &type, "input"));
      if (type == "message") {
        if (!item.contains("role") || !item["role"].is_string())
          return bad_request("an input message needs a string 'role'", "input");
        json m = {{"role", item["role"]}};
        if (item.contains("content")) m["content"] = item["content"];
        messages.push_back(m);
      } else if (type == "function_call") {
        if (!item.contains("name") || !item["name"].is_string())
          return bad_request("a function_call item needs a string 'name'", "input");
        std::string call_id = "call_0", arguments = "{}";
        API_TRY(get_string(item, "call_id", &call_id, "input"));
        API_TRY(get_string(item, "arguments", &arguments, "input"));
        json call = {{"id", call_id},
                     {"type", "function"},
                     {"function", {{"name", item["name"]}, {"arguments", arguments}}}};
        if (!messages.empty() && messages.back()["role"] == "assistant" &&
            messages.back().contains("tool_calls"))
          messages.back()["tool_calls"].push_back(call);
        else
          messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
      } else if (type == "function_call_output") {
        json out = item.contains("output") ? item["output"] : json("");
        if (!out.is_string()) out = out.dump();
        std::string call_id;
        API_TRY(get_string(item, "call_id", &call_id, "input"));
        messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", out}});
      } else if (type == "reasoning") {
        continue;
      } else {
        return bad_request(fmt::format("input items of type '{}' are not supported", type.substr(0, 64)),
                           "input");
      }
    }
  } else {
    return bad_request("'input' must be a string or an array of items", "input");
  }
  chat["messages"] = messages;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return bad_request("'tools' must be an array", "tools");
    json tools = json::array();
    for (const json& t : *it) {
      if (!t.is_object() || string_or_empty(t, "type") != "function")
        return bad_request("only tools of type 'function' are supported", "tools");
      json f = {{"name", t.contains("name") ? t["name"] : json(nullptr)}};
      if (t.contains("description")) f["description"] = t["description"];
      if (t.contains("parameters")) f["parameters"] = t["parameters"];
      tools.push_back({{"type", "function"}, {"function", f}});
    }
    chat["tools"] = tools;
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (it->is_object() && string_or_empty(*it, "type") == "function" && it->contains("name"))
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*it)["name"]}}}};
    else
      chat["tool_choice"] = *it;
  }
  if (auto it = body.find("text"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("'text' must be an object", "text");
    if (auto f = it->find("format"); f != it->end() && !f->is_null()) {
      if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
        return bad_request("'text.format' must be an object with a string 'type'", "text");
      const std::string type = (*f)["type"].get<std::string>();
      if (type == "json_schema") {
        std::string name = "response";
        API_TRY(get_string(*f, "name", &name, "text"));
        json js = {{"name", name}};
        if (f->contains("schema")) js["schema"] = (*f)["schema"];
        if (f->contains("strict")) js["strict"] = (*f)["strict"];
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else {
        chat["response_format"] = {{"type", type}};
      }
    }
  }
  auto e = parse_request(ctx, chat.dump(), true, p);
  if (e) {
    if (e->param == "messages") e->param = "input";
    if (e->param == "response_format") e->param = "text";
    if (e->param == "max_tokens") e->param = "max_output_tokens";
    return e;
  }
  p->responses = true;
  json echo = json::object();
  echo["instructions"] = body.value("instructions", json(nullptr));
  echo["max_output_tokens"] = body.value("max_output_tokens", json(nullptr));
  echo["tools"] = body.value("tools", json::array());
  echo["tool_choice"] = body.value("tool_choice", json("auto"));
  echo["text"] = body.value("text", json{{"format", {{"type", "text"}}}});
  echo["temperature"] = body.value("temperature", json(1.0));
  echo["top_p"] = body.value("top_p", json(1.0));
  echo["parallel_tool_calls"] = body.value("parallel_tool_calls", json(true));
  echo["metadata"] = body.value("metadata", json::object());
  p->responses_echo = echo;
  return std::nullopt;
}

}  // namespace ferrite
