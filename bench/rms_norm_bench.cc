// rms_norm over rows of the Qwen3-0.6B hidden size with a bf16 weight.
#include <benchmark/benchmark.h>

#include <vector>

#include "backends/cpu/kernels/vec.h"
#include "bench_util.h"
#include "tensor/dtype.h"

namespace ferrite::bench {
namespace {

void BM_RmsNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), n = state.range(1);
  std::vector<float> x = random_activations(rows * n, 3), y(static_cast<size_t>(rows * n));
  std::vector<uint16_t> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w[i] = f32_to_bf16(1.0f + 0.001f * static_cast<float>(i % 7));
  ThreadPool* pool = &ThreadPool::global();
  for (auto _ : state) {
    cpu::rms_norm(x.data(), rows, n, w.data(), DType::kBF16, 1e-6f, false, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * n * 8);  // read x, write y
}
BENCHMARK(BM_RmsNorm)
    ->Args({1, 1024})
    ->Args({64, 1024})
    ->Args({512, 1024})
    ->Args({16, 128})  // per-head q-norm of one token
    ->UseRealTime();

void BM_SiluMul(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g = random_activations(n, 4), u = random_activations(n, 5), out(n);
  for (auto _ : state) {
    cpu::silu_mul(g.data(), u.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_SiluMul)->Arg(3072)->Arg(64 * 3072);

}  // namespace
}  // namespace ferrite::bench
