// ferrite bench-serve: a load generator for any OpenAI-compatible server, or
// llama-server's native /completion (--backend llama-server: the same random
// token-id prompts, n_predict = --output-len with ignore_eos, streamed; its
// one-token events give the ITL, its last event's tokens_evaluated /
// tokens_predicted the counts), so servers are compared on one report.
//   ferrite bench-serve --url http://127.0.0.1:8000 --input-len 128
//       --output-len 64 --num-prompts 64 --concurrency 1 8 32
//       [--request-rate 2 8 inf] [--endpoint completions|chat] [--json]
// Random prompts (token-id arrays of exactly --input-len ids, or random words
// with --text-prompts), max_tokens = --output-len with ignore_eos, streamed.
// --shared-prefix-len N puts the same N ids (words; a system message for
// chat) before every prompt: a shared system prompt, for prefix caching
// (the warm-up request caches it).
// Reports per run: TTFT, TPOT, ITL, E2E (mean, p50, p90, p95, p99), output
// tokens/s, requests/s, errors, and the prompt length the server counted
// (usage.prompt_tokens). ITL is per token: each stream asks for logprobs,
// whose entries count the tokens of every SSE chunk (a server may pack
// several in one); a chunk's gap is spread over its tokens (--itl-per-chunk:
// per chunk, no logprobs). When the server exposes Ferrite's /metrics, also the
// engine's compute time per generated token and the rest (the server's own
// overhead per token: HTTP, JSON, detokenization, scheduling, idle).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>

#include "cli/commands.h"
#include "cli/common.h"

namespace ferrite::cli {

namespace {

using json = nlohmann::json;

// A field of a server's JSON reply, or `fallback` when it is absent or of
// another type: a reply is untrusted input, and json::value would throw on a
// field of the wrong type.
template <class T>
T field_or(const json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else if constexpr (std::is_integral_v<T>) {
    return it->is_number_integer() ? it->template get<T>() : fallback;
  } else {
    return it->is_string() ? it->template get<std::string>() : fallback;
  }
}
using Clock = std::chrono::steady_clock;

struct BenchServeFlags {
  std::string url = "http://127.0.0.1:8000";
  std::string model;
  std::string endpoint = "completions";
  std::string backend = "openai";  // or llama-server: its native /completion
  std::string api_key;
  int32_t input_len = 128;
  int32_t shared_prefix_len = 0;
  int32_t output_len = 64;
  int32_t num_prompts = 64;
  std::vector<int32_t> concurrency = {};
  std::vector<std::string> request_rate = {};
  int32_t max_concurrency = 0;
  uint32_t id_min = 10;
  uint32_t id_max = 250;
  bool text_prompts = false;
  uint64_t seed = 0;
  bool json_out = false;
  std::string json_file;
  double timeout_s = 600;
  bool itl_per_chunk = false;
  std::string extra_body;  // JSON object merged into every request body
};

// A 401 says what to do about it.
std::string http_error(int status, const std::string& body) {
  if (status == 401)
    return "HTTP 401: the server requires an API key: pass --api-key KEY (or set FERRITE_API_KEY "
           "or OPENAI_API_KEY)";
  std::string msg = fmt::format("HTTP {}", status);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string())
    msg += ": " + j["error"]["message"].get<std::string>().substr(0, 300);
  return msg;
}

struct Outcome {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = -1;  // as the server counted them (usage)
  std::vector<double> itl;
  bool reconnect = false;  // the connection is gone: the next request needs a new one
  bool retry = false;      // nothing was sent back: worth one more try on a new connection
};

struct Target {
  std::string scheme_host_port;
  std::string base_path;
};

Result<Target> parse_url(const std::string& url) {
  size_t p = url.find("://");
  if (p == std::string::npos) return invalid_argument("--url must look like http://host:port");
  if (url.substr(0, p) != "http") return invalid_argument("--url: only http:// is supported");
  size_t slash = url.find('/', p + 3);
  Target t;
  t.scheme_host_port = url.substr(0, slash);
  t.base_path = slash == std::string::npos ? "" : url.substr(slash);
  while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
  if (t.base_path.size() >= 3 && t.base_path.substr(t.base_path.size() - 3) == "/v1")
    t.base_path.resize(t.base_path.size() - 3);
  return t;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

class Runner {
 public:
  Runner(const BenchServeFlags& f, Target t) : f_(f), t_(std::move(t)) {}

  bool llama() const { return f_.backend == "llama-server"; }

  json body(int i) const {
    std::mt19937_64 rng(f_.seed * 1000003 + i);
    json b;
    if (llama()) {
      // llama-server's native /completion: n_predict, ignore_eos, token-id
      // prompts; every streamed event carries its token ids ("tokens").
      b["n_predict"] = f_.output_len;
      b["ignore_eos"] = true;
      b["temperature"] = 0.0;
      b["stream"] = true;
      b["return_tokens"] = true;
      // No reuse of a slot's earlier prompt (each run sends the same prompts
      // again): as a server without prefix caching. --extra-body
      // '{"cache_prompt": true}' turns it back on.
      b["cache_prompt"] = false;
    } else {
      b["model"] = model_;
      b["max_tokens"] = f_.output_len;
      b["ignore_eos"] = true;
      b["temperature"] = 0.0;
      b["stream"] = true;
      b["stream_options"] = {{"include_usage", true}};
    }
    if (!f_.itl_per_chunk && !llama()) {  // logprob entries count the tokens of each chunk
      if (f_.endpoint == "chat") {
        b["logprobs"] = true;
        b["top_logprobs"] = 0;
      } else {
        b["logprobs"] = 0;
      }
    }
    static const char* words[] = {"the",  "of",   "and",  "a",   "to",   "in",  "is",
                                  "you",  "that", "it",   "he",  "was",  "for", "on",
                                  "are",  "as",   "with", "his", "they", "at",  "be",
                                  "this", "have", "from", "or",  "one",  "had", "by"};
    std::string text, shared_text;
    std::vector<uint32_t> ids;
    {
      // The shared prefix: the same for every request (not keyed by i).
      std::mt19937_64 prng(f_.seed * 1000003 + 0x5eedull);
      const bool words_prefix = f_.text_prompts || f_.endpoint == "chat";
      for (int k = 0; k < f_.shared_prefix_len; ++k) {
        if (words_prefix)
          shared_text += std::string(k ? " " : "") + words[prng() % 28];
        else
          ids.push_back(f_.id_min + static_cast<uint32_t>(prng() % (f_.id_max - f_.id_min)));
      }
    }
    if (f_.text_prompts || f_.endpoint == "chat") {
      for (int k = 0; k < f_.input_len; ++k) text += std::string(k ? " " : "") + words[rng() % 28];
    } else {
      for (int k = 0; k < f_.input_len; ++k)
        ids.push_back(f_.id_min + static_cast<uint32_t>(rng() % (f_.id_max - f_.id_min)));
    }
    if (f_.endpoint == "chat") {
      b["messages"] = json::array({{{"role", "user"}, {"content", text}}});
      if (!shared_text.empty())
        b["messages"].insert(b["messages"].begin(),
                             json{{"role", "system"}, {"content", shared_text}});
    } else if (f_.text_prompts) {
      b["prompt"] = shared_text.empty() ? text : shared_text + " " + text;
    } else {
      b["prompt"] = ids;
    }
    if (!f_.extra_body.empty()) b.update(json::parse(f_.extra_body, nullptr, false));
    return b;
  }

  Outcome one(httplib::Client& cli, int i) const {
    Outcome o;
    std::string path =
        t_.base_path + (llama()                  ? "/completion"
                        : f_.endpoint == "chat" ? "/v1/chat/completions"
                                                : "/v1/completions");
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body(i).dump();
    req.set_header("Content-Type", "application/json");
    if (!f_.api_key.empty()) req.set_header("Authorization", "Bearer " + f_.api_key);
    std::string buf;
    int64_t chunks = 0, usage_tokens = -1, tokens_seen = 0;
    bool done = false;
    auto t0 = Clock::now();
    auto last = t0;
    std::string err;
    // A chunk of n tokens arrived now.
    auto token_chunk = [&](int64_t n) {
      auto now = Clock::now();
      if (chunks == 0) {
        o.ttft = std::chrono::duration<double>(now - t0).count();
        // Tokens packed with the first one arrived with it: no gap (so the
        // ITL's sum over a request is its last token less its first, as
        // TPOT's is).
        for (int64_t k = 1; k < n; ++k) o.itl.push_back(0.0);
      } else {
        const double gap = std::chrono::duration<double>(now - last).count();
        for (int64_t k = 0; k < n; ++k) o.itl.push_back(gap / n);
      }
      last = now;
      ++chunks;
      tokens_seen += n;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      buf.append(data, n);
      size_t pos;
      while ((pos = buf.find("\n\n")) != std::string::npos) {
        std::string ev = buf.substr(0, pos);
        buf.erase(0, pos + 2);
        if (ev.rfind("error: ", 0) == 0) {  // llama-server's error event
          json j = json::parse(ev.substr(7), nullptr, false);
          err = !j.is_discarded() && j.is_object() ? field_or(j, "message", ev.substr(7))
                                                   : ev.substr(7);
          continue;
        }
        if (ev.rfind("data: ", 0) != 0) continue;
        std::string payload = ev.substr(6);
        if (payload == "[DONE]") {
          done = true;
          continue;
        }
        json j = json::parse(payload, nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("error")) {
          err = j["error"].is_object() ? field_or(j["error"], "message", std::string("error")) : "error";
          continue;
        }
        if (llama()) {
          // {"content", "tokens": [ids], "stop": false} per token; the last
          // event has "stop": true and the server's counts.
          if (field_or(j, "stop", false)) {
            done = true;
            usage_tokens = field_or(j, "tokens_predicted", int64_t{-1});
            o.prompt_tokens = field_or(j, "tokens_evaluated", int64_t{-1});
          }
          int64_t n = 0;
          if (j.contains("tokens") && j["tokens"].is_array())
            n = static_cast<int64_t>(j["tokens"].size());
          else if (j.contains("content") && j["content"].is_string() &&
                   !j["content"].get<std::string>().empty())
            n = 1;
          if (n > 0) token_chunk(n);
          continue;
        }
        if (j.contains("usage") && j["usage"].is_object()) {
          usage_tokens = field_or(j["usage"], "completion_tokens", int64_t{-1});
          o.prompt_tokens = field_or(j["usage"], "prompt_tokens", int64_t{-1});
        }
        if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
        const json& c = j["choices"][0];
        std::string piece;
        if (c.contains("text") && c["text"].is_string()) piece = c["text"];
        if (c.contains("delta") && c["delta"].contains("content") &&
            c["delta"]["content"].is_string())
          piece = c["delta"]["content"];
        // Tokens in this chunk: its logprob entries (1 without them).
        int64_t n = piece.empty() ? 0 : 1;
        if (c.contains("logprobs") && c["logprobs"].is_object()) {
          const json& lp = c["logprobs"];
          if (lp.contains("content") && lp["content"].is_array())
            n = static_cast<int64_t>(lp["content"].size());
          else if (lp.contains("tokens") && lp["tokens"].is_array())
            n = static_cast<int64_t>(lp["tokens"].size());
        }
        if (n > 0) token_chunk(n);
      }
      return true;
    };
    auto res = cli.send(req);
    o.e2e = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!res && llama() && done && err.empty()) {
      // llama-server ends a /completion stream by dropping the connection
      // (no last chunk): everything arrived, so it counts.
      o.output_tokens = usage_tokens >= 0 ? usage_tokens : tokens_seen;
      o.ok = true;
      o.reconnect = true;
      return o;
    }
    if (!res) {
      o.error = "connection: " + httplib::to_string(res.error());
      // Nothing arrived: a kept-alive connection the server had closed.
      o.reconnect = o.retry = chunks == 0 && buf.empty();
      return o;
    }
    if (res->status != 200) {
      // The error body went through the content receiver (still in buf).
      o.error = http_error(res->status, res->body.empty() ? buf : res->body);
      return o;
    }
    if (!err.empty()) {
      o.error = err;
      return o;
    }
    if (!done) {
      o.error = llama() ? "stream ended without its last event (\"stop\": true)"
                        : "stream ended without [DONE]";
      return o;
    }
    o.output_tokens = usage_tokens >= 0 ? usage_tokens : tokens_seen;
    o.ok = true;
    return o;
  }

  // One request on `c`, renewed when the last one left it closed (and once
  // more when a closed keep-alive connection refused this one).
  Outcome attempt(std::unique_ptr<httplib::Client>& c, int i) const {
    Outcome o = one(*c, i);
    if (o.reconnect) c = client();
    if (o.retry) {
      o = one(*c, i);
      if (o.reconnect) c = client();
    }
    return o;
  }

  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>(t_.scheme_host_port);
    c->set_read_timeout(static_cast<time_t>(f_.timeout_s), 0);
    c->set_write_timeout(30, 0);
    c->set_connection_timeout(10, 0);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // no Nagle delay between request headers and body
    return c;
  }

  Status resolve_model() {
    if (!f_.model.empty()) {
      model_ = f_.model;
      return Status::ok();
    }
    auto c = client();
    httplib::Headers h;
    if (!f_.api_key.empty()) h.emplace("Authorization", "Bearer " + f_.api_key);
    auto res = c->Get((t_.base_path + "/v1/models").c_str(), h);
    if (!res)
      return unavailable(fmt::format("cannot reach {} ({}): is the server up?", f_.url,
                                     httplib::to_string(res.error())));
    // /completion needs no model name; llama-server lists its file.
    if (llama() && res->status != 200 && res->status != 401) return Status::ok();
    if (res->status != 200)
      return unavailable(fmt::format("GET {}/v1/models: {}", f_.url,
                                     http_error(res->status, res->body)));
    json j = json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() ||
        j["data"].empty())
      return unavailable("the server lists no model");
    model_ = field_or(j["data"][0], "id", std::string());
    return Status::ok();
  }

  // Engine counters of a Ferrite server (absent elsewhere).
  std::optional<std::pair<double, double>> engine_counters() const {
    auto c = client();
    auto res = c->Get((t_.base_path + "/metrics").c_str());
    if (!res || res->status != 200) return std::nullopt;
    double step = -1, tokens = -1;
    size_t pos = 0;
    const std::string& b = res->body;
    while (pos < b.size()) {
      size_t eol = b.find('\n', pos);
      if (eol == std::string::npos) eol = b.size();
      std::string line = b.substr(pos, eol - pos);
      pos = eol + 1;
      auto value = [&] { return std::atof(line.substr(line.rfind(' ') + 1).c_str()); };
      if (line.rfind("ferrite_engine_step_seconds_total ", 0) == 0) step = value();
      if (line.rfind("ferrite_generation_tokens_total ", 0) == 0) tokens = value();
    }
    if (step < 0 || tokens < 0) return std::nullopt;
    return std::make_pair(step, tokens);
  }

  // One run: `concurrency` workers (0 = unbounded), or Poisson arrivals at
  // `rate` requests/s (0 = all at once).
  json run(int32_t concurrency, double rate, const std::string& label) {
    std::vector<Outcome> outcomes(f_.num_prompts);
    auto before = engine_counters();
    auto t0 = Clock::now();
    if (rate <= 0 && concurrency > 0) {
      std::atomic<int> next{0};
      std::vector<std::thread> workers;
      for (int w = 0; w < concurrency; ++w) {
        workers.emplace_back([&] {
          auto c = client();
          for (int i; (i = next++) < f_.num_prompts;) outcomes[i] = attempt(c, i);
        });
      }
      for (auto& t : workers) t.join();
    } else {
      std::mt19937_64 rng(f_.seed + 17);
      std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);
      std::vector<std::thread> threads;
      std::mutex mu;
      std::condition_variable cv;
      int active = 0;
      for (int i = 0; i < f_.num_prompts; ++i) {
        if (rate > 0 && i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(gap(rng)));
        if (concurrency > 0) {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return active < concurrency; });
          ++active;
        }
        threads.emplace_back([&, i] {
          auto c = client();
          outcomes[i] = attempt(c, i);
          if (concurrency > 0) {
            std::lock_guard<std::mutex> lock(mu);
            --active;
            cv.notify_all();
          }
        });
      }
      for (auto& t : threads) t.join();
    }
    double duration = std::chrono::duration<double>(Clock::now() - t0).count();
    auto after = engine_counters();
    std::vector<double> ttft, tpot, itl, e2e;
    int64_t out_tokens = 0, ok = 0, in_tokens = 0, in_counted = 0;
    std::vector<std::string> errors;
    for (const Outcome& o : outcomes) {
      if (!o.ok) {
        if (errors.size() < 5) errors.push_back(o.error);
        continue;
      }
      ++ok;
      out_tokens += o.output_tokens;
      if (o.prompt_tokens >= 0) {
        in_tokens += o.prompt_tokens;
        ++in_counted;
      }
      ttft.push_back(o.ttft);
      e2e.push_back(o.e2e);
      if (o.output_tokens > 1) tpot.push_back((o.e2e - o.ttft) / (o.output_tokens - 1));
      itl.insert(itl.end(), o.itl.begin(), o.itl.end());
    }
    json r = {{"label", label},
              {"backend", f_.backend},
              {"concurrency", concurrency},
              {"request_rate", rate > 0 ? json(rate) : json("inf")},
              {"num_prompts", f_.num_prompts},
              {"input_len", f_.input_len},
              // What the server counted (usage.prompt_tokens), per request.
              {"mean_input_tokens", in_counted ? json(double(in_tokens) / in_counted) : json(nullptr)},
              {"shared_prefix_len", f_.shared_prefix_len},
              {"output_len", f_.output_len},
              {"completed", ok},
              {"errors", f_.num_prompts - ok},
              {"error_samples", errors},
              {"duration_s", duration},
              {"request_throughput", ok / duration},
              {"output_tokens", out_tokens},
              {"output_throughput", out_tokens / duration},
              {"total_token_throughput",
               (out_tokens + (in_counted == ok ? in_tokens
                                               : ok * (f_.input_len + f_.shared_prefix_len))) /
                   duration}};
    auto stats = [&](const char* name, const std::vector<double>& v) {
      r[std::string(name) + "_ms"] = {{"mean", 1e3 * mean(v)},
                                      {"p50", 1e3 * percentile(v, 0.5)},
                                      {"p90", 1e3 * percentile(v, 0.9)},
                                      {"p95", 1e3 * percentile(v, 0.95)},
                                      {"p99", 1e3 * percentile(v, 0.99)}};
    };
    stats("ttft", ttft);
    stats("tpot", tpot);
    stats("itl", itl);
    stats("e2e", e2e);
    if (before && after && after->second > before->second) {
      double steps = after->first - before->first;
      double toks = after->second - before->second;
      r["server"] = {{"engine_compute_us_per_token", 1e6 * steps / toks},
                     {"wall_us_per_token", 1e6 * duration / toks},
                     {"overhead_us_per_token", 1e6 * (duration - steps) / toks},
                     {"engine_busy_fraction", steps / duration}};
    }
    return r;
  }

  void print(const json& r) const {
    std::printf("== %s: %lld/%d ok, %.2f s\n", r["label"].get<std::string>().c_str(),
                static_cast<long long>(r["completed"].get<int64_t>()), f_.num_prompts,
                r["duration_s"].get<double>());
    std::printf("  requests/s %.2f   output tokens/s %.1f   total tokens/s %.1f   errors %lld\n",
                r["request_throughput"].get<double>(), r["output_throughput"].get<double>(),
                r["total_token_throughput"].get<double>(),
                static_cast<long long>(r["errors"].get<int64_t>()));
    if (!r["mean_input_tokens"].is_null())
      std::printf("  input tokens per request (server's count): %.1f\n",
                  r["mean_input_tokens"].get<double>());
    for (const char* k : {"ttft", "tpot", "itl", "e2e"}) {
      const json& s = r[std::string(k) + "_ms"];
      std::printf("  %-4s ms: mean %9.3f   p50 %9.3f   p90 %9.3f   p95 %9.3f   p99 %9.3f\n", k,
                  s["mean"].get<double>(), s["p50"].get<double>(), s["p90"].get<double>(),
                  s["p95"].get<double>(), s["p99"].get<double>());
    }
    if (r.contains("server")) {
      const json& s = r["server"];
      std::printf(
          "  server: engine compute %.1f us/token, wall %.1f us/token, overhead %.1f "
          "us/token (engine busy %.0f%%)\n",
          s["engine_compute_us_per_token"].get<double>(), s["wall_us_per_token"].get<double>(),
          s["overhead_us_per_token"].get<double>(), 100 * s["engine_busy_fraction"].get<double>());
    }
    for (const auto& e : r["error_samples"])
      std::printf("  error: %s\n", e.get<std::string>().c_str());
    std::fflush(stdout);
  }

  const std::string& model() const { return model_; }

 private:
  const BenchServeFlags& f_;
  Target t_;
  std::string model_;
};

int run_bench_serve(const BenchServeFlags& f) {
  std::signal(SIGPIPE, SIG_IGN);
  auto target = parse_url(f.url);
  if (!target.is_ok()) return report_error(target.status());
  if (f.input_len < 1 || f.output_len < 1 || f.num_prompts < 1 || f.id_max <= f.id_min)
    return report_error(invalid_argument(
        "--input-len, --output-len, --num-prompts must be >= 1 and --id-max > --id-min"));
  if (f.shared_prefix_len < 0)
    return report_error(invalid_argument("--shared-prefix-len must be >= 0"));
  if (f.endpoint != "completions" && f.endpoint != "chat")
    return report_error(invalid_argument("--endpoint must be completions or chat"));
  if (f.backend != "openai" && f.backend != "llama-server")
    return report_error(invalid_argument("--backend must be openai or llama-server"));
  if (f.backend == "llama-server" && f.endpoint == "chat")
    return report_error(invalid_argument(
        "--backend llama-server drives /completion (token ids or --text-prompts); for its chat "
        "endpoint use --backend openai --endpoint chat"));
  Runner runner(f, *target);
  Status st = runner.resolve_model();
  if (!st.is_ok()) return report_error(st);
  if (!f.extra_body.empty() && !json::parse(f.extra_body, nullptr, false).is_object())
    return report_error(invalid_argument("--extra-body must be a JSON object"));
  std::vector<std::pair<int32_t, double>> runs;
  std::vector<std::string> labels;
  for (int32_t c : f.concurrency) {
    if (c < 1) return report_error(invalid_argument("--concurrency values must be >= 1"));
    runs.emplace_back(c, 0.0);
    labels.push_back(fmt::format("concurrency {}", c));
  }
  for (const std::string& s : f.request_rate) {
    double rate = 0;
    if (s != "inf") {
      try {
        rate = std::stod(s);
      } catch (...) {
        rate = -1;
      }
      if (!(rate > 0))
        return report_error(invalid_argument("--request-rate: a positive number or inf"));
    }
    runs.emplace_back(f.max_concurrency, rate);
    labels.push_back(fmt::format("request rate {}", s));
  }
  if (runs.empty()) {
    runs.emplace_back(1, 0.0);
    labels.push_back("concurrency 1");
  }
  // Warm-up: one request (connections, first-use allocations).
  {
    auto c = runner.client();
    Outcome o = runner.attempt(c, -1);
    if (!o.ok) return report_error(unavailable("warm-up request failed: " + o.error));
  }
  json all = {{"url", f.url},
              {"model", runner.model()},
              {"backend", f.backend},
              {"endpoint", f.backend == "llama-server" ? "/completion" : f.endpoint},
              {"runs", json::array()}};
  if (!f.json_out)
    std::printf("bench-serve %s%s model %s: %d prompts, input %d%s, output %d tokens\n",
                f.url.c_str(), f.backend == "llama-server" ? " (llama-server /completion)" : "",
                runner.model().empty() ? "-" : runner.model().c_str(), f.num_prompts, f.input_len,
                f.shared_prefix_len
                    ? fmt::format(" after a shared prefix of {}", f.shared_prefix_len).c_str()
                    : "",
                f.output_len);
  for (size_t i = 0; i < runs.size(); ++i) {
    json r = runner.run(runs[i].first, runs[i].second, labels[i]);
    if (!f.json_out) runner.print(r);
    all["runs"].push_back(r);
  }
  if (f.json_out) std::printf("%s\n", all.dump(2).c_str());
  if (!f.json_file.empty()) {
    FILE* out = std::fopen(f.json_file.c_str(), "w");
    if (!out) return report_error(invalid_argument("cannot write " + f.json_file));
    std::string s = all.dump(2) + "\n";
    std::fwrite(s.data(), 1, s.size(), out);
    std::fclose(out);
  }
  for (const json& r : all["runs"])
    if (r["errors"].get<int64_t>() > 0) return 2;
  return 0;
}

}  // namespace

void register_bench_serve(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<BenchServeFlags>();
  CLI::App* cmd = app.add_subcommand("bench-serve", "load-test an OpenAI-compatible server");
  cmd->add_option("--url", f->url, "server base URL");
  cmd->add_option("--model", f->model, "model id (default: the first of /v1/models)");
  cmd->add_option("--endpoint", f->endpoint, "completions or chat");
  cmd->add_option("--backend", f->backend,
                  "openai (/v1/completions, /v1/chat/completions: Ferrite, vLLM, llama-server's "
                  "OpenAI routes) or llama-server (its native /completion: token-id prompts, "
                  "n_predict, ignore_eos, one event per token)");
  cmd->add_option("--api-key", f->api_key,
                  "bearer token (default: $FERRITE_API_KEY, else $OPENAI_API_KEY)");
  cmd->add_option("--input-len", f->input_len, "prompt tokens per request");
  cmd->add_option("--shared-prefix-len", f->shared_prefix_len,
                  "tokens of one shared prefix before every prompt (a system prompt)");
  cmd->add_option("--output-len", f->output_len, "generated tokens per request (ignore_eos)");
  cmd->add_option("--num-prompts", f->num_prompts, "requests per run");
  cmd->add_option("--concurrency", f->concurrency, "concurrency sweep, e.g. 1 8 32");
  cmd->add_option("--request-rate", f->request_rate, "Poisson request rates per second, or inf");
  cmd->add_option("--max-concurrency", f->max_concurrency,
                  "cap of requests in flight for rate runs");
  cmd->add_option("--id-min", f->id_min, "smallest random prompt token id");
  cmd->add_option("--id-max", f->id_max, "one past the largest random prompt token id");
  cmd->add_flag("--text-prompts", f->text_prompts, "random words instead of token ids");
  cmd->add_option("--seed", f->seed, "prompt seed");
  cmd->add_flag("--json", f->json_out, "print JSON instead of text");
  cmd->add_option("--json-file", f->json_file, "also write the JSON report here");
  cmd->add_option("--timeout", f->timeout_s, "per-request read timeout, seconds");
  cmd->add_flag("--itl-per-chunk", f->itl_per_chunk,
                "ITL per SSE chunk, without asking for logprobs (default: per token)");
  cmd->add_option("--extra-body", f->extra_body,
                  "JSON object merged into every request body, e.g. a response_format");
  cmd->callback([f, exit_code] {
    if (f->api_key.empty())
      for (const char* env : {"FERRITE_API_KEY", "OPENAI_API_KEY"})
        if (const char* v = std::getenv(env); v && *v && f->api_key.empty()) f->api_key = v;
    *exit_code = run_bench_serve(*f);
  });
}

}  // namespace ferrite::cli
