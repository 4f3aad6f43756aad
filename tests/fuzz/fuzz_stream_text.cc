// libFuzzer target: the streamed-text writer (src/server/stream_text.h):
// StopFilter, TextStream (StreamDecoder + stop strings + logprob entries) and
// the SSE event writer, with the Qwen3 tokenizer (server_fixture.h).
//
// Input: byte 0 holds the flags (bit 0 chat API, bit 1 logprobs, bits 2-3 the
// number of stop strings); then that many stop strings, each a length byte
// and its bytes (kept when valid UTF-8); the rest is a token stream: two bytes per token id (taken
// modulo the vocabulary) and a third byte whose top bit ends the engine
// update. Oracle: no crash, no sanitizer report; the emitted text is valid
// UTF-8 (an SSE event must be), never contains a stop string, and the
// emitted text plus StopFilter's hold-back never exceeds what was decoded.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "server/stream_text.h"
#include "server_fixture.h"
#include "tokenizer_exercise.h"

using namespace ferrite;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ferrite::fuzz::served_model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = *ferrite::fuzz::served_model().tokenizer;
  const uint8_t flags = data[0];
  size_t at = 1;
  std::vector<std::string> stops;
  for (int i = 0, n = (flags >> 2) & 3; i < n && at < size; ++i) {
    size_t len = data[at++] % 16;
    len = std::min(len, size - at);
    std::string stop(reinterpret_cast<const char*>(data + at), len);
    at += len;
    // Stop strings come from JSON strings, which the parser only yields as
    // valid UTF-8; an invalid one could match inside a character and cut it
    // (regressions/stream_text/invalid_utf8_stop: outside the contract).
    if (ferrite::fuzz::valid_utf8(stop)) stops.push_back(std::move(stop));
  }
  bool chat = flags & 1;
  int32_t logprobs = (flags & 2) ? 2 : -1;
  TextStream stream(tok, stops, chat, logprobs);
  StopFilter filter(stops);
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  std::string emitted;
  const uint32_t vocab = static_cast<uint32_t>(tok.vocab_size());
  RequestStream::Update u;
  auto flush_update = [&](bool finished) {
    u.finished = finished;
    u.finish = finished ? EngineFinish::kLength : EngineFinish::kStop;
    std::string text = stream.consume(u, logprobs >= 0 ? &entries : nullptr);
    emitted += text;
    nlohmann::ordered_json chunk = {{"text", text}};
    std::string ev = sse_event(chunk);
    FERRITE_FUZZ_CHECK(ev.rfind("data: ", 0) == 0);
    u.tokens.clear();
  };
  while (at + 2 < size && !stream.stopped()) {
    uint32_t id = (data[at] | (data[at + 1] << 8) | ((data[at + 2] & 0x7f) << 16)) % vocab;
    bool end_update = data[at + 2] & 0x80;
    at += 3;
    TokenOutput t;
    t.token = id;
    t.logprob = -0.5f;
    if (logprobs >= 0) t.top = {{id, -0.5f}, {(id + 1) % vocab, -1.5f}};
    u.tokens.push_back(std::move(t));
    if (end_update) flush_update(false);
  }
  if (!stream.stopped()) flush_update(true);
  FERRITE_FUZZ_CHECK(ferrite::fuzz::valid_utf8(emitted));
  for (const auto& s : stops) {
    if (!s.empty()) FERRITE_FUZZ_CHECK(emitted.find(s) == std::string::npos);
  }
  FERRITE_FUZZ_CHECK(stream.completion_tokens() >= 0);
  if (logprobs >= 0 && !chat) (void)completion_logprobs(entries, 0);

  // StopFilter alone over the raw remaining bytes in pieces of 1-7 bytes.
  std::string fed, out;
  bool hit = false;
  for (size_t i = 1; i < size && !hit;) {
    size_t len = std::min<size_t>(1 + data[i] % 7, size - i);
    std::string piece(reinterpret_cast<const char*>(data + i), len);
    fed += piece;
    out += filter.feed(piece, &hit);
    i += len;
  }
  if (!hit) out += filter.flush();
  if (!hit) FERRITE_FUZZ_CHECK(out == fed);
  if (hit) FERRITE_FUZZ_CHECK(fed.rfind(out, 0) == 0);
  return 0;
}
