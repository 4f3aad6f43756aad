// Every family's tiny checkpoint against the goldens transformers made
// (scripts/make_golden_models.py; layout in README.md beside this file):
//  - prefill logits at the last 4 prompt positions (4 truncated prompts run
//    as 4 sequences of ONE step batch, which also exercises batching);
//  - cached decode logits, one token per step, fed the golden tokens;
//  - greedy tokens through generate(), one-shot and with chunked prefill.
// Both CPU provider sets (reference and fast) are checked.
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "tests/models/golden_harness.h"

namespace ferrite {
namespace {

const std::string kModelsDir = FERRITE_SOURCE_DIR "/tests/models/";

struct GoldenCase {
  std::string family;
  std::string providers;
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.family << "/" << c.providers; }

std::string case_name(const testing::TestParamInfo<GoldenCase>& info) {
  return info.param.family + "_" + info.param.providers;
}

class GoldenTest : public testing::TestWithParam<GoldenCase> {
 protected:
  // The golden tolerance of tests/models/README.md (f32 activations).
  static constexpr double kTolerance = 2e-3;

  void SetUp() override {
    dir_ = kModelsDir + GetParam().family;
    ASSERT_NO_FATAL_FAILURE(golden::Goldens::load(dir_, &golden_));
    RunnerOptions o;
    o.load.model_dir = dir_;
    o.providers = GetParam().providers;
    o.limits.max_tokens = 1300;  // 4 truncated long prompts in one step
    o.limits.max_sequences = 8;
    o.limits.max_context = 1024;
    o.load.program.max_context = 1024;
    o.cache.page_size = 16;
    o.cache.kv_memory_bytes = 64ll << 20;
    auto r = ModelRunner::open(o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    runner_ = std::move(r).value();
  }

  std::string dir_;
  golden::Goldens golden_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(GoldenTest, PrefillLogitsOfLastPositions) {
  golden::check_prefill_logits(*runner_, golden_, kTolerance);
}

TEST_P(GoldenTest, CachedDecodeLogits) {
  golden::check_cached_decode_logits(*runner_, golden_, kTolerance);
}

TEST_P(GoldenTest, GreedyTokensOneShotChunkedAndBatched) {
  std::vector<std::vector<uint32_t>> want;
  const std::vector<GenerationRequest> reqs = golden::greedy_requests(golden_, &want);
  // One sequence at a time, then both in one batch, then with chunked prefill.
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto out = generate(*runner_, {reqs[i]});
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[0].tokens, want[i]) << "request " << i << " alone";
  }
  golden::expect_greedy(*runner_, reqs, want, 0, "batched");
  for (int32_t chunk : {1, 7, 64}) {
    if (chunk == 1 && GetParam().providers == "reference") continue;  // slow and redundant
    golden::expect_greedy(*runner_, reqs, want, chunk, "chunk " + std::to_string(chunk));
  }
  // Every page and slot came back.
  EXPECT_EQ(runner_->bound().pages().free_pages(), runner_->bound().pages().num_pages());
}

// A chunked prefill equals a one-shot prefill equals token-by-token feeding
// (to the golden tolerance), for the last-position logits of the long
// prompt; all three also match the golden row. Exercises the recurrent
// state hand-over between steps (conv and delta states) and the chunked
// versus recurrent forms of the delta rule.
TEST_P(GoldenTest, ChunkedPrefillEqualsOneShotAndTokenByToken) {
  const int64_t vocab = runner_->program().vocab_size;
  std::vector<uint32_t> ids = golden_.prompt("long")["ids"].get<std::vector<uint32_t>>();
  int64_t rows = 0;
  std::vector<float> want = golden_.rows("long.prefill_logits", &rows);
  ASSERT_GT(rows, 0);
  const float* last = &want[(rows - 1) * vocab];
  const std::vector<float> one_shot = golden::feed_in_chunks(*runner_, ids, ids.size());
  ASSERT_EQ(one_shot.size(), static_cast<size_t>(vocab));
  golden::expect_close(one_shot.data(), last, vocab, kTolerance, "one-shot vs golden");
  for (size_t chunk : {1, 7, 64}) {
    if (chunk == 1 && GetParam().providers == "reference") continue;  // slow and redundant
    const std::vector<float> got = golden::feed_in_chunks(*runner_, ids, chunk);
    ASSERT_EQ(got.size(), static_cast<size_t>(vocab));
    const std::string what = "chunks of " + std::to_string(chunk);
    golden::expect_close(got.data(), one_shot.data(), vocab, kTolerance, what + " vs one-shot");
    golden::expect_close(got.data(), last, vocab, kTolerance, what + " vs golden");
  }
}

std::vector<GoldenCase> all_cases() {
  std::vector<GoldenCase> cases;
  for (const char* family : FERRITE_GOLDEN_FAMILIES)
    for (const char* providers : {"reference", "fast"}) cases.push_back({family, providers});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Families, GoldenTest, testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace ferrite
