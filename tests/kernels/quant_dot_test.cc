// The integer matmul on GGUF block weights and u4_g128 (quant_dot.h):
//  - every ISA this CPU runs gives bitwise the scalar definition;
//  - results are bitwise independent of the thread count, of the tokens in
//    the call (batch composition) and of the row subset;
//  - against the exact product on the dequantized weights, the error stays
//    within the bound of 8-bit activation quantization derived in
//    quant_dot.h, for every format and odd shapes.
#include "backends/cpu/kernels/quant_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "base/thread_pool.h"
#include "test_util.h"

namespace ferrite::cpu {
namespace {

using testing::random_f32;

constexpr DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                 DType::kQ6_K, DType::kU4G128};

struct QW {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // reference dequantization
  std::vector<float> mag;     // |w| plus 2x the k-quant min of its sub-block
};

QW make_w(DType t, int64_t rows, int64_t in, uint32_t seed) {
  std::vector<float> v = random_f32(rows * in, seed);
  QW w;
  w.bytes.resize(dtype_bytes(t, rows * in));
  quantize_row(t, v.data(), w.bytes.data(), rows * in);
  if (t == DType::kU4G128) {  // every third block with the largest zero point, 16 (GPTQ v1's 0)
    auto* blk = reinterpret_cast<quant::BlockU4G128*>(w.bytes.data());
    for (int64_t b = 0; b < rows * in / 128; b += 3) blk[b].z = 16;
  }
  w.values.resize(rows * in);
  dequantize_row(t, w.bytes.data(), w.values.data(), rows * in);
  w.mag.resize(rows * in);
  for (int64_t i = 0; i < rows * in; ++i) w.mag[i] = std::fabs(w.values[i]);
  if (t == DType::kU4G128) {  // the zero point's products are accumulated apart
    for (int64_t b = 0; b < rows * in / 128; ++b) {
      const auto* blk = reinterpret_cast<const quant::BlockU4G128*>(w.bytes.data()) + b;
      for (int e = 0; e < 128; ++e) w.mag[128 * b + e] += 2 * std::fabs(blk->d * blk->z);
    }
  }
  if (t == DType::kQ4_K || t == DType::kQ5_K) {
    const int64_t bb = dtype_block_bytes(t);
    for (int64_t b = 0; b < rows * in / 256; ++b) {
      const uint8_t* blk = w.bytes.data() + b * bb;
      uint16_t h;
      std::memcpy(&h, blk + 2, 2);
      const float dmin = f16_to_f32(h);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        quant::scale_min_k4(j, blk + 4, &sc, &m);
        for (int e = 0; e < 32; ++e) w.mag[256 * b + 32 * j + e] += 2 * std::fabs(dmin * m);
      }
    }
  }
  return w;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

std::vector<QuantIsa> isas() {
  std::vector<QuantIsa> v = {QuantIsa::kScalar};
  const QuantIsa best = quant_isa_detected();
  if (best >= QuantIsa::kAvx2) v.push_back(QuantIsa::kAvx2);
  if (best >= QuantIsa::kAvx512Vnni) v.push_back(QuantIsa::kAvx512Vnni);
  if (best >= QuantIsa::kAmx) v.push_back(QuantIsa::kAmx);
  return v;
}

std::vector<float> run(DType t, const QW& w, const std::vector<float>& x, int64_t tokens,
                       int64_t in, int64_t out, QuantIsa isa, ThreadPool* pool) {
  std::vector<float> y(tokens * out, -7.0f);
  quant_matmul_rows(x.data(), in, tokens, in, w.bytes.data(), t, 0, out, y.data(), out, false,
                    pool, isa);
  return y;
}

// Reduction lengths: whole blocks, including odd block counts and lengths
// that are no multiple of the kernels' 64-element vectors.
std::vector<int64_t> lengths(DType t) {
  if (dtype_block_elems(t) == 32) return {32, 96, 160, 1056};
  if (dtype_block_elems(t) == 128) return {128, 384, 1152};
  return {256, 768, 2816};
}

TEST(QuantDot, EveryIsaIsTheScalarDefinition) {
  ThreadPool pool(3);
  for (DType t : kQuantTypes) {
    for (int64_t in : lengths(t)) {
      for (int64_t tokens : {1, 2, 3, 17, 40}) {
        const int64_t out = 5;
        QW w = make_w(t, out, in, 11);
        std::vector<float> x = random_f32(tokens * in, 12, -2.0f, 2.0f);
        const std::vector<float> want = run(t, w, x, tokens, in, out, QuantIsa::kScalar, nullptr);
        for (QuantIsa isa : isas()) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            const std::vector<float> got = run(t, w, x, tokens, in, out, isa, p);
            for (size_t k = 0; k < got.size(); ++k)
              ASSERT_TRUE(same_bits(want[k], got[k]))
                  << dtype_name(t) << " " << quant_isa_name(isa) << " in " << in << " tokens "
                  << tokens << " at " << k << ": " << want[k] << " vs " << got[k];
          }
        }
      }
    }
  }
}

// Rows longer than the AVX-512 prefill tiles' buffer of transposed
// activation scales (8,192 floats: q8_0 beyond 32,768 elements, the
// k-quants beyond 262,144) gather each block's scales from the rows
// instead: the same bits. 9 tokens: a full and a partial token tile.
TEST(QuantDot, LongRowsAreTheScalarDefinition) {
  ThreadPool pool(2);
  for (auto [t, in] : std::vector<std::pair<DType, int64_t>>{{DType::kQ8_0, 32832},
                                                              {DType::kQ4_K, 262400}}) {
    const int64_t out = 3, tokens = 9;
    QW w = make_w(t, out, in, 5);
    std::vector<float> x = random_f32(tokens * in, 6, -2.0f, 2.0f);
    const std::vector<float> want = run(t, w, x, tokens, in, out, QuantIsa::kScalar, nullptr);
    for (QuantIsa isa : isas()) {
      const std::vector<float> got = run(t, w, x, tokens, in, out, isa, &pool);
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_TRUE(same_bits(want[k], got[k]))
            << dtype_name(t) << " " << quant_isa_name(isa) << " in " << in << " at " << k << ": "
            << want[k] << " vs " << got[k];
    }
  }
}

TEST(QuantDot, BatchInvariantAndRowSubsets) {
  ThreadPool pool(2);
  const QuantIsa isa = quant_isa_detected();
  for (DType t : kQuantTypes) {
    const int64_t in = dtype_block_elems(t) == 32 ? 1056 : dtype_block_elems(t) == 128 ? 640 : 768;
    const int64_t out = 37, tokens = 19;
    QW w = make_w(t, out, in, 21);
    std::vector<float> x = random_f32(tokens * in, 22);
    const std::vector<float> all = run(t, w, x, tokens, in, out, isa, &pool);
    for (int64_t tk : {0, 7, 18}) {  // each token alone
      std::vector<float> one(x.begin() + tk * in, x.begin() + (tk + 1) * in);
      const std::vector<float> y = run(t, w, one, 1, in, out, isa, nullptr);
      for (int64_t o = 0; o < out; ++o)
        ASSERT_TRUE(same_bits(y[o], all[tk * out + o])) << dtype_name(t) << " token " << tk;
    }
    // Rows 5..25 into a strided output, accumulated.
    std::vector<float> acc(tokens * 24, 1.0f);
    quant_matmul_rows(x.data(), in, tokens, in, w.bytes.data(), t, 5, 25, acc.data(), 24, true,
                      &pool, isa);
    for (int64_t tk = 0; tk < tokens; ++tk) {
      for (int64_t o = 5; o < 25; ++o)
        ASSERT_TRUE(same_bits(acc[tk * 24 + o - 5], 1.0f + all[tk * out + o])) << dtype_name(t);
      for (int64_t o = 20; o < 24; ++o) ASSERT_EQ(acc[tk * 24 + o], 1.0f);
    }
  }
}

// |y - y_exact| <= sum_b (dx_b / 2) sum_{i in b} |w_i|   (activation rounding)
//               + gamma_{nb + 5} sum_i mag_i |xq_i|          (f32 combination)
// with dx_b = amax_b / 127 (slack 2^-15 for the rounding of x * 127 / amax),
// mag_i = |w_i| (+ 2 |dmin m| for q4_k / q5_k, whose scaled values and mins
// are accumulated apart) and gamma_k = k u / (1 - k u), u = 2^-24.
TEST(QuantDot, WithinTheActivationQuantizationBound) {
  for (DType t : kQuantTypes) {
    const int64_t be = dtype_block_elems(t);
    for (int64_t in : lengths(t)) {
      for (int64_t tokens : {1, 2, 3, 17, 40}) {
        const int64_t out = 9;
        QW w = make_w(t, out, in, 31);
        // Activations with outliers, as hidden states have.
        std::vector<float> x = random_f32(tokens * in, 32, -1.0f, 1.0f);
        for (int64_t i = 0; i < tokens * in; i += 97) x[i] *= 20.0f;
        const std::vector<float> y = run(t, w, x, tokens, in, out, quant_isa_detected(), nullptr);
        const double nb = static_cast<double>(in / be), u = std::ldexp(1.0, -24);
        const double gamma = (nb + 5) * u / (1 - (nb + 5) * u);
        double worst = 0;
        for (int64_t tk = 0; tk < tokens; ++tk) {
          const float* xr = x.data() + tk * in;
          std::vector<int8_t> q(in);
          std::vector<float> d(in / be);
          quantize_activation_row(t, xr, in, q.data(), d.data());
          for (int64_t o = 0; o < out; ++o) {
            double exact = 0, qterm = 0, fterm = 0;
            for (int64_t b = 0; b < in / be; ++b) {
              double amax = 0, wsum = 0;
              for (int64_t e = 0; e < be; ++e) {
                const int64_t i = b * be + e;
                exact += double(xr[i]) * w.values[o * in + i];
                amax = std::max(amax, std::fabs(double(xr[i])));
                wsum += std::fabs(w.values[o * in + i]);
                fterm += w.mag[o * in + i] * std::fabs(double(d[b]) * q[i]);
              }
              // The kernel's scale is the quantizer's d (checked here too).
              EXPECT_NEAR(d[b], amax / 127, amax * 1e-6);
              qterm += amax / 254 * wsum;
            }
            const double bound = qterm * (1 + std::ldexp(1.0, -15)) + gamma * fterm;
            const double err = std::fabs(y[tk * out + o] - exact);
            worst = std::max(worst, err / bound);
            ASSERT_LE(err, bound) << dtype_name(t) << " in " << in << " token " << tk << " row " << o;
          }
        }
        // The bound is not vacuous: random rounding uses a part of it (about 1 / sqrt(n)).
        EXPECT_GT(worst, 0.005) << dtype_name(t) << " in " << in;
      }
    }
  }
}

TEST(QuantDot, MatmulUsesTheModeSet) {
  const DType t = DType::kQ4_K;
  const int64_t in = 512, out = 6, tokens = 3;
  QW w = make_w(t, out, in, 41);
  std::vector<float> x = random_f32(tokens * in, 42);
  std::vector<float> y(tokens * out), exact(tokens * out);
  set_quant_matmul_mode(true, 0);
  matmul(x.data(), tokens, in, w.bytes.data(), t, out, y.data(), nullptr);
  const std::vector<float> want = run(t, w, x, tokens, in, out, quant_matmul_isa(), nullptr);
  for (size_t k = 0; k < y.size(); ++k) ASSERT_TRUE(same_bits(y[k], want[k]));
  set_quant_matmul_mode(false, 0);
  matmul(x.data(), tokens, in, w.bytes.data(), t, out, y.data(), nullptr);
  matmul(x.data(), tokens, in, w.values.data(), DType::kF32, out, exact.data(), nullptr);
  for (size_t k = 0; k < y.size(); ++k) ASSERT_TRUE(same_bits(y[k], exact[k]));
  set_quant_matmul_mode(true, 0);
}

}  // namespace
}  // namespace ferrite::cpu
