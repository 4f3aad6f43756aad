// Test support shared by the golden tests of every backend
// (tests/models/golden_test.cc on CPU, tests/cuda/cuda_test.cc on CUDA):
// loading a tiny checkpoint's goldens, running truncated prompts and cached
// decoding on a ModelRunner, and the logits tolerance check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/model_runner.h"
#include "formats/safetensors.h"

namespace ferrite::golden {

// golden.json and golden.safetensors of one folder of tests/models.
struct Goldens {
  nlohmann::json json;
  std::shared_ptr<SafetensorsCheckpoint> logits;

  // Fails the current test (ASSERT) when a file is missing or corrupt.
  static void load(const std::string& dir, Goldens* out) {
    std::ifstream f(dir + "/golden.json");
    ASSERT_TRUE(f) << "missing " << dir << "/golden.json";
    out->json = nlohmann::json::parse(f);
    auto g = SafetensorsCheckpoint::open(dir + "/golden.safetensors");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    out->logits = std::make_shared<SafetensorsCheckpoint>(std::move(g).value());
  }

  const nlohmann::json& prompt(const char* which) const { return json["prompts"][which]; }

  // A golden [rows, V] f32 tensor such as "short.prefill_logits".
  std::vector<float> rows(const std::string& name, int64_t* rows) const {
    const SafetensorsTensor* t = logits->find(name);
    EXPECT_NE(t, nullptr) << name;
    *rows = 0;
    if (!t) return {};
    *rows = t->shape[0];
    const float* p = reinterpret_cast<const float*>(t->data);
    return std::vector<float>(p, p + t->shape.numel());
  }
};

// max|got - want| <= tolerance * max(1, max|want|) over n logits.
inline void expect_close(const float* got, const float* want, int64_t n, double tolerance,
                         const std::string& what) {
  double max_abs = 1.0, max_diff = 0;
  for (int64_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(double(want[i])));
  int64_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(got[i]) - want[i]);
    if (!(d <= max_diff)) max_diff = d, worst = i;  // NaN counts as worst
  }
  EXPECT_LE(max_diff, tolerance * max_abs)
      << what << ": worst index " << worst << " got " << got[worst] << " want " << want[worst];
}

// The logits of the last forward, copied to the host (any device).
inline std::vector<float> logits_on_host(ModelRunner& runner) {
  TensorView l = runner.bound().logits();
  std::vector<float> out(l.numel());
  Status s = runner.device().copy_to_host(out.data(), l.data, out.size() * 4);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

// One sequence's KV pages and, for models with recurrent state, a zeroed
// state slot; both go back to the plan on destruction.
class SequenceState {
 public:
  SequenceState(BoundPlan& plan, int64_t positions) : plan_(plan) {
    EXPECT_TRUE(plan.pages().allocate(plan.pages().pages_for(positions), &pages_).is_ok());
    if (plan.has_recurrent_state()) {
      auto slot = plan.slots().allocate();
      EXPECT_TRUE(slot.is_ok()) << slot.status().to_string();
      if (slot.is_ok()) {
        slot_ = *slot;
        EXPECT_TRUE(plan.reset_state_slot(slot_).is_ok());
      }
    }
  }
  ~SequenceState() {
    plan_.pages().release_all(pages_);
    if (slot_ >= 0) plan_.slots().release(slot_);
  }
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  // The slice of `count` tokens from `position_start`, rows from `token_begin`.
  SequenceSlice slice(int32_t token_begin, int32_t count, int32_t position_start) const {
    return {token_begin, count, position_start, pages_, slot_};
  }

 private:
  BoundPlan& plan_;
  std::vector<int32_t> pages_;
  int32_t slot_ = -1;
};

// Runs `prompts` as the sequences of ONE step (each from position 0) and
// returns the logits, one row per prompt.
inline std::vector<float> forward_prompts(ModelRunner& runner,
                                          const std::vector<std::vector<uint32_t>>& prompts) {
  BoundPlan& plan = runner.bound();
  std::vector<std::unique_ptr<SequenceState>> states;
  StepBatch batch;
  for (const auto& prompt : prompts) {
    states.push_back(std::make_unique<SequenceState>(plan, prompt.size()));
    batch.sequences.push_back(
        states.back()->slice(batch.num_tokens(), static_cast<int32_t>(prompt.size()), 0));
    batch.token_ids.insert(batch.token_ids.end(), prompt.begin(), prompt.end());
  }
  Status s = plan.forward(batch);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return s.is_ok() ? logits_on_host(runner) : std::vector<float>{};
}

// Prefills `prompt` in one step, then feeds `fed` one token per step; returns
// the logits after each fed token.
inline std::vector<std::vector<float>> cached_decode(ModelRunner& runner,
                                                     const std::vector<uint32_t>& prompt,
                                                     const std::vector<uint32_t>& fed) {
  BoundPlan& plan = runner.bound();
  SequenceState state(plan, prompt.size() + fed.size());
  std::vector<std::vector<float>> out;
  StepBatch batch;
  batch.token_ids = prompt;
  batch.sequences.push_back(state.slice(0, static_cast<int32_t>(prompt.size()), 0));
  Status s = plan.forward(batch);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  for (size_t i = 0; i < fed.size() && s.is_ok(); ++i) {
    batch.token_ids = {fed[i]};
    batch.sequences[0] = state.slice(0, 1, static_cast<int32_t>(prompt.size() + i));
    s = plan.forward(batch);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (s.is_ok()) out.push_back(logits_on_host(runner));
  }
  return out;
}

// Feeds `prompt` to one sequence in steps of at most `chunk` tokens and
// returns the logits after the last step.
inline std::vector<float> feed_in_chunks(ModelRunner& runner, const std::vector<uint32_t>& prompt,
                                         size_t chunk) {
  BoundPlan& plan = runner.bound();
  SequenceState state(plan, prompt.size());
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t n = std::min(chunk, prompt.size() - begin);
    StepBatch batch;
    batch.token_ids.assign(prompt.begin() + begin, prompt.begin() + begin + n);
    batch.sequences.push_back(
        state.slice(0, static_cast<int32_t>(n), static_cast<int32_t>(begin)));
    Status s = plan.forward(batch);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (!s.is_ok()) return {};
  }
  return logits_on_host(runner);
}

// The goldens' prefill logits of both prompts: every listed position's
// truncated prompt run as one sequence of ONE step, rows within `tolerance`.
inline void check_prefill_logits(ModelRunner& runner, const Goldens& golden, double tolerance) {
  const int64_t vocab = runner.program().vocab_size;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden.prompt(which);
    std::vector<uint32_t> ids = p["ids"].get<std::vector<uint32_t>>();
    std::vector<int64_t> positions = p["prefill_logits_positions"].get<std::vector<int64_t>>();
    std::vector<std::vector<uint32_t>> prompts;
    for (int64_t pos : positions) prompts.emplace_back(ids.begin(), ids.begin() + pos + 1);
    std::vector<float> got = forward_prompts(runner, prompts);
    int64_t rows = 0;
    std::vector<float> want = golden.rows(std::string(which) + ".prefill_logits", &rows);
    ASSERT_EQ(rows, static_cast<int64_t>(positions.size()));
    ASSERT_EQ(got.size(), want.size());
    for (int64_t r = 0; r < rows; ++r)
      expect_close(&got[r * vocab], &want[r * vocab], vocab, tolerance,
                   std::string(which) + " prefill position " + std::to_string(positions[r]));
  }
}

// The goldens' cached-decode logits of both prompts: the prompt prefilled,
// then the golden tokens fed one per step, rows within `tolerance`.
inline void check_cached_decode_logits(ModelRunner& runner, const Goldens& golden,
                                       double tolerance) {
  const int64_t vocab = runner.program().vocab_size;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden.prompt(which);
    int64_t rows = 0;
    std::vector<float> want = golden.rows(std::string(which) + ".decode_logits", &rows);
    std::vector<uint32_t> fed = p["decode_logits_fed_tokens"].get<std::vector<uint32_t>>();
    fed.resize(std::min<size_t>(fed.size(), rows));
    auto got = cached_decode(runner, p["ids"].get<std::vector<uint32_t>>(), fed);
    ASSERT_EQ(got.size(), fed.size());
    for (size_t i = 0; i < got.size(); ++i)
      expect_close(got[i].data(), &want[i * vocab], vocab, tolerance,
                   std::string(which) + " decode step " + std::to_string(i));
  }
}

// The goldens' two prompts ("short", "long") as greedy requests of their
// golden lengths; *want gets the golden tokens of each.
inline std::vector<GenerationRequest> greedy_requests(const Goldens& golden,
                                                      std::vector<std::vector<uint32_t>>* want) {
  std::vector<GenerationRequest> reqs;
  for (const char* which : {"short", "long"}) {
    const auto& p = golden.prompt(which);
    GenerationRequest r;
    r.prompt = p["ids"].get<std::vector<uint32_t>>();
    want->push_back(p["greedy_tokens"].get<std::vector<uint32_t>>());
    r.max_tokens = static_cast<int32_t>(want->back().size());
    reqs.push_back(r);
  }
  return reqs;
}

// generate() on `reqs` in one batch (prefill chunks of `chunk` tokens when
// > 0) gives `want`.
inline void expect_greedy(ModelRunner& runner, const std::vector<GenerationRequest>& reqs,
                          const std::vector<std::vector<uint32_t>>& want, int32_t chunk,
                          const std::string& what) {
  auto out = generate(runner, reqs, nullptr, nullptr, chunk);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ((*out)[i].tokens, want[i]) << what << " request " << i;
}

}  // namespace ferrite::golden
