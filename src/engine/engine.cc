#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ferrite {

using Clock = std::chrono::steady_clock;

std::string_view engine_finish_name(EngineFinish f) {
  switch (f) {
    case EngineFinish::kLength:
      return "length";
    case EngineFinish::kStop:
      return "stop";
    case EngineFinish::kCancelled:
      return "cancelled";
    case EngineFinish::kError:
      return "error";
  }
  return "error";
}

void Histogram::observe(double v) {
  size_t i = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
  ++counts[i];
  sum += v;
  ++count;
}

// ---------------------------------------------------------------------------
// RequestStream

RequestStream::Update RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || (finished_ && !finish_taken_); });
  Update u;
  u.tokens.swap(pending_);
  if (finished_ && !finish_taken_) {
    finish_taken_ = true;
    u.finished = true;
    u.finish = finish_;
    u.error = error_;
  }
  return u;
}

void RequestStream::cancel() {
  if (cancel_.exchange(true)) return;
  Engine* e = engine_;
  if (e) e->wake();
}

void RequestStream::push(TokenOutput t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(t));
  }
  cv_.notify_all();
}

void RequestStream::finish(EngineFinish f, Status error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    finish_ = f;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------------------
// Engine

struct Engine::Seq {
  std::shared_ptr<RequestStream> stream;
  EngineRequest req;
  std::vector<uint32_t> tokens;  // prompt + generated
  size_t prompt_len = 0;
  size_t computed = 0;  // tokens whose KV is in the cache
  int32_t generated = 0;
  std::vector<int32_t> pages;
  std::vector<uint64_t> hashes;  // chain hashes of the leading full pages
  int32_t slot = -1;
  std::vector<int64_t> snapshot_at;  // positions still to snapshot, ascending
  bool admitted_once = false;
  bool done = false;
  Clock::time_point arrival;
  Clock::time_point last_token;
};

Engine::Engine(ModelRunner& runner, EngineOptions options) : runner_(runner), options_(options) {}

Result<std::unique_ptr<Engine>> Engine::create(ModelRunner& runner, EngineOptions options) {
  if (options.max_waiting < 1) return invalid_argument("max_waiting must be >= 1");
  if (!(options.snapshot_memory_fraction > 0) || options.snapshot_memory_fraction > 1)
    return invalid_argument("the snapshot memory fraction must be in (0, 1]");
  if (options.snapshot_interval_pages < 0)
    return invalid_argument("the snapshot interval must be >= 0 pages");
  auto e = std::unique_ptr<Engine>(new Engine(runner, options));
  BoundPlan& plan = runner.bound();
  const int32_t ps = plan.pages().page_size();
  if (plan.has_recurrent_state()) e->align_ = std::lcm<int64_t>(kRecurrentSplitAlign, ps);
  if (options.prefix_cache && plan.has_kv()) {
    if (plan.has_recurrent_state()) {
      e->snapshot_budget_ = ferrite::snapshot_budget(
          options.snapshot_memory_fraction, options.snapshot_interval_pages,
          static_cast<int32_t>(e->align_ / ps), plan.pages().num_pages(),
          plan.kv_bytes_per_page(), plan.state_bytes_per_slot());
      FERRITE_RETURN_IF_ERROR(plan.reserve_snapshots(e->snapshot_budget_.slots));
      e->cache_ = std::make_unique<PrefixCache>(plan.pages(), &plan.snapshot_slots());
    } else {
      e->cache_ = std::make_unique<PrefixCache>(plan.pages());
    }
  }
  e->metrics_.kv_pages_total = plan.pages().num_pages();
  e->thread_ = std::thread([p = e.get()] { p->loop(); });
  return e;
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  inbox_cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    // The loop cleared the cache: the snapshot memory goes back too.
    if (snapshot_budget_.slots > 0) (void)runner_.bound().reserve_snapshots(0);
  }
}

int64_t Engine::max_context() const { return runner_.bound().plan().limits.max_context; }

void Engine::wake() {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    wake_pending_ = true;
  }
  inbox_cv_.notify_all();
}

Result<std::shared_ptr<RequestStream>> Engine::submit(EngineRequest r) {
  BoundPlan& plan = runner_.bound();
  const int64_t vocab = plan.program().vocab_size;
  const int64_t ctx = max_context();
  if (r.prompt.empty()) return invalid_argument("the prompt is empty");
  for (uint32_t id : r.prompt)
    if (id >= vocab)
      return invalid_argument(
          fmt::format("token id {} is outside the vocabulary of {}", id, vocab));
  if (static_cast<int64_t>(r.prompt.size()) >= ctx)
    return invalid_argument(fmt::format(
        "the prompt has {} tokens; this model's context is {} tokens, with at least one to "
        "generate",
        r.prompt.size(), ctx));
  if (plan.has_kv() &&
      plan.pages().pages_for(static_cast<int64_t>(r.prompt.size()) + 1) > plan.pages().num_pages())
    return invalid_argument(
        fmt::format("the prompt of {} tokens does not fit in the KV cache", r.prompt.size()));
  if (r.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (r.logprobs > 20) return invalid_argument("at most 20 top logprobs");
  auto seq = std::make_unique<Seq>();
  auto stream = std::make_shared<RequestStream>();
  stream->engine_ = this;
  stream->prompt_tokens_ = static_cast<int32_t>(r.prompt.size());
  seq->stream = stream;
  seq->tokens = r.prompt;
  seq->prompt_len = r.prompt.size();
  seq->req = std::move(r);
  seq->arrival = Clock::now();
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (stop_) return unavailable("the engine is shutting down");
    if (queued_.load() >= options_.max_waiting) {
      std::lock_guard<std::mutex> m(metrics_mu_);
      ++metrics_.requests_rejected;
      return resource_exhausted(
          fmt::format("the request queue is full ({} waiting)", options_.max_waiting));
    }
    stream->id_ = next_id_++;
    ++queued_;
    inbox_.push_back(std::move(seq));
  }
  {
    std::lock_guard<std::mutex> m(metrics_mu_);
    ++metrics_.requests_submitted;
  }
  inbox_cv_.notify_all();
  return stream;
}

Result<Engine::Completion> Engine::complete(EngineRequest request) {
  FERRITE_ASSIGN_OR_RETURN(auto stream, submit(std::move(request)));
  Completion c;
  for (;;) {
    RequestStream::Update u = stream->next(std::chrono::milliseconds(1000));
    for (auto& t : u.tokens) c.tokens.push_back(std::move(t));
    if (u.finished) {
      if (u.finish == EngineFinish::kError) return u.error;
      c.finish = u.finish;
      break;
    }
  }
  c.prompt_tokens = stream->prompt_tokens();
  c.cached_tokens = stream->cached_tokens();
  return c;
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  return metrics_;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(inbox_mu_);
      if (running_.empty() && waiting_.empty())
        inbox_cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || wake_pending_; });
      wake_pending_ = false;
      if (stop_) break;
      for (auto& s : inbox_) waiting_.push_back(std::move(s));
      inbox_.clear();
    }
    step();
  }
  // Shutdown: every unfinished request ends as cancelled.
  std::vector<std::unique_ptr<Seq>> all;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    for (auto& s : inbox_) all.push_back(std::move(s));
    inbox_.clear();
  }
  for (auto& s : running_) all.push_back(std::move(s));
  for (auto& s : waiting_) all.push_back(std::move(s));
  running_.clear();
  waiting_.clear();
  for (auto& s : all) finish(*s, EngineFinish::kCancelled);
  if (cache_) cache_->clear();
  update_gauges();
}

void Engine::release(Seq& s) {
  BoundPlan& plan = runner_.bound();
  plan.pages().release_all(s.pages);
  s.pages.clear();
  s.hashes.clear();
  s.snapshot_at.clear();
  if (s.slot >= 0) plan.slots().release(s.slot);
  s.slot = -1;
  s.computed = 0;
}

void Engine::finish(Seq& s, EngineFinish f, Status error) {
  release(s);
  s.done = true;
  {
    // The gauge is current before the client hears of the finish.
    std::lock_guard<std::mutex> lock(metrics_mu_);
    metrics_.kv_pages_used = runner_.bound().pages().used_pages();
  }
  s.stream->finish(f, std::move(error));
  std::lock_guard<std::mutex> lock(metrics_mu_);
  ++metrics_.requests_finished[static_cast<int>(f)];
  metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - s.arrival).count());
}

void Engine::preempt(std::unique_ptr<Seq> s) {
  release(*s);
  waiting_.push_front(std::move(s));
  ++queued_;
  std::lock_guard<std::mutex> lock(metrics_mu_);
  ++metrics_.preemptions;
}

int32_t Engine::free_pages_with_eviction() const {
  const PagePool& pool = runner_.bound().pages();
  return pool.free_pages() + (cache_ ? cache_->evictable() : 0);
}

// Takes pages so that s covers `positions` positions; false when the pool
// (after evicting cached-only pages) cannot.
bool Engine::ensure_pages(Seq& s, int64_t positions) {
  BoundPlan& plan = runner_.bound();
  if (!plan.has_kv()) return true;
  PagePool& pool = plan.pages();
  int32_t need = pool.pages_for(positions) - static_cast<int32_t>(s.pages.size());
  if (need <= 0) return true;
  if (pool.free_pages() < need && cache_) cache_->evict(need - pool.free_pages());
  if (pool.free_pages() < need) return false;
  return pool.allocate(need, &s.pages).is_ok();
}

void Engine::update_gauges() {
  BoundPlan& plan = runner_.bound();
  std::lock_guard<std::mutex> lock(metrics_mu_);
  metrics_.running = static_cast<int32_t>(running_.size());
  metrics_.waiting = static_cast<int32_t>(waiting_.size());
  metrics_.kv_pages_used = plan.pages().used_pages();
  metrics_.prefix_cache_pages = cache_ ? cache_->size() : 0;
  metrics_.prefix_cache_snapshots = cache_ ? cache_->snapshots() : 0;
  metrics_.prefix_cache_snapshot_slots = plan.snapshot_slots().num_slots();
}

bool Engine::valid_split(int64_t position, int64_t prompt_len) const {
  return position > 0 && position % align_ == 0 && position + kRecurrentMinSpan <= prompt_len;
}

// Tokens of s to compute in this step under `budget` and the chunk size;
// 0: none now (a recurrent prompt whose next split point the budget cannot
// reach waits for a step with more room, unless it is alone in the step).
int32_t Engine::plan_chunk(const Seq& s, int64_t budget, int64_t chunk, bool alone) const {
  const int64_t c = static_cast<int64_t>(s.computed);
  const int64_t left = static_cast<int64_t>(s.tokens.size()) - c;
  const int64_t n0 = std::min<int64_t>({left, budget, chunk});
  if (align_ == 0) return static_cast<int32_t>(n0);
  const int64_t p = static_cast<int64_t>(s.prompt_len);
  // Decode, or generated tokens replayed after a preemption: one per step.
  if (c >= p) return static_cast<int32_t>(std::min<int64_t>(n0, 1));
  const int64_t n = std::min(n0, p - c);
  for (int64_t a : s.snapshot_at) {  // each one a valid split (or the prompt's end)
    if (a <= c) continue;
    if (a < c + n) return static_cast<int32_t>(a - c);
    break;
  }
  if (c + n == p) return static_cast<int32_t>(n);  // the prompt's last span
  int64_t end = (c + n) / align_ * align_;
  while (end > c && !valid_split(end, p)) end -= align_;
  if (end > c) return static_cast<int32_t>(end - c);
  // No split point within reach. Waiting helps only when the budget (not the
  // chunk size or the prompt) is what falls short.
  const bool budget_short = budget < std::min(chunk, p - c);
  return budget_short && !alone ? 0 : static_cast<int32_t>(n);
}

// Keeps the longest run of the `matched` cached pages of s that ends at a
// state snapshot it can resume from and releases the others (they are
// recomputed into pages of its own); returns the pages kept.
int32_t Engine::resume_from_snapshot(Seq& s, int32_t matched) {
  const int32_t ps = runner_.bound().pages().page_size();
  const int64_t p = static_cast<int64_t>(s.prompt_len);
  int32_t keep = matched;
  for (; keep > 0; --keep) {
    const int64_t a = static_cast<int64_t>(keep) * ps;
    // A resumed run must split where a cold one can: a valid split of the
    // prompt, or the prompt's end when generated tokens follow (a recompute).
    const bool usable = a % align_ == 0 && (valid_split(a, p) || (a == p && s.tokens.size() > s.prompt_len));
    if (usable && cache_->has_snapshot(s.hashes[keep - 1])) break;
  }
  for (int32_t i = keep; i < matched; ++i) runner_.bound().pages().release(s.pages[i]);
  s.pages.resize(keep);
  s.hashes.resize(keep);
  return keep;
}

// Where s (resumed at s.computed) snapshots its state: interval positions,
// the end of its prompt, and where it leaves the cached run of kv_matched
// positions. Each is a valid split of the prompt or the prompt's end.
std::vector<int64_t> Engine::snapshot_positions(const Seq& s, int64_t kv_matched) const {
  const int64_t p = static_cast<int64_t>(s.prompt_len);
  const int64_t from = static_cast<int64_t>(s.computed);
  std::vector<int64_t> at;
  auto add = [&](int64_t a) {
    if (a > from && a <= p && a % align_ == 0 && (a == p || valid_split(a, p))) at.push_back(a);
  };
  const int64_t every =
      static_cast<int64_t>(snapshot_budget_.interval_pages) * runner_.bound().pages().page_size();
  if (every > 0)
    for (int64_t a = every; a <= p; a += every) add(a);
  int64_t last = p / align_ * align_;
  while (last > 0 && last != p && !valid_split(last, p)) last -= align_;
  add(last);
  add(kv_matched / align_ * align_);
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  return at;
}

// After a step: s reached its next snapshot position; copy its slot into a
// snapshot slot keyed by the page hash of that prefix (unless one exists).
Status Engine::take_snapshot(Seq& s) {
  const int64_t c = static_cast<int64_t>(s.computed);
  while (!s.snapshot_at.empty() && s.snapshot_at.front() < c)
    s.snapshot_at.erase(s.snapshot_at.begin());  // passed by an unaligned chunk
  if (s.snapshot_at.empty() || s.snapshot_at.front() != c) return Status::ok();
  s.snapshot_at.erase(s.snapshot_at.begin());
  const int32_t ps = runner_.bound().pages().page_size();
  const uint64_t h = s.hashes[static_cast<size_t>(c / ps) - 1];
  if (cache_->find_snapshot(h) >= 0) return Status::ok();  // marked used
  const int32_t snap = cache_->take_snapshot_slot();
  if (snap < 0) return Status::ok();
  Status st = runner_.bound().save_snapshot(s.slot, snap);
  if (!st.is_ok()) {
    runner_.bound().snapshot_slots().release(snap);
    return st;
  }
  cache_->insert_snapshot(h, snap);
  return Status::ok();
}

bool Engine::step() {
  BoundPlan& plan = runner_.bound();
  const StepLimits& limits = plan.plan().limits;
  const int64_t ctx = limits.max_context;
  const int32_t ps = plan.pages().page_size();

  // Cancellations.
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->stream->cancel_requested()) {
      finish(*running_[i], EngineFinish::kCancelled);
      running_.erase(running_.begin() + i);
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < waiting_.size();) {
    if (waiting_[i]->stream->cancel_requested()) {
      finish(*waiting_[i], EngineFinish::kCancelled);
      waiting_.erase(waiting_.begin() + i);
      --queued_;
    } else {
      ++i;
    }
  }
  // A constraint terminated before its first token: nothing may be drawn.
  auto terminated = [](const std::unique_ptr<Seq>& s) {
    return s->req.constraint && s->generated == 0 && s->req.constraint->is_terminated();
  };
  for (size_t i = 0; i < waiting_.size();) {
    if (terminated(waiting_[i])) {
      finish(*waiting_[i], EngineFinish::kStop);
      waiting_.erase(waiting_.begin() + i);
      --queued_;
    } else {
      ++i;
    }
  }
  if (running_.empty() && waiting_.empty()) {
    update_gauges();
    return false;
  }

  int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : limits.max_tokens;
  // Recurrent models: a chunk size off the split alignment could never end
  // a chunk where a cold run does.
  if (align_ > 0) chunk = (chunk + align_ - 1) / align_ * align_;
  int64_t budget = limits.max_tokens;
  std::vector<std::pair<Seq*, int32_t>> scheduled;

  // 1. Running sequences, oldest first; preempt the newest when pages run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Seq& s = *running_[i];
    int32_t n = plan_chunk(s, budget, chunk, scheduled.empty());
    if (n == 0) {
      ++i;
      continue;
    }
    bool ok = ensure_pages(s, static_cast<int64_t>(s.computed) + n);
    while (!ok && running_.size() > i + 1) {
      auto victim = std::move(running_.back());
      running_.pop_back();
      preempt(std::move(victim));
      ok = ensure_pages(s, static_cast<int64_t>(s.computed) + n);
    }
    if (!ok) {
      if (scheduled.empty()) {
        // Alone and still no room: the pool cannot hold this sequence.
        finish(s, EngineFinish::kLength);
      } else {
        preempt(std::move(running_[i]));
      }
      running_.erase(running_.begin() + i);
      continue;
    }
    scheduled.emplace_back(&s, n);
    budget -= n;
    ++i;
  }

  // 2. Admission, FIFO.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < limits.max_sequences) {
    Seq& s = *waiting_.front();
    if (plan.has_recurrent_state() && plan.slots().free_slots() == 0) break;
    bool first = !s.admitted_once;
    int32_t matched = 0;
    int32_t snapshot = -1;
    if (cache_) {
      int32_t max_pages = static_cast<int32_t>((s.tokens.size() - 1) / ps);
      matched = cache_->match(s.tokens, max_pages, &s.pages, &s.hashes);
      const int64_t kv_matched = static_cast<int64_t>(matched) * ps;
      if (align_ > 0) {
        matched = resume_from_snapshot(s, matched);
        if (matched > 0) snapshot = cache_->find_snapshot(s.hashes[matched - 1]);
      }
      s.computed = static_cast<size_t>(matched) * ps;
      if (align_ > 0) s.snapshot_at = snapshot_positions(s, kv_matched);
    }
    int32_t n = plan_chunk(s, budget, chunk, scheduled.empty());
    if (n == 0 || !ensure_pages(s, static_cast<int64_t>(s.computed) + n)) {
      release(s);
      break;
    }
    if (plan.has_recurrent_state()) {
      auto slot = plan.slots().allocate();
      Status st = !slot.is_ok()    ? slot.status()
                  : snapshot >= 0 ? plan.restore_snapshot(snapshot, *slot)
                                  : plan.reset_state_slot(*slot);
      if (slot.is_ok()) s.slot = *slot;
      if (!st.is_ok()) {
        auto seq = std::move(waiting_.front());
        waiting_.pop_front();
        --queued_;
        finish(*seq, EngineFinish::kError, st);
        continue;
      }
    }
    if (cache_) {
      std::lock_guard<std::mutex> lock(metrics_mu_);
      metrics_.prefix_cache_queries += s.tokens.size();
      metrics_.prefix_cache_hits += static_cast<uint64_t>(matched) * ps;
    }
    if (first) {
      s.admitted_once = true;
      s.stream->cached_tokens_ = matched * ps;
      std::lock_guard<std::mutex> lock(metrics_mu_);
      metrics_.prompt_tokens += s.prompt_len;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    --queued_;
    scheduled.emplace_back(running_.back().get(), n);
    budget -= n;
  }

  if (scheduled.empty()) {  // not expected: an empty engine always admits its queue head
    update_gauges();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  }

  // 3. Run the step.
  StepBatch batch;
  SamplingBatch sampling;
  for (auto& [s, n] : scheduled) {
    SequenceSlice slice;
    slice.token_begin = batch.num_tokens();
    slice.token_count = n;
    slice.position_start = static_cast<int32_t>(s->computed);
    slice.block_table = s->pages;
    slice.state_slot = s->slot;
    batch.token_ids.insert(batch.token_ids.end(), s->tokens.begin() + s->computed,
                           s->tokens.begin() + s->computed + n);
    batch.sequences.push_back(slice);
    sampling.params.push_back(s->req.sampling);
    sampling.history.push_back(s->tokens);
    sampling.generated.push_back(std::span<const uint32_t>(s->tokens).subspan(s->prompt_len));
    sampling.step_index.push_back(static_cast<uint64_t>(s->generated));
  }
  auto t0 = Clock::now();
  Status st = plan.forward(batch);
  // Logprobs (of the raw logits) are outputs of the sampler: only the rows
  // that ask for them, only the top entries they ask for.
  int32_t top_n = -1;
  sampling.logprobs.clear();
  for (auto& [s, n] : scheduled) {
    const bool draws = s->computed + n == s->tokens.size();
    sampling.logprobs.push_back(draws ? s->req.logprobs : -1);
    top_n = std::max(top_n, sampling.logprobs.back());
  }
  const int64_t vocab = plan.program().vocab_size;
  top_n = static_cast<int32_t>(std::min<int64_t>(top_n, vocab));
  // Allowed-id bitmaps of the constrained sequences that draw in this step,
  // built while the device runs the forward step (it is asynchronous on
  // CUDA). Steps without a constrained sequence build none.
  if (st.is_ok()) {
    bool constrained = false;
    for (auto& [s, n] : scheduled)
      constrained = constrained || (s->req.constraint && s->computed + n == s->tokens.size());
    if (constrained) {
      const size_t words = static_cast<size_t>((vocab + 31) / 32);
      allowed_.resize(scheduled.size() * words);
      for (size_t k = 0; k < scheduled.size(); ++k) {
        auto [s, n] = scheduled[k];
        std::span<uint32_t> row(allowed_.data() + k * words, words);
        if (s->req.constraint && s->computed + n == s->tokens.size())
          s->req.constraint->fill_mask(row);
        else
          std::fill(row.begin(), row.end(), ~0u);
      }
      sampling.allowed = allowed_;
    }
  }
  std::vector<uint32_t> chosen, top_ids;
  std::vector<float> logprobs, top_lps;
  if (st.is_ok())
    st = plan.choose_tokens(batch, sampling, &chosen, top_n >= 0 ? &logprobs : nullptr,
                            std::max(top_n, 0), &top_ids, &top_lps);
  auto t1 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    ++metrics_.steps;
    metrics_.step_seconds += std::chrono::duration<double>(t1 - t0).count();
  }
  if (!st.is_ok()) {
    // A failed step fails the sequences in it; the engine keeps serving.
    for (auto& [s, n] : scheduled) finish(*s, EngineFinish::kError, st);
    std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
    update_gauges();
    return true;
  }

  // 4. Results.
  uint64_t new_tokens = 0;
  std::vector<double> itls, ttfts;
  for (size_t k = 0; k < scheduled.size(); ++k) {
    Seq& s = *scheduled[k].first;
    s.computed += scheduled[k].second;
    // Offer the newly completed full pages to the prefix cache.
    while (s.hashes.size() < s.computed / ps) {
      size_t idx = s.hashes.size();
      uint64_t parent = idx ? s.hashes.back() : PrefixCache::kRootHash;
      auto toks = std::span<const uint32_t>(s.tokens).subspan(idx * ps, ps);
      uint64_t h = PrefixCache::page_hash(parent, toks);
      if (cache_) cache_->insert(h, parent, toks, s.pages[idx]);
      s.hashes.push_back(h);
    }
    if (cache_ && align_ > 0 && !s.snapshot_at.empty()) {
      Status snap = take_snapshot(s);
      if (!snap.is_ok()) {
        finish(s, EngineFinish::kError, snap);
        continue;
      }
    }
    if (s.computed < s.tokens.size()) continue;  // mid-prompt chunk
    TokenOutput out;
    out.token = chosen[k];
    if (s.req.logprobs >= 0) {
      out.logprob = logprobs[k];
      const int32_t topk = std::min(s.req.logprobs, top_n);
      for (int32_t j = 0; j < topk; ++j)
        out.top.push_back({top_ids[k * top_n + j], top_lps[k * top_n + j]});
    }
    uint32_t tok = out.token;
    const EngineRequest& r = s.req;
    const bool stop_id = std::find(r.stop_ids.begin(), r.stop_ids.end(), tok) != r.stop_ids.end();
    if (r.constraint && !stop_id && !r.constraint->accept(tok)) {
      finish(s, EngineFinish::kError,
             internal_error(fmt::format("the constraint rejected token {} it allowed", tok)));
      continue;
    }
    s.tokens.push_back(tok);
    ++s.generated;
    ++new_tokens;
    auto now = Clock::now();
    if (s.generated == 1) {
      ttfts.push_back(std::chrono::duration<double>(now - s.arrival).count());
    } else {
      itls.push_back(std::chrono::duration<double>(now - s.last_token).count());
    }
    s.last_token = now;
    s.stream->push(std::move(out));
    if (stop_id || (r.constraint && r.constraint->is_terminated())) {
      finish(s, EngineFinish::kStop);
    } else if (s.generated >= r.max_tokens || static_cast<int64_t>(s.tokens.size()) >= ctx) {
      finish(s, EngineFinish::kLength);
    }
  }
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    metrics_.generation_tokens += new_tokens;
    for (double v : ttfts) metrics_.ttft.observe(v);
    for (double v : itls) metrics_.itl.observe(v);
  }
  // Drop the finished ones (finish() already released them).
  std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
  update_gauges();
  return true;
}

}  // namespace ferrite
