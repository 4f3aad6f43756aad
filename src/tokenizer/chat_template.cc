#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/jinja.h"

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
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const auto& v = config[key];
    if (v.is_string())
      out[key] = v;
    else if (v.is_object() && v.contains("content"))
      out[key] = v["content"];
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    ordered_json list = ordered_json::array();
    for (const auto& t : config["additional_special_tokens"]) {
      if (t.is_string())
        list.push_back(t);
      else if (t.is_object() && t.contains("content"))
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
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::load(const std::string& path) {
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
    FERRITE_ASSIGN_OR_RETURN(source, read_file(dir / "chat_template.jinja"));
  } else if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      source = ct.get<std::string>();
    } else if (ct.is_array()) {
      // Named templates: [{"name": "default", "template": ...}, ...].
      for (const auto& e : ct) {
        if (e.value("name", "") == "default") source = e.value("template", "");
      }
      if (source.empty()) return not_found(config_path.string() + ": no 'default' chat template");
    }
  }
  if (source.empty()) return not_found("no chat template in " + path);
  auto t = from_source(source, special_tokens_of(config));
  if (!t.is_ok()) return t.status().with_context(path);
  return t;
}

Result<std::string> ChatTemplate::render(const ordered_json& messages, const ordered_json& tools,
                                         bool add_generation_prompt,
                                         const ordered_json& extra_kwargs) const {
  if (!messages.is_array()) return invalid_argument("chat messages must be a JSON array");
  try {
    std::vector<std::pair<std::string, jinja::Value>> globals;
    for (const auto& [k, v] : special_tokens_.items()) {
      globals.emplace_back(k, jinja::Value::from_json(v));
    }
    globals.emplace_back("messages", jinja::Value::from_json(messages));
    globals.emplace_back("tools", jinja::Value::from_json(tools));
    globals.emplace_back("documents", jinja::Value::none());
    globals.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (extra_kwargs.is_object()) {
      for (const auto& [k, v] : extra_kwargs.items()) {
        globals.emplace_back(k, jinja::Value::from_json(v));
      }
    }
    return template_->render(globals);
  } catch (const jinja::TemplateRaised& e) {
    return invalid_argument(std::string("chat template rejected the request: ") + e.what());
  } catch (const jinja::JinjaError& e) {
    return invalid_argument(std::string("chat template error: ") + e.what());
  }
}

}  // namespace ferrite
