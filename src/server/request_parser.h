// The OpenAI request parser: one JSON body of /v1/chat/completions or
// /v1/completions -> a validated EngineRequest plus what the response writer
// needs (stream, stop strings, logprobs). Pure: no engine, no device, no
// sockets, so it is unit-tested and fuzzed on its own (tests/fuzz).
//
// Every field is checked against RequestLimits before anything is sized by
// it; a bad field is a 400 naming it. Text from the request (message
// contents, tool results, text prompts) never becomes a special token: only
// the chat template's own markup does (so a user cannot forge a system or
// assistant turn with "<|im_start|>"); RequestContext::special_tokens_in_prompts
// restores the old behaviour for completions prompts given as text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "grammar/matcher.h"
#include "server/api_error.h"
#include "server/chat_output.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {

// Bounds on what one request may ask for (each documented in docs/serving.md).
struct RequestLimits {
  int max_json_depth = 64;         // nesting of the JSON body
  size_t max_messages = 4096;      // chat messages per request
  size_t max_stop_strings = 16;    // entries of "stop"
  size_t max_stop_bytes = 1024;    // bytes of one stop string
  int64_t max_n = 16;              // choices per request ("n")
  int64_t max_logprobs = 20;       // top_logprobs / logprobs
};

// What the parser needs of the served model. Pointers are borrowed.
struct RequestContext {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat = nullptr;  // null: the chat API answers 400
  std::string model_name;              // "model" must match when given
  int64_t vocab_size = 0;              // token-id prompts must be below it
  int64_t max_context = 0;             // prompt + generation, in tokens
  std::vector<uint32_t> stop_ids;      // ids that end generation (EOS, ...)
  // Text longer than this many bytes cannot fit the context whatever it
  // tokenizes to (max_context * the longest token's bytes): rejected before
  // tokenizing, so a huge one-word prompt costs no tokenizer time.
  size_t max_prompt_bytes = SIZE_MAX;
  bool special_tokens_in_prompts = false;  // completions: parse "<|...|>" text
  RequestLimits limits;
  // Sampling of the fields a request leaves out: OpenAI's (temperature 1),
  // or the model's generation_config.json (serve --generation-config).
  SamplingParams sampling_defaults = [] {
    SamplingParams s;
    s.temperature = 1.0f;
    return s;
  }();
  int64_t default_max_tokens = 0;  // > 0: max_tokens when not given (max_new_tokens)
  // Structured outputs: compiled grammars by schema (null: compiled per
  // request). The server builds the matchers (make_constraint).
  grammar::GrammarCache* grammars = nullptr;
  // From the chat template (chat_template_features()): how tool calls are
  // written, whether the template renders `tools` itself (else the server
  // adds a Hermes-style system prompt), whether it thinks (<think>).
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  bool template_renders_tools = false;
  bool reasoning = false;
};

// What a chat template supports, from its source.
void chat_template_features(const ChatTemplate& chat, RequestContext* ctx);

// max_context * the byte length of the tokenizer's longest token.
size_t max_prompt_bytes_for(const Tokenizer& tokenizer, int64_t max_context);

struct ParsedRequest {
  bool chat = true;
  bool stream = false;
  bool include_usage = false;
  std::vector<std::string> stop;
  EngineRequest engine;
  int32_t logprobs = -1;  // -1 none, else top-k
  bool max_tokens_given = false;
  int32_t n = 1;           // choices; choice i samples with seed + i
  bool seed_given = false;
  // Structured output: every choice gets a matcher of this grammar.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // Tool calls parsed from the output (tools given and tool_choice != none).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  bool reasoning = false;       // split <think>...</think> into reasoning_content
  bool reasoning_open = false;  // the prompt opened the think block
  bool echo = false;            // completions: the prompt text precedes the answer
  std::string echo_text;
  // /v1/responses: what the response object echoes back.
  bool responses = false;
  nlohmann::ordered_json responses_echo;
};

// The matcher of one choice (null when the request is unconstrained).
std::shared_ptr<TokenConstraint> make_constraint(const ParsedRequest& p,
                                                 std::shared_ptr<const grammar::TokenVocab> vocab,
                                                 const std::vector<uint32_t>& end_ids);

// /v1/responses: the body is translated to a chat request (input and
// instructions -> messages, text.format -> response_format, tools and
// tool_choice to the chat shapes, max_output_tokens -> max_tokens) and
// parsed as one. previous_response_id is a 400 (nothing is stored).
std::optional<ApiError> parse_responses_request(const RequestContext& ctx, std::string_view body,
                                                ParsedRequest* out);

// Parses and validates `body`; nullopt on success (then *out is filled).
std::optional<ApiError> parse_request(const RequestContext& ctx, std::string_view body,
                                      bool chat_api, ParsedRequest* out);

// Random ids and seeds for requests that give none (thread-safe).
std::string random_request_id(const char* prefix);
uint64_t random_request_seed();

}  // namespace ferrite
