// JSON schema -> byte-level grammar (grammar.h) of the JSON texts the schema
// accepts, for constrained decoding. The JSON is compact up to bounded
// whitespace between tokens (none, one space, or one newline and up to
// kMaxIndent spaces / tabs), so a model that likes "\n" cannot loop forever.
// Numbers are bounded too: at most 16 integer digits, 16 fraction digits
// and a 3-digit exponent; integers in [-(10^16-1), 10^16-1] intersected with
// the schema's bounds.
//
// Supported: type (one or a list), properties (emitted in schema order),
// required, additionalProperties (false / true / a schema; absent means
// false when properties are listed, any value otherwise), items, prefixItems,
// minItems, maxItems, enum, const, anyOf, oneOf (as anyOf), allOf with one
// member, $ref to "#", "#/$defs/..", "#/definitions/.." or any JSON pointer
// into the document (recursion allowed), strings with minLength / maxLength,
// pattern (a regular subset of ECMA regex: literals, classes, ., \d \w \s,
// groups, |, * + ? {n,m}, ^ $ at the ends; unanchored patterns match
// anywhere), format (date, time, date-time, uuid, email, ipv4), integer and
// number with minimum / maximum / exclusiveMinimum / exclusiveMaximum
// (number bounds: the integer part is bounded, fractions are then only
// generated strictly inside, so non-integer bounds are rounded inwards),
// boolean, null, {} / true (any JSON value). Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly) are ignored. Anything else is an error naming the
// keyword (never silently ignored).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "grammar/grammar.h"

namespace ferrite::grammar {

inline constexpr int kMaxIndent = 20;

// The grammar of one JSON value valid against `schema`. InvalidArgument
// (message naming the unsupported feature and where) otherwise.
Result<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);
// Any JSON object (response_format json_object).
Grammar json_object_grammar();

// For grammars that embed JSON values (tool calls): a builder with the JSON
// pieces. Build the top sequence, then finish().
class JsonGrammar {
 public:
  JsonGrammar();
  ~JsonGrammar();
  Builder& builder();
  Builder::Seq ws();
  Builder::Seq any_value();
  Builder::Seq string_literal(const std::string& s);  // the JSON string of s
  // A value valid against `schema`, whose $refs resolve in `document`.
  Result<Builder::Seq> value(const nlohmann::ordered_json& schema,
                             const nlohmann::ordered_json& document);
  // Fails when the grammar admits nothing.
  Result<Grammar> finish(Builder::Seq top);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferrite::grammar
