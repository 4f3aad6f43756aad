// ferrite perplexity --model DIR --text-file FILE [--ctx-size N] [--stride S] [--json]
//
// Perplexity of a model on a text, as llama.cpp's perplexity tool and the
// transformers sliding-window recipe measure it: the text is tokenized whole
// (the tokenizer file decides about BOS), windows of --ctx-size tokens start
// every --stride tokens, and each token from the second on is scored once, in
// the first window that reaches it, with that window's earlier tokens as its
// context. PPL = exp(mean negative log-likelihood over the scored tokens).
// scripts/train_default_model.py computes the same figure with transformers.
//
// Windows run as sequences of one ModelRunner step batch (up to
// --max-num-seqs at a time, each with its own KV pages): a window's context
// is prefilled in chunks, then its scored tokens are fed one per step, and
// the logits row of each step (the runner's last-token logits) scores the
// next token. No sampling, no generation: a scoring loop over the runner.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/default_model.h"
#include "engine/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace ferrite::cli {

namespace {

struct PerplexityFlags {
  ModelFlags model;
  std::string text_file;
  int64_t ctx = 512;
  int64_t stride = 0;  // 0: ctx / 2
  int64_t max_windows = 0;
  bool json = false;
};

struct Window {
  int64_t begin = 0, end = 0, first = 0;  // tokens [begin, end), scored from `first`
  int64_t computed = 0;                   // window positions already in the KV cache
  std::vector<int32_t> pages;
  int32_t slot = -1;
};

struct PerplexityResult {
  double nll = 0;
  int64_t scored = 0;
  int64_t windows = 0;
  int64_t text_tokens = 0;
};

// The windows of the recipe above (also in scripts/train_default_model.py).
std::vector<Window> make_windows(int64_t n, int64_t ctx, int64_t stride) {
  std::vector<Window> out;
  int64_t prev_end = 0;
  for (int64_t begin = 0;; begin += stride) {
    Window w;
    w.begin = begin;
    w.end = std::min(begin + ctx, n);
    w.first = std::max(prev_end, begin + 1);
    if (w.first < w.end) out.push_back(w);
    prev_end = w.end;
    if (w.end == n) break;
  }
  return out;
}

Result<PerplexityResult> score(ModelRunner& runner, const std::vector<uint32_t>& tokens,
                               std::vector<Window> windows) {
  BoundPlan& plan = runner.bound();
  const StepLimits& limits = plan.plan().limits;
  const int64_t vocab = plan.program().vocab_size;
  for (uint32_t id : tokens)
    if (id >= vocab)
      return invalid_argument(
          fmt::format("token id {} is outside the model's vocabulary of {}", id, vocab));
  PerplexityResult r;
  r.windows = static_cast<int64_t>(windows.size());
  r.text_tokens = static_cast<int64_t>(tokens.size());
  std::deque<Window*> waiting;
  for (Window& w : windows) waiting.push_back(&w);
  std::vector<Window*> active;
  auto release = [&](Window* w) {
    plan.pages().release_all(w->pages);
    w->pages.clear();
    if (w->slot >= 0) plan.slots().release(w->slot);
    w->slot = -1;
  };
  auto release_all = [&] {
    for (Window* w : active) release(w);
  };
  StepBatch batch;
  std::vector<float> logits;
  while (!waiting.empty() || !active.empty()) {
    // Admit windows while sequences, pages and slots last.
    while (!waiting.empty() && static_cast<int64_t>(active.size()) < limits.max_sequences) {
      Window* w = waiting.front();
      if (plan.has_kv()) {
        Status st = plan.pages().allocate(plan.pages().pages_for(w->end - w->begin), &w->pages);
        if (!st.is_ok()) {
          if (active.empty()) {
            release_all();
            return st.with_context("the KV cache cannot hold one window (--kv-cache-gib)");
          }
          break;
        }
      }
      if (plan.has_recurrent_state()) {
        auto slot = plan.slots().allocate();
        if (!slot.is_ok()) {
          release(w);
          if (active.empty()) return slot.status();
          break;
        }
        w->slot = *slot;
        Status st = plan.reset_state_slot(w->slot);
        if (!st.is_ok()) {
          release(w);
          release_all();
          return st;
        }
      }
      active.push_back(w);
      waiting.pop_front();
    }
    // One step: the next context chunk of each window, or its next scored token.
    batch.token_ids.clear();
    batch.sequences.clear();
    std::vector<std::pair<Window*, int32_t>> in_step;
    int64_t budget = limits.max_tokens;
    for (Window* w : active) {
      if (budget <= 0) break;
      const int64_t q0 = w->first - w->begin - 1;  // its logits score the first scored token
      int64_t n = w->computed <= q0 ? std::min(q0 + 1 - w->computed, budget) : 1;
      SequenceSlice s;
      s.token_begin = batch.num_tokens();
      s.token_count = static_cast<int32_t>(n);
      s.position_start = static_cast<int32_t>(w->computed);
      s.block_table = w->pages;
      s.state_slot = w->slot;
      batch.token_ids.insert(batch.token_ids.end(), tokens.begin() + w->begin + w->computed,
                             tokens.begin() + w->begin + w->computed + n);
      batch.sequences.push_back(s);
      in_step.emplace_back(w, static_cast<int32_t>(n));
      budget -= n;
    }
    Status st = plan.forward(batch);
    if (!st.is_ok()) {
      release_all();
      return st;
    }
    TensorView view = plan.logits();
    logits.resize(static_cast<size_t>(view.numel()));
    st = runner.device().copy_to_host(logits.data(), view.data,
                                      static_cast<size_t>(view.nbytes()));
    if (!st.is_ok()) {
      release_all();
      return st;
    }
    for (size_t i = 0; i < in_step.size(); ++i) {
      auto [w, n] = in_step[i];
      const int64_t last = w->computed + n - 1;  // window position of this row's logits
      w->computed += n;
      if (last < w->first - w->begin - 1) continue;  // still in the context
      const float* row = logits.data() + i * vocab;
      double mx = row[0];
      for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const uint32_t target = tokens[w->begin + last + 1];
      const double nll = mx + std::log(sum) - static_cast<double>(row[target]);
      if (!std::isfinite(nll)) {
        release_all();
        return internal_error(fmt::format("non-finite logits at token {}", w->begin + last + 1));
      }
      r.nll += nll;
      r.scored += 1;
    }
    // Finished windows (every position but the last has been fed).
    for (size_t i = 0; i < active.size();) {
      Window* w = active[i];
      if (w->computed >= w->end - w->begin - 1) {
        release(w);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  return r;
}

int run_perplexity(PerplexityFlags f) {
  if (f.model.model.empty()) {
    auto dir = ensure_default_model();
    if (!dir.is_ok()) return report_error(dir.status());
    f.model.model = *dir;
  }
  if (f.ctx < 2) return report_error(invalid_argument("--ctx-size must be at least 2"));
  if (f.stride == 0) f.stride = std::max<int64_t>(1, f.ctx / 2);
  if (f.stride < 1 || f.stride > f.ctx)
    return report_error(invalid_argument("--stride must be in [1, --ctx-size]"));
  // The KV cache holds one window (0: the model's context, issue 18).
  if (f.model.max_model_len == 0) f.model.max_model_len = f.ctx;
  if (f.ctx > f.model.max_model_len)
    return report_error(invalid_argument(
        fmt::format("--ctx-size {} exceeds --max-model-len {}", f.ctx, f.model.max_model_len)));
  std::ifstream in(f.text_file, std::ios::binary);
  if (!in) return report_error(invalid_argument("cannot open --text-file " + f.text_file));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto tok = Tokenizer::load(f.model.model);
  if (!tok.is_ok())
    return report_error(tok.status().with_context("perplexity needs the model's tokenizer"));
  // As transformers' tokenizer(text): the tokenizer file decides about BOS.
  auto ids = (*tok)->encode(text, /*add_special_tokens=*/true);
  if (!ids.is_ok()) return report_error(ids.status().with_context(f.text_file));
  if (ids->size() < 2)
    return report_error(invalid_argument("the text has fewer than 2 tokens: nothing to score"));
  std::vector<Window> windows = make_windows(static_cast<int64_t>(ids->size()), f.ctx, f.stride);
  if (f.max_windows > 0 && static_cast<int64_t>(windows.size()) > f.max_windows)
    windows.resize(static_cast<size_t>(f.max_windows));
  auto options = runner_options(f.model);
  if (!options.is_ok()) return report_error(options.status());
  auto t0 = std::chrono::steady_clock::now();
  auto runner = ModelRunner::open(*options);
  if (!runner.is_ok()) return report_error(runner.status());
  auto t1 = std::chrono::steady_clock::now();
  auto r = score(**runner, *ids, std::move(windows));
  if (!r.is_ok()) return report_error(r.status());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double load_seconds = std::chrono::duration<double>(t1 - t0).count();
  const double mean = r->nll / static_cast<double>(r->scored);
  const double ppl = std::exp(mean);
  if (f.json) {
    nlohmann::json j = {{"perplexity", ppl},
                        {"mean_nll", mean},
                        {"tokens_evaluated", r->scored},
                        {"text_tokens", r->text_tokens},
                        {"windows", r->windows},
                        {"ctx_size", f.ctx},
                        {"stride", f.stride},
                        {"seconds", seconds},
                        {"tokens_per_second", static_cast<double>(r->scored) / seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %s (loaded in %.1f s)\n", f.model.model.c_str(), load_seconds);
    std::printf("text: %s, %lld tokens; %lld windows of %lld tokens, stride %lld\n",
                f.text_file.c_str(), static_cast<long long>(r->text_tokens),
                static_cast<long long>(r->windows), static_cast<long long>(f.ctx),
                static_cast<long long>(f.stride));
    std::printf("perplexity: %.4f (mean NLL %.5f nats) over %lld tokens evaluated, %.1f s, "
                "%.0f tokens/s\n",
                ppl, mean, static_cast<long long>(r->scored), seconds,
                static_cast<double>(r->scored) / seconds);
  }
  return 0;
}

}  // namespace

void register_perplexity(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<PerplexityFlags>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "perplexity of a model on a text file (sliding windows, as llama.cpp)");
  add_model_flags(cmd, &f->model, /*model_required=*/false);
  cmd->add_option("--text-file,-f", f->text_file, "the text to score (UTF-8)")->required();
  cmd->add_option("--ctx-size,-c", f->ctx, "window length in tokens")->capture_default_str();
  cmd->add_option("--stride", f->stride,
                  "tokens between window starts (0: ctx-size / 2); each window scores the "
                  "tokens no earlier window reached");
  cmd->add_option("--max-windows", f->max_windows, "score only the first N windows (0: all)");
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, exit_code] { *exit_code = run_perplexity(*f); });
}

}  // namespace ferrite::cli
