// Internal to the chat-template interpreter: a parsed Jinja template and its
// renderer. Supports the subset real chat templates use, with the settings
// transformers' apply_chat_template uses (trim_blocks, lstrip_blocks,
// loopcontrols, keep_trailing_newline off):
//   statements: if/elif/else, for (tuple targets, `if` filter, else, loop.*),
//     set (names, tuples, namespace attributes, set blocks), macro, break,
//     continue, raw, generation; comments; whitespace control (-, +).
//   expressions: literals, lists, dicts, tuples, attributes, subscripts,
//     slices, calls with keyword arguments, filters, tests, arithmetic,
//     ~ concatenation, comparisons, in / not in, and/or/not, conditional.
// Anything else (include, extends, import, call blocks, ...) is rejected at
// parse time with the line number.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace ferrite::jinja {

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Node {
  enum class Kind {
    // expressions
    kLiteral,
    kName,
    kList,
    kDict,
    kTuple,
    kAttr,
    kSubscript,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kAnd,
    kOr,
    kNot,
    kCond,
    // statements
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kBreak,
    kContinue,
    kBlock,
  };
  Kind kind;
  int line = 0;
  std::string name;                // name, attribute, operator, filter, test, set/macro name
  Value value;                     // literal
  std::vector<NodePtr> kids;       // operands / call arguments (positional then keyword)
  std::vector<std::string> names;  // keyword names of the trailing kids; for/set targets;
                                   // macro parameters
  std::vector<NodePtr> body, else_body;
  bool negated = false;  // kTest: `is not`
};

class Template {
 public:
  // Throws JinjaError with the line number on a syntax error.
  static Template parse(std::string_view source);
  // Renders with `globals` (name -> value) visible as top-level variables.
  // Throws JinjaError (or TemplateRaised from raise_exception).
  std::string render(const std::vector<std::pair<std::string, Value>>& globals) const;

 private:
  std::vector<NodePtr> body_;
};

}  // namespace ferrite::jinja
