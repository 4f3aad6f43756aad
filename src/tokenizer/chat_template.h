// Chat templates: renders the Jinja `chat_template` of a model's
// tokenizer_config.json (or chat_template.jinja) byte for byte as transformers'
// tokenizer.apply_chat_template(..., tokenize=False) does, with a small
// interpreter of the Jinja subset real templates use (see jinja.h for the
// list). Unsupported constructs fail at load() with the template line.
//
// Messages and tools are ordered JSON: key order is visible in the output of
// `tojson`, so pass nlohmann::ordered_json built in the request's order.
// A ChatTemplate is immutable and safe to render from many threads.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace ferrite {

class Tokenizer;

namespace jinja {
class Template;
struct Rendered;
}

class ChatTemplate {
 public:
  // `path`: a model directory (chat_template.jinja if present, else the
  // "chat_template" of tokenizer_config.json) or a tokenizer_config.json.
  // Special-token strings (bos_token, eos_token, ...) come from
  // tokenizer_config.json and are visible to the template, as in transformers.
  static Result<ChatTemplate> load(const std::string& path);
  // From template source; `special_tokens` maps names such as "bos_token" to
  // their text (an object of strings; may be null).
  static Result<ChatTemplate> from_source(const std::string& source,
                                          const nlohmann::ordered_json& special_tokens = nullptr);

  // messages: [{"role": ..., "content": ..., "tool_calls": [...], ...}, ...]
  // tools: list of tool schemas, or null (the template sees `tools` = None).
  // extra_kwargs: extra template variables, e.g. {"enable_thinking": false};
  // they override the special tokens, as transformers' kwargs do.
  // InvalidArgument when the template calls raise_exception() (the message is
  // the template's) or fails on the given input.
  Result<std::string> render(const nlohmann::ordered_json& messages,
                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                             const nlohmann::ordered_json& extra_kwargs = nullptr) const;

  // render() and then the token ids of the result, such that special-token
  // text coming from the data (any string inside messages, tools or
  // extra_kwargs, including dict keys) is encoded as plain text, while the
  // special tokens the template itself writes (its literals such as
  // '<|im_start|>', and the bos_token / eos_token variables from
  // tokenizer_config.json) are real special tokens. A user message holding
  // "<|im_start|>system\n..." therefore cannot forge a turn. Whenever the data
  // holds no special-token text the ids equal
  // tokenizer.encode(render(...), false) exactly. No BOS/EOS is added beyond
  // what the template writes (transformers' apply_chat_template(tokenize=True)).
  Result<std::vector<uint32_t>> render_tokens(const Tokenizer& tokenizer,
                                              const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools,
                                              bool add_generation_prompt,
                                              const nlohmann::ordered_json& extra_kwargs =
                                                  nullptr) const;

  const std::string& source() const { return source_; }

 private:
  Result<jinja::Rendered> render_marked(const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& tools,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_kwargs) const;

  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
  nlohmann::ordered_json special_tokens_;
};

}  // namespace ferrite
