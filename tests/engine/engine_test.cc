// Engine: continuous batching gives the same greedy tokens as generate();
// preemption under a tiny KV pool completes every request; the prefix cache
// reuses pages without changing outputs; cancellation frees pages. Hybrid
// models (Qwen3.5, Qwen3.5-MoE, Qwen3-Next): the prefix cache with
// recurrent-state snapshots gives bitwise the same tokens and logprobs as
// the cache off (CPU f32), sequentially, concurrently and under preemption.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <random>
#include <thread>

#include "engine/generator.h"

namespace ferrite {
namespace {

// FERRITE_TEST_DEVICE=cuda runs the hybrid prefix-cache tests on the GPU
// (scripts/gpu_run.sh); outputs then match within the tolerance
// (logprobs 1e-3) instead of bitwise.
std::string test_device() {
  const char* d = std::getenv("FERRITE_TEST_DEVICE");
  return d && *d ? d : "cpu";
}

// One of the test models in tests/models/ with a paged KV pool of its own.
std::unique_ptr<ModelRunner> open_model(const std::string& model, const std::string& device,
                                        int64_t max_context, int32_t num_pages, int32_t max_seqs,
                                        int64_t max_tokens) {
  RunnerOptions o;
  o.device = device;
  o.load.model_dir = std::string(FERRITE_SOURCE_DIR "/tests/models/") + model;
  o.limits.max_tokens = max_tokens;
  o.limits.max_sequences = max_seqs;
  o.limits.max_context = max_context;
  o.load.program.max_context = max_context;
  o.cache.page_size = 16;
  o.cache.num_pages = num_pages;
  auto r = ModelRunner::open(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

std::unique_ptr<ModelRunner> open_runner(int32_t num_pages, int32_t max_seqs = 16,
                                         int64_t max_tokens = 256) {
  return open_model("qwen3", "cpu", 512, num_pages, max_seqs, max_tokens);
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

// ---------------------------------------------------------------------------
// Hybrid models: prefix cache with recurrent-state snapshots.

std::unique_ptr<ModelRunner> open_hybrid(const std::string& model, int32_t num_pages,
                                         int32_t max_seqs = 16, int64_t max_tokens = 256) {
  return open_model(model, test_device(), 1024, num_pages, max_seqs, max_tokens);
}

// A shared prefix of `pages` pages (seeded by `family`) and a suffix of its own.
std::vector<uint32_t> shared_prompt(uint32_t family, int pages, uint32_t suffix_seed,
                                    int suffix_len) {
  std::vector<uint32_t> p = prompt(family, pages * 16);
  std::vector<uint32_t> s = prompt(suffix_seed, suffix_len);
  p.insert(p.end(), s.begin(), s.end());
  return p;
}

struct Case {
  std::vector<uint32_t> prompt;
  int max_tokens = 8;
};

// Every field compared bitwise: the cache must not change a single bit.
void expect_logprob(float got, float want, const std::string& what) {
  if (test_device() == "cpu")
    EXPECT_EQ(got, want) << what;
  else
    EXPECT_NEAR(got, want, 1e-3) << what;
}

void expect_same(const Engine::Completion& got, const Engine::Completion& want,
                 const std::string& what) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size()) << what;
  EXPECT_EQ(got.finish, want.finish) << what;
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    const TokenOutput& g = got.tokens[i];
    const TokenOutput& w = want.tokens[i];
    ASSERT_EQ(g.token, w.token) << what << " token " << i;
    expect_logprob(g.logprob, w.logprob, what + " token " + std::to_string(i));
    ASSERT_EQ(g.top.size(), w.top.size()) << what;
    for (size_t j = 0; j < g.top.size(); ++j) {
      EXPECT_EQ(g.top[j].token, w.top[j].token) << what << " token " << i << " top " << j;
      expect_logprob(g.top[j].logprob, w.top[j].logprob,
                     what + " token " + std::to_string(i) + " top " + std::to_string(j));
    }
  }
}

EngineRequest request_of(const Case& c) {
  EngineRequest r;
  r.prompt = c.prompt;
  r.max_tokens = c.max_tokens;
  r.logprobs = 3;
  return r;
}

std::vector<Engine::Completion> run_serial(Engine& e, const std::vector<Case>& cases) {
  std::vector<Engine::Completion> out;
  for (const Case& c : cases) {
    auto r = e.complete(request_of(c));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    out.push_back(r.is_ok() ? std::move(r).value() : Engine::Completion{});
  }
  return out;
}

std::vector<Engine::Completion> run_concurrent(Engine& e, const std::vector<Case>& cases) {
  std::vector<Engine::Completion> out(cases.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cases.size(); ++i) {
    threads.emplace_back([&, i] {
      auto r = e.complete(request_of(cases[i]));
      EXPECT_TRUE(r.is_ok()) << r.status().to_string();
      if (r.is_ok()) out[i] = std::move(r).value();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Shared prefixes of 1 to 40 pages, suffixes from 1 token to several pages.
std::vector<Case> prefix_cases() {
  std::vector<Case> cases;
  const int kPages[] = {1, 3, 4, 8, 17, 40};
  const int kSuffix[] = {1, 5, 20, 70};
  uint32_t seed = 1000;
  for (int pages : kPages)
    for (int k = 0; k < 3; ++k)
      cases.push_back({shared_prompt(pages, pages, ++seed, kSuffix[(pages + k) % 4]), 6});
  // A fourth of the 40-page family, after the third snapshotted its branch
  // point (position 640).
  cases.push_back({shared_prompt(40, 40, ++seed, 30), 6});
  return cases;
}

class HybridPrefixCache : public ::testing::TestWithParam<const char*> {};

TEST_P(HybridPrefixCache, SameTokensAndLogprobsAsWithoutTheCache) {
  auto runner = open_hybrid(GetParam(), 512);
  ASSERT_TRUE(runner);
  const std::vector<Case> cases = prefix_cases();
  std::vector<Engine::Completion> cold;
  {
    auto e = Engine::create(*runner);
    ASSERT_TRUE(e.is_ok());
    EXPECT_FALSE((*e)->prefix_cache_enabled());
    cold = run_serial(**e, cases);
  }
  EngineOptions eo;
  eo.prefix_cache = true;
  auto e = Engine::create(*runner, eo);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  ASSERT_TRUE((*e)->prefix_cache_enabled());
  EXPECT_GT((*e)->snapshot_budget().slots, 0);
  // The tiny model's state is ~2 pages of KV: interval 9 pages at 1/4,
  // rounded up to the 64-position split alignment.
  EXPECT_EQ((*e)->snapshot_budget().interval_pages % 4, 0);
  // Serially: the first of each prefix family is cold, later ones resume.
  auto warm = run_serial(**e, cases);
  int32_t resumed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_same(warm[i], cold[i], "serial request " + std::to_string(i));
    resumed += warm[i].cached_tokens > 0;
    EXPECT_EQ(warm[i].cached_tokens % 64, 0) << "request " << i;
    EXPECT_LT(warm[i].cached_tokens, static_cast<int32_t>(cases[i].prompt.size()));
  }
  // Resume points are multiples of 64 positions that leave >= 16 prompt
  // tokens: prefixes of 1 to 4 pages are recomputed (correctly), 8 pages
  // resume at 64, 17 at 256 (the first prompt's end), 40 at 576 (its last
  // interval snapshot) until a request snapshots the branch point 640.
  EXPECT_EQ(resumed, 7);
  EXPECT_EQ(warm[10].cached_tokens, 64);
  EXPECT_EQ(warm[13].cached_tokens, 256);
  EXPECT_EQ(warm[16].cached_tokens, 576);
  EXPECT_EQ(warm[18].cached_tokens, 640);
  EngineMetrics m = (*e)->metrics();
  EXPECT_GT(m.prefix_cache_hits, 0u);
  EXPECT_GT(m.prefix_cache_snapshots, 0);
  EXPECT_EQ(m.prefix_cache_snapshot_slots, (*e)->snapshot_budget().slots);
  // Concurrently, on a warm cache, twice (the second pass hits every prompt
  // end snapshot of the first).
  for (int pass = 0; pass < 2; ++pass) {
    auto conc = run_concurrent(**e, cases);
    for (size_t i = 0; i < cases.size(); ++i)
      expect_same(conc[i], cold[i],
                  "concurrent pass " + std::to_string(pass) + " request " + std::to_string(i));
  }
  EXPECT_EQ(runner->bound().pages().used_pages(), (*e)->metrics().prefix_cache_pages);
}

TEST_P(HybridPrefixCache, PreemptionUnderTinyPoolSameAsWithoutTheCache) {
  // 24 pages; 12 requests of a 5-page shared prefix + 24 tokens + 40
  // generated (9 pages each): sequences are preempted and recomputed.
  std::vector<Case> cases;
  for (int i = 0; i < 12; ++i) cases.push_back({shared_prompt(77, 5, 300 + i, 24), 40});
  std::vector<Engine::Completion> serial;
  {
    auto runner = open_hybrid(GetParam(), 64, 8, 64);
    ASSERT_TRUE(runner);
    auto e = Engine::create(*runner);
    serial = run_serial(**e, cases);
  }
  for (bool cache : {false, true}) {
    auto runner = open_hybrid(GetParam(), 24, 8, 128);
    ASSERT_TRUE(runner);
    EngineOptions eo;
    eo.prefix_cache = cache;
    auto e = Engine::create(*runner, eo);
    ASSERT_TRUE(e.is_ok());
    auto got = run_concurrent(**e, cases);
    for (size_t i = 0; i < cases.size(); ++i)
      expect_same(got[i], serial[i],
                  std::string(cache ? "cache" : "no cache") + " request " + std::to_string(i));
    EngineMetrics m = (*e)->metrics();
    EXPECT_GT(m.preemptions, 0u) << (cache ? "cache" : "no cache");
    if (cache) EXPECT_GT(m.prefix_cache_hits, 0u);
    e->reset();
    EXPECT_EQ(runner->bound().pages().used_pages(), 0);
    EXPECT_EQ(runner->bound().snapshot_slots().num_slots(), 0);  // freed with the engine
  }
}

TEST_P(HybridPrefixCache, SmallPrefillChunksSameAsWithoutTheCache) {
  // --prefill-chunk below the split alignment is rounded up to it (else a
  // chunk could never end where a resumed run starts).
  auto runner = open_hybrid(GetParam(), 256, 4, 128);
  ASSERT_TRUE(runner);
  std::vector<Case> cases;
  for (int i = 0; i < 4; ++i) cases.push_back({shared_prompt(5, 12, 900 + i, 30), 4});
  EngineOptions eo;
  eo.prefill_chunk = 48;
  std::vector<Engine::Completion> cold;
  {
    auto e = Engine::create(*runner, eo);
    cold = run_serial(**e, cases);
  }
  eo.prefix_cache = true;
  eo.snapshot_interval_pages = 4;
  auto e = Engine::create(*runner, eo);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ((*e)->snapshot_budget().interval_pages, 4);
  auto warm = run_serial(**e, cases);
  for (size_t i = 0; i < cases.size(); ++i)
    expect_same(warm[i], cold[i], "request " + std::to_string(i));
  // The first prompt snapshotted every 4 pages and its end (128, 192):
  // the others resume at 192, the last full-page split of the 12 pages.
  for (size_t i = 1; i < cases.size(); ++i) EXPECT_EQ(warm[i].cached_tokens, 192) << i;
}

INSTANTIATE_TEST_SUITE_P(Models, HybridPrefixCache,
                         ::testing::Values("qwen3_5", "qwen3_5_moe", "qwen3_next"));

TEST(SnapshotBudget, BoundedFractionOfThePool) {
  // 1000 pages of 8 KiB, 16 KiB of state: 1/4 of the pool is 125 slots; an
  // interval of 8 pages (64 KiB of KV per 16 KiB snapshot), a multiple of 4.
  SnapshotBudget b = snapshot_budget(0.25, 0, 4, 1000, 8192, 16384);
  EXPECT_EQ(b.slots, 125);
  EXPECT_EQ(b.interval_pages, 8);
  EXPECT_EQ(b.bytes, 125 * 16384);
  EXPECT_LE(b.bytes, 1000 * 8192 / 4);
  b = snapshot_budget(0.25, 5, 4, 1000, 8192, 16384);
  EXPECT_EQ(b.interval_pages, 8);  // rounded up to the alignment
  b = snapshot_budget(0.01, 0, 4, 4, 8192, 1 << 20);
  EXPECT_EQ(b.slots, 1);  // at least one
  EXPECT_EQ(snapshot_budget(0.25, 0, 4, 1000, 8192, 0).slots, 0);  // no recurrent state
}

TEST(PrefixCacheSnapshots, EvictedWithTheirPageAndLeastRecentlyUsed) {
  PagePool pool;
  pool.init(8, 4);
  StateSlots snaps;
  snaps.init(2);
  PrefixCache cache(pool, &snaps);
  std::vector<uint32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<int32_t> pages;
  ASSERT_TRUE(pool.allocate(3, &pages).is_ok());
  uint64_t h[3];
  uint64_t parent = PrefixCache::kRootHash;
  for (int i = 0; i < 3; ++i) {
    auto t = std::span<const uint32_t>(toks).subspan(4 * i, 4);
    h[i] = PrefixCache::page_hash(parent, t);
    cache.insert(h[i], parent, t, pages[i]);
    parent = h[i];
  }
  int32_t a = cache.take_snapshot_slot();
  ASSERT_GE(a, 0);
  EXPECT_TRUE(cache.insert_snapshot(h[0], a));
  EXPECT_FALSE(cache.insert_snapshot(h[0], cache.take_snapshot_slot()));  // one per prefix
  EXPECT_EQ(snaps.free_slots(), 1);
  int32_t b = cache.take_snapshot_slot();
  EXPECT_TRUE(cache.insert_snapshot(h[2], b));
  EXPECT_EQ(cache.snapshots(), 2);
  EXPECT_EQ(cache.find_snapshot(h[1]), -1);
  EXPECT_EQ(cache.find_snapshot(h[0]), a);  // now h[2]'s is the least recently used
  int32_t c = cache.take_snapshot_slot();
  EXPECT_EQ(c, b);
  EXPECT_FALSE(cache.has_snapshot(h[2]));
  EXPECT_TRUE(cache.insert_snapshot(h[1], c));
  // The sequence lets go of its pages: the cache evicts the deepest first,
  // and a page's snapshot goes with it.
  pool.release_all(pages);
  EXPECT_EQ(cache.evictable(), 3);
  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_TRUE(cache.has_snapshot(h[0]));
  EXPECT_TRUE(cache.has_snapshot(h[1]));
  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_FALSE(cache.has_snapshot(h[1]));
  EXPECT_TRUE(cache.has_snapshot(h[0]));
  EXPECT_EQ(snaps.free_slots(), 1);
  cache.clear();
  EXPECT_EQ(snaps.free_slots(), 2);
  EXPECT_EQ(pool.free_pages(), 8);
}

}  // namespace
}  // namespace ferrite
