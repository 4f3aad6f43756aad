// The repacked Hugging Face formats of tensor/dtype.h (f8_e4m3_b128, u4_g128):
// e4m3fn decoding against its definition, hand-made blocks, element reads
// against row dequantization, and the reference quantizers' round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace ferrite {
namespace {

TEST(HfQuantDtype, Sizes) {
  EXPECT_EQ(dtype_block_elems(DType::kF8B128), 128);
  EXPECT_EQ(dtype_block_bytes(DType::kF8B128), 132);
  EXPECT_EQ(dtype_block_elems(DType::kU4G128), 128);
  EXPECT_EQ(dtype_block_bytes(DType::kU4G128), 72);
  EXPECT_EQ(dtype_from_name("f8_e4m3_b128"), DType::kF8B128);
  EXPECT_EQ(dtype_from_name("u4_g128"), DType::kU4G128);
  for (DType t : {DType::kF8B128, DType::kU4G128}) {
    EXPECT_TRUE(dtype_is_quantized(t));
    EXPECT_TRUE(dtype_is_hf_quant(t));
    EXPECT_TRUE(dtype_is_weight_format(t));
  }
  EXPECT_FALSE(dtype_is_hf_quant(DType::kQ4_0));
}

TEST(HfQuantDtype, E4m3fnValues) {
  EXPECT_EQ(f8e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);         // 0.0111.000
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);       // the largest finite
  EXPECT_EQ(f8e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), 0x1p-9f);      // the smallest subnormal
  EXPECT_EQ(f8e4m3_to_f32(0x08), 0x1p-6f);      // the smallest normal
  EXPECT_EQ(f8e4m3_to_f32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  // Every finite code round-trips, and ties go to the even code.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const float v = f8e4m3_to_f32(static_cast<uint8_t>(c));
    if (v == 0) continue;
    EXPECT_EQ(f32_to_f8e4m3(v), c) << c;
  }
  EXPECT_EQ(f32_to_f8e4m3(1.0625f), 0x38);  // halfway between 1 (0x38) and 1.125 (0x39)
  EXPECT_EQ(f32_to_f8e4m3(1.1875f), 0x3a);  // halfway between 0x39 and 0x3a: even
  EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);  // saturates
}

TEST(HfQuantDtype, F8BlockByHand) {
  std::vector<uint8_t> b(2 * 132, 0);
  const float d0 = 0.1f, d1 = -3.0f;  // f32 scales kept exactly
  std::memcpy(b.data(), &d0, 4);
  std::memcpy(b.data() + 132, &d1, 4);
  b[4] = 0x38;          // element 0: 1 * d0
  b[4 + 127] = 0xbc;    // element 127: -1.5 * d0
  b[132 + 4 + 5] = 0x7e;  // element 133: 448 * d1
  std::vector<float> y(256);
  dequantize_row(DType::kF8B128, b.data(), y.data(), 256);
  EXPECT_EQ(y[0], 1.0f * d0);
  EXPECT_EQ(y[127], -1.5f * d0);
  EXPECT_EQ(y[133], 448.0f * d1);
  EXPECT_EQ(y[1], 0.0f);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(load_as_f32(b.data(), DType::kF8B128, i), y[i]) << i;
}

TEST(HfQuantDtype, U4BlockByHand) {
  std::vector<uint8_t> b(72, 0);
  const float d = 0.0123f;
  std::memcpy(b.data(), &d, 4);
  b[4] = 16;      // GPTQ v1's stored 15 read back as 16
  b[8] = 0xF3;    // element 0: 3, element 1: 15
  b[8 + 63] = 0x0A;  // element 126: 10, element 127: 0
  std::vector<float> y(128);
  dequantize_row(DType::kU4G128, b.data(), y.data(), 128);
  EXPECT_EQ(y[0], d * -13.0f);
  EXPECT_EQ(y[1], d * -1.0f);
  EXPECT_EQ(y[126], d * -6.0f);
  EXPECT_EQ(y[127], d * -16.0f);
  EXPECT_EQ(y[5], d * -16.0f);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(load_as_f32(b.data(), DType::kU4G128, i), y[i]) << i;
}

TEST(HfQuantDtype, QuantizeRoundTrip) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(512);
  for (float& v : x) v = u(rng);
  for (auto [t, bound] : {std::pair{DType::kF8B128, 0.07}, std::pair{DType::kU4G128, 0.07}}) {
    std::vector<uint8_t> q(dtype_bytes(t, 512));
    quantize_row(t, x.data(), q.data(), 512);
    std::vector<float> y(512);
    dequantize_row(t, q.data(), y.data(), 512);
    double err = 0;
    for (int i = 0; i < 512; ++i) err = std::max(err, double(std::fabs(y[i] - x[i])));
    EXPECT_LT(err, bound) << dtype_name(t);
    EXPECT_GT(err, 0) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ferrite
