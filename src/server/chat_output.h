// Model output text -> the OpenAI message parts: reasoning_content (a
// leading <think>...</think>, or everything up to </think> when the prompt
// opened the think block), content, and tool calls in the model's own
// syntax: Hermes / Qwen3 / Qwen3.5 "<tool_call>\n{"name":..,"arguments":..}\n</tool_call>"
// or Llama-3.x JSON ({"name": .., "parameters": ..} as the whole answer,
// optionally after <|python_tag|>, several separated by ';').
//
// Incremental: feed() the text as it is produced and get what can be shown
// now (tag prefixes are held back until they resolve); finish() at the end.
// Pure (unit-tested and fuzzed without a server).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ferrite {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json };

struct ToolCall {
  std::string id;         // "call_..."
  std::string name;
  std::string arguments;  // a JSON text (an object)
};

class ChatOutput {
 public:
  // reasoning: split a think block; reasoning_open: the prompt already
  // opened it (the output starts inside it).
  ChatOutput(bool reasoning, bool reasoning_open, ToolCallFormat tools);

  struct Delta {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  };
  Delta feed(const std::string& text);
  Delta finish();

  // Totals so far.
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  enum class Mode { kStart, kReasoning, kContent, kToolCall, kJson };
  void run(Delta* d, bool final);
  void emit_content(Delta* d, const std::string& s);
  bool parse_call(const std::string& json_text, Delta* d);

  bool reasoning_enabled_;
  ToolCallFormat format_;
  Mode mode_;
  std::string buf_;
  bool content_started_ = false;  // non-whitespace content seen
  bool after_think_ = false;      // strip whitespace right after </think>
  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
};

// "call_" + 24 random hex digits.
std::string random_tool_call_id();

}  // namespace ferrite
