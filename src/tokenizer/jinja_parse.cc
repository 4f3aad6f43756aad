// Jinja lexing and parsing: template source -> segments (text, tags) with
// transformers' whitespace settings applied -> statement and expression tree.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <set>

#include "tokenizer/jinja.h"

namespace ferrite::jinja {
namespace {

[[noreturn]] void fail(int line, const std::string& msg) {
  throw JinjaError("template line " + std::to_string(line) + ": " + msg);
}

struct Segment {
  enum class Kind { kText, kVar, kBlock };
  Kind kind;
  std::string text;  // text, or the tag's inner source
  int line;
};

// Line numbers of positions in `s`, counted incrementally (positions mostly
// increase), so lexing stays linear in the template size.
class LineCounter {
 public:
  explicit LineCounter(std::string_view s) : s_(s) {}
  int at(size_t pos) {
    pos = std::min(pos, s_.size());
    if (pos < pos_) pos_ = 0, line_ = 1;
    for (; pos_ < pos; ++pos_) line_ += s_[pos_] == '\n';
    return line_;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
};

// Position just past the closing delimiter `close` of a tag whose inner part
// starts at `pos`, skipping string literals; npos when unterminated.
size_t find_tag_end(std::string_view s, size_t pos, std::string_view close) {
  char quote = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      continue;
    }
    if (s.compare(i, close.size(), close) == 0) return i;
  }
  return std::string_view::npos;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::vector<Segment> lex_template(std::string_view src) {
  std::string source(src);
  // keep_trailing_newline=False: one trailing newline is dropped.
  if (source.ends_with("\r\n"))
    source.resize(source.size() - 2);
  else if (source.ends_with('\n'))
    source.pop_back();
  std::string_view s = source;
  LineCounter lines(s);
  auto line_at = [&lines](std::string_view, size_t pos) { return lines.at(pos); };

  std::vector<Segment> out;
  bool strip_next = false;    // previous tag ended with '-'
  bool trim_newline = false;  // previous tag was a block/comment (trim_blocks)
  size_t pos = 0;
  auto push_text = [&](std::string text) {
    if (strip_next) {
      size_t b = 0;
      while (b < text.size() && is_space(text[b])) ++b;
      text.erase(0, b);
    } else if (trim_newline) {
      if (text.starts_with("\r\n"))
        text.erase(0, 2);
      else if (text.starts_with('\n'))
        text.erase(0, 1);
    }
    strip_next = trim_newline = false;
    return text;
  };
  while (pos <= s.size()) {
    size_t open = s.find('{', pos);
    while (open != std::string_view::npos && open + 1 < s.size() && s[open + 1] != '{' &&
           s[open + 1] != '%' && s[open + 1] != '#') {
      open = s.find('{', open + 1);
    }
    if (open == std::string_view::npos || open + 1 >= s.size()) {
      std::string text = push_text(std::string(s.substr(pos)));
      if (!text.empty()) out.push_back({Segment::Kind::kText, text, line_at(s, pos)});
      break;
    }
    char type = s[open + 1];
    size_t inner = open + 2;
    bool lstrip_mode_minus = inner < s.size() && s[inner] == '-';
    bool lstrip_mode_plus = inner < s.size() && s[inner] == '+';
    if (lstrip_mode_minus || lstrip_mode_plus) ++inner;
    std::string text = push_text(std::string(s.substr(pos, open - pos)));
    // Whitespace before the tag.
    if (lstrip_mode_minus) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (type != '{' && !lstrip_mode_plus) {
      // lstrip_blocks: drop spaces/tabs between the line start and the tag.
      size_t b = open;
      while (b > 0 && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
      if (b == 0 || s[b - 1] == '\n') {
        size_t n = open - b;
        if (n <= text.size()) text.resize(text.size() - n);
      }
    }
    if (!text.empty()) out.push_back({Segment::Kind::kText, text, line_at(s, pos)});
    int line = line_at(s, open);
    std::string_view close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    size_t end = type == '#' ? s.find(close, inner) : find_tag_end(s, inner, close);
    if (end == std::string_view::npos) fail(line, "unclosed tag");
    size_t inner_end = end;
    bool rstrip = inner_end > inner && s[inner_end - 1] == '-';
    if (rstrip || (inner_end > inner && s[inner_end - 1] == '+')) --inner_end;
    pos = end + 2;
    strip_next = rstrip;
    trim_newline = !rstrip && type != '{';
    if (type == '#') continue;
    std::string body(s.substr(inner, inner_end - inner));
    if (type == '%') {
      // {% raw %} ... {% endraw %}: emit verbatim.
      size_t b = body.find_first_not_of(" \t\r\n");
      size_t e = body.find_last_not_of(" \t\r\n");
      if (b != std::string::npos && body.substr(b, e - b + 1) == "raw") {
        size_t endraw = pos;
        while (true) {
          endraw = s.find("{%", endraw);
          if (endraw == std::string_view::npos) fail(line, "raw block without endraw");
          size_t tag_end = s.find("%}", endraw);
          if (tag_end == std::string_view::npos) fail(line, "raw block without endraw");
          std::string t(s.substr(endraw + 2, tag_end - endraw - 2));
          bool minus_open = !t.empty() && t[0] == '-';
          size_t tb = t.find_first_not_of(" \t\r\n-+");
          size_t te = t.find_last_not_of(" \t\r\n-+");
          if (tb != std::string::npos && t.substr(tb, te - tb + 1) == "endraw") {
            std::string raw = push_text(std::string(s.substr(pos, endraw - pos)));
            if (minus_open) {
              while (!raw.empty() && is_space(raw.back())) raw.pop_back();
            }
            if (!raw.empty()) out.push_back({Segment::Kind::kText, raw, line});
            strip_next = tag_end > 0 && s[tag_end - 1] == '-';
            trim_newline = !strip_next;
            pos = tag_end + 2;
            break;
          }
          endraw = tag_end;
        }
        continue;
      }
    }
    out.push_back({type == '{' ? Segment::Kind::kVar : Segment::Kind::kBlock, body, line});
  }
  return out;
}

// ---- expression tokens ----

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind;
  std::string text;
  Value value;
};

std::vector<Token> lex_expr(const std::string& s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (is_space(c)) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      out.push_back({Token::Kind::kName, s.substr(b, i - b), Value()});
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = i;
      bool is_float = false;
      while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      if (i + 1 < s.size() && s[i] == '.' && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        is_float = true;
        ++i;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        if (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
          is_float = true;
          i = j;
          while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
        }
      }
      std::string num;
      for (char ch : s.substr(b, i - b)) {
        if (ch != '_') num += ch;
      }
      if (is_float) {
        // strtod: overflow gives inf, as Python's float literal does.
        out.push_back({Token::Kind::kFloat, num, Value(std::strtod(num.c_str(), nullptr))});
      } else {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
        if (ec != std::errc() || end != num.data() + num.size()) {
          fail(line, "integer literal " + num + " is out of range");
        }
        out.push_back({Token::Kind::kInt, num, Value(v)});
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string str;
      ++i;
      while (true) {
        if (i >= s.size()) fail(line, "unterminated string literal");
        char ch = s[i++];
        if (ch == c) break;
        if (ch != '\\') {
          str += ch;
          continue;
        }
        if (i >= s.size()) fail(line, "unterminated string literal");
        char e = s[i++];
        switch (e) {
          case 'n':
            str += '\n';
            break;
          case 't':
            str += '\t';
            break;
          case 'r':
            str += '\r';
            break;
          case 'b':
            str += '\b';
            break;
          case 'f':
            str += '\f';
            break;
          case 'v':
            str += '\v';
            break;
          case 'a':
            str += '\a';
            break;
          case '0':
            str += '\0';
            break;
          case '\\':
            str += '\\';
            break;
          case '\'':
            str += '\'';
            break;
          case '"':
            str += '"';
            break;
          case '\n':
            break;
          case 'x':
          case 'u':
          case 'U': {
            size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t code = 0;
            for (size_t k = 0; k < n; ++k) {
              if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k]))) {
                fail(line, std::string("bad \\") + e + " escape in string literal: needs " +
                               std::to_string(n) + " hex digits");
              }
              char h = s[i + k];
              code = code * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                           ? h - '0'
                                                           : std::tolower(h) - 'a' + 10);
            }
            if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
              fail(line, "escape \\" + std::string(1, e) + " names no Unicode scalar value");
            }
            char32_t cp = static_cast<char32_t>(code);
            i += n;
            // UTF-8 encode.
            if (cp < 0x80) {
              str += static_cast<char>(cp);
            } else if (cp < 0x800) {
              str += static_cast<char>(0xC0 | (cp >> 6));
              str += static_cast<char>(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
              str += static_cast<char>(0xE0 | (cp >> 12));
              str += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
              str += static_cast<char>(0x80 | (cp & 0x3F));
            } else {
              str += static_cast<char>(0xF0 | (cp >> 18));
              str += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
              str += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
              str += static_cast<char>(0x80 | (cp & 0x3F));
            }
            break;
          }
          default:  // Python keeps unknown escapes verbatim
            str += '\\';
            str += e;
        }
      }
      out.push_back({Token::Kind::kString, "", Value(std::move(str))});
      continue;
    }
    static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                 "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                 "{",  "}",  ".",  ",",  ":",  "|",  "="};
    bool matched = false;
    for (const char* op : kOps) {
      size_t n = std::char_traits<char>::length(op);
      if (s.compare(i, n, op) == 0) {
        out.push_back({Token::Kind::kOp, op, Value()});
        i += n;
        matched = true;
        break;
      }
    }
    if (!matched) fail(line, std::string("unexpected character '") + c + "'");
  }
  out.push_back({Token::Kind::kEnd, "", Value()});
  return out;
}

// ---- expression parser ----

class ExprParser {
 public:
  ExprParser(const std::string& src, int line, const Limits& limits)
      : toks_(lex_expr(src, line)), line_(line), limits_(limits) {}

  // Recursion guard of the recursive-descent entry points.
  struct Nest {
    explicit Nest(ExprParser& p) : p_(p) {
      if (++p_.nest_ > p_.limits_.max_parse_depth) {
        fail(p_.line_, "expression nests deeper than " +
                           std::to_string(p_.limits_.max_parse_depth) + " levels");
      }
    }
    ~Nest() { --p_.nest_; }
    ExprParser& p_;
  };
  // Sets n's height from its operands; operator chains (a ~ b ~ c ...) grow
  // the tree without recursion, so the height is checked here too.
  NodePtr seal(NodePtr n) {
    int h = 0;
    for (const auto& k : n->kids) {
      if (k) h = std::max(h, k->height);
    }
    n->height = h + 1;
    if (static_cast<size_t>(n->height) > limits_.max_parse_depth) {
      fail(line_, "expression nests deeper than " + std::to_string(limits_.max_parse_depth) +
                      " levels");
    }
    return n;
  }

  bool at_end() const { return peek().kind == Token::Kind::kEnd; }
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool is_op(const char* op, size_t k = 0) const {
    return peek(k).kind == Token::Kind::kOp && peek(k).text == op;
  }
  bool is_name(const char* name, size_t k = 0) const {
    return peek(k).kind == Token::Kind::kName && peek(k).text == name;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    ++pos_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(line_, std::string("expected '") + op + "', got '" + describe() + "'");
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::kName) fail(line_, "expected a name, got '" + describe() + "'");
    return toks_[pos_++].text;
  }
  void expect_end() {
    if (!at_end()) fail(line_, "unexpected '" + describe() + "'");
  }
  std::string describe() const {
    const Token& t = peek();
    if (t.kind == Token::Kind::kEnd) return "end of tag";
    if (t.kind == Token::Kind::kString) return t.value.repr();
    return t.text;
  }

  NodePtr node(Node::Kind k) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->line = line_;
    return n;
  }

  // A full expression, optionally an unparenthesized tuple (a, b).
  NodePtr parse_tuple_or_expr() {
    NodePtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = node(Node::Kind::kTuple);
    t->kids.push_back(first);
    while (accept_op(",")) {
      if (at_end() || is_op(")") || is_op("]") || is_op("}") || is_op("=")) break;
      t->kids.push_back(parse_expr());
    }
    return seal(t);
  }

  NodePtr parse_expr() {
    Nest nest(*this);
    NodePtr e = parse_or();
    if (is_name("if")) {
      ++pos_;
      auto c = node(Node::Kind::kCond);
      NodePtr cond = parse_or();
      NodePtr other = accept_name("else") ? parse_expr() : nullptr;
      c->kids = {cond, e, other};
      return seal(c);
    }
    return e;
  }

  NodePtr parse_or() {
    NodePtr l = parse_and();
    while (accept_name("or")) {
      auto n = node(Node::Kind::kOr);
      n->kids = {l, parse_and()};
      l = seal(n);
    }
    return l;
  }
  NodePtr parse_and() {
    NodePtr l = parse_not();
    while (accept_name("and")) {
      auto n = node(Node::Kind::kAnd);
      n->kids = {l, parse_not()};
      l = seal(n);
    }
    return l;
  }
  NodePtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      ++pos_;
      auto n = node(Node::Kind::kNot);
      n->kids = {parse_not()};
      return seal(n);
    }
    return parse_compare();
  }
  NodePtr parse_compare() {
    NodePtr l = parse_math1();
    while (true) {
      std::string op;
      if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">=")) {
        op = toks_[pos_++].text;
      } else if (is_name("in")) {
        ++pos_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return l;
      }
      auto n = node(Node::Kind::kBinary);
      n->name = op;
      n->kids = {l, parse_math1()};
      l = seal(n);
    }
  }
  NodePtr binary(const std::string& op, NodePtr l, NodePtr r) {
    auto n = node(Node::Kind::kBinary);
    n->name = op;
    n->kids = {std::move(l), std::move(r)};
    return seal(n);
  }
  NodePtr parse_math1() {
    NodePtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = toks_[pos_++].text;
      l = binary(op, l, parse_concat());
    }
    return l;
  }
  NodePtr parse_concat() {
    NodePtr l = parse_math2();
    while (accept_op("~")) l = binary("~", l, parse_math2());
    return l;
  }
  NodePtr parse_math2() {
    NodePtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = toks_[pos_++].text;
      l = binary(op, l, parse_pow());
    }
    return l;
  }
  NodePtr parse_pow() {
    NodePtr l = parse_unary(true);
    while (accept_op("**")) l = binary("**", l, parse_unary(true));
    return l;
  }
  NodePtr parse_unary(bool with_filter) {
    NodePtr n;
    if (is_op("-") || is_op("+")) {
      Nest nest(*this);
      std::string op = toks_[pos_++].text;
      n = node(Node::Kind::kUnary);
      n->name = op;
      n->kids = {parse_unary(false)};
      n = seal(n);
    } else {
      n = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(n) : n;
  }

  void parse_call_args(Node& n) {
    // After '(' : positional args, then name=value keyword args.
    std::vector<NodePtr> pos_args, kw_args;
    std::vector<std::string> kw_names;
    while (!accept_op(")")) {
      if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
        kw_names.push_back(toks_[pos_].text);
        pos_ += 2;
        kw_args.push_back(parse_expr());
      } else {
        if (!kw_args.empty()) fail(line_, "positional argument after keyword argument");
        pos_args.push_back(parse_expr());
      }
      if (!accept_op(",")) {
        expect_op(")");
        break;
      }
    }
    for (auto& a : pos_args) n.kids.push_back(a);
    for (auto& a : kw_args) n.kids.push_back(a);
    n.names = kw_names;
  }

  NodePtr parse_filters(NodePtr n) {
    while (true) {
      if (accept_op("|")) {
        auto f = node(Node::Kind::kFilter);
        f->name = expect_name();
        while (accept_op(".")) f->name += "." + expect_name();
        f->kids.push_back(n);
        if (accept_op("(")) parse_call_args(*f);
        n = seal(f);
      } else if (is_name("is")) {
        ++pos_;
        auto t = node(Node::Kind::kTest);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->kids.push_back(n);
        if (accept_op("(")) {
          parse_call_args(*t);
        } else if (peek().kind == Token::Kind::kString || peek().kind == Token::Kind::kInt ||
                   peek().kind == Token::Kind::kFloat ||
                   (peek().kind == Token::Kind::kName && !is_name("and") && !is_name("or") &&
                    !is_name("else") && !is_name("if") && !is_name("in") && !is_name("not") &&
                    !is_name("is"))) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
          t->kids.push_back(parse_primary());
        }
        n = seal(t);
      } else {
        return n;
      }
    }
  }

  NodePtr parse_postfix(NodePtr n) {
    while (true) {
      if (accept_op(".")) {
        auto a = node(Node::Kind::kAttr);
        if (peek().kind == Token::Kind::kInt) {  // x.0 -> x[0]
          a = node(Node::Kind::kSubscript);
          auto idx = node(Node::Kind::kLiteral);
          idx->value = toks_[pos_++].value;
          a->kids = {n, idx};
        } else {
          a->name = expect_name();
          a->kids = {n};
        }
        n = seal(a);
      } else if (accept_op("[")) {
        NodePtr parts[3] = {nullptr, nullptr, nullptr};
        int colons = 0;
        while (!is_op("]")) {
          if (accept_op(":")) {
            if (++colons > 2) fail(line_, "bad slice");
            continue;
          }
          if (parts[colons]) fail(line_, "bad subscript");
          parts[colons] = parse_expr();
        }
        expect_op("]");
        if (colons == 0) {
          if (!parts[0]) fail(line_, "empty subscript []");
          auto s = node(Node::Kind::kSubscript);
          s->kids = {n, parts[0]};
          n = seal(s);
        } else {
          auto s = node(Node::Kind::kSlice);
          s->kids = {n, parts[0], parts[1], parts[2]};
          n = seal(s);
        }
      } else if (accept_op("(")) {
        auto c = node(Node::Kind::kCall);
        c->kids.push_back(n);
        parse_call_args(*c);
        n = seal(c);
      } else {
        return n;
      }
    }
  }

  NodePtr parse_primary() {
    const Token& t = peek();
    if (t.kind == Token::Kind::kString) {
      std::string s;
      while (peek().kind == Token::Kind::kString) s += toks_[pos_++].value.as_string();
      auto n = node(Node::Kind::kLiteral);
      n->value = Value(std::move(s));
      return n;
    }
    if (t.kind == Token::Kind::kInt || t.kind == Token::Kind::kFloat) {
      auto n = node(Node::Kind::kLiteral);
      n->value = toks_[pos_++].value;
      return n;
    }
    if (t.kind == Token::Kind::kName) {
      std::string name = toks_[pos_++].text;
      auto n = node(Node::Kind::kLiteral);
      if (name == "true" || name == "True")
        n->value = Value(true);
      else if (name == "false" || name == "False")
        n->value = Value(false);
      else if (name == "none" || name == "None")
        n->value = Value::none();
      else {
        n->kind = Node::Kind::kName;
        n->name = name;
      }
      return n;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return node(Node::Kind::kTuple);
      NodePtr e = parse_tuple_or_expr();
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto l = node(Node::Kind::kList);
      while (!accept_op("]")) {
        l->kids.push_back(parse_expr());
        if (!accept_op(",")) {
          expect_op("]");
          break;
        }
      }
      return l;
    }
    if (accept_op("{")) {
      auto d = node(Node::Kind::kDict);
      while (!accept_op("}")) {
        d->kids.push_back(parse_expr());
        expect_op(":");
        d->kids.push_back(parse_expr());
        if (!accept_op(",")) {
          expect_op("}");
          break;
        }
      }
      return seal(d);
    }
    fail(line_, "unexpected '" + describe() + "' in expression");
  }

  // for/set targets: name or name, name, ...
  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = accept_op("(");
    names.push_back(expect_name());
    while (accept_op(",")) names.push_back(expect_name());
    if (paren) expect_op(")");
    return names;
  }

 private:
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int line_;
  const Limits& limits_;
  size_t nest_ = 0;
};

// ---- statement parser ----

class Parser {
 public:
  Parser(std::vector<Segment> segs, const Limits& limits)
      : segs_(std::move(segs)), limits_(limits) {}

  std::vector<NodePtr> parse_all() {
    std::string end;
    auto body = parse_body({}, end);
    return body;
  }

 private:
  static std::string first_word(const std::string& s) {
    size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    size_t e = b;
    while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
    return s.substr(b, e - b);
  }
  static std::string rest_after_word(const std::string& s) {
    size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    size_t e = b;
    while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
    return s.substr(e);
  }

  // Parses statements until a block tag whose keyword is in `ends`;
  // `found` receives that keyword (its segment is left current).
  std::vector<NodePtr> parse_body(const std::set<std::string>& ends, std::string& found) {
    std::vector<NodePtr> body;
    while (i_ < segs_.size()) {
      const Segment& seg = segs_[i_];
      if (seg.kind == Segment::Kind::kText) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kText;
        n->name = seg.text;
        n->line = seg.line;
        body.push_back(n);
        ++i_;
        continue;
      }
      if (seg.kind == Segment::Kind::kVar) {
        ExprParser p(seg.text, seg.line, limits_);
        auto n = p.node(Node::Kind::kOutput);
        n->kids = {p.parse_tuple_or_expr()};
        p.expect_end();
        body.push_back(n);
        ++i_;
        continue;
      }
      std::string word = first_word(seg.text);
      if (ends.count(word)) {
        found = word;
        return body;
      }
      body.push_back(parse_statement(word));
    }
    if (!ends.empty()) {
      fail(segs_.empty() ? 0 : segs_.back().line,
           "unexpected end of template, expected one of: " + join(ends));
    }
    return body;
  }

  static std::string join(const std::set<std::string>& s) {
    std::string out;
    for (const auto& w : s) out += (out.empty() ? "" : ", ") + w;
    return out;
  }

  NodePtr parse_statement(const std::string& word) {
    const Segment& seg = segs_[i_];
    int line = seg.line;
    if (word.empty()) fail(line, "empty or malformed block tag {% " + seg.text + " %}");
    // Nested blocks (and elif chains) recurse here.
    struct Nest {
      Nest(size_t& d, size_t max, int line) : d_(d) {
        if (++d_ > max) {
          fail(line, "statements nest deeper than " + std::to_string(max) + " levels");
        }
      }
      ~Nest() { --d_; }
      size_t& d_;
    } nest(nest_, limits_.max_parse_depth, line);
    ExprParser p(rest_after_word(seg.text), line, limits_);
    ++i_;
    std::string found;
    if (word == "if") {
      auto n = p.node(Node::Kind::kIf);
      NodePtr cond = p.parse_tuple_or_expr();
      p.expect_end();
      // kids: conditions; body of branch k in `else_body`-chained nested ifs.
      n->kids = {cond};
      n->body = parse_body({"elif", "else", "endif"}, found);
      if (found == "elif") {
        auto nested = parse_statement("if");  // consumes through endif
        n->else_body = {nested};
        return n;
      }
      if (found == "else") {
        ++i_;
        n->else_body = parse_body({"endif"}, found);
      }
      ++i_;  // endif
      return n;
    }
    if (word == "for") {
      auto n = p.node(Node::Kind::kFor);
      n->names = p.parse_targets();
      if (!p.accept_name("in")) fail(line, "expected 'in' in for loop");
      NodePtr iter = p.parse_or();  // stops before `if`
      NodePtr filter;
      if (p.accept_name("if")) filter = p.parse_expr();
      if (p.accept_name("recursive")) fail(line, "recursive for loops are not supported");
      p.expect_end();
      n->kids = {iter, filter};
      n->body = parse_body({"else", "endfor"}, found);
      if (found == "else") {
        ++i_;
        n->else_body = parse_body({"endfor"}, found);
      }
      ++i_;
      return n;
    }
    if (word == "set") {
      // set a = x | set a, b = x | set ns.attr = x | set a %}...{% endset
      std::vector<std::string> targets = p.parse_targets();
      std::string attr;
      if (targets.size() == 1 && p.accept_op(".")) attr = p.expect_name();
      if (p.at_end() || p.is_op("|")) {
        if (!attr.empty() || targets.size() != 1) fail(line, "bad set block");
        auto n = p.node(Node::Kind::kSetBlock);
        n->name = targets[0];
        if (p.accept_op("|")) fail(line, "filtered set blocks are not supported");
        n->body = parse_body({"endset"}, found);
        ++i_;
        return n;
      }
      p.expect_op("=");
      auto n = p.node(Node::Kind::kSet);
      n->names = targets;
      n->name = attr;  // non-empty: namespace attribute assignment
      n->kids = {p.parse_tuple_or_expr()};
      p.expect_end();
      return n;
    }
    if (word == "macro") {
      auto n = p.node(Node::Kind::kMacro);
      n->name = p.expect_name();
      p.expect_op("(");
      while (!p.accept_op(")")) {
        n->names.push_back(p.expect_name());
        n->kids.push_back(p.accept_op("=") ? p.parse_expr() : nullptr);
        if (!p.accept_op(",")) {
          p.expect_op(")");
          break;
        }
      }
      p.expect_end();
      n->body = parse_body({"endmacro"}, found);
      ++i_;
      return n;
    }
    if (word == "break" || word == "continue") {
      p.expect_end();
      return p.node(word == "break" ? Node::Kind::kBreak : Node::Kind::kContinue);
    }
    if (word == "generation") {
      // transformers' AssistantTracker: renders its body unchanged.
      auto n = p.node(Node::Kind::kBlock);
      n->body = parse_body({"endgeneration"}, found);
      ++i_;
      return n;
    }
    fail(line, "unsupported template statement '" + word + "'");
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  const Limits& limits_;
  size_t nest_ = 0;
};

}  // namespace

Template Template::parse(std::string_view source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes) {
    throw JinjaError("template is " + std::to_string(source.size()) + " bytes, over the limit of " +
                     std::to_string(limits.max_template_bytes));
  }
  Template t;
  t.body_ = Parser(lex_template(source), limits).parse_all();
  return t;
}

}  // namespace ferrite::jinja
