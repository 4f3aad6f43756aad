// Internal to the chat-template interpreter: the dynamic values of the Jinja
// subset (Python semantics: truthiness, equality, str(), repr(), json.dumps).
// Errors inside the interpreter are thrown as JinjaError and converted to a
// Status at the ChatTemplate boundary; they never leave this module.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferrite::jinja {

struct JinjaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Raised by raise_exception() in a template: the template rejected its input.
struct TemplateRaised : JinjaError {
  using JinjaError::JinjaError;
};

class Value;
using List = std::vector<Value>;
struct Dict;
struct Args;
using Function = std::function<Value(Args&)>;

// Provenance of a string's bytes: sorted, disjoint, non-touching [begin, end)
// byte ranges that came from request data (messages, tools, extra kwargs)
// rather than from the template. ChatTemplate::render_tokens encodes special
// tokens only where no byte of them is data. Operations that keep bytes
// (concatenation, slicing, strip, split, join, ASCII case changes, repetition)
// carry the ranges exactly; operations that rewrite text (replace, indent,
// escape, repr, tojson, ...) mark their whole result as data when any input
// byte was data, which can only turn a template-written special token into
// text, never the reverse.
using Spans = std::vector<std::pair<size_t, size_t>>;
// Appends `src` shifted by `offset` to `dst`, merging touching ranges.
void append_spans(Spans& dst, size_t offset, const Spans& src);
// The part of `src` inside [b, e), shifted to start at 0.
Spans slice_spans(const Spans& src, size_t b, size_t e);

// Budget accounting of the render running on this thread (see jinja::Limits
// in jinja.h); no-ops outside a render. Each throws JinjaError past a limit.
void charge_steps(uint64_t n);
// A new string of `bytes` bytes: the per-value cap and the cumulative total.
void charge_string(size_t bytes);
// A string being built has reached `bytes` (the per-value cap only).
void check_string_size(size_t bytes);
// A scan over `bytes` bytes of text (one step per 256 bytes).
void charge_scan(size_t bytes);
// A new list or dict of `items` entries.
void charge_items(size_t items);
// Nesting depth of a value being built (Limits::max_value_depth, or
// kDefaultMaxValueDepth outside a render).
void check_value_depth(size_t depth);
inline constexpr size_t kDefaultMaxValueDepth = 128;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value undefined(std::string name = "") {
    Value v;
    if (!name.empty()) v.str_ = std::make_shared<const Str>(Str{std::move(name), {}});
    return v;
  }
  static Value none() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}                    // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}                  // NOLINT
  Value(int i) : kind_(Kind::kInt), int_(i) {}                      // NOLINT
  Value(double d) : kind_(Kind::kFloat), float_(d) {}               // NOLINT
  Value(std::string s) : Value(std::move(s), Spans{}) {}            // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                   // NOLINT
  Value(std::string s, Spans data);                                 // a string with provenance
  Value(List l);                                                    // NOLINT
  Value(std::shared_ptr<Dict> d);                                   // NOLINT
  // A string that came whole from request data.
  static Value data_string(std::string s);
  // `s` marked as data whenever `data` (a derived string of mixed origin).
  static Value derived(std::string s, bool data);
  static Value function(Function f) {
    Value v(Kind::kFunction);
    v.fn_ = std::make_shared<Function>(std::move(f));
    return v;
  }
  // A method bound to `self` (f holds a copy of it): has_namespace() follows
  // self's, so storing it in a namespace cannot make a cycle either.
  static Value method(const Value& self, Function f) {
    Value v = function(std::move(f));
    v.has_namespace_ = self.has_namespace();
    return v;
  }
  // `data`: the strings (and dict keys) are request data. Nesting deeper
  // than Limits::max_value_depth is a JinjaError.
  static Value from_json(const nlohmann::ordered_json& j, bool data = false);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return int_ != 0; }
  // bool or int; a float truncates (JinjaError when not finite or out of the
  // int64 range).
  int64_t as_int() const;
  double as_float() const;
  const std::string& as_string() const { return str_ ? str_->text : empty_string(); }
  // The data ranges of a string (empty for template text and non-strings).
  const Spans& spans() const { return str_ ? str_->data : empty_spans(); }
  const std::string& undefined_name() const { return as_string(); }
  const List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const Function& fn() const { return *fn_; }

  // Some string (or dict key) inside came from request data.
  bool has_data() const;
  // Nesting depth of lists and dicts (0 for scalars; a namespace counts 1).
  size_t depth() const { return depth_; }
  // A namespace() object is or is inside this value.
  bool has_namespace() const { return has_namespace_; }

  bool truthy() const;
  std::string str() const;   // Python str(); undefined -> ""
  // str() as a string Value that keeps provenance: a string is itself; any
  // other value's text is data when has_data().
  Value to_str() const;
  std::string repr() const;  // Python repr()
  // Python json.dumps(..., ensure_ascii=False) with optional indent and
  // separators; `indent` < 0 means None.
  std::string to_json(int indent = -1, std::string_view item_sep = ", ",
                      std::string_view key_sep = ": ", bool sort_keys = false) const;
  std::string type_name() const;

 private:
  struct Str {
    std::string text;
    Spans data;
  };
  static const std::string& empty_string();
  static const Spans& empty_spans();
  explicit Value(Kind k) : kind_(k) {}
  void repr_impl(std::string& out, size_t depth) const;
  void to_json_impl(std::string& out, int indent, size_t depth, std::string_view item_sep,
                    std::string_view key_sep, bool sort_keys) const;

  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  // Shared and immutable: copying a Value (every variable lookup does) is
  // O(1) however large the string or list.
  std::shared_ptr<const Str> str_;  // string text, or the name of an undefined
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
  uint32_t depth_ = 0;
  bool has_data_ = false;  // containers: cached at construction (namespaces: recomputed)
  bool has_namespace_ = false;
};

// Insertion-ordered string-keyed map (Python dict). `is_namespace` marks a
// namespace() object, whose attributes may be assigned with {% set ns.x %};
// every other dict is immutable once its Value is built. A namespace never
// holds a namespace (the interpreter refuses it), so values cannot form
// reference cycles. `data_keys`: some key came from request data.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  bool data_keys = false;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
  // A key as a string Value with its provenance.
  Value key(const std::string& k) const { return data_keys ? Value::data_string(k) : Value(k); }
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
  // Positional `index` or keyword `name`, else `fallback`.
  Value get(size_t index, std::string_view name, Value fallback = Value()) const;
};

bool values_equal(const Value& a, const Value& b);
// Python ordering for numbers and strings; JinjaError otherwise.
bool value_less(const Value& a, const Value& b);
// Python float repr (shortest round trip: 0.1, 1e-05, 1e+16, 100.0).
std::string python_float_repr(double d);
// hay.find(needle, from) in time linear in both (npos when absent).
size_t str_find(std::string_view hay, std::string_view needle, size_t from = 0);
// Code points of a UTF-8 string (Python str indexing/length).
std::vector<std::string_view> code_points(std::string_view s);

}  // namespace ferrite::jinja
