// tokenizer.json / tokenizer_config.json / generation_config.json parsing.
// Every JSON exception is caught here and becomes a Status.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "tokenizer/gguf_tokenizer.h"
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

// Bounds on what a tokenizer.json may ask for, so that a hostile file is a
// clear error instead of a stack overflow or an allocation sized by its data.
// Real tokenizers nest Sequences at most 2 deep and use ids below 300k.
constexpr size_t kMaxSequenceDepth = 32;
// Token ids index arrays (the BPE id table, embedding rows): they must stay
// below 2^24 and within kIdSlack of the number of entries the file defines.
constexpr uint64_t kMaxTokenId = uint64_t{1} << 24;
constexpr uint64_t kIdSlack = 65536;

std::string json_type(const json& j) { return j.type_name(); }

// Typed field access: a wrong type is a DataLoss naming the field.
Result<std::string> string_field(const json& j, const char* key, const std::string& where,
                                 std::optional<std::string> fallback = std::nullopt) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    return data_loss(where + ": missing string field '" + key + "'");
  }
  const json& v = j[key];
  if (!v.is_string()) {
    return data_loss(where + ": field '" + key + "' must be a string, not " + json_type(v));
  }
  return v.get<std::string>();
}

Result<bool> bool_field(const json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) {
    return data_loss(where + ": field '" + key + "' must be a boolean, not " + json_type(j[key]));
  }
  return j[key].get<bool>();
}

// A token id: a non-negative integer below kMaxTokenId.
Result<uint32_t> token_id(const json& v, const std::string& where) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() &&
                                 v.get<int64_t>() < 0)) {
    return data_loss(where + ": token id must be a non-negative integer, not " +
                     (v.is_number() ? v.dump() : json_type(v)));
  }
  uint64_t id = v.get<uint64_t>();
  if (id >= kMaxTokenId) {
    return data_loss(where + ": token id " + std::to_string(id) + " is too large (limit " +
                     std::to_string(kMaxTokenId) + ")");
  }
  return static_cast<uint32_t>(id);
}

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "";
  return j["type"].get<std::string>();
}

// The list `key` of a Sequence component (normalizers, pretokenizers, ...).
Result<const json*> sequence_items(const json& j, const char* key, const std::string& where,
                                   size_t depth) {
  if (depth >= kMaxSequenceDepth) {
    return data_loss(where + ": Sequence nests deeper than " + std::to_string(kMaxSequenceDepth) +
                     " levels");
  }
  if (!j.contains(key) || !j[key].is_array()) {
    return data_loss(where + ": Sequence needs a list '" + key + "'");
  }
  return &j[key];
}

Result<std::shared_ptr<const tokenizer::Regex>> pattern_regex(const json& pattern) {
  if (pattern.is_object() && pattern.contains("Regex")) {
    FERRITE_ASSIGN_OR_RETURN(std::string re, string_field(pattern, "Regex", "pattern"));
    return tokenizer::Regex::compile(re);
  }
  if (pattern.is_object() && pattern.contains("String")) {
    FERRITE_ASSIGN_OR_RETURN(std::string text, string_field(pattern, "String", "pattern"));
    return tokenizer::Regex::compile(tokenizer::Regex::escape(text));
  }
  // Not dumped: a hostile pattern may nest deeply.
  return invalid_argument("pattern is neither {\"String\": ...} nor {\"Regex\": ...} (a " +
                          json_type(pattern) + ")");
}

Status parse_normalizer(const json& j, std::vector<NormalizerStep>& out, size_t depth = 0) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return data_loss("normalizer must be an object, not " + json_type(j));
  std::string type = type_of(j);
  const std::string where = "normalizer " + type;
  if (type == "Sequence") {
    FERRITE_ASSIGN_OR_RETURN(const json* items, sequence_items(j, "normalizers", where, depth));
    for (const auto& n : *items) FERRITE_RETURN_IF_ERROR(parse_normalizer(n, out, depth + 1));
  } else if (type == "NFC") {
    out.push_back({NormalizerStep::Kind::kNfc});
  } else if (type == "Prepend") {
    FERRITE_ASSIGN_OR_RETURN(std::string prepend, string_field(j, "prepend", where));
    out.push_back({NormalizerStep::Kind::kPrepend, std::move(prepend)});
  } else if (type == "Replace") {
    NormalizerStep step{NormalizerStep::Kind::kReplace};
    FERRITE_ASSIGN_OR_RETURN(step.content, string_field(j, "content", where));
    if (!j.contains("pattern")) return data_loss(where + ": missing 'pattern'");
    if (j["pattern"].is_object() && j["pattern"].contains("String")) {
      FERRITE_ASSIGN_OR_RETURN(step.text, string_field(j["pattern"], "String", where));
    } else {
      FERRITE_ASSIGN_OR_RETURN(step.regex, pattern_regex(j["pattern"]));
    }
    out.push_back(std::move(step));
  } else if (type == "Strip") {
    NormalizerStep step{NormalizerStep::Kind::kStrip};
    FERRITE_ASSIGN_OR_RETURN(step.strip_left, bool_field(j, "strip_left", false, where));
    FERRITE_ASSIGN_OR_RETURN(step.strip_right, bool_field(j, "strip_right", false, where));
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

Result<tokenizer::PrependScheme> parse_prepend(const json& j, const std::string& where) {
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    FERRITE_ASSIGN_OR_RETURN(std::string s, string_field(j, "prepend_scheme", where));
    if (s == "first") return tokenizer::PrependScheme::kFirst;
    if (s == "never") return tokenizer::PrependScheme::kNever;
    return tokenizer::PrependScheme::kAlways;
  }
  FERRITE_ASSIGN_OR_RETURN(bool add, bool_field(j, "add_prefix_space", true, where));
  return add ? tokenizer::PrependScheme::kAlways : tokenizer::PrependScheme::kNever;
}

const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

Status parse_pre_tokenizer(const json& j, std::vector<PreTokenizerStep>& out, size_t depth = 0) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return data_loss("pre_tokenizer must be an object, not " + json_type(j));
  std::string type = type_of(j);
  const std::string where = "pre_tokenizer " + type;
  if (type == "Sequence") {
    FERRITE_ASSIGN_OR_RETURN(const json* items, sequence_items(j, "pretokenizers", where, depth));
    for (const auto& p : *items) {
      FERRITE_RETURN_IF_ERROR(parse_pre_tokenizer(p, out, depth + 1));
    }
  } else if (type == "Split") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kSplit};
    if (!j.contains("pattern")) return data_loss(where + ": missing 'pattern'");
    FERRITE_ASSIGN_OR_RETURN(step.regex, pattern_regex(j["pattern"]));
    FERRITE_ASSIGN_OR_RETURN(std::string behavior, string_field(j, "behavior", where));
    FERRITE_ASSIGN_OR_RETURN(step.behavior, parse_behavior(behavior));
    FERRITE_ASSIGN_OR_RETURN(bool invert, bool_field(j, "invert", false, where));
    if (invert) return unsupported("Split pre-tokenizer with invert=true");
    out.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kByteLevel};
    FERRITE_ASSIGN_OR_RETURN(step.add_prefix_space, bool_field(j, "add_prefix_space", true, where));
    FERRITE_ASSIGN_OR_RETURN(bool use_regex, bool_field(j, "use_regex", true, where));
    if (use_regex) {
      FERRITE_ASSIGN_OR_RETURN(step.regex, tokenizer::Regex::compile(kGpt2Pattern));
    }
    out.push_back(std::move(step));
  } else if (type == "Metaspace") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kMetaspace};
    FERRITE_ASSIGN_OR_RETURN(step.replacement,
                             string_field(j, "replacement", where, "\xE2\x96\x81"));
    FERRITE_ASSIGN_OR_RETURN(step.prepend, parse_prepend(j, where));
    FERRITE_ASSIGN_OR_RETURN(step.split, bool_field(j, "split", true, where));
    out.push_back(std::move(step));
  } else if (type == "Digits") {
    PreTokenizerStep step{PreTokenizerStep::Kind::kDigits};
    FERRITE_ASSIGN_OR_RETURN(step.individual_digits,
                             bool_field(j, "individual_digits", false, where));
    out.push_back(std::move(step));
  } else {
    return unsupported("pre-tokenizer type '" + type + "' is not supported");
  }
  return Status::ok();
}

// A non-negative count (Strip decoder's start / stop).
Result<size_t> count_field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return size_t{0};
  const json& v = j[key];
  if (!v.is_number_unsigned()) {
    return data_loss(where + ": field '" + key + "' must be a non-negative integer");
  }
  return static_cast<size_t>(v.get<uint64_t>());
}

Status parse_decoder(const json& j, std::vector<DecoderStep>& out, size_t depth = 0) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return data_loss("decoder must be an object, not " + json_type(j));
  std::string type = type_of(j);
  const std::string where = "decoder " + type;
  if (type == "Sequence") {
    FERRITE_ASSIGN_OR_RETURN(const json* items, sequence_items(j, "decoders", where, depth));
    for (const auto& d : *items) FERRITE_RETURN_IF_ERROR(parse_decoder(d, out, depth + 1));
  } else if (type == "ByteLevel") {
    out.push_back({DecoderStep::Kind::kByteLevel});
  } else if (type == "Replace") {
    if (!j.contains("pattern") || !j["pattern"].is_object() || !j["pattern"].contains("String"))
      return unsupported("Replace decoder with a Regex pattern");
    DecoderStep step{DecoderStep::Kind::kReplace};
    FERRITE_ASSIGN_OR_RETURN(step.pattern, string_field(j["pattern"], "String", where));
    FERRITE_ASSIGN_OR_RETURN(step.content, string_field(j, "content", where));
    out.push_back(std::move(step));
  } else if (type == "ByteFallback") {
    out.push_back({DecoderStep::Kind::kByteFallback});
  } else if (type == "Fuse") {
    out.push_back({DecoderStep::Kind::kFuse});
  } else if (type == "Strip") {
    DecoderStep step{DecoderStep::Kind::kStrip};
    FERRITE_ASSIGN_OR_RETURN(std::string content, string_field(j, "content", where));
    FERRITE_RETURN_IF_ERROR(tokenizer::validate_utf8(content));
    size_t pos = 0;
    step.strip_char = content.empty() ? U' ' : tokenizer::next_code_point(content, pos);
    FERRITE_ASSIGN_OR_RETURN(step.start, count_field(j, "start", where));
    FERRITE_ASSIGN_OR_RETURN(step.stop, count_field(j, "stop", where));
    out.push_back(std::move(step));
  } else if (type == "Metaspace") {
    DecoderStep step{DecoderStep::Kind::kMetaspace};
    FERRITE_ASSIGN_OR_RETURN(step.replacement,
                             string_field(j, "replacement", where, "\xE2\x96\x81"));
    FERRITE_ASSIGN_OR_RETURN(tokenizer::PrependScheme scheme, parse_prepend(j, where));
    step.prepend = scheme != tokenizer::PrependScheme::kNever;
    out.push_back(std::move(step));
  } else {
    return unsupported("decoder type '" + type + "' is not supported");
  }
  return Status::ok();
}

// Post-processor ids are emitted by encode(): they must be in the vocab.
Result<uint32_t> emitted_id(const json& v, const Tokenizer::Impl& im, const std::string& where) {
  FERRITE_ASSIGN_OR_RETURN(uint32_t id, token_id(v, where));
  if (id >= im.vocab_size) {
    return data_loss(where + ": token id " + std::to_string(id) + " is outside the vocabulary (" +
                     std::to_string(im.vocab_size) + ")");
  }
  return id;
}

Status parse_post_processor(const json& j, const Tokenizer::Impl& im, std::vector<uint32_t>& prefix,
                            std::vector<uint32_t>& suffix, size_t depth = 0) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return data_loss("post_processor must be an object, not " + json_type(j));
  std::string type = type_of(j);
  const std::string where = "post_processor " + type;
  if (type == "Sequence") {
    FERRITE_ASSIGN_OR_RETURN(const json* items, sequence_items(j, "processors", where, depth));
    for (const auto& p : *items) {
      FERRITE_RETURN_IF_ERROR(parse_post_processor(p, im, prefix, suffix, depth + 1));
    }
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    if (!j.contains("single") || !j["single"].is_array()) {
      return data_loss(where + ": 'single' must be a list");
    }
    const json* special = j.contains("special_tokens") ? &j["special_tokens"] : nullptr;
    for (const auto& item : j["single"]) {
      if (!item.is_object()) return data_loss(where + ": items of 'single' must be objects");
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken")) {
        return data_loss(where + ": an item of 'single' is neither Sequence nor SpecialToken");
      }
      FERRITE_ASSIGN_OR_RETURN(std::string name, string_field(item["SpecialToken"], "id", where));
      if (special == nullptr || !special->is_object() || !special->contains(name)) {
        return data_loss("TemplateProcessing names unknown special token '" + name + "'");
      }
      const json& entry = (*special)[name];
      if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array()) {
        return data_loss(where + ": special token '" + name + "' needs a list 'ids'");
      }
      auto& target = seen_sequence ? suffix : prefix;
      if (target.size() + entry["ids"].size() > 1024) {
        return data_loss(where + ": more than 1024 special-token ids around a sequence");
      }
      for (const auto& id : entry["ids"]) {
        FERRITE_ASSIGN_OR_RETURN(uint32_t v, emitted_id(id, im, where));
        target.push_back(v);
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2) {
        return data_loss(where + ": '" + key + "' must be a [token, id] pair");
      }
    }
    FERRITE_ASSIGN_OR_RETURN(uint32_t cls, emitted_id(j["cls"][1], im, where));
    FERRITE_ASSIGN_OR_RETURN(uint32_t sep, emitted_id(j["sep"][1], im, where));
    prefix.push_back(cls);
    suffix.push_back(sep);
  } else {
    return unsupported("post-processor type '" + type + "' is not supported");
  }
  return Status::ok();
}

// A special token in tokenizer_config.json: a string, {"content": ...}, or null.
std::string token_text(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

Status build(const json& tj, const json& config, const json& gen_config, Tokenizer::Impl& im) {
  if (!tj.is_object()) return data_loss("tokenizer.json must be an object, not " + json_type(tj));
  if (!config.is_object()) return data_loss("tokenizer_config.json must be an object");
  if (!gen_config.is_object()) return data_loss("generation_config.json must be an object");
  if (!tj.contains("model") || !tj["model"].is_object()) {
    return data_loss("tokenizer.json has no 'model' object");
  }
  const json& model = tj["model"];
  FERRITE_ASSIGN_OR_RETURN(std::string model_type, string_field(model, "type", "model", "BPE"));
  if (model_type != "BPE") return unsupported("tokenizer model type '" + model_type + "'");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return unsupported(std::string("BPE with ") + key);
    }
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return data_loss("model.vocab must be an object of token -> id");
  }
  const json* added_json = nullptr;
  if (tj.contains("added_tokens") && !tj["added_tokens"].is_null()) {
    if (!tj["added_tokens"].is_array()) return data_loss("added_tokens must be a list");
    added_json = &tj["added_tokens"];
  }
  // Ids index arrays sized by the largest one: keep that proportional to
  // what the file defines.
  const uint64_t entries = model["vocab"].size() + (added_json ? added_json->size() : 0);
  const uint64_t id_limit = std::min(kMaxTokenId, 2 * entries + kIdSlack);
  auto bounded = [&](uint32_t id, const std::string& where) -> Status {
    if (id >= id_limit) {
      return data_loss(where + ": token id " + std::to_string(id) + " is far beyond the " +
                       std::to_string(entries) + " tokens the file defines");
    }
    return Status::ok();
  };
  std::unordered_map<std::string, uint32_t> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [token, id_json] : model["vocab"].items()) {
    FERRITE_ASSIGN_OR_RETURN(uint32_t id, token_id(id_json, "model.vocab['" + token + "']"));
    FERRITE_RETURN_IF_ERROR(bounded(id, "model.vocab['" + token + "']"));
    vocab.emplace(token, id);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (model.contains("merges") && !model["merges"].is_null()) {
    if (!model["merges"].is_array()) return data_loss("model.merges must be a list");
    merges.reserve(model["merges"].size());
    for (const auto& m : model["merges"]) {
      if (m.is_array()) {
        if (m.size() != 2 || !m[0].is_string() || !m[1].is_string()) {
          return data_loss("merge " + std::to_string(merges.size()) +
                           " must be a pair of strings");
        }
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else if (m.is_string()) {
        std::string s = m.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return data_loss("malformed merge '" + s + "'");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        return data_loss("merge " + std::to_string(merges.size()) + " is a " + json_type(m) +
                         ", not a string or a pair");
      }
    }
  }
  tokenizer::BpeOptions options;
  FERRITE_ASSIGN_OR_RETURN(options.byte_fallback,
                           bool_field(model, "byte_fallback", false, "model"));
  FERRITE_ASSIGN_OR_RETURN(options.fuse_unk, bool_field(model, "fuse_unk", false, "model"));
  FERRITE_ASSIGN_OR_RETURN(options.ignore_merges,
                           bool_field(model, "ignore_merges", false, "model"));
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

  if (added_json != nullptr) {
    for (const auto& a : *added_json) {
      const std::string where = "added_tokens[" + std::to_string(im.added.size()) + "]";
      if (!a.is_object()) return data_loss(where + " must be an object");
      AddedToken t;
      FERRITE_ASSIGN_OR_RETURN(t.content, string_field(a, "content", where));
      FERRITE_RETURN_IF_ERROR(tokenizer::validate_utf8(t.content));
      if (!a.contains("id")) return data_loss(where + ": missing 'id'");
      FERRITE_ASSIGN_OR_RETURN(t.id, token_id(a["id"], where));
      FERRITE_RETURN_IF_ERROR(bounded(t.id, where));
      FERRITE_ASSIGN_OR_RETURN(t.special, bool_field(a, "special", false, where));
      FERRITE_ASSIGN_OR_RETURN(t.lstrip, bool_field(a, "lstrip", false, where));
      FERRITE_ASSIGN_OR_RETURN(t.rstrip, bool_field(a, "rstrip", false, where));
      FERRITE_ASSIGN_OR_RETURN(t.single_word, bool_field(a, "single_word", false, where));
      FERRITE_ASSIGN_OR_RETURN(t.normalized, bool_field(a, "normalized", !t.special, where));
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
  // generation_config.json ids: in range for the tokenizer (BOS is fed to
  // the model, so it must be a token; stop ids are only compared).
  if (!im.bos_id && gen_config.contains("bos_token_id") && gen_config["bos_token_id"].is_number()) {
    FERRITE_ASSIGN_OR_RETURN(uint32_t id, emitted_id(gen_config["bos_token_id"], im,
                                                     "generation_config.json bos_token_id"));
    im.bos_id = id;
  }
  auto add_stop = [&](uint32_t id) {
    if (std::find(im.stop_ids.begin(), im.stop_ids.end(), id) == im.stop_ids.end()) {
      im.stop_ids.push_back(id);
    }
  };
  if (im.eos_id) add_stop(*im.eos_id);
  if (gen_config.contains("eos_token_id")) {
    const json& e = gen_config["eos_token_id"];
    const std::string where = "generation_config.json eos_token_id";
    if (e.is_number()) {
      FERRITE_ASSIGN_OR_RETURN(uint32_t id, token_id(e, where));
      add_stop(id);
    }
    if (e.is_array()) {
      if (e.size() > 1024) return data_loss(where + ": more than 1024 ids");
      for (const auto& id_json : e) {
        FERRITE_ASSIGN_OR_RETURN(uint32_t id, token_id(id_json, where));
        add_stop(id);
      }
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
  try {
    FERRITE_ASSIGN_OR_RETURN(json tj, parse_json(tokenizer_json, "tokenizer.json"));
    FERRITE_ASSIGN_OR_RETURN(json config,
                             parse_json(tokenizer_config_json, "tokenizer_config.json"));
    FERRITE_ASSIGN_OR_RETURN(json gen,
                             parse_json(generation_config_json, "generation_config.json"));
    auto impl = std::make_unique<Impl>();
    FERRITE_RETURN_IF_ERROR(build(tj, config, gen, *impl));
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
  } catch (const json::exception& e) {
    // Last resort: the fields build() reads are type-checked.
    return data_loss(std::string("malformed tokenizer.json: ") + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("tokenizer.json: out of memory while loading");
  } catch (const std::exception& e) {
    return internal_error(std::string("tokenizer.json: unexpected error: ") + e.what());
  }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path_or_model_dir) {
  if (is_gguf_file(path_or_model_dir)) return load_gguf_tokenizer(path_or_model_dir);
  namespace fs = std::filesystem;
  fs::path path(path_or_model_dir);
  std::error_code ec;
  fs::path dir = fs::is_directory(path, ec) ? path : path.parent_path();
  fs::path tokenizer_path = fs::is_directory(path, ec) ? dir / "tokenizer.json" : path;
  std::string tj, config, gen;
  try {
    FERRITE_ASSIGN_OR_RETURN(tj, read_file(tokenizer_path));
    if (fs::exists(dir / "tokenizer_config.json", ec)) {
      FERRITE_ASSIGN_OR_RETURN(config, read_file(dir / "tokenizer_config.json"));
    }
    if (fs::exists(dir / "generation_config.json", ec)) {
      FERRITE_ASSIGN_OR_RETURN(gen, read_file(dir / "generation_config.json"));
    }
  } catch (const std::exception& e) {
    return data_loss("cannot read " + tokenizer_path.string() + ": " + e.what());
  }
  auto result = from_json(tj, config, gen);
  if (!result.is_ok()) return result.status().with_context(tokenizer_path.string());
  return result;
}

}  // namespace ferrite
