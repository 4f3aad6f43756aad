// Kernels on GGUF block weights: the SIMD dequantization is bitwise the
// reference, and matmul on block weights in the exact mode
// (Tuning::cpu_quant_dot = 0) is bitwise the f32 matmul of the dequantized
// weights (every path: streaming, packed, long rows, row
// subsets, accumulate, threads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/quant_dot.h"
#include "base/thread_pool.h"
#include "test_util.h"

namespace ferrite::cpu {
namespace {

using testing::random_f32;

constexpr DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                 DType::kQ6_K};

struct QWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // the reference dequantization
};

QWeight make_qweight(DType t, int64_t rows, int64_t in, uint32_t seed) {
  std::vector<float> v = random_f32(rows * in, seed);
  QWeight w;
  w.bytes.resize(dtype_bytes(t, rows * in));
  quantize_row(t, v.data(), w.bytes.data(), rows * in);
  w.values.resize(rows * in);
  dequantize_row(t, w.bytes.data(), w.values.data(), rows * in);
  return w;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// dequantize_row_fast gives the reference's bits for every element.
void expect_fast_dequant_is_reference(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> want(n), got(n);
  dequantize_row(t, bytes.data(), want.data(), n);
  dequantize_row_fast(t, bytes.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(same_bits(want[i], got[i]))
        << dtype_name(t) << " element " << i << ": " << want[i] << " vs " << got[i];
}

TEST(QuantKernels, FastDequantizationIsTheReference) {
  for (DType t : kQuantTypes) {
    // Random bytes (with finite scales) cover every bit pattern of the quants.
    std::mt19937 rng(3);
    const int64_t n = 1024;
    std::vector<uint8_t> bytes(dtype_bytes(t, n));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const int64_t bb = dtype_block_bytes(t);
    for (int64_t k = 0; k < static_cast<int64_t>(bytes.size()) / bb; ++k) {
      uint16_t h = static_cast<uint16_t>(0x2000 + rng() % 0x1800);
      std::memcpy(bytes.data() + k * bb + (t == DType::kQ6_K ? 208 : 0), &h, 2);
      if (t == DType::kQ4_K || t == DType::kQ5_K) std::memcpy(bytes.data() + k * bb + 2, &h, 2);
    }
    ASSERT_NO_FATAL_FAILURE(expect_fast_dequant_is_reference(t, bytes, n));
  }
}

// The Hugging Face formats (f8_e4m3_b128: every code, NaNs and subnormals
// included; u4_g128: every nibble and zero point) the same way.
TEST(QuantKernels, FastDequantizationIsTheReferenceForHfFormats) {
  for (DType t : {DType::kF8B128, DType::kU4G128}) {
    std::mt19937 rng(4);
    const int64_t n = 128 * 24;
    std::vector<uint8_t> bytes(dtype_bytes(t, n));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const int64_t bb = dtype_block_bytes(t);
    for (int64_t k = 0; k < static_cast<int64_t>(bytes.size()) / bb; ++k) {
      const float d = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f,
                                 static_cast<int>(rng() % 16) - 12) * (k % 2 ? -1.0f : 1.0f);
      std::memcpy(bytes.data() + k * bb, &d, 4);
    }
    if (t == DType::kF8B128)  // every code once in the first two blocks
      for (int c = 0; c < 256; ++c) bytes[(c / 128) * bb + 4 + c % 128] = static_cast<uint8_t>(c);
    ASSERT_NO_FATAL_FAILURE(expect_fast_dequant_is_reference(t, bytes, n));
  }
}

// The exact path (Tuning::cpu_quant_dot = 0) for the scope of a test.
struct ExactMode {
  ExactMode() { set_quant_matmul_mode(false, 0); }
  ~ExactMode() { set_quant_matmul_mode(true, 0); }
};

TEST(QuantKernels, MatmulIsTheF32MatmulOfTheDequantizedWeights) {
  ExactMode exact;
  ThreadPool pool(3);
  for (DType t : kQuantTypes) {
    for (int64_t in : {256, 1536}) {  // 1536: reduction blocks on the packed path
      for (int64_t tokens : {1, 3, 9, 40}) {
        const int64_t out = 37;
        QWeight w = make_qweight(t, out, in, 5);
        std::vector<float> x = random_f32(tokens * in, 6);
        std::vector<float> want(tokens * out), got(tokens * out);
        matmul(x.data(), tokens, in, w.values.data(), DType::kF32, out, want.data(), nullptr);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          matmul(x.data(), tokens, in, w.bytes.data(), t, out, got.data(), p);
          for (size_t k = 0; k < got.size(); ++k)
            ASSERT_TRUE(same_bits(want[k], got[k]))
                << dtype_name(t) << " in " << in << " tokens " << tokens << " at " << k;
        }
        // A row subset, strided output, accumulate.
        std::vector<float> acc(tokens * 20, 1.0f), acc_want(tokens * 20, 1.0f);
        matmul_rows(x.data(), in, tokens, in, w.bytes.data(), t, 5, 25, acc.data(), 20, true,
                    &pool);
        matmul_rows(x.data(), in, tokens, in, w.values.data(), DType::kF32, 5, 25, acc_want.data(),
                    20, true, nullptr);
        for (size_t k = 0; k < acc.size(); ++k)
          ASSERT_TRUE(same_bits(acc[k], acc_want[k])) << dtype_name(t) << " rows 5..25 at " << k;
      }
    }
  }
}

TEST(QuantKernels, MatmulIsCloseToTheExactProduct) {
  // Guards against a bug shared by both sides of the bitwise test (e.g. both
  // reading the wrong rows): the product against a double-precision sum.
  ExactMode exact;
  for (DType t : kQuantTypes) {
    const int64_t in = 512, out = 9, tokens = 2;
    QWeight w = make_qweight(t, out, in, 8);
    std::vector<float> x = random_f32(tokens * in, 9);
    std::vector<float> y(tokens * out);
    matmul(x.data(), tokens, in, w.bytes.data(), t, out, y.data(), nullptr);
    for (int64_t tk = 0; tk < tokens; ++tk) {
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i) s += double(x[tk * in + i]) * w.values[o * in + i];
        EXPECT_NEAR(y[tk * out + o], s, 1e-4 * (1 + std::fabs(s))) << dtype_name(t);
      }
    }
  }
}

}  // namespace
}  // namespace ferrite::cpu
