// What both tokenizer targets do with a loaded Tokenizer and a text: encode
// (with and without special tokens), decode the ids back, stream-decode them,
// and decode ids read from the raw bytes (some of them out of the vocabulary,
// which must be an error, not a crash).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace ferrite::fuzz {

// True when `s` is valid UTF-8 (the encode() precondition).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = static_cast<uint8_t>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      uint8_t d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n;
  }
  return true;
}

// `must_encode`: valid UTF-8 must encode (a real tokenizer); `round_trip`:
// decode(encode(text)) must give `text` back (callers set it only where the
// tokenizer's normalizer leaves the text unchanged).
inline void exercise_tokenizer(const Tokenizer& tok, std::string_view text, bool must_encode,
                               bool round_trip) {
  size_t vocab = tok.vocab_size();
  auto plain = tok.encode(text, /*add_special_tokens=*/false);
  if (!valid_utf8(text)) FERRITE_FUZZ_CHECK(!plain.is_ok());
  if (must_encode && valid_utf8(text)) FERRITE_FUZZ_CHECK(plain.is_ok());
  if (plain.is_ok()) {
    for (uint32_t id : *plain) FERRITE_FUZZ_CHECK(id < vocab);
    auto back = tok.decode(*plain, /*skip_special_tokens=*/false);
    FERRITE_FUZZ_CHECK(back.is_ok());
    if (round_trip) FERRITE_FUZZ_CHECK(*back == text);
    // Streaming: concatenated pieces + finish() equal decode() when that is
    // valid UTF-8 (the StreamDecoder contract).
    StreamDecoder stream(tok, /*skip_special_tokens=*/false);
    std::string streamed;
    bool stream_ok = true;
    for (uint32_t id : *plain) {
      auto piece = stream.push(id);
      if (!piece.is_ok()) {
        stream_ok = false;
        break;
      }
      streamed += *piece;
    }
    streamed += stream.finish();
    FERRITE_FUZZ_CHECK(stream_ok);
    if (valid_utf8(*back)) FERRITE_FUZZ_CHECK(streamed == *back);
    for (uint32_t id : *plain) {
      (void)tok.id_to_token(id);
      (void)tok.is_special(id);
    }
  }
  auto special = tok.encode(text, /*add_special_tokens=*/true);
  if (special.is_ok()) (void)tok.decode(*special, /*skip_special_tokens=*/true);

  // Raw ids: two bytes each, spread over the vocabulary plus a few past it.
  std::vector<uint32_t> ids;
  for (size_t i = 0; i + 1 < text.size() && ids.size() < 512; i += 2) {
    uint32_t v = static_cast<uint8_t>(text[i]) | (static_cast<uint8_t>(text[i + 1]) << 8);
    ids.push_back(vocab ? v % (vocab + 4) : v);
  }
  // decode() fails exactly when an id has no token (vocabularies may have holes).
  bool in_vocab = true;
  for (uint32_t id : ids) in_vocab = in_vocab && tok.id_to_token(id).has_value();
  for (bool skip : {false, true}) {
    auto d = tok.decode(ids, skip);
    if (in_vocab) FERRITE_FUZZ_CHECK(d.is_ok());
    if (!in_vocab) FERRITE_FUZZ_CHECK(!d.is_ok());
    (void)tok.decode_bytes(ids, skip);
    StreamDecoder stream(tok, skip);
    for (uint32_t id : ids) {
      if (!stream.push(id).is_ok()) break;
    }
    (void)stream.finish();
  }
  (void)tok.token_to_id(text);
  (void)tok.stop_ids();
  (void)tok.bos_id();
  (void)tok.eos_id();
}

}  // namespace ferrite::fuzz
