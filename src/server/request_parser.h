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
#include "server/api_error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {

// Bounds on what one request may ask for (each documented in docs/serving.md).
struct RequestLimits {
  int max_json_depth = 64;         // nesting of the JSON body
  size_t max_messages = 4096;      // chat messages per request
  size_t max_stop_strings = 16;    // entries of "stop"
  size_t max_stop_bytes = 1024;    // bytes of one stop string
  int64_t max_n = 1;               // choices per request ("n")
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
};

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
};

// Parses and validates `body`; nullopt on success (then *out is filled).
std::optional<ApiError> parse_request(const RequestContext& ctx, std::string_view body,
                                      bool chat_api, ParsedRequest* out);

// Random ids and seeds for requests that give none (thread-safe).
std::string random_request_id(const char* prefix);
uint64_t random_request_seed();

}  // namespace ferrite
