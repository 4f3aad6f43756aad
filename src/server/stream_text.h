// Engine tokens -> response text, for streamed and whole responses alike.
//
// StopFilter holds back the tail of the text that could still become a stop
// string, so a partial stop string never reaches the client; TextStream runs
// the tokenizer's StreamDecoder (never a partial UTF-8 character) through it
// and builds the OpenAI logprob entries. Pure: unit-tested and fuzzed without
// a server (tests/fuzz/stream_text_fuzz.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Text safe to emit now. *hit: a stop string matched; the text before it
  // is returned and everything from the stop string on is dropped.
  std::string feed(const std::string& s, bool* hit);
  // What is still held back (at the end of a stream without a stop).
  std::string flush() { return std::exchange(held_, std::string()); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

class TextStream {
 public:
  // logprobs: -1 none, else the number of alternatives per token; chat: the
  // chat API's logprob entries (else the completions API's).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool chat,
             int32_t logprobs);

  // Consumes one engine update; returns the text to emit now and appends one
  // logprob entry per consumed token to *lp_entries (when logprobs >= 0).
  std::string consume(const RequestStream::Update& u, nlohmann::ordered_json* lp_entries);
  bool stopped() const { return stopped_; }
  int32_t completion_tokens() const { return completion_tokens_; }

 private:
  std::string token_text(uint32_t id) const;
  nlohmann::ordered_json bytes_of(uint32_t id) const;
  nlohmann::ordered_json logprob_entry(const TokenOutput& t) const;

  const Tokenizer& tok_;
  StreamDecoder decoder_;
  StopFilter stop_;
  bool chat_;
  int32_t logprobs_;
  bool stopped_ = false;
  int32_t completion_tokens_ = 0;
};

// The completions API's logprobs object from TextStream's entries.
nlohmann::ordered_json completion_logprobs(const nlohmann::ordered_json& entries,
                                           size_t text_offset_base);

// One server-sent event: "data: <json>\n\n" (invalid UTF-8 replaced).
std::string sse_event(const nlohmann::ordered_json& chunk);

}  // namespace ferrite
