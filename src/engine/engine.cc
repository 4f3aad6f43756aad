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

void EngineMetrics::observe_finished(const RequestTimes& t) {
  using Tp = Clock::time_point;
  auto secs = [](Tp a, Tp b) { return std::chrono::duration<double>(b - a).count(); };
  e2e.observe(secs(t.arrival, t.finished));
  vllm_e2e.observe(secs(t.arrival, t.finished));
  if (t.scheduled == Tp{}) return;
  vllm_queue.observe(secs(t.arrival, t.scheduled));
  if (t.first_token == Tp{}) return;
  vllm_prefill.observe(secs(t.scheduled, t.first_token));
  vllm_decode.observe(secs(t.first_token, t.last_token));
  vllm_inference.observe(secs(t.scheduled, t.last_token));
  vllm_request_tpot.observe(
      t.generated > 1 ? secs(t.first_token, t.last_token) / (t.generated - 1) : 0.0);
}

// ---------------------------------------------------------------------------
// RequestStream

RequestTimes RequestStream::times() const {
  std::lock_guard<std::mutex> lock(mu_);
  return times_;
}

RequestStream::Update RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || (finished_ && !finish_taken_); });
  Update u;
  // A copy: pending_ keeps its capacity, so the engine thread's push()
  // allocates nothing once warm.
  u.tokens.assign(std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.end()));
  pending_.clear();
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

void RequestStream::finish(EngineFinish f, Status error, const RequestTimes& times) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    times_ = times;
    finish_ = f;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------------------
// Engine: the thread, the inbox and the streams; the scheduler does the rest.

Engine::Engine(ModelRunner& runner, EngineOptions options) : runner_(runner), options_(options) {}

Result<std::unique_ptr<Engine>> Engine::create(ModelRunner& runner, EngineOptions options) {
  auto e = std::unique_ptr<Engine>(new Engine(runner, options));
  e->executor_ = make_model_executor(runner);
  FERRITE_ASSIGN_OR_RETURN(e->scheduler_, Scheduler::create(*e->executor_, options));
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
  if (thread_.joinable()) thread_.join();
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
  FERRITE_RETURN_IF_ERROR(scheduler_->validate(r));
  auto stream = std::make_shared<RequestStream>();
  stream->engine_ = this;
  stream->prompt_tokens_ = static_cast<int32_t>(r.prompt.size());
  const auto arrival = Clock::now();
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (stop_) return unavailable("the engine is shutting down");
    if (inbox_count_.load() + scheduler_->waiting() >= options_.max_waiting) {
      scheduler_->count_submitted(false);
      return resource_exhausted(
          fmt::format("the request queue is full ({} waiting)", options_.max_waiting));
    }
    stream->id_ = next_id_++;
    ++inbox_count_;
    inbox_.push_back(Pending{std::move(r), stream, arrival});
  }
  scheduler_->count_submitted(true);
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
  EngineMetrics m = scheduler_->metrics();
  return m;
}

void Engine::loop() {
  std::vector<Pending> arrived;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(inbox_mu_);
      if (scheduler_->idle())
        inbox_cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || wake_pending_; });
      wake_pending_ = false;
      if (stop_) break;
      arrived.swap(inbox_);
      // Counted as waiting before they leave the inbox's count.
      for (Pending& p : arrived) scheduler_->add(std::move(p.request), p.stream, p.arrival);
      inbox_count_ -= static_cast<int32_t>(arrived.size());
    }
    arrived.clear();
    scheduler_->step();
  }
  // Shutdown: every unfinished request ends as cancelled.
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    for (Pending& p : inbox_) scheduler_->add(std::move(p.request), p.stream, p.arrival);
    inbox_count_ = 0;
    inbox_.clear();
  }
  scheduler_->cancel_all();
}

}  // namespace ferrite
