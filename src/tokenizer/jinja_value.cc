#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace ferrite::jinja {

void append_spans(Spans& dst, size_t offset, const Spans& src) {
  for (const auto& [b, e] : src) {
    if (!dst.empty() && dst.back().second >= b + offset) {
      dst.back().second = std::max(dst.back().second, e + offset);
    } else {
      dst.emplace_back(b + offset, e + offset);
    }
  }
}

Spans slice_spans(const Spans& src, size_t b, size_t e) {
  Spans out;
  for (const auto& [rb, re] : src) {
    size_t x = std::max(rb, b), y = std::min(re, e);
    if (x < y) out.emplace_back(x - b, y - b);
  }
  return out;
}

const std::string& Value::empty_string() {
  static const std::string empty;
  return empty;
}

const Spans& Value::empty_spans() {
  static const Spans empty;
  return empty;
}

Value::Value(std::string s, Spans data) : kind_(Kind::kString) {
  charge_string(s.size());
  has_data_ = !data.empty();
  str_ = std::make_shared<const Str>(Str{std::move(s), std::move(data)});
}

Value Value::data_string(std::string s) {
  Spans data;
  if (!s.empty()) data.emplace_back(0, s.size());
  return Value(std::move(s), std::move(data));
}

Value Value::derived(std::string s, bool data) {
  return data ? data_string(std::move(s)) : Value(std::move(s));
}

Value::Value(List l) : kind_(Kind::kList) {
  charge_items(l.size());
  size_t depth = 0;
  for (const auto& v : l) {
    depth = std::max(depth, v.depth());
    has_data_ = has_data_ || v.has_data();
    has_namespace_ = has_namespace_ || v.has_namespace();
  }
  check_value_depth(depth + 1);
  depth_ = static_cast<uint32_t>(depth + 1);
  list_ = std::make_shared<const List>(std::move(l));
}

Value::Value(std::shared_ptr<Dict> d) : kind_(Kind::kDict) {
  charge_items(d->items.size());
  size_t depth = 0;
  for (const auto& [k, v] : d->items) {
    depth = std::max(depth, v.depth());
    has_data_ = has_data_ || v.has_data();
    has_namespace_ = has_namespace_ || v.has_namespace();
  }
  has_data_ = has_data_ || d->data_keys;
  if (d->is_namespace) {
    // Members may change later; they never hold a namespace (the interpreter
    // refuses that), so a namespace adds one level to what contains it.
    depth = 0;
    has_namespace_ = true;
  }
  check_value_depth(depth + 1);
  depth_ = static_cast<uint32_t>(depth + 1);
  dict_ = std::move(d);
}

bool Value::has_data() const {
  if (kind_ == Kind::kDict && dict_->is_namespace) {
    for (const auto& [k, v] : dict_->items) {
      if (v.has_data()) return true;
    }
    return false;
  }
  return has_data_;
}

Value Value::to_str() const {
  if (kind_ == Kind::kString) return *this;
  return derived(str(), has_data());
}

namespace {

Value from_json_impl(const nlohmann::ordered_json& j, bool data, size_t depth) {
  using J = nlohmann::ordered_json;
  switch (j.type()) {
    case J::value_t::null:
      return Value::none();
    case J::value_t::boolean:
      return Value(j.get<bool>());
    case J::value_t::number_integer:
      return Value(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        throw JinjaError("integer " + std::to_string(u) + " in template input is out of range");
      }
      return Value(static_cast<int64_t>(u));
    }
    case J::value_t::number_float:
      return Value(j.get<double>());
    case J::value_t::string:
      return data ? Value::data_string(j.get<std::string>()) : Value(j.get<std::string>());
    case J::value_t::array:
    case J::value_t::object:
      if (depth >= kDefaultMaxValueDepth) {
        throw JinjaError("template input nests deeper than " +
                         std::to_string(kDefaultMaxValueDepth) + " levels");
      }
      if (j.is_array()) {
        List l;
        l.reserve(j.size());
        for (const auto& e : j) l.push_back(from_json_impl(e, data, depth + 1));
        return Value(std::move(l));
      } else {
        auto d = std::make_shared<Dict>();
        d->data_keys = data;
        for (const auto& [k, v] : j.items()) {
          d->items.emplace_back(k, from_json_impl(v, data, depth + 1));
        }
        return Value(std::move(d));
      }
    case J::value_t::binary:
    case J::value_t::discarded:
      break;
  }
  throw JinjaError("unsupported JSON value in template input");
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j, bool data) {
  return from_json_impl(j, data, 0);
}

int64_t Value::as_int() const {
  if (is_float()) {
    // [-2^63, 2^63): the doubles whose truncation fits int64.
    if (!(float_ >= -9223372036854775808.0 && float_ < 9223372036854775808.0)) {
      throw JinjaError("cannot convert float " + python_float_repr(float_) + " to integer");
    }
    return static_cast<int64_t>(float_);
  }
  return int_;
}

double Value::as_float() const { return is_float() ? float_ : static_cast<double>(int_); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty() || dict_->is_namespace;
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci = [-]D[.DDD]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {  // Python repr's fixed-notation range
    if (exp < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits;
      out.append(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0');
      out += ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + e;
}

namespace {

void repr_string(const std::string& s, std::string& out) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  out += quote;
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  std::string out;
  repr_impl(out, 0);
  return out;
}

void Value::repr_impl(std::string& out, size_t depth) const {
  // Bounded: values nest at most ~2 * max_value_depth (see Value(List)).
  check_string_size(out.size());
  charge_steps(1);
  switch (kind_) {
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      out += "None";
      return;
    case Kind::kBool:
      out += int_ ? "True" : "False";
      return;
    case Kind::kInt:
      out += std::to_string(int_);
      return;
    case Kind::kFloat:
      out += python_float_repr(float_);
      return;
    case Kind::kString:
      repr_string(as_string(), out);
      return;
    case Kind::kList: {
      out += '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        (*list_)[i].repr_impl(out, depth + 1);
      }
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (dict_->is_namespace) {
        out += "<Namespace>";
        return;
      }
      out += '{';
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        repr_string(dict_->items[i].first, out);
        out += ": ";
        dict_->items[i].second.repr_impl(out, depth + 1);
      }
      out += '}';
      return;
    }
    case Kind::kFunction:
      out += "<function>";
      return;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

std::string Value::to_json(int indent, std::string_view item_sep, std::string_view key_sep,
                           bool sort_keys) const {
  std::string out;
  to_json_impl(out, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

void Value::to_json_impl(std::string& out, int indent, size_t depth, std::string_view item_sep,
                         std::string_view key_sep, bool sort_keys) const {
  check_string_size(out.size());
  charge_steps(1);
  auto newline = [&](size_t d) {
    out += '\n';
    check_string_size(out.size() + static_cast<size_t>(indent) * d);
    out.append(static_cast<size_t>(indent) * d, ' ');
  };
  switch (kind_) {
    case Kind::kUndefined:
      throw JinjaError("Object of type Undefined is not JSON serializable");
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += int_ ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(int_);
      return;
    case Kind::kFloat:
      if (std::isnan(float_))
        out += "NaN";
      else if (std::isinf(float_))
        out += float_ > 0 ? "Infinity" : "-Infinity";
      else
        out += python_float_repr(float_);
      return;
    case Kind::kString:
      json_string(as_string(), out);
      return;
    case Kind::kList: {
      if (list_->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += indent >= 0 ? std::string_view(",") : item_sep;
        if (indent >= 0) newline(depth + 1);
        (*list_)[i].to_json_impl(out, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (dict_->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : dict_->items) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent >= 0 ? std::string_view(",") : item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string(items[i]->first, out);
        out += key_sep;
        items[i]->second.to_json_impl(out, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Kind::kFunction:
      throw JinjaError("Object of type function is not JSON serializable");
  }
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

Value Args::get(size_t index, std::string_view name, Value fallback) const {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  if (index < positional.size()) return positional[index];
  return fallback;
}

bool values_equal(const Value& a, const Value& b) {
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!values_equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* o = b.dict().find(k);
        if (o == nullptr || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

bool value_less(const Value& a, const Value& b) {
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    return std::lexicographical_compare(a.list().begin(), a.list().end(), b.list().begin(),
                                        b.list().end(), value_less);
  }
  throw JinjaError("'<' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
}

size_t str_find(std::string_view hay, std::string_view needle, size_t from) {
  charge_scan(hay.size() > from ? hay.size() - from : 0);
  if (from > hay.size()) return std::string_view::npos;
  if (needle.size() <= 64) return hay.find(needle, from);
  // Knuth-Morris-Pratt: linear in hay + needle, where a naive scan of a long
  // needle over a long haystack is quadratic.
  std::vector<size_t> fail(needle.size(), 0);
  for (size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k - 1];
    if (needle[i] == needle[k]) ++k;
    fail[i] = k;
  }
  for (size_t i = from, k = 0; i < hay.size(); ++i) {
    while (k > 0 && hay[i] != needle[k]) k = fail[k - 1];
    if (hay[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - k;
  }
  return std::string_view::npos;
}

std::vector<std::string_view> code_points(std::string_view s) {
  charge_scan(s.size());
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace ferrite::jinja
