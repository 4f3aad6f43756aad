#include "backends/cpu/kernels/vec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "test_util.h"

namespace ferrite::cpu {
namespace {

using testing::make_weight;
using testing::random_f32;
using testing::same_bits;
using testing::Weight;

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
const int64_t kSizes[] = {1, 3, 15, 16, 17, 64, 100, 1000};

TEST(Vec, DotMatchesCanonical) {
  for (DType dt : kDtypes) {
    for (int64_t n : kSizes) {
      std::vector<float> a = random_f32(n, 1);
      Weight b = make_weight(dt, n, 2);
      float c = testing::canonical_dot(a.data(), b.values.data(), n);
      EXPECT_TRUE(same_bits(dot_row(a.data(), b.data(), dt, n), c)) << dtype_name(dt) << n;
      if (dt == DType::kF32) {
        EXPECT_TRUE(same_bits(dot_f32(a.data(), b.values.data(), n), c));
      }
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += static_cast<double>(a[i]) * b.values[i];
        mag += std::fabs(static_cast<double>(a[i]) * b.values[i]);
      }
      EXPECT_NEAR(c, ref, 6e-8 * (n / 16.0 + 6) * mag);
    }
  }
}

TEST(Vec, Axpy) {
  for (DType dt : kDtypes) {
    for (int64_t n : kSizes) {
      Weight x = make_weight(dt, n, 3);
      std::vector<float> y = random_f32(n, 4), y0 = y;
      axpy_row(0.37f, x.data(), dt, y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_TRUE(same_bits(y[i], testing::kernel_fma(0.37f, x.values[i], y0[i]))) << i;
      }
      if (dt == DType::kF32) {
        std::vector<float> z = y0;
        axpy_f32(0.37f, x.values.data(), z.data(), n);
        EXPECT_EQ(z, y);
      }
    }
  }
}

TEST(Vec, ScaleAndAdd) {
  for (int64_t n : kSizes) {
    std::vector<float> x = random_f32(n, 5), y = random_f32(n, 6), y0 = y;
    add_f32(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], y0[i] + x[i]);
    scale_f32(3.0f, y.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], (y0[i] + x[i]) * 3.0f);
  }
}

TEST(Vec, RmsNorm) {
  ThreadPool pool(2);
  const float eps = 1e-6f;
  for (DType dt : kDtypes) {
    for (int64_t n : kSizes) {
      for (int variant = 0; variant < 3; ++variant) {  // w, 1 + w, no weight
        bool add_one = variant == 1;
        const int64_t rows = 5;
        std::vector<float> x = random_f32(rows * n, 7, -3.0f, 3.0f);
        Weight w = make_weight(dt, n, 8);
        const void* wp = variant == 2 ? nullptr : w.data();
        std::vector<float> y(rows * n), y1(rows * n);
        rms_norm(x.data(), rows, n, wp, dt, eps, add_one, y.data(), &pool);
        rms_norm(x.data(), rows, n, wp, dt, eps, add_one, y1.data(), nullptr);
        EXPECT_EQ(y, y1);
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
          double inv = 1.0 / std::sqrt(ss / n + eps);
          for (int64_t i = 0; i < n; ++i) {
            double g = variant == 2 ? 1.0 : (add_one ? 1.0 + w.values[i] : w.values[i]);
            double ref = x[r * n + i] * inv * g;
            EXPECT_NEAR(y[r * n + i], ref, 1e-6 * (std::fabs(ref) + 1e-3))
                << dtype_name(dt) << " n=" << n << " variant=" << variant;
          }
        }
        // In place.
        std::vector<float> z = x;
        rms_norm_row(z.data(), wp, dt, n, eps, add_one, z.data());
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], y[i]);
      }
    }
  }
}

TEST(Vec, ExpAccuracyAndVectorEqualsScalar) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-87.0f, 88.5f);
  std::vector<float> x(4001);
  for (auto& v : x) v = d(rng);
  x[0] = 0.0f;
  x[1] = -100.0f;
  x[2] = 100.0f;
  x[3] = -std::numeric_limits<float>::infinity();
  x[4] = 1e-8f;
  std::vector<float> e = x;
  exp_sub_sum_inplace(e.data(), static_cast<int64_t>(e.size()), 0.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    float s = exp_f32(x[i]);
    ASSERT_TRUE(same_bits(e[i], s)) << x[i] << ": " << e[i] << " vs " << s;
    double ref = std::exp(static_cast<double>(x[i]));
    if (x[i] < -87.3f) {
      EXPECT_EQ(s, 0.0f);
    } else if (x[i] > 88.72f) {
      EXPECT_TRUE(std::isinf(s));
    } else {
      EXPECT_NEAR(s, ref, 3e-7 * ref) << x[i];
    }
  }
}

TEST(Vec, SiluMul) {
  for (int64_t n : kSizes) {
    std::vector<float> g = random_f32(n, 10, -20.0f, 20.0f), u = random_f32(n, 11);
    std::vector<float> out(n);
    silu_mul(g.data(), u.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      EXPECT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << g[i];
    }
    // In place on gate.
    std::vector<float> g2 = g;
    silu_mul(g2.data(), u.data(), n, g2.data());
    EXPECT_EQ(g2, out);
  }
}

TEST(Vec, Softmax) {
  for (int64_t n : kSizes) {
    std::vector<float> x = random_f32(n, 12, -30.0f, 30.0f);
    if (n > 2) x[1] = -std::numeric_limits<float>::infinity();  // masked
    std::vector<float> y = x;
    softmax_inplace(y.data(), n);
    double m = -INFINITY, sum = 0;
    for (float v : x) m = std::max<double>(m, v);
    for (float v : x) sum += std::exp(v - m);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      double ref = std::exp(x[i] - m) / sum;
      EXPECT_NEAR(y[i], ref, 1e-6 * ref + 1e-12);
      total += y[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
    EXPECT_EQ(max_f32(x.data(), n), static_cast<float>(m));
  }
  std::vector<float> masked(20, -std::numeric_limits<float>::infinity());
  softmax_inplace(masked.data(), 20);
  for (float v : masked) EXPECT_EQ(v, 0.0f);
}

TEST(Vec, Conversions) {
  std::mt19937 rng(13);
  for (int64_t n : kSizes) {
    std::vector<uint16_t> h(n);
    for (auto& v : h) v = static_cast<uint16_t>(rng());
    std::vector<float> f(n);
    bf16_to_f32_row(h.data(), f.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(same_bits(f[i], bf16_to_f32(h[i])));
    f16_to_f32_row(h.data(), f.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      float s = f16_to_f32(h[i]);
      // vcvtph2ps quiets signalling NaNs; any NaN is fine for a NaN.
      if (std::isnan(s)) {
        EXPECT_TRUE(std::isnan(f[i]));
      } else {
        EXPECT_TRUE(same_bits(f[i], s)) << h[i];
      }
    }
    std::vector<float> g(n);
    to_f32_row(h.data(), DType::kBF16, g.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(same_bits(g[i], bf16_to_f32(h[i])));

    // f32 -> 16 bit: random bit patterns for bf16 (NaN, inf, subnormals
    // included); finite values for f16 (hardware NaN payloads differ).
    std::vector<float> src(n);
    for (auto& v : src) {
      uint32_t u = static_cast<uint32_t>(rng());
      std::memcpy(&v, &u, 4);
    }
    std::vector<uint16_t> out(n);
    f32_to_bf16_row(src.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], f32_to_bf16(src[i])) << src[i];
    std::vector<float> fin = random_f32(n, 14, -70000.0f, 70000.0f);
    for (int64_t i = 0; i < n; i += 3) fin[i] *= 1e-9f;  // f16 subnormals
    f32_to_f16_row(fin.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], f32_to_f16(fin[i])) << fin[i];
  }
}

}  // namespace
}  // namespace ferrite::cpu
