#include "formats/json_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "formats/json_util.h"
#include "formats/mapped_file.h"

namespace ferrite {

namespace {

using nlohmann::json;

constexpr size_t kMaxConfigBytes = 64ull * 1024 * 1024;
constexpr int kMaxConfigDepth = 256;

std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Integral numbers within int64 (3, 3.0); not 3.5, 1e300, strings or bools.
std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^63 is exactly representable; anything at or above it does not fit.
    if (std::isfinite(d) && std::trunc(d) == d && d >= -9223372036854775808.0 &&
        d < 9223372036854775808.0) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

}  // namespace

JsonConfig::JsonConfig(std::shared_ptr<const json> doc, const json* node, std::string source,
                       std::string prefix)
    : doc_(std::move(doc)), node_(node), source_(std::move(source)), prefix_(std::move(prefix)) {}

Result<JsonConfig> JsonConfig::load(const std::string& path) {
  FERRITE_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  if (file.size() > kMaxConfigBytes) {
    return invalid_argument(path + ": " + std::to_string(file.size()) +
                            " bytes is too large for a JSON config");
  }
  return parse(file.bytes(), path);
}

Result<JsonConfig> JsonConfig::parse(std::string_view text, std::string source) {
  if (formats_internal::json_depth_exceeds(text, kMaxConfigDepth)) {
    return invalid_argument(source + ": JSON nests deeper than " + std::to_string(kMaxConfigDepth));
  }
  auto doc = std::make_shared<json>();
  try {
    *doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return invalid_argument(source + ": not valid JSON: " + e.what());
  }
  if (!doc->is_object()) {
    return invalid_argument(source + ": top level is not a JSON object: " + brief(*doc));
  }
  const json* node = doc.get();
  return JsonConfig(std::move(doc), node, std::move(source), "");
}

const json* JsonConfig::lookup(std::string_view key) const {
  auto it = node_->find(key);
  if (it == node_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonConfig::has(std::string_view key) const { return lookup(key) != nullptr; }

std::vector<std::string> JsonConfig::keys() const {
  std::vector<std::string> out;
  for (auto it = node_->begin(); it != node_->end(); ++it) out.push_back(it.key());
  return out;  // nlohmann::json objects iterate in sorted key order
}

Status JsonConfig::missing(std::string_view key) const {
  return invalid_argument(source_ + ": missing required field '" + prefix_ + std::string(key) +
                          "'");
}

Status JsonConfig::type_error(std::string_view key, std::string_view expected) const {
  return invalid_argument(source_ + ": field '" + prefix_ + std::string(key) + "' must be " +
                          std::string(expected) + ", got " + brief(*lookup(key)));
}

Result<int64_t> JsonConfig::get_int(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  std::optional<int64_t> i = as_int(*v);
  if (!i) return type_error(key, "an integer");
  return *i;
}

Result<int64_t> JsonConfig::get_positive_int(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  std::optional<int64_t> i = as_int(*v);
  if (!i || *i <= 0) return type_error(key, "a positive integer");
  return *i;
}

Result<double> JsonConfig::get_float(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  if (!v->is_number()) return type_error(key, "a number");
  return v->get<double>();
}

Result<bool> JsonConfig::get_bool(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  if (!v->is_boolean()) return type_error(key, "a boolean");
  return v->get<bool>();
}

Result<std::string> JsonConfig::get_string(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  if (!v->is_string()) return type_error(key, "a string");
  return v->get<std::string>();
}

Result<std::vector<int64_t>> JsonConfig::get_int_list(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  if (std::optional<int64_t> one = as_int(*v)) return std::vector<int64_t>{*one};
  if (!v->is_array()) return type_error(key, "a list of integers");
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (const json& e : *v) {
    std::optional<int64_t> i = as_int(e);
    if (!i) return type_error(key, "a list of integers");
    out.push_back(*i);
  }
  return out;
}

Result<std::vector<double>> JsonConfig::get_float_list(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  if (!v->is_array()) return type_error(key, "a list of numbers");
  std::vector<double> out;
  out.reserve(v->size());
  for (const json& e : *v) {
    if (!e.is_number()) return type_error(key, "a list of numbers");
    out.push_back(e.get<double>());
  }
  return out;
}

Result<std::vector<std::string>> JsonConfig::get_string_list(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  if (!v->is_array()) return type_error(key, "a list of strings");
  std::vector<std::string> out;
  out.reserve(v->size());
  for (const json& e : *v) {
    if (!e.is_string()) return type_error(key, "a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<JsonConfig> JsonConfig::get_object(std::string_view key) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  if (!v->is_object()) return type_error(key, "an object");
  return JsonConfig(doc_, v, source_, prefix_ + std::string(key) + ".");
}

Result<int64_t> JsonConfig::get_int_in(std::string_view key, int64_t lo, int64_t hi) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  std::optional<int64_t> i = as_int(*v);
  if (!i || *i < lo || *i > hi) {
    return type_error(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return *i;
}

Result<double> JsonConfig::get_positive_float(std::string_view key, double hi) const {
  const json* v = lookup(key);
  if (v == nullptr) return missing(key);
  // !(d > 0) also catches NaN, should a number ever decode to one.
  const double d = v->is_number() ? v->get<double>() : 0.0;
  if (!v->is_number() || !std::isfinite(d) || !(d > 0) || d > hi) {
    return type_error(key, hi < std::numeric_limits<double>::max()
                               ? "a finite number in (0, " + brief(json(hi)) + "]"
                               : std::string("a finite number > 0"));
  }
  return d;
}

Result<int64_t> JsonConfig::get_int_in_or(std::string_view key, int64_t lo, int64_t hi,
                                          int64_t fallback) const {
  if (!has(key)) return fallback;
  return get_int_in(key, lo, hi);
}

Result<double> JsonConfig::get_positive_float_or(std::string_view key, double hi,
                                                 double fallback) const {
  if (!has(key)) return fallback;
  return get_positive_float(key, hi);
}

Status JsonConfig::field_error(std::string_view key, std::string_view what) const {
  std::string msg = source_ + ": field '" + prefix_ + std::string(key) + "' " + std::string(what);
  if (const json* v = lookup(key)) msg += ", got " + brief(*v);
  return invalid_argument(msg);
}

Result<int64_t> JsonConfig::get_int_or(std::string_view key, int64_t fallback) const {
  if (!has(key)) return fallback;
  return get_int(key);
}

Result<double> JsonConfig::get_float_or(std::string_view key, double fallback) const {
  if (!has(key)) return fallback;
  return get_float(key);
}

Result<bool> JsonConfig::get_bool_or(std::string_view key, bool fallback) const {
  if (!has(key)) return fallback;
  return get_bool(key);
}

Result<std::string> JsonConfig::get_string_or(std::string_view key, std::string fallback) const {
  if (!has(key)) return fallback;
  return get_string(key);
}

Result<std::optional<JsonConfig>> JsonConfig::find_object(std::string_view key) const {
  if (!has(key)) return std::optional<JsonConfig>();
  FERRITE_ASSIGN_OR_RETURN(JsonConfig sub, get_object(key));
  return std::optional<JsonConfig>(std::move(sub));
}

std::string JsonConfig::dump(std::string_view key) const {
  auto it = node_->find(key);
  if (it == node_->end()) return "";
  return it->dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ferrite
