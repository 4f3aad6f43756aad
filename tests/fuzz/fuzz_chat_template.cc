// libFuzzer target: Jinja chat templates (src/tokenizer/chat_template.h):
// ChatTemplate::from_source on the input, then render() with fixed
// conversations (plain chat; system + tool call + tool result with tools;
// an empty list), with and without the generation prompt.
//
// Oracle: no crash, no sanitizer report, no hang (-timeout), no unbounded
// memory (-rss_limit_mb); a template either renders or returns a Status.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"
#include "tokenizer/chat_template.h"

using namespace ferrite;
using nlohmann::ordered_json;

namespace {

struct Fixture {
  ordered_json special = ordered_json::parse(
      R"({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": null})");
  ordered_json chat = ordered_json::parse(R"([
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi. <think>x</think> How can I help?"},
    {"role": "user", "content": "Tell me a joke\nabout cats."}
  ])");
  ordered_json tool_chat = ordered_json::parse(R"([
    {"role": "system", "content": "You are a bot."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {"role": "assistant", "content": null, "reasoning_content": "think",
     "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"t\": 21}"},
    {"role": "assistant", "content": "21 degrees."}
  ])");
  ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "days": {"type": "integer"}}, "required": ["city"]}}}
  ])");
  ordered_json kwargs = ordered_json::parse(R"({"enable_thinking": false, "date_string": "1 Dec 2026"})");
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = fixture();
  std::string source(reinterpret_cast<const char*>(data), size);
  auto tmpl = ChatTemplate::from_source(source, f.special);
  if (!tmpl.is_ok()) return 0;
  size_t total = 0;
  // A template that fails on the plain chat (a raise, a type error, or one of
  // the interpreter's budgets: 10M steps take ~16 s of CPU in this ASan +
  // coverage build) is not rendered again: the budget-bound hostile seeds
  // would otherwise cost four times that.
  auto first = tmpl->render(f.chat, nullptr, false);
  if (!first.is_ok()) return 0;
  total += first->size();
  auto a = tmpl->render(f.chat, nullptr, true);
  if (a.is_ok()) total += a->size();
  auto b = tmpl->render(f.tool_chat, f.tools, true, f.kwargs);
  if (b.is_ok()) total += b->size();
  auto c = tmpl->render(ordered_json::array(), nullptr, false);
  if (c.is_ok()) total += c->size();
  volatile size_t sink = total;
  (void)sink;
  return 0;
}
