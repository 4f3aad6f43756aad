// matmul: decode GEMV (weights streamed from DRAM) and prefill GEMM for the
// projection shapes of Qwen3-0.6B (hidden 1024, intermediate 3072, 16 q / 8
// kv heads of 128, vocabulary 151936), plus a whole-model decode pass.
//
// Counters: bytes_per_second (weight bytes), FLOP/s, and bw_frac = weight
// bytes/s over the measured read bandwidth (the decode roofline).
#include <benchmark/benchmark.h>

#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "bench_util.h"

namespace ferrite::bench {
namespace {

void set_counters(benchmark::State& state, int64_t weight_bytes, int64_t flops) {
  state.SetBytesProcessed(state.iterations() * weight_bytes);
  state.counters["FLOP/s"] =
      benchmark::Counter(static_cast<double>(flops), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bw_frac"] =
      benchmark::Counter(static_cast<double>(weight_bytes) / read_bandwidth(),
                         benchmark::Counter::kIsIterationInvariantRate);
}

// Args: out, in, tokens, dtype (0 bf16, 1 f16). Each iteration uses the next
// copy of W in the arena, so W always comes from DRAM.
void BM_Matmul(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), tokens = state.range(2);
  const DType dt = state.range(3) == 0 ? DType::kBF16 : DType::kF16;
  const int64_t wbytes = out * in * 2;
  WeightArena& arena = WeightArena::get();
  read_bandwidth();
  std::vector<float> x = random_activations(tokens * in, 1);
  std::vector<float> y(static_cast<size_t>(tokens * out));
  ThreadPool* pool = &ThreadPool::global();
  int64_t k = 0;
  for (auto _ : state) {
    cpu::matmul(x.data(), tokens, in, arena.copy(k++, wbytes), dt, out, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, wbytes, 2 * tokens * in * out);
  state.SetLabel(std::string(dtype_name(dt)) + " threads=" + std::to_string(pool->size()));
}

void gemv_args(benchmark::internal::Benchmark* b) {
  for (auto [out, in] :
       {std::pair{3072, 1024}, {1024, 3072}, {2048, 1024}, {6144, 1024}, {151936, 1024}}) {
    b->Args({out, in, 1, 0});
  }
  b->Args({3072, 1024, 1, 1});  // f16
  b->Args({3072, 1024, 4, 0});  // a few decode sequences
}
BENCHMARK(BM_Matmul)->Apply(gemv_args)->Name("gemv")->Unit(benchmark::kMicrosecond)->UseRealTime();

void gemm_args(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {64, 512}) {
    for (auto [out, in] : {std::pair{3072, 1024}, {1024, 3072}}) b->Args({out, in, tokens, 0});
  }
  b->Args({151936, 1024, 64, 0});
  b->Args({3072, 1024, 64, 1});  // f16
}
BENCHMARK(BM_Matmul)->Apply(gemm_args)->Name("gemm")->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode token through every projection of Qwen3-0.6B (28 layers of q,
// k, v, o, gate_up, down, then the tied LM head), bf16 weights laid out
// back to back in the arena (1.19 GB): the matmul part of a decode step
// against the bandwidth roofline.
void BM_Qwen3_0_6B_DecodeMatmuls(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  struct Proj {
    int64_t out, in;
  };
  const Proj layer[] = {{2048, 1024}, {1024, 1024}, {1024, 1024},
                        {1024, 2048}, {6144, 1024}, {1024, 3072}};
  const int layers = 28;
  const Proj head{151936, 1024};
  WeightArena& arena = WeightArena::get();
  read_bandwidth();
  int64_t total = 0;
  for (const Proj& p : layer) total += p.out * p.in * layers;
  total += head.out * head.in;
  if (total * 2 > arena.bytes()) {
    state.SkipWithError("arena smaller than the model");
    return;
  }
  std::vector<float> x = random_activations(tokens * 6144, 2);
  std::vector<float> y(static_cast<size_t>(tokens * head.out));
  ThreadPool* pool = &ThreadPool::global();
  for (auto _ : state) {
    int64_t off = 0;
    for (int l = 0; l < layers; ++l) {
      for (const Proj& p : layer) {
        cpu::matmul(x.data(), tokens, p.in, arena.at(off), DType::kBF16, p.out, y.data(), pool);
        off += p.out * p.in;
      }
    }
    cpu::matmul(x.data(), tokens, head.in, arena.at(off), DType::kBF16, head.out, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, total * 2, 2 * tokens * total);
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(tokens),
                                               benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Qwen3_0_6B_DecodeMatmuls)
    ->Arg(1)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ReadBandwidth(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(read_bandwidth());
  state.counters["read_bw_GB/s"] = read_bandwidth() / 1e9;
}
BENCHMARK(BM_ReadBandwidth)->Iterations(1);

}  // namespace
}  // namespace ferrite::bench
