#include "tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <unordered_map>
#include <unordered_set>

namespace ferrite {

namespace {

using nlohmann::ordered_json;
using json = nlohmann::json;  // std::map objects: the vocabulary has ~10^5 keys

// llama.cpp token types (llama_token_type).
constexpr int64_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

// The pre-tokenizer regexes of the original tokenizer.json files, by the
// name the converter stores in tokenizer.ggml.pre.
struct PreTokenizer {
  std::vector<std::string> names;
  std::vector<std::string> regexes;
  bool nfc = false;  // the tokenizer.json has an NFC normalizer
  bool add_bos = false;
};

const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> kPre = {
      {{"qwen2", "deepseek-r1-qwen"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       false},
      {{"qwen35"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       false},
      {{"llama-bpe", "llama3", "llama-v3"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false,
       true},
      {{"gpt-2"}, {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}, false,
       false},
      // llama.cpp's fallback for a missing or "default" name.
      {{"default", ""},
       {R"([\p{P}\$\+<=>\^~\|]+)", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
        R"(\p{N}+)", R"([0-9][0-9][0-9])"},
       false,
       false},
  };
  return kPre;
}

// Splits a UTF-8 string into its code points (as strings); invalid bytes
// stand alone.
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

json split_step(const std::string& regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

json template_processing(const std::vector<std::pair<std::string, int64_t>>& before,
                                 const std::vector<std::pair<std::string, int64_t>>& after) {
  json single = json::array(), special = json::object();
  auto add = [&](const std::pair<std::string, int64_t>& t) {
    single.push_back({{"SpecialToken", {{"id", t.first}, {"type_id", 0}}}});
    special[t.first] = {{"id", t.first}, {"ids", {t.second}}, {"tokens", {t.first}}};
  };
  for (const auto& t : before) add(t);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (const auto& t : after) add(t);
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", single},
          {"special_tokens", special}};
}

Result<std::optional<int64_t>> token_id_key(const GgufFile& f, const char* key, size_t n) {
  if (!f.has(key)) return std::optional<int64_t>();
  FERRITE_ASSIGN_OR_RETURN(int64_t id, f.get_int(key));
  // llama.cpp writes -1 (as u32 0xffffffff on some files) for "none".
  if (id == -1 || id == 0xffffffffll) return std::optional<int64_t>();
  if (id < 0 || static_cast<uint64_t>(id) >= n)
    return invalid_argument(f.path() + ": metadata key '" + key + "' is " + std::to_string(id) +
                            ", outside the " + std::to_string(n) + " tokens");
  return std::optional<int64_t>(id);
}

std::string gguf_metadata_path(const std::string& path) {
  // The first shard of a split set holds the metadata.
  static const std::regex kSplit(R"(^(.*)-(\d{5})-of-(\d{5})\.gguf$)", std::regex::icase);
  std::smatch m;
  if (std::regex_match(path, m, kSplit)) return m[1].str() + "-00001-of-" + m[3].str() + ".gguf";
  return path;
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  if (path.size() < 5) return false;
  std::string ext = path.substr(path.size() - 5);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::error_code ec;
  return ext == ".gguf" && !std::filesystem::is_directory(path, ec);
}

Result<GgufTokenizerFiles> gguf_tokenizer_files(const GgufFile& f) {
  if (!f.has("tokenizer.ggml.model"))
    return not_found(f.path() + ": no tokenizer (metadata key 'tokenizer.ggml.model')");
  FERRITE_ASSIGN_OR_RETURN(std::string_view model, f.get_string("tokenizer.ggml.model"));
  FERRITE_ASSIGN_OR_RETURN(std::vector<std::string_view> tokens,
                           f.get_string_array("tokenizer.ggml.tokens"));
  const size_t n = tokens.size();
  if (n == 0) return invalid_argument(f.path() + ": tokenizer.ggml.tokens is empty");
  std::vector<int64_t> types(n, kNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    FERRITE_ASSIGN_OR_RETURN(types, f.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != n)
      return invalid_argument(f.path() + ": tokenizer.ggml.token_type has " +
                              std::to_string(types.size()) + " entries for " + std::to_string(n) +
                              " tokens");
  }
  FERRITE_ASSIGN_OR_RETURN(auto bos, token_id_key(f, "tokenizer.ggml.bos_token_id", n));
  FERRITE_ASSIGN_OR_RETURN(auto eos, token_id_key(f, "tokenizer.ggml.eos_token_id", n));
  FERRITE_ASSIGN_OR_RETURN(auto eot, token_id_key(f, "tokenizer.ggml.eot_token_id", n));
  FERRITE_ASSIGN_OR_RETURN(auto eom, token_id_key(f, "tokenizer.ggml.eom_token_id", n));
  FERRITE_ASSIGN_OR_RETURN(auto unk, token_id_key(f, "tokenizer.ggml.unknown_token_id", n));
  FERRITE_ASSIGN_OR_RETURN(auto pad, token_id_key(f, "tokenizer.ggml.padding_token_id", n));
  auto flag = [&](const char* key, bool fallback) -> Result<bool> {
    if (!f.has(key)) return fallback;
    return f.get_bool(key);
  };
  auto text = [&](int64_t id) { return std::string(tokens[id]); };

  json tj = json::object();
  tj["version"] = "1.0";
  json added = json::array();
  json vocab = json::object();
  bool add_bos = false, add_eos = false;
  const bool spm = model == "llama";
  if (model == "gpt2") {
    std::string pre_name;
    if (f.has("tokenizer.ggml.pre")) {
      FERRITE_ASSIGN_OR_RETURN(std::string_view p, f.get_string("tokenizer.ggml.pre"));
      pre_name = p;
    }
    const PreTokenizer* pre = nullptr;
    std::string known;
    for (const PreTokenizer& p : pre_tokenizers()) {
      for (const std::string& name : p.names) {
        if (name == pre_name) pre = &p;
        if (!name.empty()) known += (known.empty() ? "" : ", ") + name;
      }
    }
    if (pre == nullptr)
      return unsupported(f.path() + ": pre-tokenizer '" + pre_name +
                         "' (tokenizer.ggml.pre) is not supported (supported: " + known + ")");
    FERRITE_ASSIGN_OR_RETURN(std::vector<std::string_view> merges,
                             f.get_string_array("tokenizer.ggml.merges"));
    for (size_t i = 0; i < n; ++i) {
      if (types[i] == kControl || types[i] == kUserDefined) continue;
      vocab[std::string(tokens[i])] = i;
    }
    json merge_list = json::array();
    for (std::string_view m : merges) merge_list.push_back(std::string(m));
    tj["model"] = {{"type", "BPE"},       {"dropout", nullptr}, {"unk_token", nullptr},
                   {"fuse_unk", false},   {"byte_fallback", false},
                   {"ignore_merges", false}, {"vocab", std::move(vocab)},
                   {"merges", std::move(merge_list)}};
    if (pre->nfc) tj["normalizer"] = {{"type", "NFC"}};
    json steps = json::array();
    for (const std::string& r : pre->regexes) steps.push_back(split_step(r));
    steps.push_back({{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", false},
                     {"use_regex", false}});
    tj["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
    tj["decoder"] = {{"type", "ByteLevel"},
                     {"add_prefix_space", true},
                     {"trim_offsets", true},
                     {"use_regex", true}};
    FERRITE_ASSIGN_OR_RETURN(add_bos, flag("tokenizer.ggml.add_bos_token", pre->add_bos));
    FERRITE_ASSIGN_OR_RETURN(add_eos, flag("tokenizer.ggml.add_eos_token", false));
  } else if (spm) {
    FERRITE_ASSIGN_OR_RETURN(std::vector<double> scores,
                             f.get_float_array("tokenizer.ggml.scores"));
    if (scores.size() != n)
      return invalid_argument(f.path() + ": tokenizer.ggml.scores has " +
                              std::to_string(scores.size()) + " entries for " +
                              std::to_string(n) + " tokens");
    std::unordered_map<std::string, int64_t> ids;
    for (size_t i = 0; i < n; ++i) {
      vocab[std::string(tokens[i])] = i;
      ids.emplace(std::string(tokens[i]), static_cast<int64_t>(i));
    }
    // transformers' SentencePieceExtractor: for every piece, each split into
    // two pieces of the vocabulary (ordered by their ids), all ranked by the
    // piece's score, highest first (stable).
    struct Merge {
      int64_t left, right;
      double score;
      size_t order;
    };
    std::vector<Merge> merges;
    for (size_t i = 0; i < n; ++i) {
      if (types[i] != kNormal && types[i] != kUserDefined) continue;
      std::vector<std::string> cps = code_points(std::string(tokens[i]));
      std::vector<Merge> local;
      std::string left;
      for (size_t k = 1; k < cps.size(); ++k) {
        left += cps[k - 1];
        std::string right;
        for (size_t r = k; r < cps.size(); ++r) right += cps[r];
        auto l = ids.find(left), rr = ids.find(right);
        if (l != ids.end() && rr != ids.end())
          local.push_back({l->second, rr->second, scores[i], 0});
      }
      std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
        return a.left != b.left ? a.left < b.left : a.right < b.right;
      });
      for (Merge& m : local) {
        m.order = merges.size();
        merges.push_back(m);
      }
    }
    std::stable_sort(merges.begin(), merges.end(),
                     [](const Merge& a, const Merge& b) { return a.score > b.score; });
    json merge_list = json::array();
    for (const Merge& m : merges) merge_list.push_back({text(m.left), text(m.right)});
    const std::string unk_text = unk ? text(*unk) : "<unk>";
    tj["model"] = {{"type", "BPE"},         {"dropout", nullptr},    {"unk_token", unk_text},
                   {"fuse_unk", true},      {"byte_fallback", true}, {"ignore_merges", false},
                   {"vocab", std::move(vocab)}, {"merges", std::move(merge_list)}};
    FERRITE_ASSIGN_OR_RETURN(bool space_prefix, flag("tokenizer.ggml.add_space_prefix", true));
    json norms = json::array();
    if (space_prefix) norms.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
    tj["pre_tokenizer"] = nullptr;
    json decoders = json::array();
    decoders.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}});
    decoders.push_back({{"type", "ByteFallback"}});
    decoders.push_back({{"type", "Fuse"}});
    if (space_prefix)
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    FERRITE_ASSIGN_OR_RETURN(add_bos, flag("tokenizer.ggml.add_bos_token", true));
    FERRITE_ASSIGN_OR_RETURN(add_eos, flag("tokenizer.ggml.add_eos_token", false));
  } else {
    return unsupported(f.path() + ": tokenizer model '" + std::string(model) +
                       "' (tokenizer.ggml.model) is not supported (gpt2, llama)");
  }
  for (size_t i = 0; i < n; ++i) {
    const bool control = types[i] == kControl || (spm && types[i] == kUnknown);
    if (!control && types[i] != kUserDefined) continue;
    added.push_back({{"id", i},
                     {"content", std::string(tokens[i])},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", control}});
  }
  tj["added_tokens"] = std::move(added);
  std::vector<std::pair<std::string, int64_t>> before, after;
  if (add_bos && bos) before.push_back({text(*bos), *bos});
  if (add_eos && eos) after.push_back({text(*eos), *eos});
  tj["post_processor"] =
      before.empty() && after.empty() ? json(nullptr) : template_processing(before, after);

  json config = json::object();
  if (bos) config["bos_token"] = text(*bos);
  if (eos) config["eos_token"] = text(*eos);
  if (unk) config["unk_token"] = text(*unk);
  if (pad) config["pad_token"] = text(*pad);
  json gen = json::object();
  json stops = json::array();
  for (const auto& id : {eos, eot, eom})
    if (id) stops.push_back(*id);
  if (!stops.empty()) gen["eos_token_id"] = stops;
  if (bos) gen["bos_token_id"] = *bos;

  GgufTokenizerFiles out;
  const auto replace = json::error_handler_t::replace;
  out.tokenizer_json = tj.dump(-1, ' ', false, replace);
  out.tokenizer_config_json = config.dump(-1, ' ', false, replace);
  out.generation_config_json = gen.dump(-1, ' ', false, replace);
  return out;
}

Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const std::string& path) {
  FERRITE_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(gguf_metadata_path(path)));
  FERRITE_ASSIGN_OR_RETURN(GgufTokenizerFiles files, gguf_tokenizer_files(f));
  auto t = Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                                files.generation_config_json);
  if (!t.is_ok()) return t.status().with_context(path + " (GGUF tokenizer)");
  return t;
}

Result<ChatTemplate> load_gguf_chat_template(const std::string& path) {
  FERRITE_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(gguf_metadata_path(path)));
  if (!f.has("tokenizer.chat_template"))
    return not_found("no chat template in " + path + " (tokenizer.chat_template)");
  FERRITE_ASSIGN_OR_RETURN(std::string_view source, f.get_string("tokenizer.chat_template"));
  ordered_json special = ordered_json::object();
  if (f.has("tokenizer.ggml.tokens")) {
    FERRITE_ASSIGN_OR_RETURN(auto tokens, f.get_string_array("tokenizer.ggml.tokens"));
    for (const auto& [key, name] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                                    std::pair{"tokenizer.ggml.eos_token_id", "eos_token"}}) {
      FERRITE_ASSIGN_OR_RETURN(auto id, token_id_key(f, key, tokens.size()));
      if (id) special[name] = std::string(tokens[*id]);
    }
  }
  auto t = ChatTemplate::from_source(std::string(source), special);
  if (!t.is_ok()) return t.status().with_context(path);
  return t;
}

}  // namespace ferrite
