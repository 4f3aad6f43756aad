// matmul on GGUF block weights (q8_0, q4_0, q4_k, q5_k, q6_k): every
// projection of one Qwen3-0.6B decode token (28 layers of q, k, v, o,
// gate_up, down, then the tied LM head) with the weights back to back in the
// arena (always from DRAM), and a 64-token prefill of one layer's MLP.
//
// Counters: bytes_per_second (block bytes), tok/s, bw_frac = block bytes/s
// over the measured read bandwidth (the decode roofline of the format).
//
// actorder: the same projections in u4_g128 (GPTQ) through
// cpu::weight_product, in natural column order and as act-order weights
// (an input permutation per projection, backends/cpu/weight_product.h): the
// cost of the activation gather.
#include <benchmark/benchmark.h>

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/quant_dot.h"
#include "backends/cpu/weight_product.h"
#include "bench_util.h"

namespace ferrite::bench {
namespace {

DType format_arg(int64_t a) {
  constexpr DType kFormats[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                                DType::kQ5_K, DType::kQ6_K, DType::kBF16};
  return kFormats[a];
}

// The first `bytes` of the arena as valid blocks of dt (quantized random
// values, tiled); false when the arena is smaller.
bool fill_arena(WeightArena& arena, DType dt, int64_t bytes) {
  if (bytes > arena.bytes()) return false;
  const int64_t chunk = 1 << 20;
  std::vector<float> v = random_activations(chunk, 7);
  std::vector<uint8_t> q(dtype_bytes(dt, chunk));
  quantize_row(dt, v.data(), q.data(), chunk);
  for (int64_t off = 0; off + static_cast<int64_t>(q.size()) <= bytes; off += q.size())
    std::memcpy(reinterpret_cast<char*>(const_cast<uint16_t*>(arena.at(0))) + off, q.data(),
                q.size());
  return true;
}

// Block bytes/s, tok/s and bw_frac (block bytes/s over the read bandwidth
// bw) of `bytes` of weights read per iteration for `tokens` tokens.
void set_rate_counters(benchmark::State& state, int64_t tokens, int64_t bytes, double bw) {
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(tokens),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bw_frac"] = benchmark::Counter(static_cast<double>(bytes) / bw,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

struct Proj {
  int64_t out, in;
};
constexpr Proj kLayer[] = {{2048, 1024}, {1024, 1024}, {1024, 1024},
                           {1024, 2048}, {6144, 1024}, {1024, 3072}};
constexpr int kLayers = 28;
constexpr Proj kHead{151936, 1024};

// Args: format, tokens, path (1: integer dots, 0: exact dequantized panels).
void BM_QuantQwen3_0_6B_Matmuls(benchmark::State& state) {
  const DType dt = format_arg(state.range(0));
  const int64_t tokens = state.range(1);
  cpu::set_quant_matmul_mode(state.range(2) != 0, 0);
  WeightArena& arena = WeightArena::get();
  const double bw = read_bandwidth();
  int64_t total = 0, bytes = 0;
  for (const Proj& p : kLayer) {
    total += p.out * p.in * kLayers;
    bytes += dtype_bytes(dt, p.out * p.in) * kLayers;
  }
  total += kHead.out * kHead.in;
  bytes += dtype_bytes(dt, kHead.out * kHead.in);
  if (!fill_arena(arena, dt, bytes)) {
    state.SkipWithError("arena smaller than the model");
    return;
  }
  std::vector<float> x = random_activations(tokens * 6144, 2);
  std::vector<float> y(static_cast<size_t>(tokens * kHead.out));
  ThreadPool* pool = &ThreadPool::global();
  for (auto _ : state) {
    const char* w = reinterpret_cast<const char*>(arena.at(0));
    for (int l = 0; l < kLayers; ++l) {
      for (const Proj& p : kLayer) {
        cpu::matmul(x.data(), tokens, p.in, w, dt, p.out, y.data(), pool);
        w += dtype_bytes(dt, p.out * p.in);
      }
    }
    cpu::matmul(x.data(), tokens, kHead.in, w, dt, kHead.out, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  set_rate_counters(state, tokens, bytes, bw);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * tokens * total, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(dtype_name(dt)) + " threads=" + std::to_string(pool->size()) +
                 (state.range(2) ? std::string(" int ") + cpu::quant_isa_name(cpu::quant_matmul_isa())
                                 : std::string(" exact")));
  cpu::set_quant_matmul_mode(true, 0);
}
BENCHMARK(BM_QuantQwen3_0_6B_Matmuls)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_QuantQwen3_0_6B_Matmuls)
    ->ArgsProduct({{0, 1, 2, 4}, {64}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Name("prefill64");

// Args: tokens, act-order (1: a random input permutation per projection).
void BM_ActOrderQwen3_0_6B_Matmuls(benchmark::State& state) {
  const DType dt = DType::kU4G128;
  const int64_t tokens = state.range(0);
  const bool act_order = state.range(1) != 0;
  WeightArena& arena = WeightArena::get();
  const double bw = read_bandwidth();
  int64_t bytes = 0;
  for (const Proj& p : kLayer) bytes += dtype_bytes(dt, p.out * p.in) * kLayers;
  if (!fill_arena(arena, dt, bytes)) {
    state.SkipWithError("arena smaller than the model");
    return;
  }
  // One permutation per projection shape (the gather's cost does not depend
  // on which one).
  std::vector<std::vector<int32_t>> perms;
  std::mt19937_64 rng(11);
  for (const Proj& p : kLayer) {
    perms.emplace_back(static_cast<size_t>(p.in));
    std::iota(perms.back().begin(), perms.back().end(), 0);
    std::shuffle(perms.back().begin(), perms.back().end(), rng);
  }
  std::vector<float> x = random_activations(tokens * 6144, 2);
  std::vector<float> y(static_cast<size_t>(tokens * 6144));
  ThreadPool* pool = &ThreadPool::global();
  for (auto _ : state) {
    char* w = reinterpret_cast<char*>(const_cast<uint16_t*>(arena.at(0)));
    for (int l = 0; l < kLayers; ++l) {
      for (size_t i = 0; i < std::size(kLayer); ++i) {
        const Proj& p = kLayer[i];
        TensorView view{w, dt, Shape{p.out, p.in}};
        if (act_order) {
          view.input_perm = perms[i].data();
          view.perm_rows = p.out;
        }
        cpu::weight_product(x.data(), tokens, p.in, view, p.out, y.data(), false, pool);
        w += dtype_bytes(dt, p.out * p.in);
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  set_rate_counters(state, tokens, bytes, bw);
  state.SetLabel(std::string(act_order ? "u4_g128 act-order" : "u4_g128") +
                 " threads=" + std::to_string(pool->size()));
}
BENCHMARK(BM_ActOrderQwen3_0_6B_Matmuls)
    ->ArgsProduct({{1, 64}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Name("actorder");

}  // namespace
}  // namespace ferrite::bench
