#include "tokenizer/pipeline.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <unordered_map>

#include "tokenizer/unicode.h"

namespace ferrite::tokenizer {
namespace {

std::array<char32_t, 256> byte_code_points() {
  std::array<char32_t, 256> cps{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  char32_t n = 0;
  for (int b = 0; b < 256; ++b) cps[b] = printable[b] ? char32_t(b) : 256 + n++;
  return cps;
}

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// Per-thread match data sized for the largest pattern used on that thread.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    auto cps = byte_code_points();
    for (int b = 0; b < 256; ++b) append_utf8(cps[b], t[b]);
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::unordered_map<char32_t, int> reverse = [] {
    std::unordered_map<char32_t, int> m;
    auto cps = byte_code_points();
    for (int b = 0; b < 256; ++b) m.emplace(cps[b], b);
    return m;
  }();
  auto it = reverse.find(cp);
  return it == reverse.end() ? -1 : it->second;
}

// tokenizer.json regexes run on Oniguruma, where \s is the Unicode
// White_Space property. PCRE2 10.42's \s with UCP also matches U+180E, which
// Unicode no longer counts as a space, so \s and \S are spelled out.
static std::string translate_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 's') {
        out += "\\p{White_Space}";
      } else if (c == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += '\\';
        out += c;
      }
      continue;
    }
    out += pattern[i];
  }
  return out;
}

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view hf_pattern) {
  const std::string pattern = translate_pattern(hf_pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("cannot compile regex '" + std::string(hf_pattern) + "' at offset " +
                            std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  std::shared_ptr<Regex> regex(new Regex());
  regex->code_ = code;
  return std::shared_ptr<const Regex>(std::move(regex));
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

bool Regex::next_match(std::string_view s, size_t pos, size_t& begin, size_t& end) const {
  pcre2_match_data* md = thread_match_data();
  uint32_t options = PCRE2_NO_UTF_CHECK;
  while (pos <= s.size()) {
    int rc = pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                         options, md, nullptr);
    if (rc < 0) return false;  // no match (or a matching error: treat as none)
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    begin = ov[0];
    end = ov[1];
    if (end > begin) return true;
    // Empty match: step over one character and search again.
    pos = begin;
    if (pos >= s.size()) return false;
    next_code_point(s, pos);
  }
  return false;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view input) {
  std::string s(input);
  for (const auto& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        s = nfc(s);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s = step.text + s;
        break;
      case NormalizerStep::Kind::kReplace: {
        std::string out;
        size_t last = 0;
        if (step.regex) {
          step.regex->for_each_match(s, [&](size_t b, size_t e) {
            out.append(s, last, b - last);
            out += step.content;
            last = e;
          });
        } else if (!step.text.empty()) {
          for (size_t p = s.find(step.text); p != std::string::npos; p = s.find(step.text, last)) {
            out.append(s, last, p - last);
            out += step.content;
            last = p + step.text.size();
          }
        }
        out.append(s, last, std::string::npos);
        s = std::move(out);
        break;
      }
      case NormalizerStep::Kind::kLowercase:
        // ASCII only; non-ASCII lowercasing is rejected at load time.
        std::transform(s.begin(), s.end(), s.begin(),
                       [](char c) { return (c >= 'A' && c <= 'Z') ? char(c + 32) : c; });
        break;
      case NormalizerStep::Kind::kStrip: {
        auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
        size_t b = 0, e = s.size();
        if (step.strip_left)
          while (b < e && is_ws(s[b])) ++b;
        if (step.strip_right)
          while (e > b && is_ws(s[e - 1])) --e;
        s = s.substr(b, e - b);
        break;
      }
    }
  }
  return s;
}

namespace {

// Splits one piece by the matches of `regex` with HF's delimiter behaviors.
void split_piece(const Piece& piece, const Regex& regex, SplitBehavior behavior,
                 std::vector<Piece>& out) {
  const std::string& s = piece.text;
  // (begin, end, is_match) spans covering `s`.
  struct Span {
    size_t b, e;
    bool match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  regex.for_each_match(s, [&](size_t b, size_t e) {
    if (b > last) spans.push_back({last, b, false});
    spans.push_back({b, e, true});
    last = e;
  });
  if (last < s.size()) spans.push_back({last, s.size(), false});

  std::vector<Span> merged;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      merged = std::move(spans);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& sp : spans)
        if (!sp.match) merged.push_back(sp);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& sp : spans) {
        if (sp.match && !merged.empty() && !merged.back().match) {
          merged.back().e = sp.e;
          merged.back().match = true;
        } else {
          merged.push_back(sp);
        }
      }
      break;
    case SplitBehavior::kMergedWithNext: {
      bool pending = false;
      for (const auto& sp : spans) {
        if (pending && !sp.match) {
          merged.back().e = sp.e;
          pending = false;
          continue;
        }
        merged.push_back(sp);
        pending = sp.match;
      }
      break;
    }
    case SplitBehavior::kContiguous:
      for (const auto& sp : spans) {
        if (sp.match && !merged.empty() && merged.back().match) {
          merged.back().e = sp.e;
        } else {
          merged.push_back(sp);
        }
      }
      break;
  }
  for (const auto& sp : merged) {
    if (sp.e > sp.b) out.push_back({s.substr(sp.b, sp.e - sp.b), piece.at_start && sp.b == 0});
  }
}

std::shared_ptr<const Regex> digits_regex(bool individual) {
  static const auto single = Regex::compile("\\p{N}").value();
  static const auto runs = Regex::compile("\\p{N}+").value();
  return individual ? single : runs;
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& pieces) {
  for (const auto& step : steps) {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (auto& piece : pieces) {
      switch (step.kind) {
        case PreTokenizerStep::Kind::kSplit:
          split_piece(piece, *step.regex, step.behavior, out);
          break;
        case PreTokenizerStep::Kind::kDigits:
          split_piece(piece, *digits_regex(step.individual_digits), SplitBehavior::kIsolated, out);
          break;
        case PreTokenizerStep::Kind::kByteLevel: {
          if (step.add_prefix_space && !piece.text.empty() && piece.text[0] != ' ') {
            piece.text.insert(piece.text.begin(), ' ');
          }
          if (step.regex) {
            split_piece(piece, *step.regex, SplitBehavior::kIsolated, out);
          } else {
            out.push_back(std::move(piece));
          }
          break;
        }
        case PreTokenizerStep::Kind::kMetaspace: {
          std::string s;
          for (size_t p = 0; p < piece.text.size(); ++p) {
            if (piece.text[p] == ' ') {
              s += step.replacement;
            } else {
              s += piece.text[p];
            }
          }
          bool prepend = step.prepend == PrependScheme::kAlways ||
                         (step.prepend == PrependScheme::kFirst && piece.at_start);
          if (prepend && !s.starts_with(step.replacement)) s = step.replacement + s;
          if (!step.split) {
            out.push_back({std::move(s), piece.at_start});
            break;
          }
          // Split before each replacement character (HF MergedWithNext).
          size_t start = 0;
          for (size_t p = s.find(step.replacement, 1); p != std::string::npos;
               p = s.find(step.replacement, p + 1)) {
            if (p > start)
              out.push_back({s.substr(start, p - start), piece.at_start && start == 0});
            start = p;
          }
          if (start < s.size()) out.push_back({s.substr(start), piece.at_start && start == 0});
          break;
        }
      }
    }
    pieces = std::move(out);
  }
}

namespace {

// "<0xAB>" -> 0xAB, else -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v *= 16;
    if (c >= '0' && c <= '9')
      v += c - '0';
    else if (c >= 'A' && c <= 'F')
      v += c - 'A' + 10;
    else
      return -1;
  }
  return v;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  size_t last = 0;
  for (size_t p = s.find(from); p != std::string_view::npos; p = s.find(from, last)) {
    out.append(s.substr(last, p - last));
    out.append(to);
    last = p + from.size();
  }
  out.append(s.substr(last));
  return out;
}

}  // namespace

std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens,
                         bool raw) {
  for (const auto& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: {
        // A token any of whose characters is outside the byte alphabet is
        // kept as its own UTF-8 (HF does the same).
        std::string bytes;
        for (const auto& t : tokens) {
          std::string mapped;
          bool ok = true;
          size_t pos = 0;
          while (pos < t.size()) {
            int b = unicode_to_byte(next_code_point(t, pos));
            if (b < 0) {
              ok = false;
              break;
            }
            mapped.push_back(static_cast<char>(b));
          }
          bytes += ok ? mapped : t;
        }
        tokens.assign(1, std::move(bytes));
        break;
      }
      case DecoderStep::Kind::kReplace:
        for (auto& t : tokens) t = replace_all(t, step.pattern, step.content);
        break;
      case DecoderStep::Kind::kByteFallback: {
        std::vector<std::string> out;
        std::string pending;
        auto flush = [&] {
          if (pending.empty()) return;
          if (raw || valid_utf8_prefix(pending) == pending.size()) {
            out.push_back(pending);
          } else {
            std::string rep;
            for (size_t i = 0; i < pending.size(); ++i) append_utf8(kReplacementChar, rep);
            out.push_back(rep);
          }
          pending.clear();
        };
        for (auto& t : tokens) {
          int b = parse_byte_token(t);
          if (b >= 0) {
            pending.push_back(static_cast<char>(b));
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case DecoderStep::Kind::kFuse: {
        std::string joined;
        for (const auto& t : tokens) joined += t;
        tokens.assign(1, std::move(joined));
        break;
      }
      case DecoderStep::Kind::kStrip: {
        std::string ch;
        append_utf8(step.strip_char, ch);
        for (auto& t : tokens) {
          size_t b = 0, e = t.size();
          for (size_t i = 0; i < step.start && t.compare(b, ch.size(), ch) == 0; ++i) {
            b += ch.size();
          }
          for (size_t i = 0;
               i < step.stop && e >= b + ch.size() && t.compare(e - ch.size(), ch.size(), ch) == 0;
               ++i) {
            e -= ch.size();
          }
          t = t.substr(b, e - b);
        }
        break;
      }
      case DecoderStep::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string t = replace_all(tokens[i], step.replacement, " ");
          if (i == 0 && step.prepend && t.starts_with(' ')) t.erase(0, 1);
          tokens[i] = std::move(t);
        }
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace ferrite::tokenizer
