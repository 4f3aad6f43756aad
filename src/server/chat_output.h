// Model output text -> the OpenAI message parts: reasoning_content (a
// leading <think>...</think>, or everything up to </think> when the prompt
// opened the think block), content, and tool calls in the model's own
// syntax: Hermes / Qwen3 / Qwen3.5 "<tool_call>\n{"name":..,"arguments":..}\n</tool_call>"
// or Llama-3.x JSON ({"name": .., "parameters": ..} as the whole answer,
// optionally after <|python_tag|>, several separated by ';').
//
// Incremental: feed() the text as it is produced and get what can be shown
// now (tag prefixes are held back until they resolve); finish() at the end.
// A Hermes call whose JSON starts {"name": "...", "arguments": {  streams its
// arguments text as it is generated (as OpenAI and vLLM stream them): the
// call's first delta carries its id and name, later ones the next piece of
// the arguments; other call syntaxes arrive whole when they close. The
// arguments of a streamed call are the model's own text (whitespace kept),
// the same in a whole (non-streamed) answer.
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

// One step of a tool call as it is produced. A call's first delta has its id
// and name; every delta may carry the next piece of its arguments text; the
// call's last delta has done set (its arguments are then complete, or cut
// short when the text ended inside them).
struct ToolCallDelta {
  size_t index = 0;       // position of the call in ChatOutput::calls()
  std::string id, name;   // set on the call's first delta only
  std::string arguments;  // the next piece of the arguments text
  bool done = false;
};

class ChatOutput {
 public:
  // reasoning: split a think block; reasoning_open: the prompt already
  // opened it (the output starts inside it).
  ChatOutput(bool reasoning, bool reasoning_open, ToolCallFormat tools);

  struct Delta {
    std::string reasoning, content;
    std::vector<ToolCallDelta> calls;  // consecutive deltas of one call merged
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
    void add_call(ToolCallDelta c);
    void append(Delta&& later);  // this delta followed by `later`
  };
  Delta feed(const std::string& text);
  Delta finish();

  // Totals so far.
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& calls() const { return calls_; }
  // The text ended inside a streamed call's arguments (cut by max_tokens).
  bool call_cut_short() const { return call_cut_short_; }

 private:
  enum class Mode { kStart, kReasoning, kContent, kToolCall, kJson };
  void run(Delta* d, bool final);
  void emit_content(Delta* d, const std::string& s);
  bool parse_call(const std::string& json_text, Delta* d);
  // A call in kToolCall mode, streamed while its header and arguments come
  // in: kWait (more text needed), kDone (the call ended), kNotStreamable
  // (not {"name", "arguments"} first: the call is taken whole at its close).
  enum class Step { kWait, kDone, kNotStreamable };
  Step stream_call(Delta* d, bool final);

  bool reasoning_enabled_;
  ToolCallFormat format_;
  Mode mode_;
  std::string buf_;
  bool content_started_ = false;  // non-whitespace content seen
  bool after_think_ = false;      // strip whitespace right after </think>
  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
  // The call being streamed: header seen, arguments scanned so far.
  enum class CallState { kUndecided, kStreaming, kWhole } call_state_ = CallState::kUndecided;
  int args_depth_ = 0;
  bool args_in_string_ = false, args_escape_ = false, args_done_ = false;
  bool call_cut_short_ = false;
  bool after_call_ = false;  // only whitespace since the last call ended
};

// "call_" + 24 random hex digits.
std::string random_tool_call_id();

}  // namespace ferrite
