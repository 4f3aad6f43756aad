// Engine: continuous batching gives the same greedy tokens as generate();
// preemption under a tiny KV pool completes every request; the prefix cache
// reuses pages without changing outputs; cancellation frees pages.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/generator.h"

namespace ferrite {
namespace {

std::unique_ptr<ModelRunner> open_runner(int32_t num_pages, int32_t max_seqs = 16,
                                         int64_t max_tokens = 256) {
  RunnerOptions o;
  o.load.model_dir = FERRITE_SOURCE_DIR "/tests/models/qwen3";
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

// Serial reference: one request at a time through generate().
std::vector<uint32_t> reference(ModelRunner& runner, const std::vector<uint32_t>& p,
                                int max_tokens) {
  GenerationRequest r;
  r.prompt = p;
  r.max_tokens = max_tokens;
  auto out = generate(runner, {r});
  EXPECT_TRUE(out.is_ok());
  return (*out)[0].tokens;
}

TEST(EngineTest, ConcurrentGreedyMatchesSerial) {
  auto runner = open_runner(256);
  ASSERT_TRUE(runner);
  const int kRequests = 24;
  std::vector<std::vector<uint32_t>> expected;
  for (int i = 0; i < kRequests; ++i)
    expected.push_back(reference(*runner, prompt(i, 5 + 7 * i % 60), 20));
  auto engine = Engine::create(*runner);
  ASSERT_TRUE(engine.is_ok());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kRequests; ++i) {
    EngineRequest r;
    r.prompt = prompt(i, 5 + 7 * i % 60);
    r.max_tokens = 20;
    auto s = (*engine)->submit(r);
    ASSERT_TRUE(s.is_ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < kRequests; ++i) {
    std::vector<uint32_t> got;
    for (;;) {
      auto u = streams[i]->next(std::chrono::milliseconds(5000));
      for (auto& t : u.tokens) got.push_back(t.token);
      if (u.finished) {
        EXPECT_EQ(u.finish, EngineFinish::kLength);
        break;
      }
    }
    EXPECT_EQ(got, expected[i]) << "request " << i;
  }
  EXPECT_EQ(runner->bound().pages().used_pages(), 0);
}

TEST(EngineTest, PreemptionUnderTinyPoolCompletesEverything) {
  // 8 pages of 16 positions; 12 requests of up to 24 + 40 positions each.
  auto runner = open_runner(8, 8, 64);
  ASSERT_TRUE(runner);
  std::vector<std::vector<uint32_t>> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(reference(*runner, prompt(100 + i, 24), 40));
  auto engine = Engine::create(*runner);
  ASSERT_TRUE(engine.is_ok());
  std::vector<std::thread> threads;
  std::vector<std::vector<uint32_t>> got(12);
  for (int i = 0; i < 12; ++i) {
    threads.emplace_back([&, i] {
      EngineRequest r;
      r.prompt = prompt(100 + i, 24);
      r.max_tokens = 40;
      auto c = (*engine)->complete(r);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      EXPECT_EQ(c->finish, EngineFinish::kLength);
      got[i] = tokens_of(*c);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(got[i], expected[i]) << "request " << i;
  EXPECT_GT((*engine)->metrics().preemptions, 0u);
  EXPECT_EQ(runner->bound().pages().used_pages(), 0);
}

TEST(EngineTest, SequenceLargerThanPoolEndsWithLength) {
  auto runner = open_runner(2, 4, 64);
  ASSERT_TRUE(runner);
  auto engine = Engine::create(*runner);
  EngineRequest r;
  r.prompt = prompt(7, 20);
  r.max_tokens = 100;  // needs 8 pages, the pool has 2
  auto c = (*engine)->complete(r);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->finish, EngineFinish::kLength);
  EXPECT_EQ(c->tokens.size(), 32u - 20u + 1u);
  r.prompt = prompt(7, 40);  // the prompt alone does not fit
  EXPECT_FALSE((*engine)->submit(r).is_ok());
}

TEST(EngineTest, PrefixCacheReusesPagesWithSameOutput) {
  auto runner = open_runner(64);
  ASSERT_TRUE(runner);
  std::vector<uint32_t> p = prompt(42, 70);
  auto expected = reference(*runner, p, 12);
  EngineOptions eo;
  eo.prefix_cache = true;
  auto engine = Engine::create(*runner, eo);
  EngineRequest r;
  r.prompt = p;
  r.max_tokens = 12;
  auto a = (*engine)->complete(r);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->cached_tokens, 0);
  EXPECT_EQ(tokens_of(*a), expected);
  auto b = (*engine)->complete(r);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->cached_tokens, 64);  // 4 full pages of the 70-token prompt
  EXPECT_EQ(tokens_of(*b), expected);
  auto m = (*engine)->metrics();
  EXPECT_EQ(m.prefix_cache_hits, 64u);
  EXPECT_GT(m.prefix_cache_pages, 0);
  // Cached pages are evicted when the pool needs them: fill it with others.
  for (int i = 0; i < 6; ++i) {
    EngineRequest o;
    o.prompt = prompt(500 + i, 150);
    o.max_tokens = 8;
    ASSERT_TRUE((*engine)->complete(o).is_ok());
  }
}

TEST(EngineTest, CancelFreesPages) {
  auto runner = open_runner(64);
  ASSERT_TRUE(runner);
  auto engine = Engine::create(*runner);
  EngineRequest r;
  r.prompt = prompt(3, 30);
  r.max_tokens = 400;
  auto s = (*engine)->submit(r);
  ASSERT_TRUE(s.is_ok());
  auto u = (*s)->next(std::chrono::milliseconds(5000));
  EXPECT_FALSE(u.tokens.empty());
  (*s)->cancel();
  for (;;) {
    u = (*s)->next(std::chrono::milliseconds(5000));
    if (u.finished) break;
  }
  EXPECT_EQ(u.finish, EngineFinish::kCancelled);
  // The stream finishes after the pages went back.
  EXPECT_EQ((*engine)->metrics().kv_pages_used, 0);
  EXPECT_EQ(runner->bound().pages().used_pages(), 0);
}

TEST(EngineTest, LogprobsAndStopIds) {
  auto runner = open_runner(64);
  auto engine = Engine::create(*runner);
  EngineRequest r;
  r.prompt = prompt(9, 10);
  r.max_tokens = 8;
  r.logprobs = 3;
  auto c = (*engine)->complete(r);
  ASSERT_TRUE(c.is_ok());
  ASSERT_EQ(c->tokens.size(), 8u);
  for (const auto& t : c->tokens) {
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].token, t.token);  // greedy: the best one
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_LE(t.logprob, 0.0f);
    EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
  }
  r.stop_ids = {c->tokens[3].token};
  auto d = (*engine)->complete(r);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->finish, EngineFinish::kStop);
  EXPECT_LE(d->tokens.size(), 4u);
  EXPECT_EQ(d->tokens.back().token, c->tokens[3].token);
}

TEST(EngineTest, QueueFullIsResourceExhausted) {
  auto runner = open_runner(64, 1);
  EngineOptions eo;
  eo.max_waiting = 2;
  auto engine = Engine::create(*runner, eo);
  std::vector<std::shared_ptr<RequestStream>> streams;
  bool rejected = false;
  for (int i = 0; i < 20 && !rejected; ++i) {
    EngineRequest r;
    r.prompt = prompt(i, 8);
    r.max_tokens = 200;
    auto s = (*engine)->submit(r);
    if (!s.is_ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
      rejected = true;
    } else {
      streams.push_back(*s);
    }
  }
  EXPECT_TRUE(rejected);
  for (auto& s : streams) s->cancel();
}

}  // namespace
}  // namespace ferrite
