// Products of 9 to hundreds of tokens on u4_g128 weights through the
// Marlin-class 4-bit tile (kernels/u4_tile.cuh, Tuning::cuda_u4_tile_tokens),
// against an f64 host product of the same bf16 activations and the weights
// dequantized in f32 (mma.sync: the tile multiplies q - z exactly and
// scales in f32) or dequantized and rounded to bf16 (wgmma: its values,
// bitwise for the f16 scales used here): only the f32 summation differs.
// Cases: each token tile (16, 32, 64, 128), token counts past a tile, rows past a
// 128-row tile, k of an odd number of 128-blocks (rows 8 bytes off a
// 16-byte piece), split k, bf16 / f32 outputs, accumulate + bias. Skipped
// without a GPU.
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
#include "backends/cuda/kernels/u4_tile.cuh"
#include "backends/cuda/kernels/u4_tile_formats.h"
#include "product_buffers.h"
#include "tensor/dtype.h"

namespace ferrite {
namespace {

using U4Case = testing::ProductCase;

// u4_g128 rows of random codes, zero points 0..16 and f16 scales.
std::vector<uint8_t> u4_weight(int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<uint8_t> w(static_cast<size_t>(dtype_bytes(DType::kU4G128, n * k)));
  std::uniform_int_distribution<int> byte(0, 255), zero(0, 16);
  std::uniform_real_distribution<float> scale(0.5f, 2.0f);
  for (int64_t b = 0; b < n * k / 128; ++b) {
    uint8_t* blk = w.data() + b * 72;
    const float d = f16_to_f32(f32_to_f16(scale(rng) / (8.0f * std::sqrt(float(k)))));
    std::memcpy(blk, &d, 4);
    blk[4] = static_cast<uint8_t>(zero(rng));
    blk[5] = blk[6] = blk[7] = 0;
    for (int i = 0; i < 64; ++i) blk[8 + i] = static_cast<uint8_t>(byte(rng));
  }
  return w;
}

// tiled: the weights repacked into U4Layout::kTiles and the tile launched
// directly (gemm() takes row-major u4_g128 only).
void run_case(const U4Case& c, bool wgmma, std::mt19937& rng, int stage_steps = 0,
              bool tiled = false) {
  SCOPED_TRACE(std::string(wgmma ? "wgmma " : "mma.sync ") + (tiled ? "tiled, " : "") +
               std::to_string(stage_steps) +
               " steps a stage, m " + std::to_string(c.m) + " n " +
               std::to_string(c.n) + " k " + std::to_string(c.k) + " out " +
               std::string(dtype_name(c.out)) + (c.accumulate_bias ? " acc+bias" : ""));
  const int64_t m = c.m, n = c.n, k = c.k;
  const std::vector<uint8_t> wq = u4_weight(n, k, rng);
  std::vector<float> wd(static_cast<size_t>(n * k));
  dequantize_row(DType::kU4G128, wq.data(), wd.data(), n * k);
  if (wgmma)
    for (float& v : wd) v = bf16_to_f32(f32_to_bf16(v));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> xh(static_cast<size_t>(m * k));
  for (uint16_t& v : xh) v = f32_to_bf16(nd(rng));
  std::vector<float> init(static_cast<size_t>(m * n), 0.0f), bias(static_cast<size_t>(n), 0.0f);
  if (c.accumulate_bias) {
    for (float& v : init) v = bf16_to_f32(f32_to_bf16(nd(rng)));
    for (float& v : bias) v = nd(rng);
  }
  std::vector<double> ref(static_cast<size_t>(m * n));
  double mag = 0.0;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0.0;
      const float* wr = wd.data() + r * k;
      const uint16_t* xr = xh.data() + t * k;
      for (int64_t i = 0; i < k; ++i) acc += double(bf16_to_f32(xr[i])) * wr[i];
      ref[t * n + r] = acc + init[t * n + r] + bias[r];
      mag = std::max(mag, std::fabs(acc));
    }

  cuda::BackendState st;
  ASSERT_EQ(cudaStreamCreate(&st.stream), cudaSuccess);
  st.u4_tile_tokens = int64_t{1} << 20;  // gemm_init sizes the split-k scratch for it
  st.u4_tile_wgmma = wgmma;
  st.u4_tile_stage_steps = stage_steps;
  ASSERT_TRUE(cuda::gemm_init(st).is_ok());
  std::vector<uint8_t> tiles;
  if (tiled) {
    tiles.resize(static_cast<size_t>(cuda::u4tile::tiled_bytes(n, k)));
    cuda::u4tile::tile_u4_rows(wq.data(), tiles.data(), n, k);
  }
  testing::ProductBuffers b;
  b.upload(tiled ? tiles : wq, xh, init, bias, m, n, c.out);
  if (::testing::Test::HasFatalFailure()) return;
  // Twice: the second launch finds the split-k counters reset by the first.
  for (int rep = 0; rep < 2; ++rep) {
    if (rep == 1) {
      if (c.accumulate_bias) break;  // the first call changed its input
      ASSERT_EQ(cudaMemset(b.out, 0xFF, m * n * dtype_bytes(c.out, 1)), cudaSuccess);
    }
    const int64_t before = st.u4_tile_products;
    const void* bias_p = c.accumulate_bias ? b.bias : nullptr;
    Status s =
        tiled ? cuda::launch_u4_tile(st.stream, st.num_sms, b.x, DType::kBF16, m, k, b.w,
                                     DType::kU4G128, n, b.out, c.out, c.accumulate_bias, bias_p,
                                     DType::kF32,
                                     cuda::quant_tile_scratch(st),
                                     false, 1, cuda::U4Layout::kTiles)
              : cuda::gemm(st, b.x, DType::kBF16, m, k, b.w, DType::kU4G128, n, b.out, c.out,
                           c.accumulate_bias, bias_p, DType::kF32);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    ASSERT_EQ(cudaStreamSynchronize(st.stream), cudaSuccess);
    if (!tiled) {
      ASSERT_EQ(st.u4_tile_products, before + 1) << "the 4-bit tile was not taken";
    }
    std::vector<float> got;
    b.read_out(&got);
    if (::testing::Test::HasFatalFailure()) return;
    double worst = 0.0;
    int64_t bad = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      // f32 sums of exact bf16 products: ~1e-6 of the largest output; plus
      // the output's rounding (bf16: 2^-8 of the value; twice with a bias,
      // which is added to the rounded product's sum).
      const double roundings = c.accumulate_bias ? 2.0 : 1.0;
      const double tol =
          2e-5 * mag + (c.out == DType::kF32
                            ? 0.0
                            : roundings * 0x1p-8 * (std::fabs(ref[i]) + std::fabs(init[i])));
      const double e = std::fabs(double(got[i]) - ref[i]);
      if (!(e <= tol)) {
        worst = std::max(worst, std::isfinite(e) ? e / std::max(tol, 1e-30) : 1e30);
        if (++bad <= 5)
          ADD_FAILURE() << "out[" << i / n << ", " << i % n << "] = " << got[i] << ", want "
                        << ref[i] << " (tolerance " << tol << ")";
      }
    }
    EXPECT_EQ(bad, 0) << "largest error / tolerance " << worst;
  }
  cuda::gemm_shutdown(st);
  cudaStreamDestroy(st.stream);
}

const std::vector<U4Case>& cases() {
  static const std::vector<U4Case> all = {
      {9, 128, 128, DType::kF32, false},    // one k step, an odd number of blocks a row
      {16, 256, 384, DType::kBF16, false},  // rows 8 bytes off a piece every other row
      {32, 200, 1024, DType::kF32, true},   // rows past a 128-row tile
      {33, 384, 2048, DType::kBF16, true},  // the 64-token tile
      {64, 512, 4096, DType::kF32, false},  // split k
      {100, 1024, 1024, DType::kBF16, false},
      {128, 4096, 512, DType::kF32, false},  // enough tiles: no split
      {130, 640, 1536, DType::kF32, true},   // 128 + 2 tokens
      {300, 256, 768, DType::kBF16, false},
  };
  return all;
}

// Every case of cases() in one form of the tile, from one seed.
void run_cases(uint32_t seed, bool wgmma, int stage_steps = 0, bool tiled = false) {
  std::mt19937 rng(seed);
  for (const U4Case& c : cases()) {
    run_case(c, wgmma, rng, stage_steps, tiled);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CudaU4TileTest, MatchesHostProductOfTheF32Weights) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  run_cases(29, false);
}

// One and two k steps a pipeline stage forced for every token tile
// (BackendState::u4_tile_stage_steps; the default takes two for 16-token
// tiles only): odd step counts a split leave a stage of one step; the last
// row's stage must not read past the tensor.
TEST(CudaU4TileTest, EachStageDepthMatchesHostProductOfTheF32Weights) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  for (int steps : {1, 2}) {
    run_cases(37 + steps, false, steps);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The tiled weight layout (U4Layout::kTiles, u4_tile_formats.h
// tile_u4_rows): the same cases.
TEST(CudaU4TileTest, TiledLayoutMatchesHostProductOfTheF32Weights) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  run_cases(41, false, 1, true);
}

// The warpgroup-MMA form (Tuning::cuda_u4_tile_wgmma): the same cases.
TEST(CudaU4TileTest, WgmmaMatchesHostProductOfTheBf16Weights) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  run_cases(31, true);
}

}  // namespace
}  // namespace ferrite
