// UTF-8 helpers and NFC normalization for the tokenizer.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace ferrite::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Appends the UTF-8 encoding of `cp` (must be a scalar value) to `out`.
void append_utf8(char32_t cp, std::string& out);

// Decodes one code point of valid UTF-8 starting at `s[pos]`, advancing `pos`.
// Precondition: `s` is valid UTF-8.
char32_t next_code_point(std::string_view s, size_t& pos);

// Length of the maximal prefix of `s` that is valid UTF-8 (RFC 3629: no
// surrogates, no overlongs, nothing above U+10FFFF).
size_t valid_utf8_prefix(std::string_view s);

// OK when `s` is valid UTF-8; else InvalidArgument naming the byte offset.
Status validate_utf8(std::string_view s);

// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes
// one U+FFFD.
std::string utf8_lossy(std::string_view s);

// Number of leading bytes of `s` that can be emitted now: everything except a
// trailing sequence that is a valid-so-far prefix of a multi-byte character
// (more bytes may complete it). Invalid bytes are not held back.
size_t utf8_emittable_prefix(std::string_view s);

// Unicode Normalization Form C of valid UTF-8 `s` (tables from Python's
// unicodedata; Hangul composed algorithmically).
std::string nfc(std::string_view s);

}  // namespace ferrite::tokenizer
