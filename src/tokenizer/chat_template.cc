#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {
namespace {

using nlohmann::ordered_json;

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// transformers' special_tokens_map: these keys, as strings ({"content": ...}
// objects of AddedToken are reduced to their content).
ordered_json special_tokens_of(const ordered_json& config) {
  ordered_json out = ordered_json::object();
  if (!config.is_object()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const auto& v = config[key];
    if (v.is_string())
      out[key] = v;
    else if (v.is_object() && v.contains("content") && v["content"].is_string())
      out[key] = v["content"];
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    ordered_json list = ordered_json::array();
    for (const auto& t : config["additional_special_tokens"]) {
      if (t.is_string())
        list.push_back(t);
      else if (t.is_object() && t.contains("content") && t["content"].is_string())
        list.push_back(t["content"]);
    }
    out["additional_special_tokens"] = list;
  }
  return out;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_source(const std::string& source,
                                               const ordered_json& special_tokens) {
  ChatTemplate t;
  t.source_ = source;
  t.special_tokens_ = special_tokens.is_object() ? special_tokens : ordered_json::object();
  try {
    t.template_ = std::make_shared<const jinja::Template>(jinja::Template::parse(source));
  } catch (const jinja::JinjaError& e) {
    return unsupported(std::string("chat template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while parsing");
  } catch (const std::exception& e) {
    // Last resort: every known failure is a JinjaError above.
    return internal_error(std::string("chat template: unexpected error while parsing: ") +
                          e.what());
  }
  return t;
}

namespace {

Result<ChatTemplate> load_template(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  fs::path config_path = fs::is_directory(p, ec) ? dir / "tokenizer_config.json" : p;
  ordered_json config = ordered_json::object();
  if (fs::exists(config_path, ec)) {
    FERRITE_ASSIGN_OR_RETURN(std::string text, read_file(config_path));
    try {
      config = ordered_json::parse(text);
    } catch (const ordered_json::exception& e) {
      return data_loss(config_path.string() + " is not valid JSON: " + e.what());
    }
  }
  std::string source;
  if (fs::exists(dir / "chat_template.jinja", ec)) {
    // Refused before reading when over the parser's size limit.
    const auto size = fs::file_size(dir / "chat_template.jinja", ec);
    if (!ec && size > jinja::Limits().max_template_bytes) {
      return invalid_argument((dir / "chat_template.jinja").string() + " is " +
                              std::to_string(size) + " bytes, over the limit of " +
                              std::to_string(jinja::Limits().max_template_bytes));
    }
    FERRITE_ASSIGN_OR_RETURN(source, read_file(dir / "chat_template.jinja"));
  } else if (config.is_object() && config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      source = ct.get<std::string>();
    } else if (ct.is_array()) {
      // Named templates: [{"name": "default", "template": ...}, ...].
      for (const auto& e : ct) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
            e["name"].get<std::string>() != "default") {
          continue;
        }
        if (!e.contains("template") || !e["template"].is_string()) {
          return invalid_argument(config_path.string() +
                                  ": the 'default' chat template is not a string");
        }
        source = e["template"].get<std::string>();
      }
      if (source.empty()) return not_found(config_path.string() + ": no 'default' chat template");
    } else if (!ct.is_null()) {
      return invalid_argument(config_path.string() +
                              ": chat_template is neither a string nor a list of named templates");
    }
  }
  if (source.empty()) return not_found("no chat template in " + path);
  auto t = ChatTemplate::from_source(source, special_tokens_of(config));
  if (!t.is_ok()) return t.status().with_context(path);
  return t;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::load(const std::string& path) {
  if (is_gguf_file(path)) return load_gguf_chat_template(path);
  try {
    return load_template(path);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while loading " + path);
  } catch (const std::exception& e) {
    // Last resort: JSON access above is type-checked.
    return internal_error("chat template: unexpected error while loading " + path + ": " +
                          e.what());
  }
}

// Forgery defence of render_tokens, by provenance tracking (rather than
// substituting placeholders for special-token text in the data before
// rendering): every string of the messages, tools and kwargs enters the
// interpreter marked as data, the marks follow the bytes through the
// template's string operations (jinja_value.h, Spans), and the tokenizer
// parses a special token only where none of its bytes is data. The rendered
// text is exactly render()'s, so templates that inspect the content
// (startswith, split on '</think>', length, tojson) behave the same as
// without the defence, and benign input gives encode(render(...)) ids.
Result<jinja::Rendered> ChatTemplate::render_marked(const ordered_json& messages,
                                                     const ordered_json& tools,
                                                     bool add_generation_prompt,
                                                     const ordered_json& extra_kwargs) const {
  if (!messages.is_array()) return invalid_argument("chat messages must be a JSON array");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object()) {
    return invalid_argument("chat template kwargs must be a JSON object");
  }
  try {
    std::vector<std::pair<std::string, jinja::Value>> globals;
    // The special tokens are the model's own (tokenizer_config.json): not data.
    for (const auto& [k, v] : special_tokens_.items()) {
      globals.emplace_back(k, jinja::Value::from_json(v));
    }
    globals.emplace_back("messages", jinja::Value::from_json(messages, /*data=*/true));
    globals.emplace_back("tools", jinja::Value::from_json(tools, /*data=*/true));
    globals.emplace_back("documents", jinja::Value::none());
    globals.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (extra_kwargs.is_object()) {
      for (const auto& [k, v] : extra_kwargs.items()) {
        globals.emplace_back(k, jinja::Value::from_json(v, /*data=*/true));
      }
    }
    return template_->render(globals);
  } catch (const jinja::TemplateRaised& e) {
    return invalid_argument(std::string("chat template rejected the request: ") + e.what());
  } catch (const jinja::JinjaError& e) {
    return invalid_argument(std::string("chat template error: ") + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while rendering");
  } catch (const std::exception& e) {
    // Last resort: every known failure is a JinjaError above.
    return internal_error(std::string("chat template: unexpected error: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render(const ordered_json& messages, const ordered_json& tools,
                                         bool add_generation_prompt,
                                         const ordered_json& extra_kwargs) const {
  FERRITE_ASSIGN_OR_RETURN(jinja::Rendered r,
                           render_marked(messages, tools, add_generation_prompt, extra_kwargs));
  return std::move(r.text);
}

Result<std::vector<uint32_t>> ChatTemplate::render_tokens(const Tokenizer& tokenizer,
                                                          const ordered_json& messages,
                                                          const ordered_json& tools,
                                                          bool add_generation_prompt,
                                                          const ordered_json& extra_kwargs) const {
  FERRITE_ASSIGN_OR_RETURN(jinja::Rendered r,
                           render_marked(messages, tools, add_generation_prompt, extra_kwargs));
  return tokenizer.encode_marked(r.text, /*add_special_tokens=*/false, SpecialText::kParse, r.data);
}

}  // namespace ferrite
