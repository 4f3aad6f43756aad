// Every family's tiny checkpoint against the goldens transformers made
// (scripts/make_golden_models.py; layout in README.md beside this file):
//  - prefill logits at the last 4 prompt positions (4 truncated prompts run
//    as 4 sequences of ONE step batch, which also exercises batching);
//  - cached decode logits, one token per step, fed the golden tokens;
//  - greedy tokens through generate(), one-shot and with chunked prefill.
// Both CPU provider sets (reference and fast) are checked.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "formats/safetensors.h"

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
  void SetUp() override {
    dir_ = kModelsDir + GetParam().family;
    std::ifstream f(dir_ + "/golden.json");
    ASSERT_TRUE(f) << "missing " << dir_ << "/golden.json";
    golden_ = nlohmann::json::parse(f);
    auto g = SafetensorsCheckpoint::open(dir_ + "/golden.safetensors");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    logits_ = std::make_unique<SafetensorsCheckpoint>(std::move(g).value());
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

  // Golden [rows, V] f32 tensor.
  std::vector<float> golden_rows(const std::string& name, int64_t* rows) {
    const SafetensorsTensor* t = logits_->find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    *rows = t->shape[0];
    const float* p = reinterpret_cast<const float*>(t->data);
    return std::vector<float>(p, p + t->shape.numel());
  }

  // max|a - b| <= 2e-3 * max(1, max|b|), as tests/models/README.md states.
  static void expect_close(const float* got, const float* want, int64_t n,
                           const std::string& what) {
    double max_abs = 1.0, max_diff = 0;
    for (int64_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(double(want[i])));
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double d = std::fabs(double(got[i]) - want[i]);
      if (d > max_diff) max_diff = d, worst = i;
    }
    EXPECT_LE(max_diff, 2e-3 * max_abs)
        << what << ": worst index " << worst << " got " << got[worst] << " want " << want[worst];
  }

  // Runs a forward over `prompts` as sequences of one step; returns logits.
  std::vector<float> forward_prompts(const std::vector<std::vector<uint32_t>>& prompts) {
    BoundPlan& plan = runner_->bound();
    StepBatch batch;
    std::vector<std::vector<int32_t>> pages(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      EXPECT_TRUE(
          plan.pages().allocate(plan.pages().pages_for(prompts[s].size()), &pages[s]).is_ok());
      SequenceSlice slice;
      slice.token_begin = batch.num_tokens();
      slice.token_count = static_cast<int32_t>(prompts[s].size());
      slice.position_start = 0;
      slice.block_table = pages[s];
      batch.token_ids.insert(batch.token_ids.end(), prompts[s].begin(), prompts[s].end());
      batch.sequences.push_back(slice);
    }
    std::vector<int32_t> slots;
    if (plan.has_recurrent_state()) {
      for (auto& slice : batch.sequences) {
        auto slot = plan.slots().allocate();
        EXPECT_TRUE(slot.is_ok());
        slice.state_slot = *slot;
        slots.push_back(*slot);
        EXPECT_TRUE(plan.reset_state_slot(*slot).is_ok());
      }
    }
    Status s = plan.forward(batch);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    TensorView l = plan.logits();
    std::vector<float> out(static_cast<const float*>(l.data),
                           static_cast<const float*>(l.data) + l.numel());
    for (auto& p : pages) plan.pages().release_all(p);
    for (int32_t slot : slots) plan.slots().release(slot);
    return out;
  }

  std::string dir_;
  nlohmann::json golden_;
  std::unique_ptr<SafetensorsCheckpoint> logits_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_P(GoldenTest, PrefillLogitsOfLastPositions) {
  const int64_t vocab = runner_->program().vocab_size;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden_["prompts"][which];
    std::vector<uint32_t> ids = p["ids"].get<std::vector<uint32_t>>();
    std::vector<int64_t> positions = p["prefill_logits_positions"].get<std::vector<int64_t>>();
    std::vector<std::vector<uint32_t>> prompts;
    for (int64_t pos : positions) prompts.emplace_back(ids.begin(), ids.begin() + pos + 1);
    std::vector<float> got = forward_prompts(prompts);
    int64_t rows = 0;
    std::vector<float> want = golden_rows(std::string(which) + ".prefill_logits", &rows);
    ASSERT_EQ(rows, static_cast<int64_t>(positions.size()));
    for (int64_t r = 0; r < rows; ++r)
      expect_close(&got[r * vocab], &want[r * vocab], vocab,
                   std::string(which) + " prefill position " + std::to_string(positions[r]));
  }
}

TEST_P(GoldenTest, CachedDecodeLogits) {
  const int64_t vocab = runner_->program().vocab_size;
  BoundPlan& plan = runner_->bound();
  for (const char* which : {"short", "long"}) {
    const auto& p = golden_["prompts"][which];
    std::vector<uint32_t> ids = p["ids"].get<std::vector<uint32_t>>();
    std::vector<uint32_t> fed = p["decode_logits_fed_tokens"].get<std::vector<uint32_t>>();
    int64_t rows = 0;
    std::vector<float> want = golden_rows(std::string(which) + ".decode_logits", &rows);
    std::vector<int32_t> pages;
    ASSERT_TRUE(
        plan.pages().allocate(plan.pages().pages_for(ids.size() + fed.size()), &pages).is_ok());
    int32_t slot = -1;
    if (plan.has_recurrent_state()) {
      slot = *plan.slots().allocate();
      ASSERT_TRUE(plan.reset_state_slot(slot).is_ok());
    }
    StepBatch batch;
    batch.token_ids = ids;
    batch.sequences.push_back({0, static_cast<int32_t>(ids.size()), 0, pages, slot});
    ASSERT_TRUE(plan.forward(batch).is_ok());
    for (size_t i = 0; i < fed.size() && static_cast<int64_t>(i) < rows; ++i) {
      batch.token_ids = {fed[i]};
      batch.sequences[0] = {0, 1, static_cast<int32_t>(ids.size() + i), pages, slot};
      Status s = plan.forward(batch);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_close(static_cast<const float*>(plan.logits().data), &want[i * vocab], vocab,
                   std::string(which) + " decode step " + std::to_string(i));
    }
    plan.pages().release_all(pages);
    if (slot >= 0) plan.slots().release(slot);
  }
}

TEST_P(GoldenTest, GreedyTokensOneShotChunkedAndBatched) {
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<uint32_t>> want;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden_["prompts"][which];
    GenerationRequest r;
    r.prompt = p["ids"].get<std::vector<uint32_t>>();
    want.push_back(p["greedy_tokens"].get<std::vector<uint32_t>>());
    r.max_tokens = static_cast<int32_t>(want.back().size());
    reqs.push_back(r);
  }
  // One sequence at a time, then both in one batch, then with chunked prefill.
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto out = generate(*runner_, {reqs[i]});
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ((*out)[0].tokens, want[i]) << "request " << i << " alone";
  }
  auto batched = generate(*runner_, reqs);
  ASSERT_TRUE(batched.is_ok()) << batched.status().to_string();
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ((*batched)[i].tokens, want[i]) << "batched " << i;
  for (int32_t chunk : {1, 7, 64}) {
    if (chunk == 1 && GetParam().providers == "reference") continue;  // slow and redundant
    auto chunked = generate(*runner_, reqs, nullptr, nullptr, chunk);
    ASSERT_TRUE(chunked.is_ok()) << chunked.status().to_string();
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ((*chunked)[i].tokens, want[i]) << "chunk " << chunk << " request " << i;
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
  BoundPlan& plan = runner_->bound();
  const auto& p = golden_["prompts"]["long"];
  std::vector<uint32_t> ids = p["ids"].get<std::vector<uint32_t>>();
  int64_t rows = 0;
  std::vector<float> want = golden_rows("long.prefill_logits", &rows);
  ASSERT_GT(rows, 0);
  auto feed = [&](int32_t chunk) {
    std::vector<int32_t> pages;
    EXPECT_TRUE(plan.pages().allocate(plan.pages().pages_for(ids.size()), &pages).is_ok());
    int32_t slot = -1;
    if (plan.has_recurrent_state()) {
      slot = *plan.slots().allocate();
      EXPECT_TRUE(plan.reset_state_slot(slot).is_ok());
    }
    for (size_t begin = 0; begin < ids.size(); begin += chunk) {
      const size_t n = std::min<size_t>(chunk, ids.size() - begin);
      StepBatch batch;
      batch.token_ids.assign(ids.begin() + begin, ids.begin() + begin + n);
      batch.sequences.push_back(
          {0, static_cast<int32_t>(n), static_cast<int32_t>(begin), pages, slot});
      Status s = plan.forward(batch);
      EXPECT_TRUE(s.is_ok()) << s.to_string();
    }
    const float* l = static_cast<const float*>(plan.logits().data);
    std::vector<float> out(l, l + vocab);
    plan.pages().release_all(pages);
    if (slot >= 0) plan.slots().release(slot);
    return out;
  };
  const std::vector<float> one_shot = feed(static_cast<int32_t>(ids.size()));
  expect_close(one_shot.data(), &want[(rows - 1) * vocab], vocab, "one-shot vs golden");
  for (int32_t chunk : {1, 7, 64}) {
    if (chunk == 1 && GetParam().providers == "reference") continue;  // slow and redundant
    const std::vector<float> got = feed(chunk);
    expect_close(got.data(), one_shot.data(), vocab,
                 "chunks of " + std::to_string(chunk) + " vs one-shot");
    expect_close(got.data(), &want[(rows - 1) * vocab], vocab,
                 "chunks of " + std::to_string(chunk) + " vs golden");
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
