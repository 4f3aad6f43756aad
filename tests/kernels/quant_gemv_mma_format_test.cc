// The 128-element block formats as the CUDA tensor-core decode GEMV reads
// them (backends/cuda/kernels/quant_gemv_mma_formats.h), checked on the CPU
// where CI runs (the kernel itself runs in cuda_test's CudaQuantMmaTest on
// the GPU): one warp's 16 rows x 8 tokens of a row item, emulated with the
// kernel's per-lane words, decoded f16 pairs, staged activations and the
// mma layouts of mma.cuh, give the exact product of the dequantized weights
// and the activations (f16 codes and f16 activations: every product exact,
// the sums in f64 here). A lane reading a wrong word, a pair in the wrong
// slot or activations staged in another order is off by whole products.
#include "backends/cuda/kernels/quant_gemv_mma_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mma_emulation.h"
#include "tensor/dtype.h"
#include "test_util.h"

namespace ferrite::cuda::mmagemv {
namespace {

using ferrite::cpu::testing::random_f32;

void emulate_mma_f16(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], double (&c)[32][4]) {
  ferrite::cuda::testing::emulate_mma_m16n8k16(a, b, c, [](uint16_t h) { return f16_to_f32(h); });
}

// 16 rows of k elements in format F (dt), 8 tokens: the kernel's loop over
// blocks and halves for one warp, against the f64 product.
template <int F>
void check_warp(DType dt, int64_t k, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " k " + std::to_string(k));
  using Fmt = MmaFmt<F>;
  const int64_t rows = 16, row_bytes = dtype_bytes(dt, k);
  const std::vector<float> wf = random_f32(rows * k, seed, -1.0f, 1.0f);
  // 8-byte aligned rows as the kernel's shared memory holds them (a bulk
  // copy a row, 16-byte aligned).
  std::vector<uint64_t> store(static_cast<size_t>((rows * row_bytes + 7) / 8));
  auto* bytes = reinterpret_cast<uint8_t*>(store.data());
  quantize_row(dt, wf.data(), bytes, rows * k);
  if (dt == DType::kU4G128) ferrite::cpu::testing::u4_zero_point_ends(bytes);
  std::vector<float> w(static_cast<size_t>(rows * k));
  dequantize_row(dt, bytes, w.data(), rows * k);
  // Activations exact in f16, staged as the kernel stages them.
  const std::vector<float> xr = random_f32(8 * k, seed + 1, -4.0f, 4.0f);
  std::vector<uint16_t> xs(static_cast<size_t>(8 * k));
  std::vector<double> x(xr.size());
  for (int64_t t = 0; t < 8; ++t)
    for (int64_t e = 0; e < k; ++e) {
      const float v = std::round(xr[t * k + e] * 256.0f) / 256.0f;
      x[t * k + e] = v;
      xs[t * k + (e & ~int64_t{63}) + Fmt::staged_pos(static_cast<int>(e & 63))] = f32_to_f16(v);
    }
  double acc[32][4] = {};
  for (int64_t j = 0; j < k / 128; ++j) {
    double ct[32][4] = {};
    for (int h = 0; h < 2; ++h) {
      uint32_t a[4][32][4], b[4][32][2];  // [mma step][lane]
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, tq = lane & 3;
        const uint8_t* b0 = bytes + g * row_bytes + j * Fmt::kBytes;
        const uint8_t* b1 = bytes + (g + 8) * row_bytes + j * Fmt::kBytes;
        uint32_t w0[4], w1[4], lo0[4], hi0[4], lo1[4], hi1[4];
        Fmt::words(b0, h, tq, w0);
        Fmt::words(b1, h, tq, w1);
        Fmt::decode(w0, Fmt::row_consts(b0), lo0, hi0);
        Fmt::decode(w1, Fmt::row_consts(b1), lo1, hi1);
        uint32_t xv[8];  // token g's two 16-byte loads
        std::memcpy(xv, xs.data() + g * k + j * 128 + 64 * h + 16 * tq, 32);
        for (int s = 0; s < 4; ++s) {
          a[s][lane][0] = lo0[s];
          a[s][lane][1] = lo1[s];
          a[s][lane][2] = hi0[s];
          a[s][lane][3] = hi1[s];
          b[s][lane][0] = xv[2 * s];
          b[s][lane][1] = xv[2 * s + 1];
        }
      }
      for (int s = 0; s < 4; ++s) emulate_mma_f16(a[s], b[s], ct);
    }
    // The block's d, as the kernel reads it after the mma.
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2;
      for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0);
        float d;
        std::memcpy(&d, bytes + row * row_bytes + j * Fmt::kBytes, 4);
        acc[lane][i] += double(d) * ct[lane][i];
      }
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, tq = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i >= 2 ? 8 : 0), t = 2 * tq + (i & 1);
      double exact = 0, mag = 0;
      for (int64_t e = 0; e < k; ++e) {
        exact += double(w[row * k + e]) * x[t * k + e];
        mag += std::fabs(double(w[row * k + e]) * x[t * k + e]);
      }
      // d q products: the reference rounds each to f32 (dequantize_row),
      // the kernel multiplies the exact sum by d.
      EXPECT_NEAR(acc[lane][i], exact, 1e-6 * (1 + mag)) << "row " << row << " token " << t;
    }
  }
}

TEST(QuantGemvMmaFormats, OneWarpItemMatchesTheProduct) {
  check_warp<kF8>(DType::kF8B128, 512, 21);
  check_warp<kF8>(DType::kF8B128, 128 * 3, 22);  // rows of 396 bytes
  check_warp<kU4>(DType::kU4G128, 512, 23);
  check_warp<kU4>(DType::kU4G128, 128 * 3, 24);  // rows of 216 bytes: blocks at offsets 0 and 8
}

// The staging orders are permutations of each run.
TEST(QuantGemvMmaFormats, StagingIsAPermutation) {
  for (int f = 0; f < 2; ++f) {
    std::vector<int> seen(64, 0);
    for (int c = 0; c < 64; ++c) {
      const int p = f == 0 ? MmaFmt<kF8>::staged_pos(c) : MmaFmt<kU4>::staged_pos(c);
      ASSERT_GE(p, 0);
      ASSERT_LT(p, 64);
      ++seen[p];
    }
    for (int p = 0; p < 64; ++p) EXPECT_EQ(seen[p], 1) << "format " << f << " place " << p;
  }
}

}  // namespace
}  // namespace ferrite::cuda::mmagemv
