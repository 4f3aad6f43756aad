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

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value undefined(std::string name = "") {
    Value v;
    v.str_ = std::move(name);
    return v;
  }
  static Value none() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}                                      // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}                                    // NOLINT
  Value(int i) : kind_(Kind::kInt), int_(i) {}                                        // NOLINT
  Value(double d) : kind_(Kind::kFloat), float_(d) {}                                 // NOLINT
  Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}                  // NOLINT
  Value(const char* s) : kind_(Kind::kString), str_(s) {}                             // NOLINT
  Value(List l) : kind_(Kind::kList), list_(std::make_shared<List>(std::move(l))) {}  // NOLINT
  Value(std::shared_ptr<Dict> d) : kind_(Kind::kDict), dict_(std::move(d)) {}         // NOLINT
  static Value function(Function f) {
    Value v(Kind::kFunction);
    v.fn_ = std::make_shared<Function>(std::move(f));
    return v;
  }
  static Value from_json(const nlohmann::ordered_json& j);

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
  int64_t as_int() const;  // bool or int (floats truncate)
  double as_float() const;
  const std::string& as_string() const { return str_; }
  const std::string& undefined_name() const { return str_; }
  List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const Function& fn() const { return *fn_; }

  bool truthy() const;
  std::string str() const;   // Python str(); undefined -> ""
  std::string repr() const;  // Python repr()
  // Python json.dumps(..., ensure_ascii=False) with optional indent and
  // separators; `indent` < 0 means None.
  std::string to_json(int indent = -1, std::string_view item_sep = ", ",
                      std::string_view key_sep = ": ", bool sort_keys = false) const;
  std::string type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  void to_json_impl(std::string& out, int indent, int depth, std::string_view item_sep,
                    std::string_view key_sep, bool sort_keys) const;

  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Insertion-ordered string-keyed map (Python dict). `is_namespace` marks a
// namespace() object, whose attributes may be assigned with {% set ns.x %}.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
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
// Code points of a UTF-8 string (Python str indexing/length).
std::vector<std::string_view> code_points(std::string_view s);

}  // namespace ferrite::jinja
