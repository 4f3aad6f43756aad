// JsonConfig: a typed, read-only view of a Hugging Face JSON config
// (config.json, generation_config.json, tokenizer_config.json, ...).
//
// Every getter names the file and the full field path in its error, e.g.
//   "/m/config.json: field 'text_config.hidden_size' must be a positive
//    integer, got \"abc\""
// JSON null counts as absent (HF writes "rope_scaling": null), so has() is
// false for it and the *_or getters return their fallback.
//
// Error codes: load(): not_found (missing file), invalid_argument (not JSON,
// with the parser's message; top level not an object). Getters:
// invalid_argument for a missing required field or a value of the wrong type
// or range.
//
// Ownership: the parsed document is shared (reference counted) by a config and
// every sub-object taken from it; copies are cheap and independent of the
// source file. Thread safety: immutable; const methods may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ferrite {

class JsonConfig {
 public:
  // Reads and parses `path` (at most 64 MB, nesting at most 256 deep).
  static Result<JsonConfig> load(const std::string& path);
  // Parses `text`; `source` names it in error messages (usually a path).
  static Result<JsonConfig> parse(std::string_view text, std::string source);

  // The file (or source name) the config came from.
  const std::string& source() const { return source_; }
  // "" at the top level, "text_config." inside a sub-object.
  const std::string& prefix() const { return prefix_; }

  // True when `key` is present and not null.
  bool has(std::string_view key) const;
  // Keys of this object, sorted.
  std::vector<std::string> keys() const;

  // Required fields: invalid_argument when absent, null or of the wrong type.
  // get_int accepts integral numbers only (3 and 3.0; not 3.5, "3" or true)
  // within int64. get_float accepts any number.
  Result<int64_t> get_int(std::string_view key) const;
  Result<int64_t> get_positive_int(std::string_view key) const;  // > 0
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  // An array of integers. A single integer reads as a one-element list
  // (generation_config's eos_token_id is either).
  Result<std::vector<int64_t>> get_int_list(std::string_view key) const;
  Result<std::vector<double>> get_float_list(std::string_view key) const;
  Result<std::vector<std::string>> get_string_list(std::string_view key) const;
  // A nested object (`text_config`, `rope_scaling`, `quantization_config`).
  Result<JsonConfig> get_object(std::string_view key) const;

  // Range-checked fields, for every value that reaches a size, a loop bound
  // or a division: invalid_argument naming the field, the range and the
  // value, e.g. "field 'num_hidden_layers' must be an integer in [1, 1024],
  // got 4294967296". get_int_in: integral numbers in [lo, hi].
  // get_positive_float: a finite number in (0, hi] (JSON cannot spell NaN or
  // infinity and parse() refuses numbers past a double's range; checked
  // anyway, as every comparison with NaN is false).
  Result<int64_t> get_int_in(std::string_view key, int64_t lo, int64_t hi) const;
  Result<double> get_positive_float(std::string_view key, double hi) const;
  // As above; `fallback` (returned unchecked) when absent or null.
  Result<int64_t> get_int_in_or(std::string_view key, int64_t lo, int64_t hi,
                                int64_t fallback) const;
  Result<double> get_positive_float_or(std::string_view key, double hi, double fallback) const;
  // invalid_argument "<source>: field '<prefix><key>' <what>" (and the value
  // when present), for checks that relate several fields.
  Status field_error(std::string_view key, std::string_view what) const;

  // Optional fields: `fallback` when absent or null, an error when present
  // with the wrong type (a wrong value is never silently replaced).
  Result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  Result<double> get_float_or(std::string_view key, double fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;
  // nullopt when absent or null.
  Result<std::optional<JsonConfig>> find_object(std::string_view key) const;

  // The value of `key` as compact JSON text ("" when absent), for logs and
  // fingerprints.
  std::string dump(std::string_view key) const;

 private:
  JsonConfig(std::shared_ptr<const nlohmann::json> doc, const nlohmann::json* node,
             std::string source, std::string prefix);
  // nullptr when absent or null.
  const nlohmann::json* lookup(std::string_view key) const;
  Status type_error(std::string_view key, std::string_view expected) const;
  Status missing(std::string_view key) const;

  std::shared_ptr<const nlohmann::json> doc_;  // keeps node_ alive
  const nlohmann::json* node_ = nullptr;       // an object inside *doc_
  std::string source_;
  std::string prefix_;
};

}  // namespace ferrite
