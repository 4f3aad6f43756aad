#include "engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <thread>

namespace ferrite {

using Clock = std::chrono::steady_clock;

void Step::clear() {
  batch.token_ids.clear();
  batch.sequences.clear();
  sampling.params.clear();
  sampling.history.clear();
  sampling.generated.clear();
  sampling.step_index.clear();
  sampling.logprobs.clear();
  sampling.allowed = {};
  seqs.clear();
  top_n = -1;
  constrained = false;
  prompt_tokens = 0;
  drawn = 0;
}

struct Scheduler::Seq {
  uint64_t id = 0;
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
  int32_t step_tokens = 0;  // tokens of it in the scheduled step
  Clock::time_point arrival;
  Clock::time_point last_token;
  RequestTimes times;  // stage times, handed to the stream at the finish
};

Scheduler::Scheduler(StepExecutor& executor, EngineOptions options)
    : executor_(executor), options_(options) {}

Scheduler::~Scheduler() {
  cancel_all();
  // The cache is empty: the snapshot memory goes back too.
  if (snapshot_budget_.slots > 0) (void)executor_.reserve_snapshots(0);
}

Result<std::unique_ptr<Scheduler>> Scheduler::create(StepExecutor& ex, EngineOptions options) {
  if (options.max_waiting < 1) return invalid_argument("max_waiting must be >= 1");
  if (!(options.snapshot_memory_fraction > 0) || options.snapshot_memory_fraction > 1)
    return invalid_argument("the snapshot memory fraction must be in (0, 1]");
  if (options.snapshot_interval_pages < 0)
    return invalid_argument("the snapshot interval must be >= 0 pages");
  auto s = std::unique_ptr<Scheduler>(new Scheduler(ex, options));
  const int32_t ps = ex.pages().page_size();
  if (ex.has_recurrent_state()) s->align_ = std::lcm<int64_t>(kRecurrentSplitAlign, ps);
  if (options.prefix_cache && ex.has_kv()) {
    if (ex.has_recurrent_state()) {
      s->snapshot_budget_ = ferrite::snapshot_budget(
          options.snapshot_memory_fraction, options.snapshot_interval_pages,
          static_cast<int32_t>(s->align_ / ps), ex.pages().num_pages(), ex.kv_bytes_per_page(),
          ex.state_bytes_per_slot());
      FERRITE_RETURN_IF_ERROR(ex.reserve_snapshots(s->snapshot_budget_.slots));
      s->cache_ = std::make_unique<PrefixCache>(ex.pages(), &ex.snapshot_slots());
    } else {
      s->cache_ = std::make_unique<PrefixCache>(ex.pages());
    }
  }
  s->metrics_.kv_pages_total = ex.pages().num_pages();
  return s;
}

Status Scheduler::validate(const EngineRequest& r) const {
  const int64_t vocab = executor_.vocab_size();
  const int64_t ctx = executor_.limits().max_context;
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
  PagePool& pool = executor_.pages();
  if (executor_.has_kv() &&
      pool.pages_for(static_cast<int64_t>(r.prompt.size()) + 1) > pool.num_pages())
    return invalid_argument(
        fmt::format("the prompt of {} tokens does not fit in the KV cache", r.prompt.size()));
  if (r.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (r.logprobs > 20) return invalid_argument("at most 20 top logprobs");
  return Status::ok();
}

void Scheduler::add(EngineRequest request, std::shared_ptr<RequestStream> stream,
                    Clock::time_point arrival) {
  auto seq = std::make_unique<Seq>();
  seq->id = stream->id();
  seq->stream = std::move(stream);
  // Sized once for the whole generation: the step loop does not allocate.
  const int64_t positions = std::min<int64_t>(
      static_cast<int64_t>(request.prompt.size()) + request.max_tokens, executor_.limits().max_context);
  seq->tokens.reserve(static_cast<size_t>(positions));
  seq->tokens = request.prompt;
  seq->pages.reserve(static_cast<size_t>(executor_.pages().pages_for(positions)));
  seq->hashes.reserve(seq->pages.capacity());
  seq->prompt_len = request.prompt.size();
  seq->req = std::move(request);
  seq->arrival = seq->times.arrival = arrival;
  waiting_.push_back(std::move(seq));
  ++waiting_count_;
}

void Scheduler::count_submitted(bool queued) {
  std::lock_guard<std::mutex> m(metrics_mu_);
  ++(queued ? metrics_.requests_submitted : metrics_.requests_rejected);
}

EngineMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  return metrics_;
}

void Scheduler::cancel_all() {
  for (auto& s : running_) finish(*s, EngineFinish::kCancelled);
  for (auto& s : waiting_) finish(*s, EngineFinish::kCancelled);
  running_.clear();
  waiting_.clear();
  waiting_count_ = 0;
  in_step_.clear();
  if (cache_) cache_->clear();
  update_gauges();
}

void Scheduler::release(Seq& s) {
  executor_.pages().release_all(s.pages);
  s.pages.clear();
  s.hashes.clear();
  s.snapshot_at.clear();
  if (s.slot >= 0) executor_.slots().release(s.slot);
  s.slot = -1;
  s.computed = 0;
}

void Scheduler::finish(Seq& s, EngineFinish f, Status error) {
  release(s);
  s.done = true;
  {
    // The gauge is current before the client hears of the finish.
    std::lock_guard<std::mutex> lock(metrics_mu_);
    metrics_.kv_pages_used = executor_.pages().used_pages();
  }
  s.times.finished = Clock::now();
  s.times.generated = s.generated;
  s.stream->finish(f, std::move(error), s.times);
  std::lock_guard<std::mutex> lock(metrics_mu_);
  ++metrics_.requests_finished[static_cast<int>(f)];
  metrics_.observe_finished(s.times);
}

void Scheduler::preempt(std::unique_ptr<Seq> s) {
  release(*s);
  waiting_.push_front(std::move(s));
  ++waiting_count_;
  std::lock_guard<std::mutex> lock(metrics_mu_);
  ++metrics_.preemptions;
}

// Takes pages so that s covers `positions` positions; false when the pool
// (after evicting cached-only pages) cannot.
bool Scheduler::ensure_pages(Seq& s, int64_t positions) {
  if (!executor_.has_kv()) return true;
  PagePool& pool = executor_.pages();
  int32_t need = pool.pages_for(positions) - static_cast<int32_t>(s.pages.size());
  if (need <= 0) return true;
  if (pool.free_pages() < need && cache_) cache_->evict(need - pool.free_pages());
  if (pool.free_pages() < need) return false;
  return pool.allocate(need, &s.pages).is_ok();
}

void Scheduler::update_gauges() {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  metrics_.running = static_cast<int32_t>(running_.size());
  metrics_.waiting = static_cast<int32_t>(waiting_.size());
  metrics_.kv_pages_used = executor_.pages().used_pages();
  metrics_.prefix_cache_pages = cache_ ? cache_->size() : 0;
  metrics_.prefix_cache_snapshots = cache_ ? cache_->snapshots() : 0;
  metrics_.prefix_cache_snapshot_slots = executor_.snapshot_slots().num_slots();
}

bool Scheduler::valid_split(int64_t position, int64_t prompt_len) const {
  return position > 0 && position % align_ == 0 && position + kRecurrentMinSpan <= prompt_len;
}

// Tokens of s to compute in this step under `budget` and the chunk size;
// 0: none now (a recurrent prompt whose next split point the budget cannot
// reach waits for a step with more room, unless it is alone in the step).
int32_t Scheduler::plan_chunk(const Seq& s, int64_t budget, int64_t chunk, bool alone) const {
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
int32_t Scheduler::resume_from_snapshot(Seq& s, int32_t matched) {
  const int32_t ps = executor_.pages().page_size();
  const int64_t p = static_cast<int64_t>(s.prompt_len);
  int32_t keep = matched;
  for (; keep > 0; --keep) {
    const int64_t a = static_cast<int64_t>(keep) * ps;
    // A resumed run must split where a cold one can: a valid split of the
    // prompt, or the prompt's end when generated tokens follow (a recompute).
    const bool usable = a % align_ == 0 && (valid_split(a, p) || (a == p && s.tokens.size() > s.prompt_len));
    if (usable && cache_->has_snapshot(s.hashes[keep - 1])) break;
  }
  for (int32_t i = keep; i < matched; ++i) executor_.pages().release(s.pages[i]);
  s.pages.resize(keep);
  s.hashes.resize(keep);
  return keep;
}

// Where s (resumed at s.computed) snapshots its state: interval positions,
// the end of its prompt, and where it leaves the cached run of kv_matched
// positions. Each is a valid split of the prompt or the prompt's end.
std::vector<int64_t> Scheduler::snapshot_positions(const Seq& s, int64_t kv_matched) const {
  const int64_t p = static_cast<int64_t>(s.prompt_len);
  const int64_t from = static_cast<int64_t>(s.computed);
  std::vector<int64_t> at;
  auto add = [&](int64_t a) {
    if (a > from && a <= p && a % align_ == 0 && (a == p || valid_split(a, p))) at.push_back(a);
  };
  const int64_t every =
      static_cast<int64_t>(snapshot_budget_.interval_pages) * executor_.pages().page_size();
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
Status Scheduler::take_snapshot(Seq& s) {
  const int64_t c = static_cast<int64_t>(s.computed);
  while (!s.snapshot_at.empty() && s.snapshot_at.front() < c)
    s.snapshot_at.erase(s.snapshot_at.begin());  // passed by an unaligned chunk
  if (s.snapshot_at.empty() || s.snapshot_at.front() != c) return Status::ok();
  s.snapshot_at.erase(s.snapshot_at.begin());
  const int32_t ps = executor_.pages().page_size();
  const uint64_t h = s.hashes[static_cast<size_t>(c / ps) - 1];
  if (cache_->find_snapshot(h) >= 0) return Status::ok();  // marked used
  const int32_t snap = cache_->take_snapshot_slot();
  if (snap < 0) return Status::ok();
  Status st = executor_.save_snapshot(s.slot, snap);
  if (!st.is_ok()) {
    executor_.snapshot_slots().release(snap);
    return st;
  }
  cache_->insert_snapshot(h, snap);
  return Status::ok();
}

bool Scheduler::schedule(Step* step) {
  step->clear();
  in_step_.clear();
  const StepLimits& limits = executor_.limits();
  const int32_t ps = executor_.pages().page_size();

  // Cancellations, and constraints terminated before their first token
  // (nothing may be drawn: "stop" at once).
  auto drop = [&](const std::unique_ptr<Seq>& s) -> bool {
    if (s->stream->cancel_requested()) {
      finish(*s, EngineFinish::kCancelled);
      return true;
    }
    if (s->req.constraint && s->generated == 0 && s->req.constraint->is_terminated()) {
      finish(*s, EngineFinish::kStop);
      return true;
    }
    return false;
  };
  std::erase_if(running_, drop);
  for (size_t i = 0; i < waiting_.size();) {
    if (drop(waiting_[i])) {
      waiting_.erase(waiting_.begin() + i);
      --waiting_count_;
    } else {
      ++i;
    }
  }
  if (idle()) {
    update_gauges();
    return false;
  }

  int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : limits.max_tokens;
  // Recurrent models: a chunk size off the split alignment could never end
  // a chunk where a cold run does.
  if (align_ > 0) chunk = (chunk + align_ - 1) / align_ * align_;
  int64_t budget = limits.max_tokens;

  // prefill_first: decode waits while a prompt can make progress.
  bool hold_decode = false;
  if (options_.prefill_first) {
    hold_decode = !waiting_.empty() &&
                  static_cast<int64_t>(running_.size()) < limits.max_sequences;
    for (const auto& s : running_) hold_decode = hold_decode || s->computed < s->prompt_len;
  }

  // 1. Running sequences, oldest first; preempt the newest when pages run out.
  auto schedule_running = [&] {
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Seq& s = *running_[i];
      if (hold_decode && s.computed >= s.prompt_len) {
        ++i;
        continue;
      }
      int32_t n = plan_chunk(s, budget, chunk, in_step_.empty());
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
        if (in_step_.empty()) {
          // Alone and still no room: the pool cannot hold this sequence.
          finish(s, EngineFinish::kLength);
        } else {
          preempt(std::move(running_[i]));
        }
        running_.erase(running_.begin() + i);
        continue;
      }
      s.step_tokens = n;
      in_step_.push_back(&s);
      budget -= n;
      ++i;
    }
  };
  schedule_running();

  // 2. Admission, FIFO.
  StateSlots& slots = executor_.slots();
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < limits.max_sequences) {
    Seq& s = *waiting_.front();
    if (executor_.has_recurrent_state() && slots.free_slots() == 0) break;
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
    int32_t n = plan_chunk(s, budget, chunk, in_step_.empty());
    if (n == 0 || !ensure_pages(s, static_cast<int64_t>(s.computed) + n)) {
      release(s);
      break;
    }
    if (executor_.has_recurrent_state()) {
      auto slot = slots.allocate();
      Status st = !slot.is_ok()    ? slot.status()
                  : snapshot >= 0 ? executor_.restore_snapshot(snapshot, *slot)
                                  : executor_.reset_state_slot(*slot);
      if (slot.is_ok()) s.slot = *slot;
      if (!st.is_ok()) {
        auto seq = std::move(waiting_.front());
        waiting_.pop_front();
        --waiting_count_;
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
      s.times.scheduled = Clock::now();
      s.stream->cached_tokens_ = matched * ps;
      std::lock_guard<std::mutex> lock(metrics_mu_);
      metrics_.prompt_tokens += s.prompt_len;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    --waiting_count_;
    s.step_tokens = n;
    in_step_.push_back(&s);
    budget -= n;
  }

  if (in_step_.empty() && hold_decode) {  // the prompts cannot move: decode after all
    hold_decode = false;
    schedule_running();
  }
  if (in_step_.empty()) {  // not expected: an empty engine always admits its queue head
    update_gauges();
    return false;
  }
  const int64_t vocab = executor_.vocab_size();
  for (Seq* s : in_step_) add_to_step(step, *s, s->step_tokens);
  step->top_n = static_cast<int32_t>(std::min<int64_t>(step->top_n, vocab));
  return true;
}

void Scheduler::add_to_step(Step* step, Seq& s, int32_t n) {
  SequenceSlice slice;
  slice.token_begin = step->batch.num_tokens();
  slice.token_count = n;
  slice.position_start = static_cast<int32_t>(s.computed);
  slice.block_table = s.pages;
  slice.state_slot = s.slot;
  step->batch.token_ids.insert(step->batch.token_ids.end(), s.tokens.begin() + s.computed,
                               s.tokens.begin() + s.computed + n);
  step->batch.sequences.push_back(slice);
  SamplingBatch& sb = step->sampling;
  sb.params.push_back(s.req.sampling);
  sb.history.push_back(s.tokens);
  sb.generated.push_back(std::span<const uint32_t>(s.tokens).subspan(s.prompt_len));
  sb.step_index.push_back(static_cast<uint64_t>(s.generated));
  StepSequence q;
  q.id = s.id;
  q.draws = s.computed + n == s.tokens.size();
  q.prompt = s.computed < s.prompt_len;
  if (q.draws) {
    q.logprobs = s.req.logprobs;
    q.constraint = s.req.constraint.get();
    step->top_n = std::max(step->top_n, q.logprobs);
    step->constrained = step->constrained || q.constraint;
    ++step->drawn;
  }
  sb.logprobs.push_back(q.logprobs);
  step->prompt_tokens +=
      std::max<int64_t>(0, std::min<int64_t>(s.computed + n, s.prompt_len) - s.computed);
  step->seqs.push_back(q);
}

void Scheduler::update(const Step& step, const StepResult& result) {
  const int32_t ps = executor_.pages().page_size();
  const int64_t ctx = executor_.limits().max_context;
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    ++metrics_.steps;
    metrics_.step_seconds += result.seconds;
  }
  if (!result.status.is_ok()) {
    // A failed step fails the sequences in it; the engine keeps serving.
    for (Seq* s : in_step_) finish(*s, EngineFinish::kError, result.status);
    std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
    in_step_.clear();
    update_gauges();
    return;
  }
  uint64_t new_tokens = 0;
  const Clock::time_point now = Clock::now();
  for (size_t k = 0; k < in_step_.size(); ++k) {
    Seq& s = *in_step_[k];
    s.computed += s.step_tokens;
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
    if (!step.seqs[k].draws) continue;  // mid-prompt chunk
    TokenOutput out;
    out.token = result.tokens[k];
    if (s.req.logprobs >= 0) {
      out.logprob = result.logprobs[k];
      const int32_t top_n = step.top_n;
      const int32_t topk = std::min(s.req.logprobs, top_n);
      out.top.reserve(static_cast<size_t>(std::max(topk, 0)));
      for (int32_t j = 0; j < topk; ++j)
        out.top.push_back({result.top_ids[k * top_n + j], result.top_logprobs[k * top_n + j]});
    }
    const uint32_t tok = out.token;
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
    {
      std::lock_guard<std::mutex> lock(metrics_mu_);
      if (s.generated == 1) {
        const double ttft = std::chrono::duration<double>(now - s.arrival).count();
        metrics_.ttft.observe(ttft);
        metrics_.vllm_ttft.observe(ttft);
        s.times.first_token = now;
      } else {
        const double itl = std::chrono::duration<double>(now - s.last_token).count();
        metrics_.itl.observe(itl);
        metrics_.vllm_itl.observe(itl);
      }
    }
    s.last_token = s.times.last_token = now;
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
  }
  // Drop the finished ones (finish() already released them).
  std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
  in_step_.clear();
  update_gauges();
}

StepInfo Scheduler::step() {
  StepInfo info;
  if (!schedule(&step_)) {
    // Not expected with work queued: wait for the pool instead of spinning.
    if (!idle()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return info;
  }
  result_.status = Status::ok();
  executor_.run(step_, &result_);
  info.ran = true;
  info.prompt_tokens = step_.prompt_tokens;
  info.other_tokens = step_.batch.num_tokens() - step_.prompt_tokens;
  info.drawn = step_.drawn;
  for (const StepSequence& q : step_.seqs) info.decode_drawn += q.draws && !q.prompt;
  info.sequences = step_.batch.num_sequences();
  info.seconds = result_.seconds;
  update(step_, result_);
  return info;
}

}  // namespace ferrite
