// The tiny GGUF files of tests/models/gguf (scripts/make_gguf_models.py: the
// tiny Hugging Face checkpoints written as llama.cpp's converter writes them,
// per architecture) against the same transformers goldens as the
// safetensors checkpoints: their F32 / BF16 weights are the checkpoints'
// bf16 values exactly (F16 ones to f16 rounding, well inside the tolerance),
// so prefill and cached-decode logits within the golden tolerance and
// identical greedy tokens show that every name, layout and transform of the
// converter is undone. Also: weights stay in their stored type and, where
// the converter did not re-arrange them, are views of the file mapping.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "engine/generator.h"
#include "models/gguf_model.h"
#include "tests/models/golden_harness.h"

namespace ferrite {
namespace {

const std::string kModelsDir = FERRITE_SOURCE_DIR "/tests/models/";

struct GgufCase {
  std::string file;    // under tests/models/gguf
  std::string family;  // the golden folder
  std::string providers;
};

void PrintTo(const GgufCase& c, std::ostream* os) { *os << c.file << "/" << c.providers; }

std::string case_name(const testing::TestParamInfo<GgufCase>& info) {
  std::string s = info.param.file + "_" + info.param.providers;
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

RunnerOptions options_for(const std::string& path, const std::string& providers) {
  RunnerOptions o;
  o.load.model_dir = path;
  o.providers = providers;
  o.limits.max_tokens = 1300;
  o.limits.max_sequences = 8;
  o.limits.max_context = 1024;
  o.load.program.max_context = 1024;
  o.cache.page_size = 16;
  o.cache.kv_memory_bytes = 64ll << 20;
  return o;
}

class GgufGoldenTest : public testing::TestWithParam<GgufCase> {
 protected:
  static constexpr double kTolerance = 2e-3;  // tests/models/README.md (f32 activations)

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(golden::Goldens::load(kModelsDir + GetParam().family, &golden_));
    auto r = ModelRunner::open(options_for(kModelsDir + "gguf/" + GetParam().file,
                                           GetParam().providers));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    runner_ = std::move(r).value();
  }

  golden::Goldens golden_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(GgufGoldenTest, PrefillLogitsOfLastPositions) {
  golden::check_prefill_logits(*runner_, golden_, kTolerance);
}

TEST_P(GgufGoldenTest, CachedDecodeLogits) {
  golden::check_cached_decode_logits(*runner_, golden_, kTolerance);
}

TEST_P(GgufGoldenTest, GreedyTokens) {
  std::vector<std::vector<uint32_t>> want;
  const std::vector<GenerationRequest> reqs = golden::greedy_requests(golden_, &want);
  golden::expect_greedy(*runner_, reqs, want, 0, "batched");
  golden::expect_greedy(*runner_, reqs, want, 7, "chunked");
}

// The embedding and the MLP / expert down projections are never re-arranged
// by the converter: they must be zero-copy views of the file, in the file's
// type (f16 stays f16).
TEST_P(GgufGoldenTest, WeightsStayInTheFileAndItsType) {
  auto file = GgufModelFile::open(kModelsDir + "gguf/" + GetParam().file);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  const WeightStore& store = runner_->bound().weights();
  const TensorView* embed = store.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  const GgufTensor* t = (*file)->find("token_embd.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(embed->dtype, t->dtype);
  // A view of the runner's own mapping of the file: the same bytes, at the
  // tensor's file offset from a page-aligned mapping base.
  EXPECT_EQ(std::memcmp(embed->data, t->data, t->nbytes), 0);
  EXPECT_EQ((reinterpret_cast<uintptr_t>(embed->data) - t->file_offset) % 4096, 0u);
  int zero_copy = 0;
  for (const auto& [name, view] : store.views()) {
    if (name.find("down_proj") == std::string::npos) continue;
    EXPECT_EQ(view.dtype, t->dtype) << name;
    ++zero_copy;
  }
  EXPECT_GT(zero_copy, 0);
}

std::vector<GgufCase> all_cases() {
  std::vector<GgufCase> cases;
  for (const char* family : FERRITE_GOLDEN_FAMILIES) {
    for (const char* providers : {"reference", "fast"})
      cases.push_back({std::string(family) + "-f16.gguf", family, providers});
  }
  for (const char* providers : {"reference", "fast"}) {
    cases.push_back({"qwen3-f32.gguf", "qwen3", providers});
    cases.push_back({"qwen3-bf16.gguf", "qwen3", providers});
    cases.push_back({"qwen3_5-f32.gguf", "qwen3_5", providers});
  }
  cases.push_back({"qwen3-split-00001-of-00003.gguf", "qwen3", "fast"});
  cases.push_back({"qwen3-split-00002-of-00003.gguf", "qwen3", "fast"});  // any shard opens all
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Files, GgufGoldenTest, testing::ValuesIn(all_cases()), case_name);

#ifdef FERRITE_GGUF_QUANT_FILES
// Block formats: the 256-wide twins (make_gguf_models.py --wide) in Q8_0 and
// Q4_0 (gguf-py, as the converter's --outtype q8_0) and Q4_K_M / Q5_K_M /
// Q6_K (llama-quantize, mixed types per tensor as it chooses them), against
// transformers float32 on the weights gguf-py dequantizes from each file
// (make_gguf_goldens.py, goldens in tests/models/gguf/quant/<stem>/). The
// block weights are read as blocks (never expanded): the weights' stored
// types are the file's.
class GgufQuantGoldenTest : public testing::TestWithParam<GgufCase> {
 protected:
  static constexpr double kTolerance = 2e-3;

  void SetUp() override {
    const std::string dir = kModelsDir + "gguf/quant/";
    ASSERT_NO_FATAL_FAILURE(golden::Goldens::load(dir + GetParam().family, &golden_));
    RunnerOptions o = options_for(dir + GetParam().file, GetParam().providers);
    // The exact path (dequantized weights, f32 dots): these goldens check the
    // file's layout at 2e-3. The fast default quantizes activations to 8-bit
    // blocks (backends/cpu/kernels/quant_dot.h); its error is bounded per
    // product by quant_dot_test and the conformance suite, and measured on
    // a trained model by bench/quant_ppl.sh.
    o.tuning.cpu_quant_dot = false;
    auto r = ModelRunner::open(o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    runner_ = std::move(r).value();
  }

  golden::Goldens golden_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(GgufQuantGoldenTest, PrefillLogitsOfLastPositions) {
  golden::check_prefill_logits(*runner_, golden_, kTolerance);
}

TEST_P(GgufQuantGoldenTest, CachedDecodeLogits) {
  golden::check_cached_decode_logits(*runner_, golden_, kTolerance);
}

TEST_P(GgufQuantGoldenTest, GreedyTokensAndStoredTypes) {
  std::vector<std::vector<uint32_t>> want;
  const std::vector<GenerationRequest> reqs = golden::greedy_requests(golden_, &want);
  golden::expect_greedy(*runner_, reqs, want, 0, "batched");
  // Every weight in the type the file stores it in (golden.json's tensor_types).
  const auto& types = golden_.json["tensor_types"];
  const WeightStore& store = runner_->bound().weights();
  const TensorView* q = store.find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  std::string want_q = types["blk.0.attn_q.weight"].get<std::string>();
  std::string got_q(dtype_name(q->dtype));
  for (char& c : got_q) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(got_q, want_q);
}

std::vector<GgufCase> quant_cases() {
  std::vector<GgufCase> cases;
  // The (slow, scalar) reference set on the Q8_0 / Q4_0 files and one K-quant
  // mix (Q4_K + Q6_K); the fast set on every file. The conformance suite
  // compares the two sets on every format anyway, and this keeps the
  // sanitizer run of CI short.
  const std::set<std::string> reference = {"qwen3w-q8_0", "qwen3w-q4_0", "qwen3moew-q4_0",
                                           "qwen3w-q4_k_m"};
  for (const char* stem : FERRITE_GGUF_QUANT_FILES)
    for (const char* providers : {"reference", "fast"})
      if (std::string(providers) == "fast" || reference.count(stem))
        cases.push_back({std::string(stem) + ".gguf", stem, providers});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Files, GgufQuantGoldenTest, testing::ValuesIn(quant_cases()), case_name);
#endif  // FERRITE_GGUF_QUANT_FILES

}  // namespace
}  // namespace ferrite
