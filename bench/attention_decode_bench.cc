// Decode attention of one token over a contiguous f32 KV cache, Qwen3-0.6B
// geometry (16 q heads, 8 kv heads, head_dim 128), written the simple way
// with the row kernels: blocks of scores by dot_f32, an online softmax
// (running max and sum, rescaling the accumulator when the max grows) and
// axpy_f32 of the value rows. The two q heads of a kv head share one pass over
// its keys and values; work is parallel over kv heads.
#include <benchmark/benchmark.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/vec.h"
#include "bench_util.h"

namespace ferrite::bench {
namespace {

constexpr int kHeads = 16, kKvHeads = 8, kHeadDim = 128, kBlock = 128;
constexpr int kGroup = kHeads / kKvHeads;

// q [kHeads][kHeadDim], k/v [positions][kKvHeads][kHeadDim], out like q.
void attention_decode(const float* q, const float* k, const float* v, int64_t positions, float* out,
                      ThreadPool* pool) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const int64_t row = kKvHeads * kHeadDim;
  pool->parallel_for(kKvHeads, [&](int64_t g0, int64_t g1) {
    float scores[kGroup][kBlock];
    for (int64_t g = g0; g < g1; ++g) {
      float m[kGroup], l[kGroup];
      float* acc[kGroup];
      for (int h = 0; h < kGroup; ++h) {
        m[h] = -std::numeric_limits<float>::infinity();
        l[h] = 0.0f;
        acc[h] = out + (g * kGroup + h) * kHeadDim;
        for (int d = 0; d < kHeadDim; ++d) acc[h][d] = 0.0f;
      }
      for (int64_t p0 = 0; p0 < positions; p0 += kBlock) {
        int64_t nb = std::min<int64_t>(kBlock, positions - p0);
        for (int h = 0; h < kGroup; ++h) {
          const float* qh = q + (g * kGroup + h) * kHeadDim;
          for (int64_t j = 0; j < nb; ++j) {
            scores[h][j] = cpu::dot_f32(qh, k + (p0 + j) * row + g * kHeadDim, kHeadDim) * scale;
          }
          float mb = cpu::max_f32(scores[h], nb);
          if (mb > m[h]) {
            float c = cpu::exp_f32(m[h] - mb);  // 0 on the first block
            cpu::scale_f32(c, acc[h], kHeadDim);
            l[h] *= c;
            m[h] = mb;
          }
          l[h] += cpu::exp_sub_sum_inplace(scores[h], nb, m[h]);
          for (int64_t j = 0; j < nb; ++j) {
            cpu::axpy_f32(scores[h][j], v + (p0 + j) * row + g * kHeadDim, acc[h], kHeadDim);
          }
        }
      }
      for (int h = 0; h < kGroup; ++h) cpu::scale_f32(1.0f / l[h], acc[h], kHeadDim);
    }
  });
}

void BM_AttentionDecode(benchmark::State& state) {
  const int64_t positions = state.range(0);
  std::vector<float> q = random_activations(kHeads * kHeadDim, 6);
  std::vector<float> k = random_activations(positions * kKvHeads * kHeadDim, 7);
  std::vector<float> v = random_activations(positions * kKvHeads * kHeadDim, 8);
  std::vector<float> out(kHeads * kHeadDim);
  ThreadPool* pool = &ThreadPool::global();
  for (auto _ : state) {
    attention_decode(q.data(), k.data(), v.data(), positions, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  const int64_t kv_bytes = 2 * positions * kKvHeads * kHeadDim * 4;
  state.SetBytesProcessed(state.iterations() * kv_bytes);
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * kHeads * kHeadDim * positions,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionDecode)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace ferrite::bench
