// Products of 1 to 64 tokens on q4_k / q6_k / q8_0 weights through the int8 tensor-core
// tile (kernels/quant_mmq.cuh, Tuning::cuda_quant_mmq_tokens) by gemm(),
// against an f64 host product of the weights dequantized in f32 and the
// activations quantized on the host exactly as the kernel does (int8 per
// token and 256 elements, q8_0 32, scale amax / 127): only the f32 arithmetic of the
// scales and sums differs. Cases: one 256-block (one split, the outputs
// written by the product itself), token counts off the 8-token tiles, rows
// past a 64-row block, split k (a reduction launch), bf16 / f32 outputs,
// accumulate + bias; each under both split rules (Tuning::
// cuda_quant_mmq_waves), and mmq_splits' choices. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "product_buffers.h"
#include "tensor/dtype.h"

namespace ferrite {
namespace {

using MmqCase = testing::ProductCase;
using testing::random_blocks;

void run_case(DType w_dt, const MmqCase& c, std::mt19937& rng) {
  SCOPED_TRACE(std::string(dtype_name(w_dt)) + " m " + std::to_string(c.m) + " n " +
               std::to_string(c.n) + " k " + std::to_string(c.k) + " out " +
               std::string(dtype_name(c.out)) + (c.accumulate_bias ? " acc+bias" : ""));
  const int64_t m = c.m, n = c.n, k = c.k;
  const std::vector<uint8_t> wq = random_blocks(w_dt, n, k, rng);
  std::vector<float> wd(static_cast<size_t>(n * k));
  dequantize_row(w_dt, wq.data(), wd.data(), n * k);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> xh(static_cast<size_t>(m * k));
  for (uint16_t& v : xh) v = f32_to_bf16(nd(rng));
  // The kernel's activations: int8 per token and 256 elements (q8_0: 32).
  const int64_t group = w_dt == DType::kQ8_0 ? 32 : 256;
  std::vector<double> xqd(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t b = 0; b < k / group; ++b) {
      const uint16_t* xb = xh.data() + t * k + group * b;
      float amax = 0.0f;
      for (int i = 0; i < group; ++i) amax = std::max(amax, std::fabs(bf16_to_f32(xb[i])));
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
      for (int i = 0; i < group; ++i) {
        const float q = std::clamp(std::nearbyint(bf16_to_f32(xb[i]) * id), -127.0f, 127.0f);
        xqd[t * k + group * b + i] = double(q) * d;
      }
    }
  std::vector<float> init(static_cast<size_t>(m * n), 0.0f), bias(static_cast<size_t>(n), 0.0f);
  if (c.accumulate_bias) {
    for (float& v : init) v = bf16_to_f32(f32_to_bf16(nd(rng)));
    for (float& v : bias) v = nd(rng);
  }
  std::vector<double> ref(static_cast<size_t>(m * n)), mag(static_cast<size_t>(m * n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0.0, a = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        acc += double(wd[r * k + i]) * xqd[t * k + i];
        a += std::fabs(double(wd[r * k + i]) * xqd[t * k + i]);
      }
      ref[t * n + r] = acc + init[t * n + r] + bias[r];
      mag[t * n + r] = a;
    }

  cuda::BackendState st;
  ASSERT_EQ(cudaStreamCreate(&st.stream), cudaSuccess);
  st.quant_dot = true;
  st.quant_mmq_tokens = 64;  // gemm_init allocates its buffers
  st.quant_mmq_min_tokens = 1;  // decode token counts too (Tuning::cuda_quant_mmq_min_tokens)
  ASSERT_TRUE(cuda::gemm_init(st).is_ok());
  // The wave rule's splits, then the older rule's.
  for (bool waves : {true, false}) {
    st.quant_mmq_waves = waves;
    SCOPED_TRACE(waves ? "wave splits" : "~3 blocks an SM");
    testing::ProductBuffers b;
    b.upload(wq, xh, init, bias, m, n, c.out);
    if (::testing::Test::HasFatalFailure()) return;
    const void* bias_p = c.accumulate_bias ? b.bias : nullptr;
    ASSERT_TRUE(cuda::quant_mmq_supported(DType::kBF16, w_dt, b.w, m, k, n, c.out));
    Status s = cuda::gemm(st, b.x, DType::kBF16, m, k, b.w, w_dt, n, b.out, c.out,
                          c.accumulate_bias, bias_p, DType::kF32);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    ASSERT_EQ(cudaStreamSynchronize(st.stream), cudaSuccess);
    std::vector<float> got;
    b.read_out(&got);
    if (::testing::Test::HasFatalFailure()) return;
    int64_t bad = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      // f32 scale products and sums: ~1e-5 of the terms' magnitude; plus the
      // output's rounding (bf16: 2^-8 of the value; twice with a bias).
      const double roundings = c.accumulate_bias ? 2.0 : 1.0;
      const double tol = 1e-5 * mag[i] + 1e-6 +
                         (c.out == DType::kF32
                              ? 0.0
                              : roundings * 0x1p-8 * (std::fabs(ref[i]) + std::fabs(init[i])));
      const double e = std::fabs(double(got[i]) - ref[i]);
      if (!(e <= tol) && ++bad <= 5)
        ADD_FAILURE() << "out[" << i / n << ", " << i % n << "] = " << got[i] << ", want " << ref[i]
                      << " (tolerance " << tol << ")";
    }
    EXPECT_EQ(bad, 0);
  }
  cuda::gemm_shutdown(st);
  cudaStreamDestroy(st.stream);
}

TEST(CudaQuantMmqTest, MatchesTheHostProductOfTheQuantizedActivations) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(1234);
  const MmqCase cases[] = {
      {1, 64, 256, DType::kF32, false},     // one token (a decode step)
      {5, 100, 512, DType::kBF16, true},    // a part of one 8-token tile, accumulate + bias
      {8, 130, 768, DType::kF32, true},     // one whole 8-token tile
      {9, 64, 256, DType::kF32, false},     // one 256-block, one row block: one split,
                                            // written directly
      {16, 100, 256, DType::kBF16, true},   // the same with accumulate + bias
      {16, 100, 512, DType::kBF16, true},   // rows past a 64-row block
      {33, 256, 4096, DType::kF32, false},  // a partial 8-token tile, split k
      {40, 130, 768, DType::kF32, true},    // three 256-blocks (q6_k: rows 2-byte aligned)
      {64, 4096, 2048, DType::kBF16, false},
  };
  for (DType w_dt : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0})
    for (const MmqCase& c : cases) run_case(w_dt, c, rng);
}

// The products of one unchanged input (gemm_projections: Q, K and V; gate
// and up) quantize it once per activation group (q4_k and q6_k share 256,
// q8_0 takes 32), with the same outputs as each product quantizing it itself.
TEST(CudaQuantMmqTest, ProductsOfOneInputQuantizeItOnce) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(99);
  const int64_t m = 24, k = 512, n = 128;
  const DType formats[] = {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0};
  cuda::BackendState st;
  ASSERT_EQ(cudaStreamCreate(&st.stream), cudaSuccess);
  st.quant_dot = true;
  st.quant_mmq_tokens = 64;
  st.quant_mmq_share_act = true;  // Tuning::cuda_quant_mmq_share_act
  ASSERT_TRUE(cuda::gemm_init(st).is_ok());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> xh(static_cast<size_t>(m * k));
  for (uint16_t& v : xh) v = f32_to_bf16(nd(rng));
  void* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, xh.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  void* w[3] = {};
  void* out[2][3] = {};
  for (int f = 0; f < 3; ++f) {
    const std::vector<uint8_t> wq = random_blocks(formats[f], n, k, rng);
    ASSERT_EQ(cudaMalloc(&w[f], wq.size()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(w[f], wq.data(), wq.size(), cudaMemcpyHostToDevice), cudaSuccess);
    for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaMalloc(&out[r][f], m * n * 4), cudaSuccess);
  }
  // Run 0: each product on its own; run 1: as one stage's products.
  int64_t launched[2] = {};
  for (int r = 0; r < 2; ++r) {
    const int64_t before = st.mmq_quantized;
    for (int f = 0; f < 3; ++f) {
      st.fp8_act_same_x = r == 1 && f > 0;
      const Status s = cuda::gemm(st, x, DType::kBF16, m, k, w[f], formats[f], n, out[r][f],
                                  DType::kF32, false);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
    st.fp8_act_same_x = false;
    launched[r] = st.mmq_quantized - before;
  }
  ASSERT_EQ(cudaStreamSynchronize(st.stream), cudaSuccess);
  EXPECT_EQ(launched[0], 3);
  EXPECT_EQ(launched[1], 2);  // q6_k reused q4_k's; q8_0's group differs
  for (int f = 0; f < 3; ++f) {
    std::vector<float> a(static_cast<size_t>(m * n)), b(a.size());
    ASSERT_EQ(cudaMemcpy(a.data(), out[0][f], m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.data(), out[1][f], m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << dtype_name(formats[f]);
  }
  for (int f = 0; f < 3; ++f) {
    cudaFree(w[f]);
    for (int r = 0; r < 2; ++r) cudaFree(out[r][f]);
  }
  cudaFree(x);
  cuda::gemm_shutdown(st);
  cudaStreamDestroy(st.stream);
}

// The split counts of Qwen3-8B's products at 64 tokens on the H200 (132
// SMs x 3 blocks; the partials' room kMmqPartialFloats / (64 n)), and the
// bounds of any.
TEST(CudaQuantMmqTest, SplitsRunTheBlocksInFewWaves) {
  auto room = [](int64_t n) { return cuda::kMmqPartialFloats / (64 * n); };
  EXPECT_EQ(cuda::mmq_splits(192, 16, 396, room(12288), true), 2);   // one wave of 8 steps
  EXPECT_EQ(cuda::mmq_splits(192, 16, 396, room(12288), false), 3);  // 1.45 waves of 6
  EXPECT_EQ(cuda::mmq_splits(64, 48, 396, room(4096), true), 6);     // 4,096 x 12,288
  EXPECT_EQ(cuda::mmq_splits(64, 48, 396, room(4096), false), 7);    // 1.13 waves of 7
  EXPECT_EQ(cuda::mmq_splits(64, 16, 396, room(4096), true), 6);     // 4,096 x 4,096
  EXPECT_EQ(cuda::mmq_splits(384, 16, 396, room(24576), true), 1);   // 24,576 x 4,096
  EXPECT_EQ(cuda::mmq_splits(2374, 16, 396, room(151936), true), 1); // the LM head
  for (bool waves : {true, false})
    for (int64_t tiles : {1, 3, 100, 512, 1025, 4000})
      for (int64_t steps : {1, 2, 16, 48, 256})
        for (int64_t r : {0, 1, 5, 64}) {
          const int64_t s = cuda::mmq_splits(tiles, steps, 396, r, waves);
          EXPECT_GE(s, 1);
          EXPECT_LE(s, std::max<int64_t>(1, std::min(steps, r)));
          const int64_t per = (steps + s - 1) / s;
          EXPECT_EQ((steps + per - 1) / per, s) << "whole runs of steps";
        }
}

}  // namespace
}  // namespace ferrite
