// The stages of a Hugging Face tokenizer.json pipeline that surround the
// model: normalizers, pre-tokenizers and decoders. Parsed from JSON by
// tokenizer.cc; plain data here so this layer does not depend on the JSON
// library. Everything is immutable after construction and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ferrite::tokenizer {

// GPT-2's byte <-> printable code point map used by ByteLevel stages.
const std::array<std::string, 256>& byte_to_unicode();
// The byte a code point stands for, or -1 when it is not in the map.
int unicode_to_byte(char32_t cp);

// A PCRE2 regex (UTF + UCP, JIT when available). Patterns are the
// Oniguruma/Rust syntax of tokenizer.json; PCRE2 supplies the Unicode classes.
class Regex {
 public:
  static Result<std::shared_ptr<const Regex>> compile(std::string_view pattern);
  static std::string escape(std::string_view literal);
  ~Regex();
  // Calls fn(begin, end) for each non-overlapping non-empty match in `s`
  // (valid UTF-8), left to right.
  template <typename Fn>
  void for_each_match(std::string_view s, Fn&& fn) const {
    size_t pos = 0;
    size_t b, e;
    while (next_match(s, pos, b, e)) {
      fn(b, e);
      pos = e;
    }
  }

 private:
  Regex() = default;
  // Finds the first non-empty match at or after `pos`; false when none.
  bool next_match(std::string_view s, size_t pos, size_t& begin, size_t& end) const;
  void* code_ = nullptr;  // pcre2_code_8*
};

struct NormalizerStep {
  enum class Kind { kNfc, kPrepend, kReplace, kLowercase, kStrip };
  Kind kind{};
  std::string text{};     // kPrepend: prefix; kReplace: literal pattern (when !regex)
  std::string content{};  // kReplace: replacement
  std::shared_ptr<const Regex> regex{};  // kReplace with a Regex pattern
  bool strip_left = false, strip_right = false;
};

// Applies the steps in order to `s` (valid UTF-8).
std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view s);

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits };
  Kind kind{};
  std::shared_ptr<const Regex> regex{};  // kSplit; kByteLevel when use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement{};      // kMetaspace, UTF-8
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;               // kMetaspace
  bool individual_digits = false;  // kDigits
};

// One pre-token; `at_start` when it begins at offset 0 of the whole input.
struct Piece {
  std::string text;
  bool at_start = false;
};

// Runs the steps over `pieces` in place. A ByteLevel step only splits (and
// prefixes); the byte-to-symbol mapping is left to the model.
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& pieces);

struct DecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind{};
  std::string pattern{}, content{};  // kReplace (literal)
  char32_t strip_char = ' ';         // kStrip
  size_t start = 0, stop = 0;        // kStrip
  std::string replacement{};         // kMetaspace
  bool prepend = true;               // kMetaspace: strip the first token's leading space
};

// Runs the decoder chain over token strings and joins the result. With `raw`,
// byte-level and byte-fallback bytes are kept as they are (possibly invalid
// UTF-8); without it, invalid byte-fallback groups become U+FFFD per byte as
// in Hugging Face. The caller applies lossy UTF-8 conversion at the end.
std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens,
                         bool raw);

}  // namespace ferrite::tokenizer
