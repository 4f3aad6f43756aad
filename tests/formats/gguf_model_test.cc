// GGUF files as models (models/gguf_model.h) and tokenizers
// (tokenizer/gguf_tokenizer.h): bad input is refused with a clear error
// before any weight memory is allocated; the metadata becomes the config,
// the tokenizer and the chat template.
#include "models/gguf_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine/model_runner.h"
#include "test_util.h"
#include "tokenizer/gguf_tokenizer.h"

namespace ferrite {
namespace {

using testing_util::read_bytes;
using testing_util::TempDir;
using testing_util::write_bytes;

const std::string kGguf = FERRITE_SOURCE_DIR "/tests/models/gguf/";

// Offset just past the first occurrence of the length-prefixed string `s`.
size_t after_string(const std::string& bytes, const std::string& s) {
  const std::string needle = testing_util::le64(s.size()) + s;
  const size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << s;
  return at == std::string::npos ? 0 : at + needle.size();
}

// Offset of the ggml type field of tensor `name` in the tensor infos.
size_t tensor_type_offset(const std::string& bytes, const std::string& name) {
  const size_t p = after_string(bytes, name);
  uint32_t n_dims;
  std::memcpy(&n_dims, bytes.data() + p, 4);
  return p + 4 + 8 * n_dims;
}

void put_u32(std::string* bytes, size_t at, uint32_t v) { std::memcpy(bytes->data() + at, &v, 4); }

RunnerOptions options_for(const std::string& path) {
  RunnerOptions o;
  o.load.model_dir = path;
  o.limits.max_tokens = 64;
  o.limits.max_sequences = 2;
  o.limits.max_context = 128;
  o.load.program.max_context = 128;
  o.cache.page_size = 16;
  o.cache.kv_memory_bytes = 8ll << 20;
  return o;
}

class GgufModelTest : public testing::Test {
 protected:
  void SetUp() override { good_ = read_bytes(kGguf + "qwen3-f16.gguf"); ASSERT_FALSE(good_.empty()); }
  // Writes `bytes` as a .gguf file and returns the open_model() status.
  Status open(const std::string& bytes) {
    path_ = dir_.file("model.gguf");
    write_bytes(path_, bytes);
    LoadOptions lo;
    lo.model_dir = path_;
    return open_model(lo).status();
  }
  TempDir dir_;
  std::string good_, path_;
};

TEST_F(GgufModelTest, GoodFileOpens) {
  LoadOptions lo;
  lo.model_dir = kGguf + "qwen3-f16.gguf";
  auto src = open_model(lo);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ(src->config.model_type, "qwen3");
  EXPECT_EQ(src->config.num_layers, 2);
  EXPECT_TRUE(src->config.tie_word_embeddings);  // no output.weight in the file
  const WeightDecl* q = src->program.find_weight("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kF16);  // stays f16
  const WeightDecl* n = src->program.find_weight("model.layers.0.input_layernorm.weight");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->dtype, DType::kF32);  // the converter keeps norms f32
}

TEST_F(GgufModelTest, TruncatedTensorData) {
  Status s = open(good_.substr(0, good_.size() - 1000));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find("runs past"), std::string::npos) << s.to_string();
}

TEST_F(GgufModelTest, UnknownArchitecture) {
  std::string b = good_;
  const size_t at = after_string(b, "general.architecture") + 4 + 8;  // type, length
  ASSERT_EQ(b.substr(at, 5), "qwen3");
  b[at + 4] = '9';
  Status s = open(b);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("architecture 'qwen9'"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("qwen3next"), std::string::npos) << "lists the supported ones";
}

TEST_F(GgufModelTest, MetadataOfTheWrongType) {
  std::string b = good_;
  const size_t at = after_string(b, "qwen3.block_count");
  put_u32(&b, at, static_cast<uint32_t>(GgufType::kF32));  // u32 -> f32, same size
  Status s = open(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'qwen3.block_count' must be an integer, got f32"),
            std::string::npos)
      << s.to_string();
}

TEST_F(GgufModelTest, MissingMetadata) {
  std::string b = good_;
  const size_t at = after_string(b, "qwen3.embedding_length") - 22;
  b[at + 1] = 'X';  // "qXen3.embedding_length": the key is gone
  Status s = open(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("qwen3.embedding_length"), std::string::npos) << s.to_string();
}

TEST_F(GgufModelTest, ShapeNotAMultipleOfTheBlockSize) {
  std::string b = good_;
  // token_embd [512, 64] as Q4_K (blocks of 256 along the 64-wide rows).
  put_u32(&b, tensor_type_offset(b, "token_embd.weight"), kGgmlTypeQ4_K);
  Status s = open(b);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find("not a multiple of the Q4_K block size 256"), std::string::npos)
      << s.to_string();
}

TEST_F(GgufModelTest, BlockTypeFerriteDoesNotRead) {
  std::string b = good_;
  put_u32(&b, tensor_type_offset(b, "token_embd.weight"), 16);  // IQ2_XXS
  Status s = open(b);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("IQ2_XXS is not supported"), std::string::npos) << s.to_string();
}

TEST_F(GgufModelTest, TypeNoProviderAcceptsFailsAtPlanBeforeWeights) {
  std::string b = good_;
  // The final norm (f32) relabelled i32, a type of the same size no
  // provider takes as a weight: the file opens, the plan refuses it.
  put_u32(&b, tensor_type_offset(b, "output_norm.weight"), kGgmlTypeI32);
  ASSERT_TRUE(open(b).is_ok());
  auto r = ModelRunner::open(options_for(path_));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("i32"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("final_norm"), std::string::npos) << r.status().to_string();
}

TEST_F(GgufModelTest, WrongShapeListsTheProblem) {
  std::string b = good_;
  // attn_q of layer 1 declared [32, 64] instead of [64, 64]: ne[1] patched.
  const size_t p = after_string(b, "blk.1.attn_q.weight") + 4 + 8;
  uint64_t ne1 = 32;
  std::memcpy(b.data() + p, &ne1, 8);
  Status s = open(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("tensor 'blk.1.attn_q.weight' has shape [32, 64]"), std::string::npos)
      << s.to_string();
}

TEST_F(GgufModelTest, MissingShardOfASplitFile) {
  for (int i = 1; i <= 3; ++i) {
    const std::string name = "qwen3-split-0000" + std::to_string(i) + "-of-00003.gguf";
    if (i != 2) write_bytes(dir_.file(name), read_bytes(kGguf + name));
  }
  LoadOptions lo;
  lo.model_dir = dir_.file("qwen3-split-00001-of-00003.gguf");
  Status s = open_model(lo).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("00002-of-00003"), std::string::npos) << s.to_string();
}

// The tokenizers of the tiny files: byte-level BPE (qwen2 pre-tokenizer) and
// SentencePiece-style with scores; encode and decode round-trip, BOS as the
// metadata says, stop ids from eos, chat template from the metadata.
TEST(GgufTokenizerTest, Gpt2Vocab) {
  auto t = Tokenizer::load(kGguf + "qwen3-f16.gguf");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  const std::string text = "Hello world! The quick brown fox, 12 tokens.\n<|im_start|>user";
  auto ids = (*t)->encode(text, true);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_NE(std::find(ids->begin(), ids->end(), 1u), ids->end())
      << "<|im_start|> is a special token";
  EXPECT_LT(ids->size(), text.size()) << "merges apply";
  auto back = (*t)->decode(*ids, false);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, text);
  EXPECT_EQ((*t)->stop_ids(), std::vector<uint32_t>{2});
  EXPECT_EQ((*t)->vocab_size(), 512u);
  // Digits one by one (the qwen2 pre-tokenizer's \p{N}).
  auto digits = (*t)->encode("2024", false);
  ASSERT_TRUE(digits.is_ok());
  EXPECT_EQ(digits->size(), 4u);
  auto chat = ChatTemplate::load(kGguf + "qwen3-f16.gguf");
  ASSERT_TRUE(chat.is_ok()) << chat.status().to_string();
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  msgs.push_back({{"role", "user"}, {"content", "hi"}});
  auto rendered = chat->render(msgs, nullptr, true);
  ASSERT_TRUE(rendered.is_ok());
  EXPECT_EQ(*rendered, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(GgufTokenizerTest, SentencePieceVocab) {
  auto t = Tokenizer::load(kGguf + "llama-f16.gguf");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  const std::string text = "The quick brown fox jumps, caf\xc3\xa9!";
  auto ids = (*t)->encode(text, true);
  ASSERT_TRUE(ids.is_ok());
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(ids->front(), 1u) << "add_bos_token";
  EXPECT_LT(ids->size(), text.size()) << "merges from the scores apply";
  auto back = (*t)->decode(*ids, true);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, text) << "byte fallback for the accented letter, no leading space";
  EXPECT_EQ((*t)->bos_id(), std::optional<uint32_t>(1));
}

TEST(GgufTokenizerTest, SplitShardFindsTheMetadata) {
  auto t = Tokenizer::load(kGguf + "qwen3-split-00003-of-00003.gguf");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)->vocab_size(), 512u);
}

TEST(GgufTokenizerTest, UnknownPreTokenizerIsRefused) {
  TempDir dir;
  std::string b = read_bytes(kGguf + "qwen3-f16.gguf");
  const size_t at = after_string(b, "tokenizer.ggml.pre") + 4 + 8;
  ASSERT_EQ(b.substr(at, 5), "qwen2");
  b[at + 4] = '7';
  write_bytes(dir.file("m.gguf"), b);
  auto t = Tokenizer::load(dir.file("m.gguf"));
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(t.status().message().find("pre-tokenizer 'qwen7'"), std::string::npos)
      << t.status().to_string();
}

}  // namespace
}  // namespace ferrite
