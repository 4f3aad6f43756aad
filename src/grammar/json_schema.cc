#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <set>

namespace ferrite::grammar {

namespace {

using json = nlohmann::ordered_json;
using Seq = Builder::Seq;

constexpr int64_t kMaxInt = 9999999999999999;  // 16 digits
constexpr int64_t kMaxRepeat = 10000;          // minItems / maxItems / lengths
constexpr size_t kMaxRules = 200000;

Status unsupported_feature(const std::string& what, const std::string& where) {
  return invalid_argument(fmt::format("unsupported JSON schema feature: {} (at {})", what,
                                      where.empty() ? "#" : where));
}

ByteSet range_set(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.set_range(lo, hi);
  return s;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// The JSON-escaped form of one code point inside a string.
std::string json_char(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  if (cp < 0x20) return fmt::format("\\u{:04x}", cp);
  return utf8(cp);
}

// A regex character class over code points.
struct CharClass {
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool contains(uint32_t cp) const {
    for (auto [a, b] : ranges)
      if (cp >= a && cp <= b) return true;
    return false;
  }
};

}  // namespace

struct JsonGrammar::Impl {
  Builder b;
  Seq ws_, char_, value_, digit_, digit19_;
  const json* doc = nullptr;
  std::map<std::string, uint32_t> refs;  // JSON pointer -> rule
  std::map<std::pair<int64_t, int64_t>, Seq> int_ranges;

  Seq ws() {
    if (ws_.empty()) {
      ByteSet sp_tab;
      sp_tab.set(' ');
      sp_tab.set('\t');
      Seq indent = b.repeat(b.bytes(sp_tab), 0, kMaxIndent);
      uint32_t r = b.declare();
      b.define(r, {{}, b.byte(' '), Builder::cat({b.byte('\n'), indent})});
      ws_ = Builder::ref(r);
    }
    return ws_;
  }
  Seq digit() {
    if (digit_.empty()) digit_ = b.bytes(range_set('0', '9'));
    return digit_;
  }
  // Any one character of a JSON string (escapes included).
  Seq string_char() {
    if (!char_.empty()) return char_;
    ByteSet ascii = range_set(0x20, 0x7f);
    ascii.bits['"' >> 6] &= ~(uint64_t{1} << ('"' & 63));
    ascii.bits['\\' >> 6] &= ~(uint64_t{1} << ('\\' & 63));
    ByteSet esc;
    for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
    ByteSet hex = range_set('0', '9');
    hex.set_range('a', 'f');
    hex.set_range('A', 'F');
    Seq h = b.bytes(hex);
    Seq cont = b.bytes(range_set(0x80, 0xbf));
    std::vector<Seq> alts;
    alts.push_back(b.bytes(ascii));
    alts.push_back(Builder::cat({b.byte('\\'), b.bytes(esc)}));
    alts.push_back(Builder::cat({b.byte('\\'), b.byte('u'), h, h, h, h}));
    for (Seq s : multibyte_utf8()) alts.push_back(std::move(s));
    uint32_t r = b.declare();
    b.define(r, std::move(alts));
    char_ = Builder::ref(r);
    return char_;
  }
  // Every valid UTF-8 sequence of 2 to 4 bytes (no surrogates, <= U+10FFFF).
  std::vector<Seq> multibyte_utf8() {
    Seq c = b.bytes(range_set(0x80, 0xbf));
    ByteSet e1 = range_set(0xe1, 0xec);
    e1.set_range(0xee, 0xef);
    return {Builder::cat({b.bytes(range_set(0xc2, 0xdf)), c}),
            Builder::cat({b.byte(0xe0), b.bytes(range_set(0xa0, 0xbf)), c}),
            Builder::cat({b.bytes(e1), c, c}),
            Builder::cat({b.byte(0xed), b.bytes(range_set(0x80, 0x9f)), c}),
            Builder::cat({b.byte(0xf0), b.bytes(range_set(0x90, 0xbf)), c, c}),
            Builder::cat({b.bytes(range_set(0xf1, 0xf3)), c, c, c}),
            Builder::cat({b.byte(0xf4), b.bytes(range_set(0x80, 0x8f)), c, c})};
  }
  Seq any_string() {
    return Builder::cat({b.byte('"'), b.star(string_char()), b.byte('"')});
  }

  // Unsigned decimal numbers in [lo, hi] of the same digit count.
  Seq same_len(const std::string& lo, const std::string& hi) {
    const size_t n = lo.size();
    if (n == 0) return {};
    if (n == 1) return b.bytes(range_set(lo[0], hi[0]));
    if (lo[0] == hi[0]) return Builder::cat({b.byte(lo[0]), same_len(lo.substr(1), hi.substr(1))});
    const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
    if (rest_lo == std::string(n - 1, '0') && rest_hi == std::string(n - 1, '9'))
      return Builder::cat({b.bytes(range_set(lo[0], hi[0])), b.repeat(digit(), n - 1, n - 1)});
    std::vector<Seq> alts;
    alts.push_back(Builder::cat({b.byte(lo[0]), same_len(rest_lo, std::string(n - 1, '9'))}));
    if (hi[0] - lo[0] > 1)
      alts.push_back(Builder::cat({b.bytes(range_set(lo[0] + 1, hi[0] - 1)),
                                   b.repeat(digit(), n - 1, n - 1)}));
    alts.push_back(Builder::cat({b.byte(hi[0]), same_len(std::string(n - 1, '0'), rest_hi)}));
    return b.alt(std::move(alts));
  }
  // Canonical decimal integers in [lo, hi], 0 <= lo <= hi.
  Seq nonneg_range(int64_t lo, int64_t hi) {
    std::vector<Seq> alts;
    int64_t p = 1;  // 10^(len-1)
    for (int len = 1; len <= 17; ++len, p *= 10) {
      const int64_t a = std::max(lo, len == 1 ? 0 : p);
      const int64_t top = len >= 17 ? INT64_MAX : p * 10 - 1;
      const int64_t z = std::min(hi, top);
      if (a <= z) alts.push_back(same_len(std::to_string(a), std::to_string(z)));
      if (top >= hi) break;
    }
    return b.alt(std::move(alts));
  }
  Seq int_range(int64_t lo, int64_t hi) {
    auto it = int_ranges.find({lo, hi});
    if (it != int_ranges.end()) return it->second;
    Seq s;
    if (lo >= 0)
      s = nonneg_range(lo, hi);
    else if (hi < 0)
      s = Builder::cat({b.byte('-'), nonneg_range(-hi, -lo)});
    else
      s = b.alt({Builder::cat({b.byte('-'), nonneg_range(1, -lo)}), nonneg_range(0, hi)});
    if (s.size() > 1) {
      uint32_t r = b.declare();
      b.define(r, {s});
      s = Builder::ref(r);
    }
    int_ranges[{lo, hi}] = s;
    return s;
  }
  Seq fraction() { return Builder::cat({b.byte('.'), b.repeat(digit(), 1, 16)}); }
  // Non-negative numbers in [lo, hi] (integers lo <= hi).
  Seq nonneg_number(int64_t lo, int64_t hi) {
    Seq exact = Builder::cat({b.lit(std::to_string(hi)),
                              b.opt(Builder::cat({b.byte('.'), b.repeat(b.byte('0'), 1, 16)}))});
    if (lo == hi) return exact;
    return b.alt({Builder::cat({int_range(lo, hi - 1), b.opt(fraction())}), exact});
  }
  Seq number_range(int64_t lo, int64_t hi) {
    if (lo >= 0) return nonneg_number(lo, hi);
    if (hi <= 0) return Builder::cat({b.byte('-'), nonneg_number(-hi, -lo)});
    return b.alt({Builder::cat({b.byte('-'), nonneg_number(0, -lo)}), nonneg_number(0, hi)});
  }
  Seq any_number() {
    ByteSet pm;
    pm.set('+');
    pm.set('-');
    ByteSet e;
    e.set('e');
    e.set('E');
    Seq intpart = b.alt({b.byte('0'), Builder::cat({b.bytes(range_set('1', '9')),
                                                    b.repeat(digit(), 0, 15)})});
    Seq exp = Builder::cat({b.bytes(e), b.opt(b.bytes(pm)), b.repeat(digit(), 1, 3)});
    return Builder::cat({b.opt(b.byte('-')), intpart, b.opt(fraction()), b.opt(exp)});
  }

  Seq any_value() {
    if (!value_.empty()) return value_;
    uint32_t v = b.declare();
    value_ = Builder::ref(v);
    Seq kv = Builder::cat({any_string(), ws(), b.byte(':'), ws(), value_, ws()});
    Seq object = Builder::cat(
        {b.byte('{'), ws(), b.opt(Builder::cat({kv, b.star(Builder::cat({b.byte(','), ws(), kv}))})),
         b.byte('}')});
    Seq item = Builder::cat({value_, ws()});
    Seq array = Builder::cat(
        {b.byte('['), ws(),
         b.opt(Builder::cat({item, b.star(Builder::cat({b.byte(','), ws(), item}))})),
         b.byte(']')});
    b.define(v, {object, array, any_string(), any_number(), b.lit("true"), b.lit("false"),
                 b.lit("null")});
    return value_;
  }

  // --- regex (pattern) -> the JSON string content it matches ----------------
  struct Regex {
    Impl* im;
    std::string_view p;
    size_t i = 0;
    std::string where;
    Status error = Status::ok();

    bool fail(const std::string& what) {
      if (error.is_ok()) error = unsupported_feature("pattern " + what, where);
      return false;
    }
    bool more() const { return i < p.size(); }
    // Reads one UTF-8 code point.
    uint32_t next_cp() {
      unsigned char c = static_cast<unsigned char>(p[i++]);
      if (c < 0x80) return c;
      int n = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
      uint32_t cp = c & (0x3f >> n);
      for (int k = 0; k < n && more(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(p[i++]) & 0x3f);
      return cp;
    }
    Seq class_seq(const CharClass& cc) {
      Builder& b = im->b;
      std::vector<Seq> alts;
      ByteSet ascii;
      auto in = [&](uint32_t cp) { return cc.contains(cp) != cc.negated; };
      for (uint32_t c = 0; c < 0x80; ++c) {
        if (!in(c)) continue;
        if (c >= 0x20 && c != '"' && c != '\\')
          ascii.set(static_cast<uint8_t>(c));
        else
          alts.push_back(b.lit(json_char(c)));
      }
      if (!ascii.empty()) alts.push_back(b.bytes(ascii));
      if (cc.negated) {
        for (auto [a, z] : cc.ranges)
          if (z >= 0x80) {
            fail("negated class with non-ASCII members");
            return {};
          }
        for (Seq s : im->multibyte_utf8()) alts.push_back(std::move(s));
      } else {
        size_t count = 0;
        for (auto [a, z] : cc.ranges)
          if (z >= 0x80) count += z - std::max<uint32_t>(a, 0x80) + 1;
        if (count > 1024) {
          fail("class with more than 1024 non-ASCII characters");
          return {};
        }
        for (auto [a, z] : cc.ranges)
          for (uint32_t c = std::max<uint32_t>(a, 0x80); c <= z && z >= 0x80; ++c)
            if (!(c >= 0xd800 && c <= 0xdfff) && c <= 0x10ffff) alts.push_back(b.lit(utf8(c)));
      }
      if (alts.empty()) {
        fail("empty character class");
        return {};
      }
      return b.alt(std::move(alts));
    }
    static void add_shorthand(char c, CharClass* cc) {
      switch (c) {
        case 'd': cc->ranges.push_back({'0', '9'}); break;
        case 'w':
          cc->ranges.insert(cc->ranges.end(), {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}});
          break;
        case 's':
          cc->ranges.insert(cc->ranges.end(), {{' ', ' '}, {'\t', '\r'}});
          break;
      }
    }
    // An escape after '\' as a code point; -1 for a shorthand (added to *cc).
    bool escape(uint32_t* cp, CharClass* cc, bool* shorthand) {
      *shorthand = false;
      if (!more()) return fail("ending in a backslash");
      char c = p[i++];
      switch (c) {
        case 'd': case 'w': case 's':
          *shorthand = true;
          add_shorthand(c, cc);
          return true;
        case 'D': case 'W': case 'S':
          if (cc->negated || !cc->ranges.empty()) return fail("negated shorthand inside a class");
          *shorthand = true;
          cc->negated = true;
          add_shorthand(static_cast<char>(c - 'A' + 'a'), cc);
          return true;
        case 'n': *cp = '\n'; return true;
        case 't': *cp = '\t'; return true;
        case 'r': *cp = '\r'; return true;
        case 'f': *cp = '\f'; return true;
        case 'v': *cp = '\v'; return true;
        case '0': *cp = 0; return true;
        case 'x': case 'u': {
          int n = c == 'x' ? 2 : 4;
          if (i + n > p.size()) return fail("with a short \\x / \\u escape");
          uint32_t v = 0;
          for (int k = 0; k < n; ++k) {
            char h = p[i++];
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) return fail("with a bad hex escape");
            v = v * 16 + d;
          }
          *cp = v;
          return true;
        }
        case 'b': case 'B': return fail("word boundaries (\\b)");
        default:
          if (c >= '1' && c <= '9') return fail("backreferences (not a regular language)");
          if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return fail(fmt::format("escape \\{}", c));
          *cp = static_cast<unsigned char>(c);
          return true;
      }
    }
    bool parse_class(Seq* out) {
      CharClass cc;
      if (more() && p[i] == '^') {
        cc.negated = true;
        ++i;
      }
      bool first = true;
      while (more() && (p[i] != ']' || first)) {
        first = false;
        uint32_t lo;
        if (p[i] == '\\') {
          ++i;
          bool sh;
          CharClass tmp;
          tmp.negated = false;
          if (!escape(&lo, &tmp, &sh)) return false;
          if (sh) {
            if (tmp.negated) return fail("negated shorthand inside a class");
            cc.ranges.insert(cc.ranges.end(), tmp.ranges.begin(), tmp.ranges.end());
            continue;
          }
        } else if (p[i] == '[' && i + 1 < p.size() && p[i + 1] == ':') {
          return fail("POSIX classes");
        } else {
          lo = next_cp();
        }
        uint32_t hi = lo;
        if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
          ++i;
          if (p[i] == '\\') {
            ++i;
            bool sh;
            CharClass tmp;
            if (!escape(&hi, &tmp, &sh)) return false;
            if (sh) return fail("shorthand as a range end");
          } else {
            hi = next_cp();
          }
          if (hi < lo) return fail("with a reversed range");
        }
        cc.ranges.push_back({lo, hi});
      }
      if (!more()) return fail("with an unterminated class");
      ++i;  // ']'
      *out = class_seq(cc);
      return error.is_ok();
    }
    bool atom(Seq* out, bool* nullable) {
      Builder& b = im->b;
      *nullable = false;
      char c = p[i];
      if (c == '(') {
        ++i;
        if (more() && p[i] == '?') {
          if (i + 1 < p.size() && p[i + 1] == ':') {
            i += 2;
          } else if (i + 1 < p.size() && p[i + 1] == '<' && i + 2 < p.size() && p[i + 2] != '=' &&
                     p[i + 2] != '!') {
            size_t close = p.find('>', i);
            if (close == std::string_view::npos) return fail("with a bad group name");
            i = close + 1;
          } else {
            return fail("lookaround or group flags (not regular)");
          }
        }
        if (!alternation(out, nullable)) return false;
        if (!more() || p[i] != ')') return fail("with unbalanced parentheses");
        ++i;
        return true;
      }
      if (c == '[') {
        ++i;
        return parse_class(out);
      }
      if (c == '.') {
        ++i;
        CharClass cc;
        cc.negated = true;
        cc.ranges.push_back({'\n', '\n'});
        cc.ranges.push_back({'\r', '\r'});
        *out = class_seq(cc);
        return error.is_ok();
      }
      if (c == '\\') {
        ++i;
        uint32_t cp;
        bool sh;
        CharClass cc;
        if (!escape(&cp, &cc, &sh)) return false;
        *out = sh ? class_seq(cc) : b.lit(json_char(cp));
        return error.is_ok();
      }
      if (c == '^' || c == '$') return fail("anchors other than a leading ^ and a trailing $");
      if (c == '*' || c == '+' || c == '?' || c == '{') return fail("with a quantifier on nothing");
      *out = b.lit(json_char(next_cp()));
      return true;
    }
    bool number(int64_t* v) {
      if (!more() || p[i] < '0' || p[i] > '9') return false;
      *v = 0;
      while (more() && p[i] >= '0' && p[i] <= '9') {
        *v = *v * 10 + (p[i++] - '0');
        if (*v > kMaxRepeat) return fail(fmt::format("with a repetition count over {}", kMaxRepeat));
      }
      return true;
    }
    bool quantified(Seq* out, bool* nullable) {
      Builder& b = im->b;
      if (!atom(out, nullable)) return false;
      while (more()) {
        char c = p[i];
        int64_t lo, hi;
        if (c == '*') { lo = 0; hi = -1; ++i; }
        else if (c == '+') { lo = 1; hi = -1; ++i; }
        else if (c == '?') { lo = 0; hi = 1; ++i; }
        else if (c == '{') {
          size_t save = i++;
          if (!number(&lo)) {
            if (!error.is_ok()) return false;
            i = save;  // a literal '{'
            return true;
          }
          hi = lo;
          if (more() && p[i] == ',') {
            ++i;
            hi = -1;
            if (more() && p[i] != '}' && !number(&hi)) return fail("with a bad {n,m}");
          }
          if (!more() || p[i] != '}') return fail("with a bad {n,m}");
          ++i;
          if (hi >= 0 && hi < lo) return fail("with {n,m} where m < n");
        } else {
          break;
        }
        if (more() && p[i] == '?') ++i;  // lazy: the same language
        if (more() && p[i] == '+') return fail("possessive quantifiers");
        if (*nullable && (hi < 0 || hi > 1)) return fail("repeating a part that can match nothing");
        *out = b.repeat(*out, lo, hi);
        if (lo == 0) *nullable = true;
      }
      return true;
    }
    bool sequence(Seq* out, bool* nullable) {
      *out = {};
      *nullable = true;
      while (more() && p[i] != '|' && p[i] != ')') {
        Seq s;
        bool n;
        if (!quantified(&s, &n)) return false;
        Builder::append(*out, s);
        *nullable = *nullable && n;
      }
      return true;
    }
    bool alternation(Seq* out, bool* nullable) {
      std::vector<Seq> alts;
      *nullable = false;
      for (;;) {
        Seq s;
        bool n;
        if (!sequence(&s, &n)) return false;
        alts.push_back(std::move(s));
        *nullable = *nullable || n;
        if (more() && p[i] == '|') {
          ++i;
          continue;
        }
        break;
      }
      *out = im->b.alt(std::move(alts));
      return true;
    }
  };

  Result<Seq> pattern(std::string_view pat, const std::string& where) {
    bool anchored_start = !pat.empty() && pat.front() == '^';
    bool anchored_end = false;
    if (anchored_start) pat.remove_prefix(1);
    if (!pat.empty() && pat.back() == '$') {
      size_t bs = 0;
      for (size_t k = pat.size() - 1; k > 0 && pat[k - 1] == '\\'; --k) ++bs;
      if (bs % 2 == 0) {
        anchored_end = true;
        pat.remove_suffix(1);
      }
    }
    Regex re{this, pat, 0, where};
    Seq body;
    bool nullable;
    if (!re.alternation(&body, &nullable) || re.more()) {
      if (re.error.is_ok()) re.fail("with unbalanced parentheses");
      return re.error;
    }
    Seq out = {b.byte('"')};
    if (!anchored_start) Builder::append(out, b.star(string_char()));
    Builder::append(out, body);
    if (!anchored_end) Builder::append(out, b.star(string_char()));
    Builder::append(out, b.byte('"'));
    return out;
  }

  // --- schemas ----------------------------------------------------------------
  Result<const json*> resolve(const std::string& ref, const std::string& where) {
    if (ref.empty() || ref[0] != '#')
      return unsupported_feature(fmt::format("$ref '{}' (only local refs '#...')", ref.substr(0, 80)),
                                 where);
    const json* node = doc;
    size_t pos = 1;
    if (ref.size() > 1 && ref[1] != '/')
      return unsupported_feature(fmt::format("$ref '{}' (anchors)", ref.substr(0, 80)), where);
    while (pos < ref.size()) {
      size_t next = ref.find('/', pos + 1);
      std::string tok = ref.substr(pos + 1, next == std::string::npos ? std::string::npos
                                                                      : next - pos - 1);
      std::string key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += tok[k];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
      } else if (node->is_array() && !key.empty() &&
                 key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(key.substr(0, 9)) < node->size()) {
        node = &(*node)[std::stoull(key.substr(0, 9))];
      } else {
        return invalid_argument(
            fmt::format("$ref '{}' does not resolve (at {})", ref.substr(0, 80), where));
      }
      if (next == std::string::npos) break;
      pos = next;
    }
    return node;
  }

  Result<Seq> value(const json& s, const std::string& where, int depth) {
    if (depth > 128) return invalid_argument(fmt::format("the schema nests too deeply (at {})", where));
    if (b.num_rules() > kMaxRules)
      return invalid_argument("the schema is too large (its grammar exceeds the rule limit)");
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return invalid_argument(fmt::format("the schema 'false' admits no value (at {})", where));
    }
    if (!s.is_object())
      return invalid_argument(fmt::format("a schema must be an object or a boolean (at {})", where));
    static const std::set<std::string> kAnnotations = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict", "name"};
    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "pattern",
        "minLength", "maxLength", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "nullable"};
    std::set<std::string> assertions;
    for (const auto& [k, v] : s.items()) {
      if (kAnnotations.count(k)) continue;
      if (!kKnown.count(k)) return unsupported_feature("'" + k.substr(0, 64) + "'", where);
      assertions.insert(k);
    }
    auto only = [&](const char* kw) -> Status {
      for (const std::string& k : assertions)
        if (k != kw)
          return unsupported_feature(fmt::format("'{}' beside '{}'", k, kw), where);
      return Status::ok();
    };
    if (s.contains("nullable") && s["nullable"] == true) {
      json copy = s;
      copy.erase("nullable");
      FERRITE_ASSIGN_OR_RETURN(Seq inner, value(copy, where, depth + 1));
      return b.alt({inner, b.lit("null")});
    }
    if (s.contains("$ref")) {
      FERRITE_RETURN_IF_ERROR(only("$ref"));
      if (!s["$ref"].is_string()) return invalid_argument(fmt::format("'$ref' must be a string (at {})", where));
      const std::string ref = s["$ref"].get<std::string>();
      auto it = refs.find(ref);
      if (it != refs.end()) return Builder::ref(it->second);
      FERRITE_ASSIGN_OR_RETURN(const json* target, resolve(ref, where));
      uint32_t r = b.declare();
      refs[ref] = r;
      FERRITE_ASSIGN_OR_RETURN(Seq body, value(*target, ref, depth + 1));
      b.define(r, {body});
      return Builder::ref(r);
    }
    if (s.contains("const")) {
      FERRITE_RETURN_IF_ERROR(only("const"));
      return b.lit(s["const"].dump());
    }
    if (s.contains("enum")) {
      for (const std::string& k : assertions)
        if (k != "enum" && k != "type")
          return unsupported_feature(fmt::format("'{}' beside 'enum'", k), where);
      const json& e = s["enum"];
      if (!e.is_array() || e.empty())
        return invalid_argument(fmt::format("'enum' must be a non-empty array (at {})", where));
      std::vector<Seq> alts;
      for (const json& v : e) alts.push_back(b.lit(v.dump()));
      return b.alt(std::move(alts));
    }
    for (const char* kw : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(kw)) continue;
      FERRITE_RETURN_IF_ERROR(only(kw));
      const json& list = s[kw];
      if (!list.is_array() || list.empty())
        return invalid_argument(fmt::format("'{}' must be a non-empty array (at {})", kw, where));
      if (std::string(kw) == "allOf") {
        if (list.size() != 1) return unsupported_feature("'allOf' with more than one schema", where);
        return value(list[0], where + "/allOf/0", depth + 1);
      }
      std::vector<Seq> alts;
      for (size_t k = 0; k < list.size(); ++k) {
        FERRITE_ASSIGN_OR_RETURN(Seq a, value(list[k], fmt::format("{}/{}/{}", where, kw, k), depth + 1));
        alts.push_back(std::move(a));
      }
      return b.alt(std::move(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return invalid_argument(fmt::format("'type' must hold strings (at {})", where));
          types.push_back(x.get<std::string>());
        }
      } else {
        return invalid_argument(fmt::format("'type' must be a string or a list (at {})", where));
      }
    } else {
      // No type: infer from the keywords, else any value.
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
        types.push_back("object");
      else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
        types.push_back("array");
      else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
        types.push_back("string");
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum"))
        types.push_back("number");
      else
        return any_value();
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) {
      FERRITE_ASSIGN_OR_RETURN(Seq a, typed(s, t, where, depth));
      alts.push_back(std::move(a));
    }
    return b.alt(std::move(alts));
  }

  Result<int64_t> get_count(const json& s, const char* key, int64_t dflt, const std::string& where) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return invalid_argument(fmt::format("'{}' must be a non-negative integer (at {})", key, where));
    if (v.get<int64_t>() > kMaxRepeat)
      return unsupported_feature(fmt::format("'{}' over {}", key, kMaxRepeat), where);
    return v.get<int64_t>();
  }

  // [lo, hi] of an integer / the integer part bounds of a number.
  Status int_bounds(const json& s, const std::string& where, bool integer, int64_t* lo, int64_t* hi) {
    *lo = -kMaxInt;
    *hi = kMaxInt;
    auto num = [&](const char* key, double* out) -> Status {
      if (!s[key].is_number())
        return invalid_argument(fmt::format("'{}' must be a number (at {})", key, where));
      *out = s[key].get<double>();
      return Status::ok();
    };
    auto clamp = [](double v) {
      return static_cast<int64_t>(std::max<double>(-kMaxInt, std::min<double>(kMaxInt, v)));
    };
    double v;
    if (s.contains("minimum")) {
      FERRITE_RETURN_IF_ERROR(num("minimum", &v));
      *lo = std::max(*lo, clamp(std::ceil(v)));
    }
    if (s.contains("exclusiveMinimum")) {
      FERRITE_RETURN_IF_ERROR(num("exclusiveMinimum", &v));
      *lo = std::max(*lo, clamp(std::floor(v) + 1));
    }
    if (s.contains("maximum")) {
      FERRITE_RETURN_IF_ERROR(num("maximum", &v));
      *hi = std::min(*hi, clamp(std::floor(v)));
    }
    if (s.contains("exclusiveMaximum")) {
      FERRITE_RETURN_IF_ERROR(num("exclusiveMaximum", &v));
      *hi = std::min(*hi, clamp(std::ceil(v) - 1));
    }
    (void)integer;
    if (*lo > *hi)
      return invalid_argument(fmt::format("no {} satisfies the bounds (at {})",
                                          integer ? "integer" : "number", where));
    return Status::ok();
  }

  Result<Seq> typed(const json& s, const std::string& t, const std::string& where, int depth) {
    if (t == "null") return b.lit("null");
    if (t == "boolean") return b.alt({b.lit("true"), b.lit("false")});
    if (t == "integer" || t == "number") {
      const bool bounded = s.contains("minimum") || s.contains("maximum") ||
                           s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
      int64_t lo, hi;
      FERRITE_RETURN_IF_ERROR(int_bounds(s, where, t == "integer", &lo, &hi));
      if (t == "integer") return int_range(lo, hi);
      if (!bounded) return any_number();
      return number_range(lo, hi);
    }
    if (t == "string") {
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string())
          return invalid_argument(fmt::format("'pattern' must be a string (at {})", where));
        if (s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
          return unsupported_feature("'pattern' with 'minLength' / 'maxLength' / 'format'", where);
        return pattern(s["pattern"].get<std::string>(), where + "/pattern");
      }
      if (s.contains("format")) {
        if (!s["format"].is_string())
          return invalid_argument(fmt::format("'format' must be a string (at {})", where));
        static const std::map<std::string, std::string> kFormats = {
            {"date", R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)"},
            {"time", R"(^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)?$)"},
            {"date-time",
             R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)"},
            {"uuid", R"(^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$)"},
            {"email", R"(^[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\.[a-zA-Z0-9-]{1,63}){0,4}\.[a-zA-Z]{2,8}$)"},
            {"ipv4", R"(^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$)"}};
        auto it = kFormats.find(s["format"].get<std::string>());
        if (it == kFormats.end())
          return unsupported_feature(
              fmt::format("string format '{}'", s["format"].get<std::string>().substr(0, 64)), where);
        if (s.contains("minLength") || s.contains("maxLength"))
          return unsupported_feature("'format' with 'minLength' / 'maxLength'", where);
        return pattern(it->second, where + "/format");
      }
      FERRITE_ASSIGN_OR_RETURN(int64_t lo, get_count(s, "minLength", 0, where));
      FERRITE_ASSIGN_OR_RETURN(int64_t hi, get_count(s, "maxLength", -1, where));
      if (hi >= 0 && hi < lo)
        return invalid_argument(fmt::format("'maxLength' is below 'minLength' (at {})", where));
      return Builder::cat({b.byte('"'), b.repeat(string_char(), lo, hi), b.byte('"')});
    }
    if (t == "array") {
      FERRITE_ASSIGN_OR_RETURN(int64_t min, get_count(s, "minItems", 0, where));
      FERRITE_ASSIGN_OR_RETURN(int64_t max, get_count(s, "maxItems", -1, where));
      if (max >= 0 && max < min)
        return invalid_argument(fmt::format("'maxItems' is below 'minItems' (at {})", where));
      std::vector<Seq> prefix;
      if (s.contains("prefixItems")) {
        const json& pi = s["prefixItems"];
        if (!pi.is_array()) return invalid_argument(fmt::format("'prefixItems' must be an array (at {})", where));
        for (size_t k = 0; k < pi.size(); ++k) {
          FERRITE_ASSIGN_OR_RETURN(Seq v, value(pi[k], fmt::format("{}/prefixItems/{}", where, k), depth + 1));
          prefix.push_back(Builder::cat({v, ws()}));
        }
      }
      std::optional<Seq> rest_item;
      if (!s.contains("items") || !(s["items"].is_boolean() && !s["items"].get<bool>())) {
        json items = s.contains("items") ? s["items"] : json(true);
        if (items.is_array()) return unsupported_feature("'items' as an array (use prefixItems)", where);
        FERRITE_ASSIGN_OR_RETURN(Seq v, value(items, where + "/items", depth + 1));
        rest_item = Builder::cat({v, ws()});
      }
      const int64_t k = static_cast<int64_t>(prefix.size());
      if (!rest_item && min > k)
        return invalid_argument(fmt::format("'minItems' exceeds the items allowed (at {})", where));
      if (!rest_item && (max < 0 || max > k)) max = k;
      // rest(i): after i items.
      std::function<Seq(int64_t)> rest = [&](int64_t i) -> Seq {
        if (max >= 0 && i >= max) return {};
        if (i >= k) {
          return b.repeat(Builder::cat({b.byte(','), ws(), *rest_item}), std::max<int64_t>(0, min - i),
                          max < 0 ? -1 : max - i);
        }
        Seq next = Builder::cat({b.byte(','), ws(), prefix[i], rest(i + 1)});
        return i >= min ? b.opt(next) : next;
      };
      Seq content;
      if (max != 0) {
        Seq first = Builder::cat({k > 0 ? prefix[0] : *rest_item, rest(1)});
        content = min == 0 ? b.opt(first) : first;
      }
      return Builder::cat({b.byte('['), ws(), content, b.byte(']')});
    }
    if (t == "object") {
      std::vector<std::pair<std::string, Seq>> props;  // key literal + value
      std::set<std::string> required;
      if (s.contains("required")) {
        if (!s["required"].is_array())
          return invalid_argument(fmt::format("'required' must be an array (at {})", where));
        for (const json& r : s["required"]) {
          if (!r.is_string()) return invalid_argument(fmt::format("'required' must hold strings (at {})", where));
          required.insert(r.get<std::string>());
        }
      }
      std::vector<bool> req;
      std::set<std::string> listed;
      if (s.contains("properties")) {
        if (!s["properties"].is_object())
          return invalid_argument(fmt::format("'properties' must be an object (at {})", where));
        for (const auto& [name, ps] : s["properties"].items()) {
          FERRITE_ASSIGN_OR_RETURN(Seq v, value(ps, where + "/properties/" + name, depth + 1));
          props.push_back({name, std::move(v)});
          req.push_back(required.count(name) > 0);
          listed.insert(name);
        }
      }
      for (const std::string& r : required)
        if (!listed.count(r)) {
          props.push_back({r, any_value()});
          req.push_back(true);
        }
      std::optional<Seq> addl;
      if (s.contains("additionalProperties")) {
        const json& ap = s["additionalProperties"];
        if (!(ap.is_boolean() && !ap.get<bool>())) {
          FERRITE_ASSIGN_OR_RETURN(Seq v, value(ap, where + "/additionalProperties", depth + 1));
          addl = v;
        }
      } else if (props.empty()) {
        addl = any_value();
      }
      auto kv = [&](const std::string& name, const Seq& v) {
        return Builder::cat({b.lit(json(name).dump()), ws(), b.byte(':'), ws(), v, ws()});
      };
      const size_t n = props.size();
      // E[i]: the rest after something was emitted; N[i]: nothing emitted yet.
      std::vector<Seq> E(n + 1), N(n + 1);
      Seq addkv;
      if (addl) addkv = Builder::cat({any_string(), ws(), b.byte(':'), ws(), *addl, ws()});
      E[n] = addl ? b.star(Builder::cat({b.byte(','), ws(), addkv})) : Seq{};
      for (size_t i = n; i-- > 0;) {
        Seq item = Builder::cat({b.byte(','), ws(), kv(props[i].first, props[i].second), E[i + 1]});
        if (req[i]) {
          E[i] = item;
        } else {
          E[i] = b.alt({item, E[i + 1]});
        }
        if (E[i].size() > 1) {  // keep the rules small
          uint32_t r = b.declare();
          b.define(r, {E[i]});
          E[i] = Builder::ref(r);
        }
      }
      size_t first_req = n;
      for (size_t i = 0; i < n; ++i)
        if (req[i]) {
          first_req = i;
          break;
        }
      N[n] = addl ? b.opt(Builder::cat({addkv, E[n]})) : Seq{};
      for (size_t i = n; i-- > 0;) {
        if (i > first_req) continue;
        Seq item = Builder::cat({kv(props[i].first, props[i].second), E[i + 1]});
        N[i] = req[i] ? item : b.alt({item, N[i + 1]});
      }
      return Builder::cat({b.byte('{'), ws(), N[0], b.byte('}')});
    }
    return unsupported_feature(fmt::format("type '{}'", t.substr(0, 64)), where);
  }
};

JsonGrammar::JsonGrammar() : impl_(std::make_unique<Impl>()) {}
JsonGrammar::~JsonGrammar() = default;
Builder& JsonGrammar::builder() { return impl_->b; }
Builder::Seq JsonGrammar::ws() { return impl_->ws(); }
Builder::Seq JsonGrammar::any_value() { return impl_->any_value(); }
Builder::Seq JsonGrammar::string_literal(const std::string& s) {
  return impl_->b.lit(json(s).dump());
}

Result<Builder::Seq> JsonGrammar::value(const json& schema, const json& document) {
  impl_->doc = &document;
  impl_->refs.clear();
  return impl_->value(schema, "#", 0);
}

Result<Grammar> JsonGrammar::finish(Builder::Seq top) {
  uint32_t root = impl_->b.declare();
  impl_->b.define(root, {std::move(top)});
  Grammar g = impl_->b.finish(root);
  StackSet st;
  initial_state(g, &st);
  if (st.empty() && !st.accepting)
    return invalid_argument("the schema admits no value (a $ref cycle that consumes nothing?)");
  return g;
}

Result<Grammar> json_schema_grammar(const json& schema) {
  JsonGrammar jg;
  FERRITE_ASSIGN_OR_RETURN(Builder::Seq v, jg.value(schema, schema));
  return jg.finish(std::move(v));
}

Grammar json_object_grammar() {
  JsonGrammar jg;
  json s = {{"type", "object"}};
  auto v = jg.value(s, s);
  return std::move(jg.finish(std::move(v).value())).value();
}

}  // namespace ferrite::grammar
