// Jinja evaluation: statements, expressions, filters, tests and the Python
// methods of str / dict / list that chat templates call.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/jinja.h"

namespace ferrite::jinja {

// ---- budgets (Limits) ----

namespace {

// The render running on this thread. Value's constructors and the helpers of
// jinja_value.cc charge it without a handle being passed around; macro calls
// (which run a nested interpreter) share it.
struct Budget {
  const Limits& limits;
  uint64_t steps = 0;
  uint64_t total_bytes = 0;
  size_t depth = 0;
};
thread_local Budget* t_budget = nullptr;

[[noreturn]] void over_limit(const std::string& what) {
  throw JinjaError("chat template exceeded its limit of " + what);
}

// One level of statement / expression / macro nesting while rendering.
struct EvalDepth {
  EvalDepth() {
    if (t_budget == nullptr) return;
    if (t_budget->depth >= t_budget->limits.max_eval_depth) {
      over_limit(std::to_string(t_budget->limits.max_eval_depth) +
                 " nested statements, expressions and macro calls");
    }
    ++t_budget->depth;
  }
  ~EvalDepth() {
    if (t_budget != nullptr) --t_budget->depth;
  }
  EvalDepth(const EvalDepth&) = delete;
  EvalDepth& operator=(const EvalDepth&) = delete;
};

}  // namespace

void charge_steps(uint64_t n) {
  if (t_budget == nullptr) return;
  t_budget->steps += n;
  if (t_budget->steps > t_budget->limits.max_steps) {
    over_limit(std::to_string(t_budget->limits.max_steps) + " evaluation steps");
  }
}

void check_string_size(size_t bytes) {
  if (t_budget != nullptr && bytes > t_budget->limits.max_string_bytes) {
    over_limit(std::to_string(t_budget->limits.max_string_bytes) + " bytes for one string");
  }
}

void charge_string(size_t bytes) {
  if (t_budget == nullptr) return;
  check_string_size(bytes);
  t_budget->total_bytes += bytes;
  if (t_budget->total_bytes > t_budget->limits.max_total_bytes) {
    over_limit(std::to_string(t_budget->limits.max_total_bytes) + " bytes of strings built");
  }
}

void charge_scan(size_t bytes) { charge_steps(1 + bytes / 256); }

void charge_items(size_t items) {
  if (t_budget == nullptr) return;
  if (items > t_budget->limits.max_items) {
    over_limit(std::to_string(t_budget->limits.max_items) + " items in one list or dict");
  }
  charge_steps(items);
}

void check_value_depth(size_t depth) {
  size_t max = t_budget != nullptr ? t_budget->limits.max_value_depth : kDefaultMaxValueDepth;
  if (depth > max) over_limit(std::to_string(max) + " levels of nested lists and dicts");
}

namespace {

// Text under construction with its data ranges (the render output, set
// blocks, macro output, join, replace, ...). `cap`: the size limit.
class TextBuilder {
 public:
  explicit TextBuilder(bool top_level = false) : top_level_(top_level) {}
  void append(const Value& v) {  // v: a string
    const std::string& t = v.as_string();
    grow(t.size());
    size_t at = text_.size();
    text_ += t;
    append_spans(data_, at, v.spans());
  }
  void append_text(std::string_view t) {
    grow(t.size());
    text_ += t;
  }
  // bytes [b, e) of string `v`
  void append_part(const Value& v, size_t b, size_t e) {
    grow(e - b);
    size_t at = text_.size();
    text_.append(v.as_string(), b, e - b);
    append_spans(data_, at, slice_spans(v.spans(), b, e));
  }
  size_t size() const { return text_.size(); }
  Value take() { return Value(std::move(text_), std::move(data_)); }
  Rendered take_rendered() { return Rendered{std::move(text_), std::move(data_)}; }

 private:
  void grow(size_t n) {
    size_t total = text_.size() + n;
    if (top_level_ && t_budget != nullptr) {
      if (total > t_budget->limits.max_output_bytes) {
        over_limit(std::to_string(t_budget->limits.max_output_bytes) + " bytes of rendered text");
      }
    } else {
      check_string_size(total);
    }
    charge_scan(n);
  }
  bool top_level_;
  std::string text_;
  Spans data_;
};

// Bytes [b, e) of string `v`, keeping provenance.
Value substr(const Value& v, size_t b, size_t e) {
  return Value(v.as_string().substr(b, e - b), slice_spans(v.spans(), b, e));
}

Value concat(const Value& a, const Value& b) {
  check_string_size(a.as_string().size() + b.as_string().size());
  Spans data = a.spans();
  append_spans(data, a.as_string().size(), b.spans());
  return Value(a.as_string() + b.as_string(), std::move(data));
}

// Checked int64 arithmetic: Python ints are unbounded, ours end in an error.
int64_t checked_add(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_add_overflow(x, y, &r)) throw JinjaError("integer overflow in +");
  return r;
}
int64_t checked_sub(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_sub_overflow(x, y, &r)) throw JinjaError("integer overflow in -");
  return r;
}
int64_t checked_mul(int64_t x, int64_t y, const char* op = "*") {
  int64_t r;
  if (__builtin_mul_overflow(x, y, &r)) throw JinjaError(std::string("integer overflow in ") + op);
  return r;
}

using Frame = std::unordered_map<std::string, Value>;
using Frames = std::vector<std::shared_ptr<Frame>>;

[[noreturn]] void fail(const Node& n, const std::string& msg) {
  throw JinjaError("template line " + std::to_string(n.line) + ": " + msg);
}

enum class Flow { kNormal, kBreak, kContinue };

constexpr size_t kNoIndex = SIZE_MAX;  // keyword-only argument

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Python str.strip family on string `v`; `chars` not a string means
// whitespace. The result keeps v's provenance.
Value py_strip(const Value& v, const Value& chars, bool left, bool right) {
  const std::string& s = v.as_string();
  std::unordered_set<std::string_view> strip_set;
  std::string ws = " \t\n\r\v\f";
  for (auto cp : code_points(chars.is_string() ? chars.as_string() : ws)) strip_set.insert(cp);
  auto cps = code_points(s);
  auto in_set = [&](std::string_view cp) { return strip_set.count(cp) != 0; };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && in_set(cps[b])) ++b;
  if (right)
    while (e > b && in_set(cps[e - 1])) --e;
  if (b == e) return Value("");
  size_t byte_b = static_cast<size_t>(cps[b].data() - s.data());
  size_t byte_e = static_cast<size_t>(cps[e - 1].data() + cps[e - 1].size() - s.data());
  return substr(v, byte_b, byte_e);
}

List py_split(const Value& sv, const Value& sep, int64_t maxsplit) {
  const std::string& s = sv.as_string();
  charge_scan(s.size());
  List out;
  if (!sep.is_string() || sep.is_none()) {
    // Split on whitespace runs, dropping empties.
    size_t i = 0;
    auto ws = [](char c) {
      return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    };
    while (i < s.size()) {
      while (i < s.size() && ws(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > i && ws(s[e - 1])) --e;
        out.push_back(substr(sv, i, e));
        break;
      }
      size_t b = i;
      while (i < s.size() && !ws(s[i])) ++i;
      out.push_back(substr(sv, b, i));
    }
    return out;
  }
  const std::string& d = sep.as_string();
  if (d.empty()) throw JinjaError("empty separator");
  size_t last = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    size_t p = str_find(s, d, last);
    if (p == std::string::npos) break;
    out.push_back(substr(sv, last, p));
    last = p + d.size();
  }
  out.push_back(substr(sv, last, s.size()));
  return out;
}

// Python str.replace on string `sv`; the copied parts of sv and of `to` keep
// their provenance.
Value py_replace(const Value& sv, const Value& from_v, const Value& to, int64_t count) {
  const std::string& s = sv.as_string();
  const std::string from = from_v.str();
  TextBuilder out;
  size_t last = 0;
  int64_t n = 0;
  if (from.empty()) {
    // Python inserts `to` between every character.
    auto cps = code_points(s);
    for (auto cp : cps) {
      if (count < 0 || n < count) {
        out.append(to);
        ++n;
      }
      size_t b = static_cast<size_t>(cp.data() - s.data());
      out.append_part(sv, b, b + cp.size());
    }
    if (count < 0 || n < count) out.append(to);
    return out.take();
  }
  for (size_t p = str_find(s, from); p != std::string::npos && (count < 0 || n < count);
       p = str_find(s, from, last)) {
    out.append_part(sv, last, p);
    out.append(to);
    last = p + from.size();
    ++n;
  }
  out.append_part(sv, last, s.size());
  return out.take();
}

std::string py_title(const std::string& s, bool capitalize_only) {
  std::string out = s;
  bool start = true;
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    bool alpha = std::isalpha(c) != 0;
    if (capitalize_only) {
      out[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
      continue;
    }
    out[i] = static_cast<char>(alpha ? (start ? std::toupper(c) : std::tolower(c)) : c);
    start = !alpha && !(c >= 0x80);
  }
  return out;
}

int64_t py_index(int64_t i, size_t size) { return i < 0 ? i + static_cast<int64_t>(size) : i; }

// Python slice indices over `size` elements.
std::vector<size_t> slice_indices(size_t size, const Value& start, const Value& stop,
                                  const Value& step_v) {
  int64_t n = static_cast<int64_t>(size);
  int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : step_v.as_int();
  if (step == 0) throw JinjaError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = clamp(start, step > 0 ? 0 : n - 1);
  int64_t e = clamp(stop, step > 0 ? n : -1);
  std::vector<size_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e;) {
    out.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, step, &i)) break;  // past either end
  }
  charge_steps(out.size());
  return out;
}

// Code-point walks without materializing code_points() (16 bytes per
// character), stepping exactly as it does.
size_t cp_len_at(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return std::min(n, s.size() - i);
}
size_t cp_count(std::string_view s) {
  charge_scan(s.size());
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += cp_len_at(s, i)) ++n;
  return n;
}
// Byte offset of code point `index` (s.size() past the end).
size_t cp_byte(std::string_view s, size_t index) {
  size_t i = 0;
  for (; index > 0 && i < s.size(); --index) i += cp_len_at(s, i);
  charge_scan(i);
  return i;
}

// [b, e) of a step-1 Python slice over `size` elements.
std::pair<size_t, size_t> slice_range(size_t size, const Value& start, const Value& stop) {
  int64_t n = static_cast<int64_t>(size);
  auto clamp = [&](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  return {static_cast<size_t>(clamp(start, 0)), static_cast<size_t>(clamp(stop, n))};
}

class Interp {
 public:
  explicit Interp(Frames frames, bool top_level = false)
      : out(top_level), frames_(std::move(frames)) {}

  TextBuilder out;

  Flow exec_body(const std::vector<NodePtr>& body) {
    for (const auto& n : body) {
      Flow f = exec(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value::undefined(name);
  }
  void assign(const std::string& name, Value v) { (*frames_.back())[name] = std::move(v); }

  Flow exec(const Node& n) {
    EvalDepth depth;
    charge_steps(1);
    switch (n.kind) {
      case Node::Kind::kText:
        out.append_text(n.name);
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out.append(eval(*n.kids[0]).to_str());
        return Flow::kNormal;
      case Node::Kind::kIf:
        return exec_body(eval(*n.kids[0]).truthy() ? n.body : n.else_body);
      case Node::Kind::kFor:
        return exec_for(n);
      case Node::Kind::kSet: {
        Value v = eval(*n.kids[0]);
        if (!n.name.empty()) {
          Value ns = lookup(n.names[0]);
          if (!ns.is_dict() || !ns.dict().is_namespace) {
            fail(n, "cannot assign attribute on non-namespace object '" + n.names[0] + "'");
          }
          // Keeps values acyclic (and their depth bounded): see Dict.
          if (v.has_namespace()) fail(n, "a namespace attribute cannot hold a namespace");
          check_value_depth(v.depth() + 1);
          ns.dict().set(n.name, std::move(v));
        } else {
          assign_targets(n, n.names, std::move(v));
        }
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        TextBuilder saved;
        std::swap(saved, out);
        exec_body(n.body);
        std::swap(saved, out);
        assign(n.name, saved.take());
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        define_macro(n);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kBlock:
        return exec_body(n.body);
      default:
        fail(n, "internal: expression used as statement");
    }
  }

  void assign_targets(const Node& n, const std::vector<std::string>& names, Value v) {
    if (names.size() == 1) {
      assign(names[0], std::move(v));
      return;
    }
    List items = iterate(n, v);
    if (items.size() != names.size()) {
      fail(n, "cannot unpack " + std::to_string(items.size()) + " values into " +
                  std::to_string(names.size()) + " names");
    }
    for (size_t i = 0; i < names.size(); ++i) assign(names[i], items[i]);
  }

  List iterate(const Node& n, const Value& v) {
    if (v.is_list()) {
      charge_steps(v.list().size());
      return v.list();
    }
    if (v.is_dict()) {
      charge_items(v.dict().items.size());
      List keys;
      for (const auto& [k, _] : v.dict().items) keys.push_back(v.dict().key(k));
      return keys;
    }
    if (v.is_string()) {
      const std::string& s = v.as_string();
      auto cps = code_points(s);
      charge_items(cps.size());
      List chars;
      for (auto cp : cps) {
        size_t b = static_cast<size_t>(cp.data() - s.data());
        chars.push_back(substr(v, b, b + cp.size()));
      }
      return chars;
    }
    if (v.is_undefined()) return {};  // Jinja iterates an undefined as empty
    fail(n, "'" + v.type_name() + "' object is not iterable");
  }

  // The `loop` variable of iteration i. Out of line: its temporaries would
  // otherwise sit in exec_for's frame, on the stack once per nested loop.
  [[gnu::noinline]] static Value loop_object(const List& items, size_t i) {
    const size_t len = items.size();
    auto loop = std::make_shared<Dict>();
    loop->items = {
        {"index", Value(static_cast<int64_t>(i + 1))},
        {"index0", Value(static_cast<int64_t>(i))},
        {"revindex", Value(static_cast<int64_t>(len - i))},
        {"revindex0", Value(static_cast<int64_t>(len - i - 1))},
        {"first", Value(i == 0)},
        {"last", Value(i + 1 == len)},
        {"length", Value(static_cast<int64_t>(len))},
        {"depth", Value(1)},
        {"depth0", Value(0)},
        {"previtem", i > 0 ? items[i - 1] : Value::undefined("previtem")},
        {"nextitem", i + 1 < len ? items[i + 1] : Value::undefined("nextitem")},
        {"cycle", Value::function([i](Args& a) {
           if (a.positional.empty()) throw JinjaError("loop.cycle() needs arguments");
           return a.positional[i % a.positional.size()];
         })},
    };
    return Value(loop);
  }

  Flow exec_for(const Node& n) {
    List items = iterate(n, eval(*n.kids[0]));
    if (n.kids[1]) {
      // `for x in xs if cond`: filter first, so loop.* counts the kept items.
      List kept;
      for (auto& item : items) {
        frames_.push_back(std::make_shared<Frame>());
        assign_targets(n, n.names, item);
        bool keep = eval(*n.kids[1]).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(n.else_body);
    const size_t len = items.size();
    for (size_t i = 0; i < len; ++i) {
      frames_.push_back(std::make_shared<Frame>());
      assign("loop", loop_object(items, i));
      assign_targets(n, n.names, items[i]);
      Flow f = exec_body(n.body);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void define_macro(const Node& n) {
    const Node* def = &n;
    // The macro sees the globals and the top-level frame. It holds them
    // weakly: it is stored in one of them, and a strong reference would make
    // a cycle that leaks every variable of the render. Both frames outlive
    // every call (values cannot escape a render).
    std::vector<std::weak_ptr<Frame>> closure = {frames_.front()};
    if (frames_.size() > 1) closure.push_back(frames_[1]);
    assign(n.name, Value::function([def, closure](Args& args) {
             EvalDepth depth;
             Frames frames;
             for (const auto& w : closure) {
               auto f = w.lock();
               if (!f) throw JinjaError("macro called after its render ended");
               frames.push_back(std::move(f));
             }
             Interp sub(std::move(frames));
             sub.frames_.push_back(std::make_shared<Frame>());
             for (size_t i = 0; i < def->names.size(); ++i) {
               Value v = args.get(i, def->names[i], Value::undefined(def->names[i]));
               if (v.is_undefined() && def->kids[i]) v = sub.eval(*def->kids[i]);
               sub.assign(def->names[i], v);
             }
             sub.exec_body(def->body);
             return sub.out.take();
           }));
  }

  Value eval(const Node& n) {
    EvalDepth depth;
    charge_steps(1);
    switch (n.kind) {
      case Node::Kind::kLiteral:
        return n.value;
      case Node::Kind::kName:
        return lookup(n.name);
      case Node::Kind::kList:
      case Node::Kind::kTuple: {
        List l;
        for (const auto& k : n.kids) l.push_back(eval(*k));
        return Value(std::move(l));
      }
      case Node::Kind::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          Value k = eval(*n.kids[i]);
          if (!k.is_string()) fail(n, "only string dict keys are supported");
          d->data_keys = d->data_keys || k.has_data();
          d->set(k.as_string(), eval(*n.kids[i + 1]));
        }
        return Value(d);
      }
      case Node::Kind::kAttr:
        return get_attr(n, eval(*n.kids[0]), n.name);
      case Node::Kind::kSubscript:
        return get_item(n, eval(*n.kids[0]), eval(*n.kids[1]));
      case Node::Kind::kSlice: {
        Value obj = eval(*n.kids[0]);
        Value a = n.kids[1] ? eval(*n.kids[1]) : Value::none();
        Value b = n.kids[2] ? eval(*n.kids[2]) : Value::none();
        Value c = n.kids[3] ? eval(*n.kids[3]) : Value::none();
        if (obj.is_list()) {
          List l;
          for (size_t i : slice_indices(obj.list().size(), a, b, c)) l.push_back(obj.list()[i]);
          return Value(std::move(l));
        }
        if (obj.is_string()) {
          const std::string& str = obj.as_string();
          if (c.is_none() || (c.is_int() && c.as_int() == 1)) {
            // Contiguous: one substring (no per-character work).
            auto [first, last] = slice_range(cp_count(str), a, b);
            if (first >= last) return Value("");
            size_t from = cp_byte(str, first);
            size_t to = from + cp_byte(std::string_view(str).substr(from), last - first);
            return substr(obj, from, to);
          }
          auto cps = code_points(str);
          TextBuilder s;
          for (size_t i : slice_indices(cps.size(), a, b, c)) {
            size_t at = static_cast<size_t>(cps[i].data() - str.data());
            s.append_part(obj, at, at + cps[i].size());
          }
          return s.take();
        }
        fail(n, "cannot slice a '" + obj.type_name() + "'");
      }
      case Node::Kind::kCall: {
        Value callee = eval(*n.kids[0]);
        Args args = eval_args(n, 1);
        if (!callee.is_function()) {
          std::string what = n.kids[0]->kind == Node::Kind::kName   ? n.kids[0]->name
                             : n.kids[0]->kind == Node::Kind::kAttr ? n.kids[0]->name
                                                                    : "expression";
          fail(n, "'" + what + "' is " +
                      (callee.is_undefined() ? "undefined"
                                             : "not callable (" + callee.type_name() + ")"));
        }
        try {
          return callee.fn()(args);
        } catch (const TemplateRaised&) {
          throw;
        } catch (const JinjaError& e) {
          std::string msg = e.what();
          if (msg.starts_with("template line")) throw;
          fail(n, msg);
        }
      }
      case Node::Kind::kFilter: {
        Value v = eval(*n.kids[0]);
        Args args = eval_args(n, 1);
        try {
          return apply_filter(n, n.name, v, args);
        } catch (const TemplateRaised&) {
          throw;
        } catch (const JinjaError& e) {
          std::string msg = e.what();
          if (msg.starts_with("template line")) throw;
          fail(n, msg);
        }
      }
      case Node::Kind::kTest: {
        Value v = eval(*n.kids[0]);
        Args args = eval_args(n, 1);
        bool r = apply_test(n, n.name, v, args);
        return Value(n.negated ? !r : r);
      }
      case Node::Kind::kUnary: {
        Value v = eval(*n.kids[0]);
        if (!v.is_number())
          fail(n, "bad operand type for unary " + n.name + ": '" + v.type_name() + "'");
        if (n.name == "+") return v.is_float() ? Value(v.as_float()) : Value(v.as_int());
        if (v.is_float()) return Value(-v.as_float());
        if (v.as_int() == INT64_MIN) fail(n, "integer overflow in unary -");
        return Value(-v.as_int());
      }
      case Node::Kind::kNot:
        return Value(!eval(*n.kids[0]).truthy());
      case Node::Kind::kAnd: {
        Value l = eval(*n.kids[0]);
        return l.truthy() ? eval(*n.kids[1]) : l;
      }
      case Node::Kind::kOr: {
        Value l = eval(*n.kids[0]);
        return l.truthy() ? l : eval(*n.kids[1]);
      }
      case Node::Kind::kCond:
        if (eval(*n.kids[0]).truthy()) return eval(*n.kids[1]);
        return n.kids[2] ? eval(*n.kids[2]) : Value::undefined();
      case Node::Kind::kBinary:
        return binary(n, n.name, eval(*n.kids[0]), eval(*n.kids[1]));
      default:
        fail(n, "internal: statement used as expression");
    }
  }

  Args eval_args(const Node& n, size_t first) {
    Args a;
    size_t n_kw = n.names.size();
    size_t n_pos = n.kids.size() - first - n_kw;
    for (size_t i = 0; i < n_pos; ++i) a.positional.push_back(eval(*n.kids[first + i]));
    for (size_t i = 0; i < n_kw; ++i) {
      a.kwargs.emplace_back(n.names[i], eval(*n.kids[first + n_pos + i]));
    }
    return a;
  }

  static bool contains(const Node& n, const Value& container, const Value& item) {
    if (container.is_string()) {
      if (!item.is_string()) fail(n, "'in <string>' requires string as left operand");
      return str_find(container.as_string(), item.as_string()) != std::string::npos;
    }
    if (container.is_list()) {
      return std::any_of(container.list().begin(), container.list().end(),
                         [&](const Value& v) { return values_equal(v, item); });
    }
    if (container.is_dict()) return item.is_string() && container.dict().find(item.as_string());
    if (container.is_undefined()) fail(n, "'" + container.undefined_name() + "' is undefined");
    fail(n, "argument of type '" + container.type_name() + "' is not iterable");
  }

  Value binary(const Node& n, const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value(values_equal(a, b));
    if (op == "!=") return Value(!values_equal(a, b));
    if (op == "in") return Value(contains(n, b, a));
    if (op == "not in") return Value(!contains(n, b, a));
    if (op == "~") return concat(a.to_str(), b.to_str());
    try {
      if (op == "<") return Value(value_less(a, b));
      if (op == ">") return Value(value_less(b, a));
      if (op == "<=") return Value(!value_less(b, a));
      if (op == ">=") return Value(!value_less(a, b));
    } catch (const JinjaError& e) {
      fail(n, e.what());
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return concat(a, b);
      if (a.is_list() && b.is_list()) {
        charge_items(a.list().size() + b.list().size());
        List l = a.list();
        l.insert(l.end(), b.list().begin(), b.list().end());
        return Value(std::move(l));
      }
    }
    if (op == "*") {
      // Python: a sequence times an int (either order); <= 0 gives empty.
      const Value* seq = a.is_string() || a.is_list() ? &a : &b;
      const Value* times = seq == &a ? &b : &a;
      if ((seq->is_string() || seq->is_list()) && times->is_int()) {
        int64_t k = std::max<int64_t>(times->as_int(), 0);
        size_t unit = seq->is_string() ? seq->as_string().size() : seq->list().size();
        unsigned __int128 total = static_cast<unsigned __int128>(unit) * static_cast<uint64_t>(k);
        if (seq->is_string()) {
          if (total > SIZE_MAX) check_string_size(SIZE_MAX);
          check_string_size(static_cast<size_t>(total));
          charge_scan(static_cast<size_t>(total));
          std::string s;
          s.reserve(static_cast<size_t>(total));
          Spans data;
          if (unit > 0 && k > 0) {
            // Doubling: O(log k) appends.
            s = seq->as_string();
            while (s.size() * 2 <= total) s.append(s);
            s.append(s, 0, static_cast<size_t>(total) - s.size());
            if (!seq->spans().empty()) {
              for (int64_t i = 0; i < k; ++i) append_spans(data, i * unit, seq->spans());
            }
          }
          return Value(std::move(s), std::move(data));
        }
        if (total > SIZE_MAX) charge_items(SIZE_MAX);
        charge_items(static_cast<size_t>(total));
        List l;
        l.reserve(static_cast<size_t>(total));
        for (int64_t i = 0; i < k && unit > 0; ++i)
          l.insert(l.end(), seq->list().begin(), seq->list().end());
        return Value(std::move(l));
      }
    }
    if (a.is_number() && b.is_number()) {
      bool fl = a.is_float() || b.is_float();
      try {
        return arithmetic(n, op, a, b, fl);
      } catch (const JinjaError& e) {
        std::string msg = e.what();
        if (msg.starts_with("template line")) throw;
        fail(n, msg);
      }
    }
    if (a.is_undefined() || b.is_undefined()) {
      fail(n, "'" + (a.is_undefined() ? a : b).undefined_name() + "' is undefined");
    }
    fail(n, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                b.type_name() + "'");
  }

  // Python arithmetic on numbers (bools count as ints); int64 overflow,
  // division and modulo by zero are errors.
  static Value arithmetic(const Node& n, const std::string& op, const Value& a, const Value& b,
                          bool fl) {
    if (op == "/") {
      if (b.as_float() == 0) fail(n, "division by zero");
      return Value(a.as_float() / b.as_float());
    }
    if (fl) {
      double x = a.as_float(), y = b.as_float();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "//" || op == "%") {
        if (y == 0) fail(n, "float division or modulo by zero");
        double q = std::floor(x / y);
        return op == "//" ? Value(q) : Value(x - q * y);
      }
      if (op == "**") return Value(std::pow(x, y));
    } else {
      int64_t x = a.as_int(), y = b.as_int();
      if (op == "+") return Value(checked_add(x, y));
      if (op == "-") return Value(checked_sub(x, y));
      if (op == "*") return Value(checked_mul(x, y));
      if (op == "//" || op == "%") {
        if (y == 0) fail(n, "integer division or modulo by zero");
        if (y == -1) {  // INT64_MIN / -1 traps; x % -1 is 0
          if (op == "%") return Value(int64_t{0});
          if (x == INT64_MIN) throw JinjaError("integer overflow in //");
          return Value(-x);
        }
        // Floor division: C++ truncates, so a nonzero remainder of the
        // other sign than y moves q down by one and r up by y (r + y cannot
        // overflow: they have opposite signs; x - q * y could, for
        // INT64_MIN % 7).
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return op == "//" ? Value(q) : Value(r);
      }
      if (op == "**") {
        if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        // Square-and-multiply: at most 63 rounds whatever the exponent. The
        // base is squared only while a higher exponent bit remains, so an
        // overflow there means the result overflows too.
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if (e & 1) result = checked_mul(result, base, "**");
          if (e > 1) base = checked_mul(base, base, "**");
        }
        return Value(result);
      }
    }
    fail(n, "unsupported operator " + op);
  }

  Value get_item(const Node& n, const Value& obj, const Value& key) {
    if (obj.is_dict()) {
      if (key.is_string()) {
        if (const Value* v = obj.dict().find(key.as_string())) return *v;
        return get_attr_soft(obj, key.as_string());
      }
      return Value::undefined();
    }
    if (obj.is_list() && key.is_number()) {
      int64_t i = py_index(key.as_int(), obj.list().size());
      if (i < 0 || i >= static_cast<int64_t>(obj.list().size())) return Value::undefined();
      return obj.list()[static_cast<size_t>(i)];
    }
    if (obj.is_string() && key.is_number()) {
      const std::string& str = obj.as_string();
      const size_t count = cp_count(str);
      int64_t i = py_index(key.as_int(), count);
      if (i < 0 || i >= static_cast<int64_t>(count)) return Value::undefined();
      size_t at = cp_byte(str, static_cast<size_t>(i));
      return substr(obj, at, at + cp_len_at(str, at));
    }
    if (obj.is_undefined()) fail(n, "'" + obj.undefined_name() + "' is undefined");
    if (key.is_string()) return get_attr_soft(obj, key.as_string());
    return Value::undefined();
  }

  Value get_attr(const Node& n, const Value& obj, const std::string& name) {
    if (obj.is_undefined()) {
      fail(n, "'" + (obj.undefined_name().empty() ? std::string("value") : obj.undefined_name()) +
                  "' is undefined (getting attribute '" + name + "')");
    }
    if (obj.is_dict()) {
      if (!obj.dict().is_namespace) {
        Value m = get_attr_soft(obj, name);
        if (!m.is_undefined()) return m;
      }
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined(name);
    }
    Value m = get_attr_soft(obj, name);
    return m.is_undefined() ? Value::undefined(name) : m;
  }

  // Python methods of str / dict / list, bound to `obj`; undefined if none.
  Value get_attr_soft(const Value& obj, const std::string& name) {
    if (obj.is_string()) {
      // Methods capture the string Value (O(1) to copy) and keep provenance.
      const Value self = obj;
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        bool l = name != "rstrip", r = name != "lstrip";
        return Value::function([self, l, r](Args& a) {
          return py_strip(self, a.get(0, "chars", Value::none()), l, r);
        });
      }
      if (name == "split") {
        return Value::function([self](Args& a) {
          Value sep = a.get(0, "sep", Value::none());
          Value maxsplit = a.get(1, "maxsplit", Value(-1));
          return Value(py_split(self, sep, maxsplit.as_int()));
        });
      }
      if (name == "startswith" || name == "endswith") {
        bool starts = name == "startswith";
        return Value::function([self, starts](Args& a) {
          const std::string& s = self.as_string();
          Value p = a.get(0, "prefix");
          List options = p.is_list() ? p.list() : List{p};
          for (const auto& o : options) {
            if (!o.is_string()) throw JinjaError("startswith/endswith argument must be str");
            if (starts ? s.starts_with(o.as_string()) : s.ends_with(o.as_string()))
              return Value(true);
          }
          return Value(false);
        });
      }
      // ASCII case changes keep every byte's position, so provenance too.
      if (name == "upper") {
        return Value::function(
            [self](Args&) { return Value(ascii_upper(self.as_string()), self.spans()); });
      }
      if (name == "lower") {
        return Value::function(
            [self](Args&) { return Value(ascii_lower(self.as_string()), self.spans()); });
      }
      if (name == "title") {
        return Value::function(
            [self](Args&) { return Value(py_title(self.as_string(), false), self.spans()); });
      }
      if (name == "capitalize") {
        return Value::function(
            [self](Args&) { return Value(py_title(self.as_string(), true), self.spans()); });
      }
      if (name == "replace") {
        return Value::function([self](Args& a) {
          return py_replace(self, a.get(0, "old"), a.get(1, "new").to_str(),
                            a.get(2, "count", Value(-1)).as_int());
        });
      }
      if (name == "find" || name == "count" || name == "index") {
        return Value::function([self, name](Args& a) {
          const std::string& s = self.as_string();
          std::string sub = a.get(0, "sub").str();
          if (name == "count") {
            if (sub.empty()) return Value(static_cast<int64_t>(cp_count(s) + 1));
            int64_t c = 0;
            for (size_t p = str_find(s, sub); p != std::string::npos;
                 p = str_find(s, sub, p + sub.size()))
              ++c;
            return Value(c);
          }
          size_t p = str_find(s, sub);
          if (p == std::string::npos) {
            if (name == "index") throw JinjaError("substring not found");
            return Value(-1);
          }
          return Value(static_cast<int64_t>(cp_count(std::string_view(s).substr(0, p))));
        });
      }
      if (name == "join") {
        return Value::function([self](Args& a) {
          Value items = a.get(0, "iterable");
          TextBuilder out;
          if (!items.is_list()) throw JinjaError("join() argument must be a list");
          for (size_t i = 0; i < items.list().size(); ++i) {
            if (i) out.append(self);
            out.append(items.list()[i].to_str());
          }
          return out.take();
        });
      }
      if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
        return Value::function([self, name](Args&) {
          const std::string& s = self.as_string();
          charge_scan(s.size());
          if (s.empty()) return Value(false);
          for (unsigned char c : s) {
            bool ok = name == "isdigit"   ? std::isdigit(c)
                      : name == "isalpha" ? std::isalpha(c)
                      : name == "isspace" ? std::isspace(c)
                                          : std::isalnum(c);
            if (!ok) return Value(false);
          }
          return Value(true);
        });
      }
      if (name == "splitlines") {
        return Value::function([self](Args&) {
          const std::string& s = self.as_string();
          charge_scan(s.size());
          List out;
          size_t last = 0;
          for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '\n' || s[i] == '\r') {
              out.push_back(substr(self, last, i));
              if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
              last = i + 1;
            }
          }
          if (last < s.size()) out.push_back(substr(self, last, s.size()));
          return Value(std::move(out));
        });
      }
      return Value::undefined(name);
    }
    if (obj.is_dict() && !obj.dict().is_namespace) {
      Value self = obj;
      if (name == "items") {
        return Value::method(self, [self](Args&) {
          List l;
          for (const auto& [k, v] : self.dict().items)
            l.push_back(Value(List{self.dict().key(k), v}));
          return Value(std::move(l));
        });
      }
      if (name == "keys") {
        return Value::method(self, [self](Args&) {
          List l;
          for (const auto& [k, v] : self.dict().items) l.push_back(self.dict().key(k));
          return Value(std::move(l));
        });
      }
      if (name == "values") {
        return Value::method(self, [self](Args&) {
          List l;
          for (const auto& [k, v] : self.dict().items) l.push_back(v);
          return Value(std::move(l));
        });
      }
      if (name == "get") {
        return Value::method(self, [self](Args& a) {
          Value key = a.get(0, "key");
          if (key.is_string()) {
            if (const Value* v = self.dict().find(key.as_string())) return *v;
          }
          return a.get(1, "default", Value::none());
        });
      }
      return Value::undefined(name);
    }
    if (obj.is_list()) {
      Value self = obj;
      if (name == "index" || name == "count") {
        return Value::method(self, [self, name](Args& a) {
          Value x = a.get(0, "value");
          int64_t c = 0;
          for (size_t i = 0; i < self.list().size(); ++i) {
            if (values_equal(self.list()[i], x)) {
              if (name == "index") return Value(static_cast<int64_t>(i));
              ++c;
            }
          }
          if (name == "index") throw JinjaError("value is not in list");
          return Value(c);
        });
      }
    }
    return Value::undefined(name);
  }

  // ---- filters ----

  Value attribute_of(const Node& n, const Value& v, const std::string& path) {
    Value cur = v;
    size_t start = 0;
    while (true) {
      size_t dot = path.find('.', start);
      std::string part =
          path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      int64_t index = 0;
      bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
      if (numeric) {
        auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
        if (ec != std::errc()) fail(n, "attribute index " + part + " is out of range");
      }
      cur = numeric ? get_item(n, cur, Value(index))
                    : (cur.is_undefined() ? cur : get_item(n, cur, Value(part)));
      if (dot == std::string::npos) return cur;
      start = dot + 1;
    }
  }

  Value apply_filter(const Node& n, const std::string& name, const Value& v, Args& a) {
    if (name == "tojson") {
      // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
      // sort_keys=False) replaces Jinja's HTML-escaping one.
      Value indent = a.get(1, "indent", Value::none());
      Value seps = a.get(2, "separators", Value::none());
      std::string item_sep = indent.is_none() ? ", " : ",", key_sep = ": ";
      if (seps.is_list() && seps.list().size() == 2) {
        item_sep = seps.list()[0].str();
        key_sep = seps.list()[1].str();
      }
      if (a.get(0, "ensure_ascii", Value(false)).truthy()) {
        fail(n, "tojson(ensure_ascii=True) is not supported");
      }
      // Python: a negative indent inserts newlines only; None is compact.
      int ind = indent.is_none()
                    ? -1
                    : static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 1 << 20));
      return Value::derived(
          v.to_json(ind, item_sep, key_sep, a.get(3, "sort_keys", Value(false)).truthy()),
          v.has_data() || seps.has_data());
    }
    if (name == "length" || name == "count") {
      if (v.is_string()) return Value(static_cast<int64_t>(cp_count(v.as_string())));
      if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
      if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
      if (v.is_undefined()) return Value(0);
      fail(n, "object of type '" + v.type_name() + "' has no len()");
    }
    if (name == "trim") return py_strip(v.to_str(), a.get(0, "chars", Value::none()), true, true);
    // ASCII case changes keep byte positions, so provenance too.
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
      Value sv = v.to_str();
      const std::string& t = sv.as_string();
      std::string r = name == "upper"   ? ascii_upper(t)
                      : name == "lower" ? ascii_lower(t)
                                        : py_title(t, name == "capitalize");
      return Value(std::move(r), sv.spans());
    }
    if (name == "string") return v.to_str();
    if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
      if (name == "safe") return v.to_str();
      std::string out;
      for (char c : v.str()) {
        check_string_size(out.size());
        switch (c) {
          case '&':
            out += "&amp;";
            break;
          case '<':
            out += "&lt;";
            break;
          case '>':
            out += "&gt;";
            break;
          case '"':
            out += "&#34;";
            break;
          case '\'':
            out += "&#39;";
            break;
          default:
            out += c;
        }
      }
      return Value::derived(std::move(out), v.has_data());
    }
    if (name == "default" || name == "d") {
      bool boolean = a.get(1, "boolean", Value(false)).truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
      return v;
    }
    if (name == "first" || name == "last") {
      List l = iterate(n, v);
      if (l.empty()) return Value::undefined();
      return name == "first" ? l.front() : l.back();
    }
    if (name == "list") return Value(iterate(n, v));
    if (name == "reverse") {
      if (v.is_string()) {
        const std::string& str = v.as_string();
        auto cps = code_points(str);
        TextBuilder s;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) {
          size_t at = static_cast<size_t>(it->data() - str.data());
          s.append_part(v, at, at + it->size());
        }
        return s.take();
      }
      List l = iterate(n, v);
      std::reverse(l.begin(), l.end());
      return Value(std::move(l));
    }
    if (name == "join") {
      Value sep = a.get(0, "d", Value("")).to_str();
      Value attr = a.get(1, "attribute", Value::none());
      TextBuilder out;
      List l = iterate(n, v);
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out.append(sep);
        out.append((attr.is_none() ? l[i] : attribute_of(n, l[i], attr.str())).to_str());
      }
      return out.take();
    }
    if (name == "int") {
      if (v.is_string()) {
        try {
          return Value(static_cast<int64_t>(std::stoll(v.as_string())));
        } catch (...) {
          return a.get(0, "default", Value(0));
        }
      }
      if (v.is_number()) return Value(v.as_int());
      return a.get(0, "default", Value(0));
    }
    if (name == "float") {
      if (v.is_string()) {
        try {
          return Value(std::stod(v.as_string()));
        } catch (...) {
          return a.get(0, "default", Value(0.0));
        }
      }
      if (v.is_number()) return Value(v.as_float());
      return a.get(0, "default", Value(0.0));
    }
    if (name == "abs") {
      if (v.is_float()) return Value(std::fabs(v.as_float()));
      if (v.as_int() == INT64_MIN) fail(n, "integer overflow in abs");
      return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (name == "round") {
      int64_t prec = a.get(0, "precision", Value(0)).as_int();
      std::string method = a.get(1, "method", Value("common")).str();
      double scale = std::pow(10.0, static_cast<double>(prec));
      double x = v.as_float() * scale;
      x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
      return Value(x / scale);
    }
    if (name == "items") {
      if (v.is_undefined()) return Value(List{});
      if (!v.is_dict()) fail(n, "items filter needs a mapping");
      List l;
      for (const auto& [k, val] : v.dict().items) l.push_back(Value(List{v.dict().key(k), val}));
      return Value(std::move(l));
    }
    if (name == "dictsort") {
      if (!v.is_dict()) fail(n, "dictsort needs a mapping");
      List l;
      for (const auto& [k, val] : v.dict().items) l.push_back(Value(List{v.dict().key(k), val}));
      std::stable_sort(l.begin(), l.end(), [](const Value& x, const Value& y) {
        return ascii_lower(x.list()[0].as_string()) < ascii_lower(y.list()[0].as_string());
      });
      return Value(std::move(l));
    }
    if (name == "unique") {
      List out;
      for (const auto& x : iterate(n, v)) {
        if (std::none_of(out.begin(), out.end(),
                         [&](const Value& y) { return values_equal(x, y); })) {
          out.push_back(x);
        }
      }
      return Value(std::move(out));
    }
    if (name == "sort") {
      List l = iterate(n, v);
      bool reverse = a.get(0, "reverse", Value(false)).truthy();
      Value attr = a.get(2, "attribute", Value::none());
      std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
        Value kx = attr.is_none() ? x : attribute_of(n, x, attr.str());
        Value ky = attr.is_none() ? y : attribute_of(n, y, attr.str());
        if (kx.is_string() && ky.is_string()) {
          kx = Value(ascii_lower(kx.as_string()));
          ky = Value(ascii_lower(ky.as_string()));
        }
        return reverse ? value_less(ky, kx) : value_less(kx, ky);
      });
      return Value(std::move(l));
    }
    if (name == "min" || name == "max") {
      List l = iterate(n, v);
      if (l.empty()) return Value::undefined();
      auto it = name == "min" ? std::min_element(l.begin(), l.end(), value_less)
                              : std::max_element(l.begin(), l.end(), value_less);
      return *it;
    }
    if (name == "sum") {
      Value total = a.get(1, "start", Value(0));
      Value attr = a.get(0, "attribute", Value::none());
      for (const auto& x : iterate(n, v)) {
        total = binary(n, "+", total, attr.is_none() ? x : attribute_of(n, x, attr.str()));
      }
      return total;
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
      bool by_attr = name == "selectattr" || name == "rejectattr";
      bool keep_if = name == "selectattr" || name == "select";
      size_t idx = 0;
      std::string attr = by_attr ? a.get(idx++, "attribute").str() : "";
      Value test = a.get(idx++, "test", Value::none());
      Args test_args;
      for (size_t i = idx; i < a.positional.size(); ++i)
        test_args.positional.push_back(a.positional[i]);
      List out;
      for (const auto& x : iterate(n, v)) {
        Value subject = by_attr ? attribute_of(n, x, attr) : x;
        bool r = test.is_none() ? subject.truthy() : apply_test(n, test.str(), subject, test_args);
        if (r == keep_if) out.push_back(x);
      }
      return Value(std::move(out));
    }
    if (name == "map") {
      Value attr = a.get(kNoIndex, "attribute", Value::none());
      List out;
      if (!attr.is_none()) {
        Value dflt = a.get(kNoIndex, "default", Value::undefined());
        for (const auto& x : iterate(n, v)) {
          Value r = attribute_of(n, x, attr.str());
          out.push_back(r.is_undefined() ? dflt : r);
        }
        return Value(std::move(out));
      }
      if (a.positional.empty()) fail(n, "map needs a filter name or attribute=");
      std::string filter = a.positional[0].str();
      Args rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.kwargs = a.kwargs;
      for (const auto& x : iterate(n, v)) out.push_back(apply_filter(n, filter, x, rest));
      return Value(std::move(out));
    }
    if (name == "replace") {
      return py_replace(v.to_str(), a.get(0, "old"), a.get(1, "new").to_str(),
                        a.get(2, "count", Value(-1)).as_int());
    }
    if (name == "indent") {
      Value w = a.get(0, "width", Value(4));
      Value pad;
      if (w.is_string()) {
        pad = w;
      } else {
        int64_t width = std::max<int64_t>(w.as_int(), 0);
        check_string_size(static_cast<uint64_t>(width) > SIZE_MAX ? SIZE_MAX
                                                                   : static_cast<size_t>(width));
        pad = Value(std::string(static_cast<size_t>(width), ' '));
      }
      bool first = a.get(1, "first", Value(false)).truthy();
      bool blank = a.get(2, "blank", Value(false)).truthy();
      Value sv = v.to_str();
      const std::string& s = sv.as_string();
      TextBuilder out;
      size_t start = 0;
      bool is_first = true;
      while (true) {
        size_t nl = s.find('\n', start);
        size_t end = nl == std::string::npos ? s.size() : nl;
        bool indent = is_first ? first : (blank || end > start);
        if (indent) out.append(pad);
        out.append_part(sv, start, end);
        if (nl == std::string::npos) break;
        out.append_part(sv, nl, nl + 1);
        start = nl + 1;
        is_first = false;
      }
      return out.take();
    }
    if (name == "wordcount")
      return Value(static_cast<int64_t>(py_split(v.to_str(), Value::none(), -1).size()));
    fail(n, "unsupported filter '" + name + "'");
  }

  // ---- tests ----

  bool apply_test(const Node& n, const std::string& name, const Value& v, const Args& a) {
    Value arg = a.positional.empty() ? Value::undefined() : a.positional[0];
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_int() || v.is_float();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
    if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
    if (name == "callable") return v.is_function();
    if (name == "odd") return v.as_int() % 2 != 0;
    if (name == "even") return v.as_int() % 2 == 0;
    if (name == "divisibleby") {
      // INT64_MIN % -1 traps; everything is divisible by -1.
      return arg.as_int() != 0 && (arg.as_int() == -1 || v.as_int() % arg.as_int() == 0);
    }
    if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg);
    if (name == "ne" || name == "!=") return !values_equal(v, arg);
    if (name == "lt" || name == "lessthan" || name == "<") return value_less(v, arg);
    if (name == "gt" || name == "greaterthan" || name == ">") return value_less(arg, v);
    if (name == "le" || name == "<=") return !value_less(arg, v);
    if (name == "ge" || name == ">=") return !value_less(v, arg);
    if (name == "in") return contains(n, arg, v);
    if (name == "sameas") {
      if (v.is_none() || arg.is_none()) return v.is_none() && arg.is_none();
      if (v.is_bool() && arg.is_bool()) return v.as_bool() == arg.as_bool();
      return values_equal(v, arg) && v.kind() == arg.kind();
    }
    if (name == "lower") return v.is_string() && ascii_lower(v.as_string()) == v.as_string();
    if (name == "upper") return v.is_string() && ascii_upper(v.as_string()) == v.as_string();
    fail(n, "unsupported test '" + name + "'");
  }

 private:
  Frames frames_;
};

// Python strftime for the formats chat templates use.
std::string strftime_now(const std::string& fmt) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[256];
  size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
  return std::string(buf, n);
}

}  // namespace

Rendered Template::render(const std::vector<std::pair<std::string, Value>>& globals,
                          const Limits& limits) const {
  // Installs this render's budget on the thread for its duration (renders
  // do not nest: macros run inside the same render).
  struct Install {
    Budget budget;
    Budget* saved;
    explicit Install(const Limits& l) : budget{l}, saved(t_budget) { t_budget = &budget; }
    ~Install() { t_budget = saved; }
  } install(limits);

  auto builtins = std::make_shared<Frame>();
  (*builtins)["raise_exception"] =
      Value::function([](Args& a) -> Value { throw TemplateRaised(a.get(0, "message").str()); });
  (*builtins)["strftime_now"] =
      Value::function([](Args& a) { return Value(strftime_now(a.get(0, "format").str())); });
  (*builtins)["range"] = Value::function([](Args& a) {
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].as_int();
    } else if (a.positional.size() >= 2) {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() > 2) step = a.positional[2].as_int();
    } else {
      throw JinjaError("range expected at least 1 argument");
    }
    if (step == 0) throw JinjaError("range() arg 3 must not be zero");
    // The length first (in 128 bits: stop - start can overflow int64), so
    // an enormous range is refused before anything is allocated.
    __int128 span = static_cast<__int128>(stop) - start;
    __int128 count = 0;
    if (step > 0 && span > 0) count = (span + step - 1) / step;
    if (step < 0 && span < 0) {
      __int128 down = -static_cast<__int128>(step);
      count = (-span + down - 1) / down;
    }
    charge_items(count > static_cast<__int128>(SIZE_MAX) ? SIZE_MAX : static_cast<size_t>(count));
    List l;
    l.reserve(static_cast<size_t>(count));
    for (__int128 i = 0; i < count; ++i) l.push_back(Value(static_cast<int64_t>(start + i * step)));
    return Value(std::move(l));
  });
  // namespace() may not hold a namespace (see Dict): values stay acyclic.
  (*builtins)["namespace"] = Value::function([](Args& a) {
    auto d = std::make_shared<Dict>();
    d->is_namespace = true;
    auto put = [&](const std::string& k, const Value& v) {
      if (v.has_namespace()) throw JinjaError("a namespace attribute cannot hold a namespace");
      check_value_depth(v.depth() + 1);
      d->set(k, v);
    };
    for (const auto& p : a.positional) {
      if (p.is_dict()) {
        d->data_keys = d->data_keys || p.dict().data_keys;
        for (const auto& [k, v] : p.dict().items) put(k, v);
      }
    }
    for (const auto& [k, v] : a.kwargs) put(k, v);
    return Value(d);
  });
  (*builtins)["dict"] = Value::function([](Args& a) {
    auto d = std::make_shared<Dict>();
    for (const auto& p : a.positional) {
      if (p.is_dict()) {
        d->data_keys = d->data_keys || p.dict().data_keys;
        for (const auto& [k, v] : p.dict().items) d->set(k, v);
      }
    }
    for (const auto& [k, v] : a.kwargs) d->set(k, v);
    return Value(d);
  });
  for (const auto& [k, v] : globals) (*builtins)[k] = v;
  Interp interp({builtins, std::make_shared<Frame>()}, /*top_level=*/true);
  interp.exec_body(body_);
  return interp.out.take_rendered();
}

}  // namespace ferrite::jinja
