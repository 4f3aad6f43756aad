// ChatOutput: reasoning / content / tool calls out of model text, fed whole
// or one byte at a time (the streamed and the whole answers agree).
#include <gtest/gtest.h>

#include "server/chat_output.h"

namespace ferrite {
namespace {

struct Split {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

Split run(const std::string& text, bool reasoning, bool open, ToolCallFormat f, size_t step) {
  ChatOutput out(reasoning, open, f);
  Split s;
  auto add = [&](const ChatOutput::Delta& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    s.calls.insert(s.calls.end(), d.calls.begin(), d.calls.end());
  };
  for (size_t i = 0; i < text.size(); i += step) add(out.feed(text.substr(i, step)));
  add(out.finish());
  EXPECT_EQ(s.reasoning, out.reasoning());
  EXPECT_EQ(s.content, out.content());
  EXPECT_EQ(s.calls.size(), out.calls().size());
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
    EXPECT_EQ(s.calls[0].arguments, "{\"a\":1}");
    EXPECT_EQ(s.calls[1].arguments, "{}");
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
