// The CUDA backend end to end, on the tiny checkpoints of tests/models:
//  - f32 activations: prefill and cached-decode logits within the golden
//    tolerance (2e-3 * max|golden|), greedy tokens identical (one-shot,
//    batched, chunked prefill);
//  - bf16 activations: logits within a bf16 tolerance; greedy tokens
//    identical up to the first step whose golden top-1/top-2 margin is
//    below what bf16 rounding can flip;
//  - graph replay: a decode step replayed from a captured graph gives
//    logits bitwise equal to the same step run eagerly.
// Every test is skipped (with the reason) when no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backends/cuda/cuda_backend.h"
#include "engine/generator.h"
#include "tests/models/golden_harness.h"

namespace ferrite {
namespace {

const std::string kModelsDir = FERRITE_SOURCE_DIR "/tests/models/";

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    std::string why;                                                \
    if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

struct Case {
  std::string family;
  DType act;
};

// Readable parameters in test listings (ctest names).
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.family << "/" << dtype_name(c.act);
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.family + (info.param.act == DType::kF32 ? "_f32" : "_bf16");
}

std::unique_ptr<ModelRunner> open_runner(const std::string& dir, DType act, bool graphs = true) {
  RunnerOptions o;
  o.load.model_dir = dir;
  o.device = "cuda";
  o.activation_dtype = act;
  o.load.program.kv_dtype = act;
  o.cuda_graphs = graphs;
  o.limits.max_tokens = 1300;
  o.limits.max_sequences = 8;
  o.limits.max_context = 1024;
  o.load.program.max_context = 1024;
  o.cache.page_size = 16;
  o.cache.kv_memory_bytes = 64ll << 20;
  auto r = ModelRunner::open(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

using golden::logits_on_host;

class CudaGoldenTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    dir_ = kModelsDir + GetParam().family;
    ASSERT_NO_FATAL_FAILURE(golden::Goldens::load(dir_, &golden_));
    runner_ = open_runner(dir_, GetParam().act);
    ASSERT_NE(runner_, nullptr);
  }

  double tolerance() const { return GetParam().act == DType::kF32 ? 2e-3 : 4e-2; }

  // Tiny random models with a recurrent state amplify bf16 rounding through
  // the delta rule (ARCHITECTURE.md, numerical profiles): their logits are
  // compared with the f32 goldens in f32 only; in bf16 their greedy tokens
  // are still checked (GreedyTokensOneShotChunkedAndBatched). Measured on the
  // H200: f32 within 2e-3; bf16 off by up to 0.28 of the logit range for
  // qwen3_5_moe.
  bool logits_comparable() const {
    return GetParam().act == DType::kF32 || !runner_->bound().has_recurrent_state();
  }

  void expect_close(const float* got, const float* want, int64_t n, const std::string& what) {
    golden::expect_close(got, want, n, tolerance(), what);
  }

  // Greedy tokens that bf16 rounding cannot flip: the prefix before the
  // first golden margin below 1.0 (all of them in f32).
  size_t trusted_prefix(const nlohmann::json& prompt) const {
    auto margins = prompt["greedy_margins"].get<std::vector<double>>();
    if (GetParam().act == DType::kF32) return margins.size();
    size_t n = 0;
    while (n < margins.size() && margins[n] >= 1.0) ++n;
    return n;
  }

  std::string dir_;
  golden::Goldens golden_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(CudaGoldenTest, PrefillLogitsOfLastPositions) {
  if (!logits_comparable())
    GTEST_SKIP() << "bf16 logits of a recurrent-state model: compared in f32 (see logits_comparable)";
  const int64_t vocab = runner_->program().vocab_size;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden_.prompt(which);
    std::vector<uint32_t> ids = p["ids"].get<std::vector<uint32_t>>();
    std::vector<int64_t> positions = p["prefill_logits_positions"].get<std::vector<int64_t>>();
    std::vector<std::vector<uint32_t>> prompts;
    for (int64_t pos : positions) prompts.emplace_back(ids.begin(), ids.begin() + pos + 1);
    std::vector<float> got = golden::forward_prompts(*runner_, prompts);
    int64_t rows = 0;
    std::vector<float> want = golden_.rows(std::string(which) + ".prefill_logits", &rows);
    ASSERT_EQ(rows, static_cast<int64_t>(positions.size()));
    ASSERT_EQ(got.size(), want.size());
    for (int64_t r = 0; r < rows; ++r)
      expect_close(&got[r * vocab], &want[r * vocab], vocab,
                   std::string(which) + " prefill position " + std::to_string(positions[r]));
  }
}

TEST_P(CudaGoldenTest, CachedDecodeLogits) {
  if (!logits_comparable())
    GTEST_SKIP() << "bf16 logits of a recurrent-state model: compared in f32 (see logits_comparable)";
  const int64_t vocab = runner_->program().vocab_size;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden_.prompt(which);
    int64_t rows = 0;
    std::vector<float> want = golden_.rows(std::string(which) + ".decode_logits", &rows);
    std::vector<uint32_t> fed = p["decode_logits_fed_tokens"].get<std::vector<uint32_t>>();
    fed.resize(std::min<size_t>(fed.size(), rows));
    auto got = golden::cached_decode(*runner_, p["ids"].get<std::vector<uint32_t>>(), fed);
    ASSERT_EQ(got.size(), fed.size());
    for (size_t i = 0; i < got.size(); ++i)
      expect_close(got[i].data(), &want[i * vocab], vocab,
                   std::string(which) + " decode step " + std::to_string(i));
  }
  CudaGraphStats stats = cuda_graph_stats(runner_->exec_context());
  EXPECT_GT(stats.replays, 0) << "decode steps were not replayed from graphs";
}

TEST_P(CudaGoldenTest, GreedyTokensOneShotChunkedAndBatched) {
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<uint32_t>> want;
  std::vector<size_t> trusted;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden_.prompt(which);
    GenerationRequest r;
    r.prompt = p["ids"].get<std::vector<uint32_t>>();
    want.push_back(p["greedy_tokens"].get<std::vector<uint32_t>>());
    trusted.push_back(trusted_prefix(p));
    r.max_tokens = static_cast<int32_t>(want.back().size());
    reqs.push_back(r);
  }
  auto check = [&](const std::vector<GenerationResult>& out, const std::string& what) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_EQ(out[i].tokens.size(), want[i].size()) << what;
      std::vector<uint32_t> got(out[i].tokens.begin(), out[i].tokens.begin() + trusted[i]);
      std::vector<uint32_t> exp(want[i].begin(), want[i].begin() + trusted[i]);
      EXPECT_EQ(got, exp) << what << " request " << i << " (first " << trusted[i] << " tokens)";
    }
  };
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto out = generate(*runner_, {reqs[i]});
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    std::vector<GenerationResult> one(reqs.size());
    one[i] = (*out)[0];
    for (size_t j = 0; j < reqs.size(); ++j)
      if (j != i) one[j].tokens = want[j];
    check(one, "alone");
  }
  auto batched = generate(*runner_, reqs);
  ASSERT_TRUE(batched.is_ok()) << batched.status().to_string();
  check(*batched, "batched");
  for (int32_t chunk : {1, 7, 64}) {
    auto chunked = generate(*runner_, reqs, nullptr, nullptr, chunk);
    ASSERT_TRUE(chunked.is_ok()) << chunked.status().to_string();
    check(*chunked, "chunk " + std::to_string(chunk));
  }
  EXPECT_EQ(runner_->bound().pages().free_pages(), runner_->bound().pages().num_pages());
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* family :
       {"llama", "llama3_scaled", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"})
    for (DType act : {DType::kF32, DType::kBF16}) cases.push_back({family, act});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Families, CudaGoldenTest, testing::ValuesIn(all_cases()), case_name);

// A decode step of 3 sequences (bucket 4: one padding row) run eagerly, then
// captured and replayed twice: logits bitwise equal each time.
TEST(CudaGraphTest, ReplayIsBitwiseEqualToEager) {
  SKIP_WITHOUT_GPU();
  for (DType act : {DType::kBF16, DType::kF32}) {
    auto runner = open_runner(kModelsDir + "qwen3", act);
    ASSERT_NE(runner, nullptr);
    BoundPlan& plan = runner->bound();
    const std::vector<std::vector<uint32_t>> prompts = {{5, 17, 300, 42, 7}, {9, 9, 1}, {100, 200, 300, 400, 500, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}};
    std::vector<std::vector<int32_t>> pages(prompts.size());
    StepBatch prefill;
    for (size_t s = 0; s < prompts.size(); ++s) {
      ASSERT_TRUE(plan.pages().allocate(plan.pages().pages_for(prompts[s].size() + 8), &pages[s]).is_ok());
      prefill.sequences.push_back({prefill.num_tokens(), static_cast<int32_t>(prompts[s].size()), 0, pages[s], -1});
      prefill.token_ids.insert(prefill.token_ids.end(), prompts[s].begin(), prompts[s].end());
    }
    ASSERT_TRUE(plan.forward(prefill).is_ok());
    StepBatch decode;
    for (size_t s = 0; s < prompts.size(); ++s) {
      decode.sequences.push_back({static_cast<int32_t>(s), 1, static_cast<int32_t>(prompts[s].size()), pages[s], -1});
      decode.token_ids.push_back(static_cast<uint32_t>(11 * s + 3));
    }
    cuda_set_graphs_enabled(runner->exec_context(), false);
    ASSERT_TRUE(plan.forward(decode).is_ok());
    std::vector<float> eager = logits_on_host(*runner);
    cuda_set_graphs_enabled(runner->exec_context(), true);
    const CudaGraphStats before = cuda_graph_stats(runner->exec_context());
    for (int rep = 0; rep < 2; ++rep) {
      ASSERT_TRUE(plan.forward(decode).is_ok());
      std::vector<float> replay = logits_on_host(*runner);
      ASSERT_EQ(replay.size(), eager.size());
      EXPECT_EQ(std::memcmp(replay.data(), eager.data(), eager.size() * 4), 0)
          << dtype_name(act) << " replay " << rep << " differs from the eager step";
    }
    const CudaGraphStats after = cuda_graph_stats(runner->exec_context());
    EXPECT_EQ(after.captures - before.captures, 1);
    EXPECT_EQ(after.replays - before.replays, 1);
    for (auto& pg : pages) plan.pages().release_all(pg);
  }
}

// The tensor-core prefill kernel (head_dim 128, one 300-token step) against
// the split-KV kernel (the same prompt in chunks of 8 tokens), on random
// bf16 weights of a small Qwen3-shaped model: last-token logits agree within
// bf16 rounding.
TEST(CudaAttentionTest, FlashPrefillMatchesSplitKvPath) {
  SKIP_WITHOUT_GPU();
  const std::string dir = testing::TempDir() + "/ferrite_cuda_hd128";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/config.json");
    f << R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 512,
            "intermediate_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 128, "num_hidden_layers": 2, "vocab_size": 1024, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000, "max_position_embeddings": 4096, "tie_word_embeddings": true,
            "attention_bias": false, "torch_dtype": "bfloat16"})";
  }
  RunnerOptions o;
  o.load.model_dir = dir;
  o.load.dummy_weights = true;
  o.device = "cuda";
  o.activation_dtype = DType::kBF16;
  o.load.program.kv_dtype = DType::kBF16;
  o.limits.max_tokens = 512;
  o.limits.max_sequences = 4;
  o.limits.max_context = 1024;
  o.load.program.max_context = 1024;
  auto r = ModelRunner::open(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ModelRunner& runner = **r;
  GenerationRequest req;
  for (int i = 0; i < 300; ++i) req.prompt.push_back(static_cast<uint32_t>((i * 37 + 11) % 1024));
  req.max_tokens = 1;
  req.want_logprobs = false;
  auto logits_after = [&](size_t chunk) {
    return golden::feed_in_chunks(runner, req.prompt, chunk);
  };
  std::vector<float> flash = logits_after(300);
  std::vector<float> split = logits_after(8);
  ASSERT_EQ(flash.size(), split.size());
  double max_abs = 1e-3, max_diff = 0;
  for (size_t i = 0; i < flash.size(); ++i) {
    ASSERT_TRUE(std::isfinite(flash[i])) << i;
    max_abs = std::max(max_abs, std::fabs(double(split[i])));
    max_diff = std::max(max_diff, std::fabs(double(flash[i]) - split[i]));
  }
  EXPECT_LE(max_diff, 3e-2 * max_abs) << "max |flash - split| " << max_diff << " of max " << max_abs;
}

}  // namespace
}  // namespace ferrite
