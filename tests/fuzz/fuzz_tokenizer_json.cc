// libFuzzer target: tokenizer.json loading plus encode / decode of arbitrary
// bytes with the tokenizer it describes (src/tokenizer/tokenizer.h).
//
// Input: part 0 is tokenizer.json, part 1 the text, part 2 an optional
// tokenizer_config.json (split on fuzz_util.h's kSplit). Oracle: no crash, no
// sanitizer report, no hang; invalid UTF-8 text is rejected by encode(); ids
// from encode() are inside the vocabulary; decode() fails exactly for ids
// without a token; streamed decoding equals decode() (tokenizer_exercise.h).
#include <cstdint>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_exercise.h"

using namespace ferrite;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = ferrite::fuzz::split_parts(data, size, 3);
  auto tok = Tokenizer::from_json(parts[0], parts[2]);
  if (!tok.is_ok()) return 0;
  ferrite::fuzz::exercise_tokenizer(**tok, parts[1], /*must_encode=*/false, /*round_trip=*/false);
  return 0;
}
