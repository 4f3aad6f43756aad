#include "backends/cpu/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace ferrite::cpu {
namespace {

using testing::make_weight;
using testing::random_f32;
using testing::same_bits;
using testing::Weight;

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// y[t][o] in double, with the bound sum |x||w| for the tolerance.
void reference(const std::vector<float>& x, int64_t tokens, int64_t in, const Weight& w,
               int64_t out, std::vector<double>* y, std::vector<double>* mag) {
  y->assign(tokens * out, 0.0);
  mag->assign(tokens * out, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0, m = 0;
      for (int64_t i = 0; i < in; ++i) {
        double p = static_cast<double>(x[t * in + i]) * w.values[o * in + i];
        s += p;
        m += std::fabs(p);
      }
      (*y)[t * out + o] = s;
      (*mag)[t * out + o] = m;
    }
  }
}

TEST(Matmul, MatchesDoubleReference) {
  ThreadPool pool(2);
  const int64_t ins[] = {1, 3, 17, 64, 1000};
  const int64_t outs[] = {1, 7, 13, 64};
  const int64_t toks[] = {1, 2, 3, 5, 8, 9, 17, 33};
  uint32_t seed = 1;
  for (DType dt : kDtypes) {
    for (int64_t in : ins) {
      for (int64_t out : outs) {
        Weight w = make_weight(dt, out * in, seed++);
        for (int64_t tokens : toks) {
          std::vector<float> x = random_f32(tokens * in, seed++);
          std::vector<float> y(tokens * out, NAN);
          matmul(x.data(), tokens, in, w.data(), dt, out, y.data(), &pool);
          std::vector<double> ref, mag;
          reference(x, tokens, in, w, out, &ref, &mag);
          for (int64_t k = 0; k < tokens * out; ++k) {
            // Each lane adds in/16 products, then 4 tree levels: a bound of
            // that many f32 roundings of the magnitude.
            double tol = 6e-8 * (in / 16.0 + 6) * mag[k] + 1e-30;
            ASSERT_NEAR(y[k], ref[k], tol) << dtype_name(dt) << " in=" << in << " out=" << out
                                           << " tokens=" << tokens << " k=" << k;
          }
        }
      }
    }
  }
}

// Every element equals the canonical scalar dot product bitwise, whatever
// the path (streaming or packed), tile position or thread count.
TEST(Matmul, BitwiseCanonicalAcrossThreadsAndBatch) {
  ThreadPool pool1(1), pool2(2);
  struct Shape {
    int64_t tokens, in, out;
  };
  const Shape shapes[] = {{1, 1000, 37},
                          {3, 129, 250},
                          {7, 64, 13},
                          {8, 1000, 61},
                          {33, 17, 100},
                          {300, 257, 45},
                          // Rows long enough to be reduced in blocks.
                          {20, 1500, 19},
                          {9, 2049, 7},
                          {70, 3072, 13}};
  uint32_t seed = 100;
  for (DType dt : kDtypes) {
    for (const Shape& s : shapes) {
      Weight w = make_weight(dt, s.out * s.in, seed++);
      std::vector<float> x = random_f32(s.tokens * s.in, seed++);
      std::vector<float> y0(s.tokens * s.out), y1(s.tokens * s.out), y2(s.tokens * s.out);
      matmul(x.data(), s.tokens, s.in, w.data(), dt, s.out, y0.data(), nullptr);
      matmul(x.data(), s.tokens, s.in, w.data(), dt, s.out, y1.data(), &pool1);
      matmul(x.data(), s.tokens, s.in, w.data(), dt, s.out, y2.data(), &pool2);
      for (int64_t t = 0; t < s.tokens; ++t) {
        std::vector<float> single(s.out);
        matmul(x.data() + t * s.in, 1, s.in, w.data(), dt, s.out, single.data(), &pool2);
        for (int64_t o = 0; o < s.out; ++o) {
          float c = testing::canonical_dot(x.data() + t * s.in, w.values.data() + o * s.in, s.in);
          int64_t k = t * s.out + o;
          ASSERT_TRUE(same_bits(y0[k], c) && same_bits(y1[k], c) && same_bits(y2[k], c) &&
                      same_bits(single[o], c))
              << dtype_name(dt) << " tokens=" << s.tokens << " in=" << s.in << " out=" << s.out
              << " t=" << t << " o=" << o << ": " << y0[k] << " " << y1[k] << " " << y2[k] << " "
              << single[o] << " vs " << c;
        }
      }
    }
  }
}

TEST(Matmul, RowsSubsetStridesAndAccumulate) {
  ThreadPool pool(2);
  const int64_t in = 100, out = 50, tokens = 12, ldx = 130, ldy = 40;
  for (DType dt : kDtypes) {
    Weight w = make_weight(dt, out * in, 7);
    std::vector<float> x = random_f32(tokens * ldx, 8);
    for (int64_t tk : {int64_t{1}, int64_t{5}, tokens}) {
      const int64_t o0 = 9, o1 = 44;  // 35 rows
      std::vector<float> y(tk * ldy, 0.5f);
      matmul_rows(x.data(), ldx, tk, in, w.data(), dt, o0, o1, y.data(), ldy, true, &pool);
      for (int64_t t = 0; t < tk; ++t) {
        for (int64_t j = 0; j < ldy; ++j) {
          float got = y[t * ldy + j];
          if (j >= o1 - o0) {
            EXPECT_EQ(got, 0.5f);  // untouched past the range
            continue;
          }
          float c = testing::canonical_dot(x.data() + t * ldx, w.values.data() + (o0 + j) * in, in);
          EXPECT_TRUE(same_bits(got, 0.5f + c)) << got << " vs " << 0.5f + c;
        }
      }
    }
  }
}

TEST(Matmul, AccumulateAddsToOutput) {
  const int64_t in = 33, out = 9, tokens = 10;
  Weight w = make_weight(DType::kBF16, out * in, 3);
  std::vector<float> x = random_f32(tokens * in, 4);
  std::vector<float> y(tokens * out), acc = random_f32(tokens * out, 5), base = acc;
  matmul(x.data(), tokens, in, w.data(), DType::kBF16, out, y.data(), nullptr);
  matmul_accumulate(x.data(), tokens, in, w.data(), DType::kBF16, out, acc.data(), nullptr);
  for (size_t k = 0; k < y.size(); ++k) EXPECT_TRUE(same_bits(acc[k], base[k] + y[k]));
}

TEST(Matmul, Supports) {
  EXPECT_TRUE(matmul_supports(DType::kBF16));
  EXPECT_TRUE(matmul_supports(DType::kF16));
  EXPECT_TRUE(matmul_supports(DType::kF32));
  EXPECT_TRUE(matmul_supports(DType::kQ4_K));  // GGUF blocks: quant_matmul_test.cc
  EXPECT_FALSE(matmul_supports(DType::kU32));
}

}  // namespace
}  // namespace ferrite::cpu
