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

// Budgets that keep a hostile template (or a hostile request fed to a benign
// one) from crashing, hanging or exhausting memory: every limit is a
// JinjaError naming it, never a stack overflow or bad_alloc. They are
// generous: the real templates (Qwen3, Llama-3.x, Qwen3.5, ...) on long
// multi-turn chats with tools use a small fraction of each.
struct Limits {
  // Template source size. Real chat templates are under 20 KB.
  size_t max_template_bytes = size_t{1} << 20;
  // Height of the parsed tree: nested parentheses / lists / operators chains
  // in one expression, and nested statements ({% if %} inside {% for %}, each
  // elif of a chain). Evaluation and destruction of the tree recurse, so this
  // bounds stack use; real templates stay under 30.
  size_t max_parse_depth = 256;
  // Statements, expressions and macro calls active at once while rendering
  // (recursive macros). Real templates stay under 40. With max_parse_depth
  // this keeps a parse or a render under ~512 KiB of stack in a release
  // build (hostile_input_test runs the deepest cases on a 1 MiB thread).
  size_t max_eval_depth = 200;
  // Nesting of lists and dicts, in the request data and in values the
  // template builds (equality, repr and tojson recurse over it).
  size_t max_value_depth = kDefaultMaxValueDepth;
  // Evaluation steps: one per statement, expression node and loop iteration,
  // plus one per element copied or compared and per 256 bytes scanned. About
  // a second of work at worst; Qwen3's template on a 2,000-message chat with
  // tool calls takes ~270k.
  uint64_t max_steps = 10'000'000;
  // Rendered text, and any single string built (by ~, +, *, join, replace,
  // tojson, set blocks, macro output...). 8 MiB is ~2M tokens of text, far
  // beyond any context window.
  size_t max_output_bytes = size_t{8} << 20;
  size_t max_string_bytes = size_t{8} << 20;
  // Elements of any single list or dict built (range(), *, +, ...).
  size_t max_items = size_t{1} << 20;
  // Bytes of all the strings built during one render together: bounds the
  // memory and time of templates that rebuild large strings in loops.
  uint64_t max_total_bytes = uint64_t{512} << 20;
};

// The rendered text and which of its bytes came from request data (see
// Spans in jinja_value.h).
struct Rendered {
  std::string text;
  Spans data;
};

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
  int height = 1;        // of this expression tree (Limits::max_parse_depth)
};

class Template {
 public:
  // Throws JinjaError with the line number on a syntax error or when the
  // template exceeds limits.max_template_bytes / max_parse_depth.
  static Template parse(std::string_view source, const Limits& limits = Limits());
  // Renders with `globals` (name -> value) visible as top-level variables.
  // Throws JinjaError (or TemplateRaised from raise_exception), also when a
  // budget of `limits` runs out.
  Rendered render(const std::vector<std::pair<std::string, Value>>& globals,
                  const Limits& limits = Limits()) const;

 private:
  std::vector<NodePtr> body_;
};

}  // namespace ferrite::jinja
