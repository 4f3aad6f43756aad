// Tensor parallelism on CPU (ranks as threads, the in-process
// communicator), for every family of tests/models/families.txt at TP = 2
// and 4: the goldens' logits (prefill and cached decode) and greedy tokens
// (alone, batched, chunked), and the logits within a tight tolerance of
// TP = 1's. The fast providers at both sizes, the reference ones at TP = 2.
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "tests/models/golden_harness.h"

namespace ferrite {
namespace {

const std::string kModelsDir = FERRITE_SOURCE_DIR "/tests/models/";

struct TpCase {
  std::string family;
  int tp;
  std::string providers;
};

void PrintTo(const TpCase& c, std::ostream* os) {
  *os << c.family << "/tp" << c.tp << "/" << c.providers;
}

std::string case_name(const testing::TestParamInfo<TpCase>& info) {
  return info.param.family + "_tp" + std::to_string(info.param.tp) + "_" + info.param.providers;
}

RunnerOptions options(const std::string& dir, int tp, const std::string& providers) {
  RunnerOptions o;
  o.load.model_dir = dir;
  o.providers = providers;
  o.tensor_parallel = tp;
  o.limits.max_tokens = 1300;  // 4 truncated long prompts in one step
  o.limits.max_sequences = 8;
  o.limits.max_context = 1024;
  o.load.program.max_context = 1024;
  o.cache.page_size = 16;
  o.cache.kv_memory_bytes = 64ll << 20;
  return o;
}

// Prefill of three truncations of each golden prompt in one step, then
// cached decode: the logits of TP = N within `tolerance` of TP = 1's.
void check_against_one_rank(ModelRunner& runner, const golden::Goldens& golden,
                            const std::string& dir, const std::string& providers,
                            double tolerance) {
  auto one = ModelRunner::open(options(dir, 1, providers));
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  const int64_t vocab = runner.program().vocab_size;
  for (const char* which : {"short", "long"}) {
    std::vector<uint32_t> ids = golden.prompt(which)["ids"].get<std::vector<uint32_t>>();
    std::vector<std::vector<uint32_t>> prompts = {
        ids, {ids.begin(), ids.begin() + ids.size() / 2}, {ids.begin(), ids.begin() + 1}};
    std::vector<float> want = golden::forward_prompts(**one, prompts);
    std::vector<float> got = golden::forward_prompts(runner, prompts);
    ASSERT_EQ(got.size(), want.size());
    for (size_t r = 0; r < prompts.size(); ++r)
      golden::expect_close(&got[r * vocab], &want[r * vocab], vocab, tolerance,
                           std::string(which) + " prefill of " +
                               std::to_string(prompts[r].size()) + " tokens vs TP=1");
    std::vector<uint32_t> fed = {3, 1, 4, 1, 5};
    auto want_decode = golden::cached_decode(**one, ids, fed);
    auto got_decode = golden::cached_decode(runner, ids, fed);
    ASSERT_EQ(got_decode.size(), want_decode.size());
    for (size_t i = 0; i < got_decode.size(); ++i)
      golden::expect_close(got_decode[i].data(), want_decode[i].data(), vocab, tolerance,
                           std::string(which) + " decode step " + std::to_string(i) + " vs TP=1");
  }
}

class TpGoldenTest : public testing::TestWithParam<TpCase> {
 protected:
  // The golden tolerance of tests/models/README.md (f32 activations).
  static constexpr double kGoldenTolerance = 2e-3;
  // TP = N against TP = 1: the same math, the sums of the row-parallel
  // products split in N and added in rank order.
  static constexpr double kTp1Tolerance = 1e-4;

  void SetUp() override {
    dir_ = kModelsDir + GetParam().family;
    ASSERT_NO_FATAL_FAILURE(golden::Goldens::load(dir_, &golden_));
    auto r = ModelRunner::open(options(dir_, GetParam().tp, GetParam().providers));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    runner_ = std::move(r).value();
    ASSERT_EQ(runner_->bound().world_size(), GetParam().tp);
  }

  std::string dir_;
  golden::Goldens golden_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(TpGoldenTest, GoldenLogits) {
  golden::check_prefill_logits(*runner_, golden_, kGoldenTolerance);
  golden::check_cached_decode_logits(*runner_, golden_, kGoldenTolerance);
}

TEST_P(TpGoldenTest, LogitsMatchOneRank) {
  check_against_one_rank(*runner_, golden_, dir_, GetParam().providers, kTp1Tolerance);
}

TEST_P(TpGoldenTest, GreedyTokensAloneBatchedAndChunked) {
  std::vector<std::vector<uint32_t>> want;
  const std::vector<GenerationRequest> reqs = golden::greedy_requests(golden_, &want);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto out = generate(*runner_, {reqs[i]});
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[0].tokens, want[i]) << "request " << i << " alone";
  }
  golden::expect_greedy(*runner_, reqs, want, 0, "batched");
  golden::expect_greedy(*runner_, reqs, want, 7, "chunked");
  EXPECT_EQ(runner_->bound().pages().free_pages(), runner_->bound().pages().num_pages());
}

std::vector<TpCase> all_cases() {
  std::vector<TpCase> cases;
  for (const char* family : FERRITE_GOLDEN_FAMILIES)
    for (int tp : {2, 4}) cases.push_back({family, tp, "fast"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Families, TpGoldenTest, testing::ValuesIn(all_cases()), case_name);

// The reference providers' partial_out (the oracle's tensor-parallel
// output) against TP = 1, once per block contract: attention + dense MLP
// (llama), routed experts (qwen3_moe), gated delta + shared experts
// (qwen3_5_moe).
TEST(TpReferenceTest, LogitsMatchOneRank) {
  for (const char* family : {"llama", "qwen3_moe", "qwen3_5_moe"}) {
    SCOPED_TRACE(family);
    const std::string dir = kModelsDir + family;
    golden::Goldens golden;
    ASSERT_NO_FATAL_FAILURE(golden::Goldens::load(dir, &golden));
    auto r = ModelRunner::open(options(dir, 2, "reference"));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    check_against_one_rank(**r, golden, dir, "reference", 1e-4);
  }
}

}  // namespace
}  // namespace ferrite
