// ferrite bench: prefill and decode tokens/s of a model (real or dummy
// weights), and decode as a fraction of the memory-bandwidth roofline. Decode
// is timed over pure decode steps: every prompt of the batch is prefilled
// first (llama-batched-bench's order); when the prompts do not fit in one
// step, a second run reports what mixed steps (decode beside prompt chunks,
// as serving schedules them) achieve:
//   roofline tokens/s = batch * bandwidth / (weight bytes read per step
//                                            + KV bytes read per step)
// with the bandwidth measured on this machine in the same run (CPU: a
// read-bandwidth probe; other devices: a large device-to-device copy, bytes
// read + written). Prefill is also reported as a fraction of the device's
// dense matrix peak (--peak-tflops, 790 for bf16 on the H200; a model with
// FP8 weights on CUDA is also given against the e4m3 peak, 1,979, which its
// large products reach through the FP8 tensor cores):
//   flops = 2 * tokens * (matrix weights) + causal attention
//           (4 * heads * head_dim * tokens * (tokens + 1) / 2 per layer).
// Every figure is measured after a warm-up run of the same shape (graph
// capture, cuBLASLt heuristics and module loads stay out of the numbers),
// --repetitions times (3): the mean and the sample standard deviation are
// reported (llama-bench -r), each run's figure in the JSON.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "backends/cpu/kernels/memory_bandwidth.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "contracts/standard_contracts.h"
#include "engine/generator.h"

namespace ferrite::cli {

namespace {

struct BenchFlags {
  ModelFlags model;
  int32_t prompt_len = 128;
  int32_t gen_len = 32;
  std::vector<int32_t> batches = {1};
  int32_t decode_prompt_len = 16;
  double peak_tflops = 0;  // 0: 790 on CUDA (bf16 H200), none on CPU
  int32_t repetitions = 3;  // measured runs per figure (after one warm-up)
  bool json = false;
};

// Mean and sample standard deviation of repeated measurements (llama-bench's
// avg and stdev); the deviation is 0 for one run.
struct Spread {
  std::vector<double> runs;
  double mean() const {
    double s = 0;
    for (double v : runs) s += v;
    return runs.empty() ? 0 : s / runs.size();
  }
  double stddev() const {
    if (runs.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double v : runs) s += (v - m) * (v - m);
    return std::sqrt(s / (runs.size() - 1));
  }
  nlohmann::json to_json() const {
    return {{"mean", mean()}, {"stddev", stddev()}, {"runs", runs}};
  }
};

// Device-to-device copy bandwidth (bytes read + written per second), median
// of a few 1 GiB copies.
double device_copy_bandwidth(Device& device) {
  const int64_t bytes = 1ll << 30;
  auto a = DeviceBuffer::allocate(device, bytes);
  auto b = DeviceBuffer::allocate(device, bytes);
  if (!a.is_ok() || !b.is_ok()) return 0;
  std::vector<double> rates;
  for (int i = 0; i < 6; ++i) {
    if (!device.synchronize().is_ok()) return 0;
    auto t0 = std::chrono::steady_clock::now();
    if (!device.copy_on_device(b->data(), a->data(), bytes).is_ok()) return 0;
    if (!device.synchronize().is_ok()) return 0;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) rates.push_back(2.0 * bytes / dt);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// Routed expert weights (gate_up and down of every routed MoE node) and
// the share of experts one token picks (top_k / num_experts).
std::map<std::string, double> routed_expert_shares(const ModelProgram& program) {
  std::map<std::string, double> share;
  for (const ProgramNode& node : program.nodes) {
    if (node.contract_id.rfind("routed_", 0) != 0) continue;
    const double experts = static_cast<double>(node.attrs.u("num_experts"));
    const ContractSchema* schema = find_contract(node.contract_id);
    if (experts <= 0 || !schema) continue;
    for (const char* role : {"gate_up", "down"}) {
      const int b = schema->binding_index(role);
      if (b >= 0 && b < static_cast<int>(node.bindings.size()))
        share[node.bindings[b].name] = static_cast<double>(node.attrs.u("top_k")) / experts;
    }
  }
  return share;
}

// Matrix FLOPs of a prefill of `tokens` tokens (one sequence): every weight
// matrix but the embedding gather once per token (the LM head once; of the
// routed experts only the top_k a token picks), plus causal attention.
double prefill_flops(const ModelRunner& runner, int64_t tokens) {
  const ModelProgram& p = runner.program();
  const std::map<std::string, double> expert_share = routed_expert_shares(p);
  double per_token = 0, once = 0;
  for (const WeightDecl& w : p.weights) {
    if (w.shape.rank() < 2) continue;
    double n = static_cast<double>(w.shape.numel());
    if (auto it = expert_share.find(w.name); it != expert_share.end()) n *= it->second;
    const bool embed = w.name.find("embed_tokens") != std::string::npos;
    const bool head = w.name.find("lm_head") != std::string::npos;
    if (head || (embed && runner.config().tie_word_embeddings))
      once += n;
    else if (!embed)
      per_token += n;
  }
  double flops = 2.0 * per_token * tokens + 2.0 * once;
  for (const ProgramNode& n : p.nodes) {
    if (n.contract_id != "causal_paged_attention") continue;
    const double heads = static_cast<double>(n.attrs.u("num_heads"));
    const double hd = static_cast<double>(n.attrs.u("head_dim"));
    flops += 4.0 * heads * hd * static_cast<double>(tokens) * (tokens + 1) / 2.0;
  }
  return flops;
}

// Bytes of weights one decode step streams: everything but the embedding
// gather (which reads one row per token), unless the LM head is tied to it.
//
// Routed experts: a step of `tokens` tokens reads only the experts they pick;
// with uniform routing a layer touches E * (1 - (1 - k/E)^tokens) of its E
// experts on average, so only that share of the expert weights is counted.
double weight_bytes_per_step(const ModelRunner& runner, int64_t tokens) {
  const ModelProgram& program = runner.program();
  double bytes = static_cast<double>(program.weight_bytes());
  if (!runner.config().tie_word_embeddings) {
    const WeightDecl* e = program.find_weight("model.embed_tokens.weight");
    if (e) bytes -= static_cast<double>(dtype_bytes(e->dtype, e->shape.numel()));
  }
  for (const auto& [name, share] : routed_expert_shares(program)) {
    const WeightDecl* w = program.find_weight(name);
    if (!w) continue;
    const double touched = 1.0 - std::pow(1.0 - share, static_cast<double>(tokens));
    bytes -= (1.0 - touched) * static_cast<double>(dtype_bytes(w->dtype, w->shape.numel()));
  }
  return bytes;
}

std::vector<uint32_t> random_prompt(int32_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> d(0, vocab - 1);
  std::vector<uint32_t> p(n);
  for (auto& t : p) t = static_cast<uint32_t>(d(rng));
  return p;
}

int run_bench(const BenchFlags& f) {
  if (f.prompt_len < 1 || f.gen_len < 2 || f.decode_prompt_len < 1)
    return report_error(
        invalid_argument("--prompt-len >= 1, --gen-len >= 2, --decode-prompt-len >= 1"));
  if (f.repetitions < 1 || f.repetitions > 1000)
    return report_error(invalid_argument("--repetitions must be in [1, 1000]"));
  // The context the measurements need: within the model's (or
  // --max-model-len), past it only with --allow-long-max-model-len.
  const int64_t needed = std::max(f.prompt_len, f.decode_prompt_len + f.gen_len) + 1;
  Capacity cap;
  auto options = runner_options(f.model, &cap);
  if (!options.is_ok()) return report_error(options.status());
  if (needed > cap.max_model_len) {
    if (f.model.max_model_len != 0)
      return report_error(invalid_argument(fmt::format(
          "--prompt-len {} / --decode-prompt-len {} + --gen-len {} need a context of {} tokens; "
          "--max-model-len is {}",
          f.prompt_len, f.decode_prompt_len, f.gen_len, needed, cap.max_model_len)));
    if (!f.model.allow_long_max_model_len)
      return report_error(invalid_argument(fmt::format(
          "--prompt-len {} / --decode-prompt-len {} + --gen-len {} need a context of {} tokens, "
          "longer than the model's {} (max_position_embeddings): use shorter lengths, or add "
          "--allow-long-max-model-len to measure past it",
          f.prompt_len, f.decode_prompt_len, f.gen_len, needed, cap.model_max_len)));
    ModelFlags longer = f.model;
    longer.max_model_len = needed;
    options = runner_options(longer, &cap);
    if (!options.is_ok()) return report_error(options.status());
  }
  int32_t max_batch = 1;
  for (int32_t b : f.batches) {
    if (b < 1) return report_error(invalid_argument("--batch values must be >= 1"));
    max_batch = std::max(max_batch, b);
  }
  options->limits.max_sequences = std::max<int64_t>(options->limits.max_sequences, max_batch);
  options->limits.max_tokens = std::max<int64_t>(options->limits.max_tokens, max_batch);
  // The prompt runs as one step.
  options->limits.max_tokens = std::max<int64_t>(options->limits.max_tokens, f.prompt_len);
  auto runner_or = ModelRunner::open(*options);
  if (!runner_or.is_ok()) return report_error(runner_or.status());
  ModelRunner& runner = **runner_or;
  const int64_t vocab = runner.program().vocab_size;

  const double bandwidth = options->device == "cpu"
                               ? cpu::measure_read_bandwidth_bytes_per_s(ThreadPool::global())
                               : device_copy_bandwidth(runner.device());
  const double peak_flops =
      (f.peak_tflops > 0 ? f.peak_tflops : (options->device == "cuda" ? 790.0 : 0.0)) * 1e12;
  nlohmann::json out;
  out["model"] = runner.config().model_type;
  out["repetitions"] = f.repetitions;
  out["device"] = runner.device().name();
  out["weight_bytes"] = runner.program().weight_bytes();
  out["memory_bandwidth_gb_s"] = bandwidth / 1e9;

  // Prefill: one prompt, one generated token (after a warm-up of the same shape).
  {
    GenerationRequest req;
    req.prompt = random_prompt(f.prompt_len, vocab, 1);
    req.max_tokens = 1;
    Spread rate;  // tokens/s of each measured run
    for (int run = 0; run <= f.repetitions; ++run) {  // run 0: the warm-up
      GenerationStats stats;
      auto r = generate(runner, {req}, nullptr, &stats);
      if (!r.is_ok()) return report_error(r.status());
      if (run > 0) rate.runs.push_back(stats.prefill_tokens / stats.prefill_seconds);
    }
    const double tps = rate.mean();
    const double flops = prefill_flops(runner, f.prompt_len);
    const double flops_per_s = flops * tps / f.prompt_len;
    const double flop_fraction = peak_flops > 0 ? flops_per_s / peak_flops : 0;
    out["prefill"] = {{"prompt_tokens", f.prompt_len},
                      {"tokens_per_s", tps},
                      {"tokens_per_s_stddev", rate.stddev()},
                      {"tokens_per_s_runs", rate.runs},
                      {"tflops", flops_per_s / 1e12},
                      {"peak_fraction", flop_fraction}};
    bool fp8_weights = false;
    for (const WeightDecl& w : runner.program().weights)
      fp8_weights = fp8_weights || w.dtype == DType::kF8B128;
    const double fp8_peak = 1979.0e12;  // H200 dense e4m3
    const bool fp8_line = fp8_weights && options->device == "cuda" && f.peak_tflops <= 0;
    if (fp8_line) out["prefill"]["fp8_peak_fraction"] = flops_per_s / fp8_peak;
    if (!f.json) {
      std::printf("prefill  %5d tokens: %10.1f tokens/s ± %.1f  (%.1f GFLOP/s", f.prompt_len,
                  tps, rate.stddev(), flops_per_s / 1e9);
      // The fraction only where a peak is known (--peak-tflops, or the GPU's).
      if (peak_flops > 0)
        std::printf(", %.1f%% of %.0f TFLOP/s", 100 * flop_fraction, peak_flops / 1e12);
      if (fp8_line)
        std::printf(", %.1f%% of the FP8 %.0f", 100 * flops_per_s / fp8_peak, fp8_peak / 1e12);
      std::printf(")\n");
    }
  }
  const int64_t kv_per_token = runner.report().kv_bytes_per_token;
  for (int32_t batch : f.batches) {
    const double w_step = weight_bytes_per_step(runner, batch);
    std::vector<GenerationRequest> reqs(batch);
    for (int32_t i = 0; i < batch; ++i) {
      reqs[i].prompt = random_prompt(f.decode_prompt_len, vocab, 100 + i);
      reqs[i].max_tokens = f.gen_len;
    }
    // Every prompt of the batch is prefilled before decoding starts (as
    // llama-batched-bench does); the decode figure is that of the pure
    // decode steps that follow: batch tokens per step, nothing else.
    GenerateOptions pure;
    pure.prefill_first = true;
    {  // warm-up: captures the decode graph of this batch size
      std::vector<GenerationRequest> warm = reqs;
      for (auto& w : warm) w.max_tokens = 3;
      auto r = generate(runner, warm, pure);
      if (!r.is_ok()) return report_error(r.status());
    }
    Spread rate;
    int64_t decode_steps = 0;
    for (int run = 0; run < f.repetitions; ++run) {
      GenerationStats stats;
      auto r = generate(runner, reqs, pure, nullptr, &stats);
      if (!r.is_ok()) return report_error(r.status());
      rate.runs.push_back(stats.pure_decode_tokens_per_s());
      decode_steps = stats.pure_decode_steps;
    }
    const double tps = rate.mean();
    double roofline = decode_roofline_tokens_per_s(batch, bandwidth, w_step, kv_per_token,
                                                   f.decode_prompt_len, f.gen_len);
    double bytes_per_step =
        w_step + batch * (f.decode_prompt_len + f.gen_len / 2.0) * kv_per_token;
    double fraction = roofline > 0 ? tps / roofline : 0;
    nlohmann::json entry = {{"batch", batch},
                            {"tokens_per_s", tps},
                            {"tokens_per_s_stddev", rate.stddev()},
                            {"tokens_per_s_runs", rate.runs},
                            {"decode_steps", decode_steps},
                            {"roofline_tokens_per_s", roofline},
                            {"roofline_fraction", fraction},
                            {"bytes_per_step", bytes_per_step}};
    // Mixed steps: the same batch scheduled as a server does (decode tokens
    // beside other sequences' prompt chunks), when its prompts do not fit in
    // one step. Their decode and prompt tokens per second of those steps.
    Spread mixed_decode, mixed_prompt;
    int64_t mixed_steps = 0;
    if (static_cast<int64_t>(batch) * f.decode_prompt_len > runner.bound().plan().limits.max_tokens) {
      for (int run = 0; run < f.repetitions; ++run) {
        GenerationStats mixed;
        auto m = generate(runner, reqs, GenerateOptions{}, nullptr, &mixed);
        if (!m.is_ok()) return report_error(m.status());
        if (mixed.mixed_steps == 0) break;
        mixed_steps = mixed.mixed_steps;
        mixed_decode.runs.push_back(mixed.mixed_decode_tokens / mixed.mixed_seconds);
        mixed_prompt.runs.push_back(mixed.mixed_prompt_tokens / mixed.mixed_seconds);
      }
    }
    if (mixed_steps > 0) {
      entry["mixed"] = {{"steps", mixed_steps},
                        {"decode_tokens_per_s", mixed_decode.mean()},
                        {"decode_tokens_per_s_stddev", mixed_decode.stddev()},
                        {"prompt_tokens_per_s", mixed_prompt.mean()},
                        {"prompt_tokens_per_s_stddev", mixed_prompt.stddev()}};
    }
    out["decode"].push_back(entry);
    if (!f.json) {
      std::printf("decode   batch %3d: %10.1f tokens/s ± %.1f  (roofline %.1f tokens/s, %.1f%%)\n",
                  batch, tps, rate.stddev(), roofline, 100 * fraction);
      if (mixed_steps > 0)
        std::printf("  mixed  batch %3d: %10.1f decode tokens/s ± %.1f beside %.1f prompt tokens/s (%lld steps)\n",
                    batch, mixed_decode.mean(), mixed_decode.stddev(), mixed_prompt.mean(),
                    static_cast<long long>(mixed_steps));
    }
  }
  if (f.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "weights %.1f MB, weight bytes read per decode token (batch 1) %.1f MB, "
        "memory bandwidth %.1f GB/s (%s); mean ± standard deviation of %d runs\n",
        runner.program().weight_bytes() / 1e6, weight_bytes_per_step(runner, 1) / 1e6,
        bandwidth / 1e9, runner.device().name().c_str(), f.repetitions);
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prefill and decode speed");
  add_model_flags(cmd, &f->model);
  cmd->add_option("--prompt-len", f->prompt_len, "prompt tokens of the prefill measurement");
  cmd->add_option("--gen-len", f->gen_len, "generated tokens per sequence when decoding");
  cmd->add_option("--batch", f->batches, "decode batch sizes, e.g. --batch 1 8 32");
  cmd->add_option("--decode-prompt-len", f->decode_prompt_len, "prompt tokens before decoding");
  cmd->add_option("--peak-tflops", f->peak_tflops,
                  "dense matrix peak for the prefill fraction (default: 790 on cuda)");
  cmd->add_option("-r,--repetitions", f->repetitions,
                  "measured runs per figure, after one warm-up (mean and standard deviation "
                  "reported, as llama-bench -r)");
  cmd->add_flag("--json", f->json, "print JSON");
  cmd->callback([f, exit_code] { *exit_code = run_bench(*f); });
}

}  // namespace ferrite::cli
