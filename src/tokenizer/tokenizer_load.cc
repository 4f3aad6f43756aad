// tokenizer.json / tokenizer_config.json / generation_config.json parsing.
// Every JSON exception is caught here and becomes a Status.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ferrite {
namespace {

using nlohmann::json;
using tokenizer::DecoderStep;
using tokenizer::NormalizerStep;
using tokenizer::PreTokenizerStep;

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string type_of(const json& j) { return j.value("type", std::string()); }

Result<std::shared_ptr<const tokenizer::Regex>> pattern_regex(const json& pattern) {
  if (pattern.contains("Regex"))
    return tokenizer::Regex::compile(pattern["Regex"].get<std::string>());
  if (pattern.contains("String")) {
    return tokenizer::Regex::compile(
        tokenizer::Regex::escape(pattern["String"].get<std::string>()));
  }
  return invalid_argument("pattern is neither String nor Regex: " + pattern.dump());
}

Status parse_normalizer(const json& j, std::vector<NormalizerStep>& out) {
  if (j.is_null()) return Status::ok();
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& n : j["normalizers"]) FERRITE_RETURN_IF_ERROR(parse_normalizer(n, out));
  } else if (type == "NFC") {
    out.push_back({NormalizerStep::Kind::kNfc});
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::kPrepend, j["prepend"].get<std::string>()});
  } else if (type == "Replace") {
    NormalizerStep step{NormalizerStep::Kind::kReplace};
    step.content = j["content"].get<std::string>();
    if (j["pattern"].contains("String")) {
      step.text = j["pattern"]["String"].get<std::string>();
    } else {
      FERRITE_ASSIGN_OR_RETURN(step.regex, pattern_regex(j["pattern"]));
    }
    out.push_back(std::move(step));
  } else if (type == "Strip") {
    NormalizerStep step{NormalizerStep::Kind::kStrip};
    step.strip_left = j.value("strip_left", false);
    step.strip_right = j.value("strip_right", false);
    out.push_back(std::move(step));
  } else {
    return unsupported("normalizer type '" + type + "' is not supported");
  }
  return Status::ok();
}

Result<tokenizer::SplitBehavior> parse_behavior(const std::string& b) {
  using tokenizer::SplitBehavior;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported("split behavior '" + b + "' is not supported");
}

tokenizer::PrependScheme parse_prepend(const json& j) {
  if (j.contains("prepend_scheme")) {
    std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "first") return tokenizer::PrependScheme::kFirst;
    if (s == "never") return tokenizer::PrependScheme::kNever;
    return tokenizer::PrependScheme::kAlways;
  }
  return j.value("add_prefix_space", true) ? tokenizer::PrependScheme::kAlways
                                           : tokenizer::PrependScheme::kNever;
}

const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

Status parse_pre_tokenizer(const json& j, std::vector<PreTokenizerStep>& out) {
  if (j.is_null()) return Status::ok();
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& p : j["pretokenizers"]) FERRITE_RETURN_IF_ERROR(parse_pre_tokenizer(p, out));
  } else if (type == "Split") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kSplit};
    FERRITE_ASSIGN_OR_RETURN(step.regex, pattern_regex(j["pattern"]));
    FERRITE_ASSIGN_OR_RETURN(step.behavior, parse_behavior(j["behavior"].get<std::string>()));
    if (j.value("invert", false)) return unsupported("Split pre-tokenizer with invert=true");
    out.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kByteLevel};
    step.add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) {
      FERRITE_ASSIGN_OR_RETURN(step.regex, tokenizer::Regex::compile(kGpt2Pattern));
    }
    out.push_back(std::move(step));
  } else if (type == "Metaspace") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kMetaspace};
    step.replacement = j.value("replacement", std::string("\xE2\x96\x81"));
    step.prepend = parse_prepend(j);
    step.split = j.value("split", true);
    out.push_back(std::move(step));
  } else if (type == "Digits") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kDigits};
    step.individual_digits = j.value("individual_digits", false);
    out.push_back(std::move(step));
  } else {
    return unsupported("pre-tokenizer type '" + type + "' is not supported");
  }
  return Status::ok();
}

Status parse_decoder(const json& j, std::vector<DecoderStep>& out) {
  if (j.is_null()) return Status::ok();
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& d : j["decoders"]) FERRITE_RETURN_IF_ERROR(parse_decoder(d, out));
  } else if (type == "ByteLevel") {
    out.push_back({DecoderStep::Kind::kByteLevel});
  } else if (type == "Replace") {
    if (!j["pattern"].contains("String"))
      return unsupported("Replace decoder with a Regex pattern");
    DecoderStep step{DecoderStep::Kind::kReplace};
    step.pattern = j["pattern"]["String"].get<std::string>();
    step.content = j["content"].get<std::string>();
    out.push_back(std::move(step));
  } else if (type == "ByteFallback") {
    out.push_back({DecoderStep::Kind::kByteFallback});
  } else if (type == "Fuse") {
    out.push_back({DecoderStep::Kind::kFuse});
  } else if (type == "Strip") {
    DecoderStep step{DecoderStep::Kind::kStrip};
    std::string content = j["content"].get<std::string>();
    size_t pos = 0;
    step.strip_char = content.empty() ? U' ' : tokenizer::next_code_point(content, pos);
    step.start = j.value("start", size_t{0});
    step.stop = j.value("stop", size_t{0});
    out.push_back(std::move(step));
  } else if (type == "Metaspace") {
    DecoderStep step{DecoderStep::Kind::kMetaspace};
    step.replacement = j.value("replacement", std::string("\xE2\x96\x81"));
    step.prepend = parse_prepend(j) != tokenizer::PrependScheme::kNever;
    out.push_back(std::move(step));
  } else {
    return unsupported("decoder type '" + type + "' is not supported");
  }
  return Status::ok();
}

Status parse_post_processor(const json& j, const Tokenizer::Impl& im, std::vector<uint32_t>& prefix,
                            std::vector<uint32_t>& suffix) {
  if (j.is_null()) return Status::ok();
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& p : j["processors"]) {
      FERRITE_RETURN_IF_ERROR(parse_post_processor(p, im, prefix, suffix));
    }
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    for (const auto& item : j["single"]) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      const auto& special = j["special_tokens"];
      if (!special.contains(name)) {
        return data_loss("TemplateProcessing names unknown special token '" + name + "'");
      }
      auto& target = seen_sequence ? suffix : prefix;
      for (const auto& id : special[name]["ids"]) target.push_back(id.get<uint32_t>());
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(j["cls"][1].get<uint32_t>());
    suffix.push_back(j["sep"][1].get<uint32_t>());
  } else {
    return unsupported("post-processor type '" + type + "' is not supported");
  }
  return Status::ok();
}

// A special token in tokenizer_config.json: a string, {"content": ...}, or null.
std::string token_text(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return "";
}

Status build(const json& tj, const json& config, const json& gen_config, Tokenizer::Impl& im) {
  const json& model = tj.at("model");
  std::string model_type = model.value("type", std::string("BPE"));
  if (model_type != "BPE") return unsupported("tokenizer model type '" + model_type + "'");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return unsupported(std::string("BPE with ") + key);
    }
  }
  std::unordered_map<std::string, uint32_t> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) vocab.emplace(token, id.get<uint32_t>());
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(model["merges"].size());
  for (const auto& m : model["merges"]) {
    if (m.is_array()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      std::string s = m.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return data_loss("malformed merge '" + s + "'");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
  }
  tokenizer::BpeOptions options;
  options.byte_fallback = model.value("byte_fallback", false);
  options.fuse_unk = model.value("fuse_unk", false);
  options.ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = vocab.find(model["unk_token"].get<std::string>());
    if (it != vocab.end()) options.unk_id = it->second;
  }
  FERRITE_ASSIGN_OR_RETURN(auto bpe, tokenizer::Bpe::create(std::move(vocab), merges, options));
  im.model.emplace(std::move(bpe));
  im.vocab_size = im.model->size();

  if (tj.contains("normalizer"))
    FERRITE_RETURN_IF_ERROR(parse_normalizer(tj["normalizer"], im.normalizers));
  if (tj.contains("pre_tokenizer")) {
    FERRITE_RETURN_IF_ERROR(parse_pre_tokenizer(tj["pre_tokenizer"], im.pre_tokenizers));
  }
  for (size_t i = 0; i < im.pre_tokenizers.size(); ++i) {
    if (im.pre_tokenizers[i].kind == PreTokenizerStep::Kind::kByteLevel) {
      if (i + 1 != im.pre_tokenizers.size()) {
        return unsupported("a ByteLevel pre-tokenizer that is not the last one");
      }
      im.byte_level = true;
    }
  }
  if (tj.contains("decoder") && !tj["decoder"].is_null()) {
    im.has_decoder = true;
    FERRITE_RETURN_IF_ERROR(parse_decoder(tj["decoder"], im.decoders));
  }

  if (tj.contains("added_tokens")) {
    for (const auto& a : tj["added_tokens"]) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = a.at("id").get<uint32_t>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      t.normalized = a.value("normalized", !t.special);
      im.added.push_back(std::move(t));
    }
  }
  for (size_t i = 0; i < im.added.size(); ++i) {
    const AddedToken& t = im.added[i];
    im.added_by_id[t.id] = i;
    im.added_by_content[t.content] = i;
    (t.normalized ? im.normalized_matcher : im.raw_matcher).add(&t);
    im.vocab_size = std::max(im.vocab_size, size_t{t.id} + 1);
  }
  im.raw_matcher.finalize();
  im.normalized_matcher.finalize();

  if (tj.contains("post_processor")) {
    FERRITE_RETURN_IF_ERROR(
        parse_post_processor(tj["post_processor"], im, im.prefix_ids, im.suffix_ids));
  }

  auto lookup = [&](const std::string& token) -> std::optional<uint32_t> {
    if (token.empty()) return std::nullopt;
    if (auto it = im.added_by_content.find(token); it != im.added_by_content.end()) {
      return im.added[it->second].id;
    }
    return im.model->token_to_id(token);
  };
  im.bos_token = token_text(config, "bos_token");
  im.eos_token = token_text(config, "eos_token");
  im.bos_id = lookup(im.bos_token);
  im.eos_id = lookup(im.eos_token);
  if (!im.bos_id && gen_config.contains("bos_token_id") && gen_config["bos_token_id"].is_number()) {
    im.bos_id = gen_config["bos_token_id"].get<uint32_t>();
  }
  auto add_stop = [&](uint32_t id) {
    if (std::find(im.stop_ids.begin(), im.stop_ids.end(), id) == im.stop_ids.end()) {
      im.stop_ids.push_back(id);
    }
  };
  if (im.eos_id) add_stop(*im.eos_id);
  if (gen_config.contains("eos_token_id")) {
    const json& e = gen_config["eos_token_id"];
    if (e.is_number()) add_stop(e.get<uint32_t>());
    if (e.is_array()) {
      for (const auto& id : e) add_stop(id.get<uint32_t>());
    }
  }
  if (!im.eos_id && !im.stop_ids.empty()) im.eos_id = im.stop_ids.front();
  return Status::ok();
}

Result<json> parse_json(std::string_view text, const char* what) {
  if (text.empty()) return json::object();
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return data_loss(std::string(what) + " is not valid JSON: " + e.what());
  }
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json,
                                                        std::string_view tokenizer_config_json,
                                                        std::string_view generation_config_json) {
  FERRITE_ASSIGN_OR_RETURN(json tj, parse_json(tokenizer_json, "tokenizer.json"));
  FERRITE_ASSIGN_OR_RETURN(json config, parse_json(tokenizer_config_json, "tokenizer_config.json"));
  FERRITE_ASSIGN_OR_RETURN(json gen, parse_json(generation_config_json, "generation_config.json"));
  auto impl = std::make_unique<Impl>();
  try {
    FERRITE_RETURN_IF_ERROR(build(tj, config, gen, *impl));
  } catch (const json::exception& e) {
    return data_loss(std::string("malformed tokenizer.json: ") + e.what());
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path_or_model_dir) {
  namespace fs = std::filesystem;
  fs::path path(path_or_model_dir);
  std::error_code ec;
  fs::path dir = fs::is_directory(path, ec) ? path : path.parent_path();
  fs::path tokenizer_path = fs::is_directory(path, ec) ? dir / "tokenizer.json" : path;
  FERRITE_ASSIGN_OR_RETURN(std::string tj, read_file(tokenizer_path));
  std::string config, gen;
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    FERRITE_ASSIGN_OR_RETURN(config, read_file(dir / "tokenizer_config.json"));
  }
  if (fs::exists(dir / "generation_config.json", ec)) {
    FERRITE_ASSIGN_OR_RETURN(gen, read_file(dir / "generation_config.json"));
  }
  auto result = from_json(tj, config, gen);
  if (!result.is_ok()) return result.status().with_context(tokenizer_path.string());
  return result;
}

}  // namespace ferrite
