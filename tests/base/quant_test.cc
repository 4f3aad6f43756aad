// The GGUF block formats: dequantization of hand-made blocks against values
// worked out by hand from ggml-common.h's layouts, element reads against row
// dequantization, and the reference quantizers' round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace ferrite {
namespace {

constexpr DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                 DType::kQ6_K};

std::vector<float> dequant(DType t, const std::vector<uint8_t>& bytes) {
  const int64_t n =
      static_cast<int64_t>(bytes.size()) / dtype_block_bytes(t) * dtype_block_elems(t);
  std::vector<float> out(n);
  dequantize_row(t, bytes.data(), out.data(), n);
  return out;
}

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

TEST(QuantTest, BlockSizesAsGgml) {
  EXPECT_EQ(dtype_block_elems(DType::kQ8_0), 32);
  EXPECT_EQ(dtype_block_bytes(DType::kQ8_0), 34);
  EXPECT_EQ(dtype_block_elems(DType::kQ4_0), 32);
  EXPECT_EQ(dtype_block_bytes(DType::kQ4_0), 18);
  EXPECT_EQ(dtype_block_elems(DType::kQ4_K), 256);
  EXPECT_EQ(dtype_block_bytes(DType::kQ4_K), 144);
  EXPECT_EQ(dtype_block_bytes(DType::kQ5_K), 176);
  EXPECT_EQ(dtype_block_bytes(DType::kQ6_K), 210);
  EXPECT_EQ(dtype_from_name("q4_0"), DType::kQ4_0);
  for (DType t : kQuantTypes) {
    EXPECT_TRUE(dtype_is_quantized(t));
    EXPECT_TRUE(dtype_is_weight_format(t));
    EXPECT_FALSE(dtype_is_float(t));
  }
  EXPECT_FALSE(dtype_is_quantized(DType::kBF16));
  EXPECT_FALSE(dtype_is_weight_format(DType::kU32));
}

TEST(QuantTest, Q8_0ByHand) {
  std::vector<uint8_t> b(34, 0);
  put16(b.data(), 0x3800);  // d = 0.5
  const int8_t q[] = {0, 1, -1, 127, -128, 5};
  std::memcpy(b.data() + 2, q, sizeof q);
  std::vector<float> y = dequant(DType::kQ8_0, b);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], -0.5f);
  EXPECT_EQ(y[3], 63.5f);
  EXPECT_EQ(y[4], -64.0f);
  EXPECT_EQ(y[5], 2.5f);
  EXPECT_EQ(y[31], 0.0f);
}

TEST(QuantTest, Q4_0ByHand) {
  std::vector<uint8_t> b(18, 0x88);  // every nibble 8: value 0
  put16(b.data(), 0x4000);           // d = 2
  b[2] = 0x9F;                       // element 0: 15 - 8, element 16: 9 - 8
  b[3] = 0x08;                       // element 1: 0, element 17: -8
  std::vector<float> y = dequant(DType::kQ4_0, b);
  EXPECT_EQ(y[0], 14.0f);
  EXPECT_EQ(y[16], 2.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[17], -16.0f);
  EXPECT_EQ(y[5], 0.0f);
}

// Scales 1, 2, 3, 4, 17, 18, 19, 20 and mins 0, 1, 2, 3, 16, 33, 5, 63 in
// the 12-byte packing of get_scale_min_k4, worked out by hand.
constexpr uint8_t kScalesK[12] = {65, 66, 67, 68, 64, 129, 2, 195, 1, 18, 83, 244};
constexpr int kSc[8] = {1, 2, 3, 4, 17, 18, 19, 20};
constexpr int kMin[8] = {0, 1, 2, 3, 16, 33, 5, 63};

TEST(QuantTest, ScaleMinK4) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    quant::scale_min_k4(j, kScalesK, &sc, &m);
    EXPECT_EQ(sc, kSc[j]) << j;
    EXPECT_EQ(m, kMin[j]) << j;
  }
}

TEST(QuantTest, Q4_KByHand) {
  std::vector<uint8_t> b(144);
  put16(b.data(), 0x3C00);      // d = 1
  put16(b.data() + 2, 0x3800);  // dmin = 0.5
  std::memcpy(b.data() + 4, kScalesK, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i * 7 + 3) & 0xFF);
  std::vector<float> y = dequant(DType::kQ4_K, b);
  EXPECT_EQ(y[0], 3.0f);      // sub-block 0, low nibble of qs[0] = 3
  EXPECT_EQ(y[32], -0.5f);    // sub-block 1, high nibble of qs[0] = 0: 2 * 0 - 0.5 * 1
  EXPECT_EQ(y[133], 94.0f);   // sub-block 4, qs[69] = 230, low 6: 17 * 6 - 0.5 * 16
  EXPECT_EQ(y[255], 108.5f);  // sub-block 7, qs[127] = 124, high 7: 20 * 7 - 0.5 * 63
  // Every element from the layout: 64-element chunk c reads qs[32c + l].
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, c = e / 64, l = e % 32;
    const int byte = b[16 + 32 * c + l];
    const int q = sub % 2 ? byte >> 4 : byte & 15;
    EXPECT_EQ(y[e], float(kSc[sub]) * q - 0.5f * kMin[sub]) << e;
  }
}

TEST(QuantTest, Q5_KByHand) {
  std::vector<uint8_t> b(176, 0);
  put16(b.data(), 0x3C00);
  put16(b.data() + 2, 0x3800);
  std::memcpy(b.data() + 4, kScalesK, 12);
  for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<uint8_t>((i * 7 + 3) & 0xFF);
  b[16 + 5] = 0x10;  // qh[5] bit 4: the high bit of element 128 + 5 (sub-block 4)
  b[16 + 0] = 0x02;  // qh[0] bit 1: element 32 (sub-block 1)
  std::vector<float> y = dequant(DType::kQ5_K, b);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[32], 2.0f * 16 - 0.5f);
  EXPECT_EQ(y[133], 17.0f * 22 - 8.0f);
  EXPECT_EQ(y[5], 1.0f * ((b[48 + 5] & 15)));  // qh[5] bit 0 clear
  EXPECT_EQ(y[255], 108.5f);
}

TEST(QuantTest, Q6_KByHand) {
  std::vector<uint8_t> b(210, 0);
  uint8_t* ql = b.data();
  uint8_t* qh = b.data() + 128;
  auto* sc = reinterpret_cast<int8_t*>(b.data() + 192);
  for (int s = 0; s < 16; ++s) sc[s] = static_cast<int8_t>(s - 8);
  put16(b.data() + 208, 0x3400);  // d = 0.25
  ql[0] = 0x21;
  qh[0] = 0xE4;  // 2-bit fields 0, 1, 2, 3 for elements 0, 32, 64, 96
  ql[32] = 0x0F;
  ql[80] = 0x05;  // second half, l = 16: element 144
  qh[48] = 0x03;
  std::vector<float> y = dequant(DType::kQ6_K, b);
  EXPECT_EQ(y[0], 62.0f);    // (1 | 0 << 4) - 32 = -31, d * sc[0] = -2
  EXPECT_EQ(y[32], 1.5f);    // (15 | 1 << 4) - 32 = -1, d * sc[2] = -1.5
  EXPECT_EQ(y[64], -2.0f);   // (2 | 2 << 4) - 32 = 2, d * sc[4] = -1
  EXPECT_EQ(y[96], -8.0f);   // (0 | 3 << 4) - 32 = 16, d * sc[6] = -0.5
  EXPECT_EQ(y[144], 5.25f);  // (5 | 3 << 4) - 32 = 21, d * sc[9] = 0.25
  EXPECT_EQ(y[1], 64.0f);    // q = -32, d * sc[0] = -2
}

TEST(QuantTest, ElementReadsMatchRowDequantization) {
  std::mt19937 rng(7);
  for (DType t : kQuantTypes) {
    const int64_t blocks = 3;
    std::vector<uint8_t> bytes(blocks * dtype_block_bytes(t));
    for (auto& v : bytes) v = static_cast<uint8_t>(rng());
    // Sane f16 scales (random bytes may be inf / nan).
    for (int64_t k = 0; k < blocks; ++k) {
      uint8_t* blk = bytes.data() + k * dtype_block_bytes(t);
      const int64_t off = t == DType::kQ6_K ? 208 : 0;
      put16(blk + off, static_cast<uint16_t>(0x2000 + rng() % 0x1800));
      if (t == DType::kQ4_K || t == DType::kQ5_K)
        put16(blk + 2, static_cast<uint16_t>(0x2000 + rng() % 0x1800));
    }
    std::vector<float> y = dequant(t, bytes);
    for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i)
      ASSERT_EQ(load_as_f32(bytes.data(), t, i), y[i]) << dtype_name(t) << " element " << i;
  }
}

TEST(QuantTest, QuantizersRoundTrip) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = 4 * 256;
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  // Relative RMS error bounds of the formats on gaussian data.
  struct Bound {
    DType t;
    double rel_rms;
  };
  for (Bound bound :
       {Bound{DType::kQ8_0, 0.01}, Bound{DType::kQ4_0, 0.15}, Bound{DType::kQ4_K, 0.12},
        Bound{DType::kQ5_K, 0.06}, Bound{DType::kQ6_K, 0.03}}) {
    std::vector<uint8_t> q(dtype_bytes(bound.t, n));
    quantize_row(bound.t, x.data(), q.data(), n);
    std::vector<float> y = dequant(bound.t, q);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (y[i] - x[i]) * double(y[i] - x[i]);
      ref += x[i] * double(x[i]);
    }
    EXPECT_LT(std::sqrt(err / ref), bound.rel_rms) << dtype_name(bound.t);
    // Quantizing the dequantized values again is (nearly) lossless.
    std::vector<uint8_t> q2(q.size());
    quantize_row(bound.t, y.data(), q2.data(), n);
    std::vector<float> y2 = dequant(bound.t, q2);
    double err2 = 0;
    for (int64_t i = 0; i < n; ++i) err2 += (y2[i] - y[i]) * double(y2[i] - y[i]);
    EXPECT_LT(std::sqrt(err2 / ref), bound.rel_rms / 2) << dtype_name(bound.t);
  }
}

TEST(QuantTest, ZeroBlocksStayZero) {
  std::vector<float> x(256, 0.0f);
  for (DType t : kQuantTypes) {
    std::vector<uint8_t> q(dtype_bytes(t, 256));
    quantize_row(t, x.data(), q.data(), 256);
    for (float v : dequant(t, q)) EXPECT_EQ(v, 0.0f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ferrite
