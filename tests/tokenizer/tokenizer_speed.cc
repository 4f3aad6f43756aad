// Tokenization throughput, for the comparison with Hugging Face tokenizers
// run by bench_speed.js. Usage: tokenizer_speed TOKENIZER DOCS_JSON
// Prints one JSON line: {"tokens": N, "bytes": B, "seconds": S}.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER DOCS_JSON\n", argv[0]);
    return 2;
  }
  auto tok = ferrite::Tokenizer::load(argv[1]);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::ifstream in(argv[2]);
  auto docs = nlohmann::json::parse(in).get<std::vector<std::string>>();
  size_t tokens = 0, bytes = 0;
  auto start = std::chrono::steady_clock::now();
  for (const auto& d : docs) {
    auto ids = (*tok)->encode(d, false);
    if (!ids.is_ok()) {
      std::fprintf(stderr, "%s\n", ids.status().to_string().c_str());
      return 1;
    }
    tokens += ids->size();
    bytes += d.size();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"tokens\": %zu, \"bytes\": %zu, \"seconds\": %.6f}\n", tokens, bytes, s);
  return 0;
}
