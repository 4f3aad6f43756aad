// EngineRequest::constraint: every drawn token is one the constraint allows
// (the per-sequence bitmap reaches the sampler contracts), the request
// finishes with "stop" once the constraint is terminated, a rejected token
// fails the request, and unconstrained requests batched with constrained
// ones are unaffected. Greedy and sampled, with batching, preemption and
// the prefix cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "engine/generator.h"

namespace ferrite {
namespace {

// Allows the ids of `allowed` (all of them at every position) and is
// terminated after `length` accepted tokens.
class SetConstraint final : public TokenConstraint {
 public:
  SetConstraint(std::set<uint32_t> allowed, int length) : allowed_(std::move(allowed)), length_(length) {}
  void fill_mask(std::span<uint32_t> bits) override {
    ++fills_;
    std::fill(bits.begin(), bits.end(), 0u);
    for (uint32_t id : allowed_) bits[id / 32] |= 1u << (id % 32);
  }
  bool accept(uint32_t token) override {
    if (!allowed_.count(token)) return false;
    accepted_.push_back(token);
    return true;
  }
  bool is_terminated() const override { return static_cast<int>(accepted_.size()) >= length_; }
  const std::vector<uint32_t>& accepted() const { return accepted_; }
  int fills() const { return fills_; }

 private:
  std::set<uint32_t> allowed_;
  int length_;
  std::vector<uint32_t> accepted_;
  int fills_ = 0;
};

// Allows exactly one id per position: the output must be `forced`.
class ForcedConstraint final : public TokenConstraint {
 public:
  explicit ForcedConstraint(std::vector<uint32_t> forced) : forced_(std::move(forced)) {}
  void fill_mask(std::span<uint32_t> bits) override {
    std::fill(bits.begin(), bits.end(), 0u);
    const uint32_t id = forced_[at_];
    bits[id / 32] |= 1u << (id % 32);
  }
  bool accept(uint32_t token) override { return token == forced_[at_] && ++at_ > 0; }
  bool is_terminated() const override { return at_ >= forced_.size(); }

 private:
  std::vector<uint32_t> forced_;
  size_t at_ = 0;
};

// Allows everything and rejects what it is given (a broken grammar).
class LyingConstraint final : public TokenConstraint {
 public:
  void fill_mask(std::span<uint32_t> bits) override { std::fill(bits.begin(), bits.end(), ~0u); }
  bool accept(uint32_t) override { return false; }
  bool is_terminated() const override { return false; }
};

std::unique_ptr<ModelRunner> open_runner(int32_t num_pages, int32_t max_seqs = 16,
                                         int64_t max_tokens = 256) {
  RunnerOptions o;
  o.load.model_dir = std::string(FERRITE_SOURCE_DIR "/tests/models/qwen3");
  o.limits.max_tokens = max_tokens;
  o.limits.max_sequences = max_seqs;
  o.limits.max_context = 512;
  o.load.program.max_context = 512;
  o.cache.page_size = 16;
  o.cache.num_pages = num_pages;
  auto r = ModelRunner::open(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

std::vector<uint32_t> prompt(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> p(n);
  for (auto& t : p) t = rng() % 500;
  return p;
}

std::vector<uint32_t> tokens_of(const Engine::Completion& c) {
  std::vector<uint32_t> t;
  for (const auto& o : c.tokens) t.push_back(o.token);
  return t;
}

std::set<uint32_t> id_set(uint32_t seed) {
  std::mt19937 rng(seed);
  std::set<uint32_t> s;
  while (s.size() < 6) s.insert(rng() % 512);
  return s;
}

SamplingParams sampled(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 4;  // counts allowed ids only: a disallowed top-4 would show
  p.seed = seed;
  return p;
}

struct Outcome {
  std::vector<uint32_t> tokens;
  EngineFinish finish = EngineFinish::kError;
};

// Submits every request at once and waits for all of them.
std::vector<Outcome> run_all(Engine& engine, std::vector<EngineRequest> reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& r : reqs) {
    auto s = engine.submit(r);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (s.is_ok()) streams.push_back(*s);
  }
  std::vector<Outcome> out(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    for (;;) {
      auto u = streams[i]->next(std::chrono::milliseconds(5000));
      for (auto& t : u.tokens) out[i].tokens.push_back(t.token);
      if (u.finished) {
        out[i].finish = u.finish;
        break;
      }
    }
  }
  return out;
}

TEST(EngineConstraint, GreedyAndSampledDrawOnlyAllowedIdsAndStop) {
  auto runner = open_runner(128);
  ASSERT_TRUE(runner);
  auto engine = Engine::create(*runner);
  ASSERT_TRUE(engine.is_ok());
  for (bool greedy : {true, false}) {
    const std::set<uint32_t> ids = id_set(greedy ? 1 : 2);
    auto c = std::make_shared<SetConstraint>(ids, 9);
    EngineRequest r;
    r.prompt = prompt(greedy ? 11 : 12, 20);
    r.max_tokens = 50;
    if (!greedy) r.sampling = sampled(5);
    r.constraint = c;
    auto out = (*engine)->complete(r);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(out->finish, EngineFinish::kStop);
    const std::vector<uint32_t> got = tokens_of(*out);
    ASSERT_EQ(got.size(), 9u);
    for (uint32_t t : got) EXPECT_TRUE(ids.count(t)) << "token " << t << " is not allowed";
    EXPECT_EQ(c->accepted(), got);
    EXPECT_EQ(c->fills(), 9);  // one mask per drawn token, none after the end
    // Without the constraint the model goes elsewhere (the test can fail).
    r.constraint = nullptr;
    auto free = (*engine)->complete(r);
    ASSERT_TRUE(free.is_ok());
    int outside = 0;
    for (uint32_t t : tokens_of(*free)) outside += ids.count(t) ? 0 : 1;
    EXPECT_GT(outside, 0);
  }
}

TEST(EngineConstraint, ForcedSequenceIsReproducedExactly) {
  auto runner = open_runner(128);
  ASSERT_TRUE(runner);
  auto engine = Engine::create(*runner);
  const std::vector<uint32_t> forced = {3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 338, 327};
  for (bool greedy : {true, false}) {
    EngineRequest r;
    r.prompt = prompt(21, 33);
    r.max_tokens = 100;
    if (!greedy) r.sampling = sampled(9);
    r.constraint = std::make_shared<ForcedConstraint>(forced);
    auto out = (*engine)->complete(r);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(out->finish, EngineFinish::kStop);
    EXPECT_EQ(tokens_of(*out), forced);
  }
  // max_tokens before the end: "length", the prefix of the forced sequence.
  EngineRequest r;
  r.prompt = prompt(22, 10);
  r.max_tokens = 5;
  r.constraint = std::make_shared<ForcedConstraint>(forced);
  auto out = (*engine)->complete(r);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(out->finish, EngineFinish::kLength);
  EXPECT_EQ(tokens_of(*out), std::vector<uint32_t>(forced.begin(), forced.begin() + 5));
}

TEST(EngineConstraint, TerminatedAtOnceAndRejectingConstraints) {
  auto runner = open_runner(64);
  ASSERT_TRUE(runner);
  auto engine = Engine::create(*runner);
  EngineRequest r;
  r.prompt = prompt(31, 12);
  r.max_tokens = 10;
  r.constraint = std::make_shared<ForcedConstraint>(std::vector<uint32_t>{});
  auto out = (*engine)->complete(r);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(out->finish, EngineFinish::kStop);
  EXPECT_TRUE(out->tokens.empty());
  r.constraint = std::make_shared<LyingConstraint>();
  auto bad = (*engine)->complete(r);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
  EXPECT_EQ(runner->bound().pages().used_pages(), 0);
}

// Constrained and unconstrained requests, greedy and sampled, in one
// engine: each constrained one gives what it gives alone, each
// unconstrained one what generate() gives it.
TEST(EngineConstraint, BatchedWithUnconstrainedRequests) {
  auto runner = open_runner(256);
  ASSERT_TRUE(runner);
  const int kRequests = 16;
  std::vector<EngineRequest> reqs(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    reqs[i].prompt = prompt(40 + i, 6 + 5 * i);
    reqs[i].max_tokens = 14;
    if (i % 4 >= 2) reqs[i].sampling = sampled(100 + i);
  }
  auto constrain = [&](std::vector<EngineRequest> rs) {
    for (int i = 0; i < kRequests; i += 2)
      rs[i].constraint = std::make_shared<SetConstraint>(id_set(60 + i), 8 + i % 3);
    return rs;
  };
  // Alone (one at a time).
  std::vector<Outcome> alone;
  {
    auto engine = Engine::create(*runner);
    for (auto& r : constrain(reqs)) alone.push_back(run_all(**engine, {r})[0]);
  }
  auto engine = Engine::create(*runner);
  std::vector<Outcome> together = run_all(**engine, constrain(reqs));
  ASSERT_EQ(together.size(), static_cast<size_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    if (i % 2 == 0) {
      const std::set<uint32_t> ids = id_set(60 + i);
      EXPECT_EQ(together[i].finish, EngineFinish::kStop) << "request " << i;
      EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(8 + i % 3));
      for (uint32_t t : together[i].tokens) EXPECT_TRUE(ids.count(t)) << "request " << i;
    } else {
      EXPECT_EQ(together[i].finish, EngineFinish::kLength);
      if (reqs[i].sampling.greedy()) {
        GenerationRequest g;
        g.prompt = reqs[i].prompt;
        g.max_tokens = reqs[i].max_tokens;
        auto ref = generate(*runner, {g});
        ASSERT_TRUE(ref.is_ok());
        EXPECT_EQ(together[i].tokens, (*ref)[0].tokens) << "request " << i;
      }
    }
  }
}

// A tiny pool preempts constrained sequences; their recomputed tokens are
// replayed, not accepted again, and the outputs stay those of a roomy pool.
TEST(EngineConstraint, PreemptionAndPrefixCacheKeepOutputs) {
  std::vector<EngineRequest> reqs(10);
  std::vector<std::shared_ptr<SetConstraint>> cs;
  auto make = [&] {
    cs.clear();
    for (int i = 0; i < 10; ++i) {
      reqs[i].prompt = prompt(i < 5 ? 70 : 71, 40);  // two shared prompts
      reqs[i].prompt.push_back(static_cast<uint32_t>(i));
      reqs[i].max_tokens = 40;
      reqs[i].sampling = i % 2 ? sampled(300 + i) : SamplingParams{};
      cs.push_back(std::make_shared<SetConstraint>(id_set(80 + i), 24));
      reqs[i].constraint = cs.back();
    }
    return reqs;
  };
  std::vector<Outcome> roomy;
  {
    auto runner = open_runner(256);
    ASSERT_TRUE(runner);
    auto engine = Engine::create(*runner);
    roomy = run_all(**engine, make());
  }
  for (bool cache : {false, true}) {
    auto runner = open_runner(9, 8, 64);  // 9 pages of 16: three sequences at a time
    ASSERT_TRUE(runner);
    EngineOptions eo;
    eo.prefix_cache = cache;
    auto engine = Engine::create(*runner, eo);
    auto got = run_all(**engine, make());
    ASSERT_EQ(got.size(), roomy.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].finish, EngineFinish::kStop) << "request " << i;
      EXPECT_EQ(got[i].tokens, roomy[i].tokens) << "request " << i << (cache ? " (cache)" : "");
      EXPECT_EQ(cs[i]->accepted(), got[i].tokens) << "request " << i;
    }
    EXPECT_GT((*engine)->metrics().preemptions, 0u);
    if (cache) {
      EXPECT_GT((*engine)->metrics().prefix_cache_hits, 0u);
    }
    if (!cache) {
      EXPECT_EQ(runner->bound().pages().used_pages(), 0);
    }
  }
}

}  // namespace
}  // namespace ferrite
