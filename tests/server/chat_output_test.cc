// ChatOutput: reasoning / content / tool calls out of model text, fed whole
// or one byte at a time (the streamed and the whole answers agree).
#include <gtest/gtest.h>

#include "server/chat_output.h"

#include <array>
#include <random>

namespace ferrite {
namespace {

struct Split {
  std::string reasoning, content;
  std::vector<ToolCall> calls;  // reassembled from the deltas, as a client does
  std::vector<bool> done;
  size_t argument_deltas = 0;   // deltas that carried a piece of arguments
  bool cut_short = false;
};

Split run(const std::string& text, bool reasoning, bool open, ToolCallFormat f, size_t step) {
  ChatOutput out(reasoning, open, f);
  Split s;
  auto add = [&](const ChatOutput::Delta& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (!c.id.empty()) {
        EXPECT_EQ(c.index, s.calls.size()) << "a call's first delta comes in order";
        s.calls.push_back({c.id, c.name, ""});
        s.done.push_back(false);
      }
      ASSERT_LT(c.index, s.calls.size()) << "a delta before its call's first delta";
      EXPECT_FALSE(s.done[c.index]) << "a delta after the call was done";
      s.calls[c.index].arguments += c.arguments;
      s.argument_deltas += !c.arguments.empty();
      if (c.done) s.done[c.index] = true;
    }
  };
  for (size_t i = 0; i < text.size(); i += step) add(out.feed(text.substr(i, step)));
  add(out.finish());
  EXPECT_EQ(s.reasoning, out.reasoning());
  EXPECT_EQ(s.content, out.content());
  EXPECT_EQ(s.calls.size(), out.calls().size());
  for (size_t k = 0; k < s.calls.size() && k < out.calls().size(); ++k) {
    EXPECT_EQ(s.calls[k].id, out.calls()[k].id);
    EXPECT_EQ(s.calls[k].name, out.calls()[k].name);
    EXPECT_EQ(s.calls[k].arguments, out.calls()[k].arguments) << "streamed arguments = the whole answer's";
    EXPECT_TRUE(s.done[k]) << "call " << k << " never got its last delta";
  }
  s.cut_short = out.call_cut_short();
  return s;
}

TEST(ChatOutputTest, ReasoningThenContent) {
  for (size_t step : {1, 3, 1000}) {
    Split s = run("<think>\nLet me see.\n</think>\n\nThe answer is 4.", true, false, ToolCallFormat::kNone, step);
    EXPECT_EQ(s.reasoning, "Let me see.\n");
    EXPECT_EQ(s.content, "The answer is 4.");
    Split o = run("still thinking</think>done", true, true, ToolCallFormat::kNone, step);
    EXPECT_EQ(o.reasoning, "still thinking");
    EXPECT_EQ(o.content, "done");
    Split n = run("<thin is not a tag", true, false, ToolCallFormat::kNone, step);
    EXPECT_EQ(n.reasoning, "");
    EXPECT_EQ(n.content, "<thin is not a tag");
    Split cut = run("<think>never closed", true, false, ToolCallFormat::kNone, step);
    EXPECT_EQ(cut.reasoning, "never closed");
  }
}

TEST(ChatOutputTest, HermesToolCalls) {
  for (size_t step : {1, 5, 1000}) {
    Split s = run("Sure.<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
                  "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>",
                  false, false, ToolCallFormat::kHermes, step);
    EXPECT_EQ(s.content, "Sure.");
    ASSERT_EQ(s.calls.size(), 2u);
    EXPECT_EQ(s.calls[0].name, "add");
    EXPECT_EQ(s.calls[0].arguments, "{\"a\": 1}");  // the model's text, streamed as produced
    EXPECT_EQ(s.calls[1].arguments, "{}");          // a string of JSON: taken whole
    EXPECT_EQ(s.calls[0].id.rfind("call_", 0), 0u);
    Split xml = run("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
                    false, false, ToolCallFormat::kHermes, step);
    ASSERT_EQ(xml.calls.size(), 1u);
    EXPECT_EQ(xml.calls[0].name, "get_weather");
    EXPECT_EQ(xml.calls[0].arguments, "{\"city\":\"Paris\",\"days\":3}");
    Split bad = run("<tool_call>not json</tool_call>", false, false, ToolCallFormat::kHermes, step);
    EXPECT_TRUE(bad.calls.empty());
    EXPECT_EQ(bad.content, "<tool_call>not json</tool_call>");
    Split think = run("<think>hm</think><tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>", true, false,
                      ToolCallFormat::kHermes, step);
    EXPECT_EQ(think.reasoning, "hm");
    ASSERT_EQ(think.calls.size(), 1u);
  }
}

// Hermes calls stream: the name goes out as soon as the header is complete,
// the arguments piece by piece, before </tool_call> arrives.
TEST(ChatOutputTest, HermesArgumentsStream) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n";
  ChatOutput out(false, false, ToolCallFormat::kHermes);
  std::string args;
  bool named = false;
  size_t pieces = 0;
  for (size_t i = 0; i < call.size(); ++i) {
    ChatOutput::Delta d = out.feed(call.substr(i, 1));
    for (const ToolCallDelta& c : d.calls) {
      if (!c.id.empty()) {
        EXPECT_EQ(c.name, "get_weather");
        EXPECT_FALSE(named);
        named = true;
        // The header is known at the arguments' '{', which goes out with it.
        EXPECT_EQ(call[i], '{');
        EXPECT_EQ(c.arguments, "{");
      }
      EXPECT_FALSE(c.done) << "done before </tool_call>";
      args += c.arguments;
      pieces += !c.arguments.empty();
    }
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(args, "{\"city\": \"Paris\", \"days\": [1, 2]}");
  EXPECT_GT(pieces, 10u) << "arguments were held back instead of streamed";
  ChatOutput::Delta d = out.feed("</tool_call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_TRUE(d.calls[0].done);
  EXPECT_EQ(d.calls[0].arguments, "");
  EXPECT_TRUE(out.finish().empty());
  EXPECT_FALSE(out.call_cut_short());

  for (size_t step : {1, 2, 7, 1000}) {
    // Brackets and the close tag inside strings do not end the arguments.
    Split str = run("<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"a}b</tool_call>{\\\"\"}}</tool_call>x", false,
                    false, ToolCallFormat::kHermes, step);
    ASSERT_EQ(str.calls.size(), 1u);
    EXPECT_EQ(str.calls[0].arguments, "{\"s\":\"a}b</tool_call>{\\\"\"}");
    EXPECT_EQ(str.content, "x");
    // "parameters" as the key; two calls get indexes 0 and 1.
    Split two = run("<tool_call>{\"name\": \"a\", \"parameters\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", "
                    "\"arguments\": {\"k\": {\"n\": 1}}}</tool_call>",
                    false, false, ToolCallFormat::kHermes, step);
    ASSERT_EQ(two.calls.size(), 2u);
    EXPECT_EQ(two.calls[0].arguments, "{}");
    EXPECT_EQ(two.calls[1].name, "b");
    EXPECT_EQ(two.calls[1].arguments, "{\"k\": {\"n\": 1}}");
    EXPECT_EQ(two.content, "");
    // Cut by max_tokens inside the arguments: the call keeps what came.
    Split cut = run("<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"lon", false, false,
                    ToolCallFormat::kHermes, step);
    ASSERT_EQ(cut.calls.size(), 1u);
    EXPECT_EQ(cut.calls[0].arguments, "{\"q\": \"lon");
    EXPECT_TRUE(cut.cut_short);
    // The model closes the call inside its arguments: the call ends there.
    Split broken = run("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call>after", false, false,
                       ToolCallFormat::kHermes, step);
    ASSERT_EQ(broken.calls.size(), 1u);
    EXPECT_EQ(broken.calls[0].arguments, "{\"a\": 1");
    EXPECT_EQ(broken.content, "after");
    EXPECT_FALSE(broken.cut_short);
    // Keys in another order: taken whole at the close tag.
    Split order = run("<tool_call>{\"arguments\": {\"a\": 2}, \"name\": \"g\"}</tool_call>", false, false,
                      ToolCallFormat::kHermes, step);
    ASSERT_EQ(order.calls.size(), 1u);
    EXPECT_EQ(order.calls[0].name, "g");
    EXPECT_EQ(order.calls[0].arguments, "{\"a\":2}");
    EXPECT_EQ(order.argument_deltas, 1u);
    // A header that turns out not to be one stays content.
    Split fake = run("<tool_call>{\"name\": 5}</tool_call>", false, false, ToolCallFormat::kHermes, step);
    EXPECT_TRUE(fake.calls.empty());
    EXPECT_EQ(fake.content, "<tool_call>{\"name\": 5}</tool_call>");
  }
}

// Property: however the text is cut into pieces, the answer (reasoning,
// content, calls' names and arguments) is the same, and the streamed deltas
// reassemble into it (run() checks that). Random texts from fragments of
// every syntax the parser knows.
TEST(ChatOutputTest, ChunkingNeverChangesTheAnswer) {
  const std::vector<std::string> frags = {
      "<tool_call>", "</tool_call>", "{", "}", "[", "]", "\"name\"", "\"arguments\"", ":", ",", " ", "\n",
      "\"f\"", "\"a}\"", "\\", "\"", "1", "x", "<", "<think>", "</think>", "<function=g>",
      "<parameter=k>", "</parameter>", "</function>", "{\"name\": \"h\", \"arguments\": {", "<|python_tag|>",
      ";", "\"parameters\""};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 24); k < n; ++k) text += frags[rng() % frags.size()];
    const bool reasoning = rng() % 2;
    const ToolCallFormat f = std::array{ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kHermes,
                                        ToolCallFormat::kLlama3Json}[rng() % 4];
    Split whole = run(text, reasoning, false, f, text.size() + 1);
    for (size_t step : {size_t{1}, size_t{1} + rng() % 5}) {
      Split cut = run(text, reasoning, false, f, step);
      ASSERT_EQ(cut.reasoning, whole.reasoning) << text;
      ASSERT_EQ(cut.content, whole.content) << text;
      ASSERT_EQ(cut.calls.size(), whole.calls.size()) << text;
      for (size_t c = 0; c < cut.calls.size(); ++c) {
        ASSERT_EQ(cut.calls[c].name, whole.calls[c].name) << text;
        ASSERT_EQ(cut.calls[c].arguments, whole.calls[c].arguments) << text;
      }
      ASSERT_EQ(cut.cut_short, whole.cut_short) << text;
    }
  }
}

TEST(ChatOutputTest, Llama3JsonToolCalls) {
  for (size_t step : {1, 1000}) {
    Split s = run("{\"name\": \"get\", \"parameters\": {\"city\": \"Oslo\"}}", false, false,
                  ToolCallFormat::kLlama3Json, step);
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].arguments, "{\"city\":\"Oslo\"}");
    EXPECT_EQ(s.content, "");
    Split t = run("<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}",
                  false, false, ToolCallFormat::kLlama3Json, step);
    EXPECT_EQ(t.calls.size(), 2u);
    Split text = run("Hello {not a call}", false, false, ToolCallFormat::kLlama3Json, step);
    EXPECT_TRUE(text.calls.empty());
    EXPECT_EQ(text.content, "Hello {not a call}");
    Split obj = run("{\"x\": 1}", false, false, ToolCallFormat::kLlama3Json, step);
    EXPECT_TRUE(obj.calls.empty());
    EXPECT_EQ(obj.content, "{\"x\": 1}");
  }
}

}  // namespace
}  // namespace ferrite
