#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ferrite {
namespace {

TEST(DTypeTest, Bf16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, 0.0078125f, 65536.0f}) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f) << f;
  }
  // Round to nearest even: 1 + 2^-8 is halfway between two bf16 values.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
}

TEST(DTypeTest, F16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
  }
}

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(dtype_bytes(DType::kBF16, 10), 20);
  EXPECT_EQ(dtype_bytes(DType::kQ8_0, 64), 68);
  EXPECT_EQ(dtype_from_name("bf16"), DType::kBF16);
}

}  // namespace
}  // namespace ferrite

namespace ferrite {
namespace {

TEST(DTypeTest, LoadAndStoreThroughF32) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    uint32_t buf[4] = {};
    store_from_f32(buf, t, 3, -2.5f);
    EXPECT_EQ(load_as_f32(buf, t, 3), -2.5f) << dtype_name(t);
    store_from_f32(buf, t, 1, 1.0f / 3);
    EXPECT_NEAR(load_as_f32(buf, t, 1), 1.0f / 3, 4e-3) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ferrite
