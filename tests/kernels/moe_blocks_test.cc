// The 128-element block formats as the grouped expert GEMM converts them
// (backends/cuda/kernels/moe_blocks.h), checked on the CPU where CI runs
// (the kernel itself runs in cuda_test on the GPU): every block of rows whose
// blocks start at every offset their format allows, staged as the kernel
// stages it (the 16-byte pieces covering it, cut at the weights' end), gives
// dequantize_row's values bitwise, and fits its shared-memory row.
#include "backends/cuda/kernels/moe_blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "test_util.h"

namespace ferrite::cuda::moeblocks {
namespace {

using ferrite::cpu::testing::random_f32;

template <int Q>
void check_blocks(DType dt, int64_t rows, int64_t k, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " k " + std::to_string(k));
  const int64_t row_bytes = dtype_bytes(dt, k), total = rows * row_bytes;
  const std::vector<float> wf = random_f32(rows * k, seed, -1.0f, 1.0f);
  std::vector<uint64_t> store(static_cast<size_t>((total + 7) / 8));  // 8-byte aligned
  auto* bytes = reinterpret_cast<uint8_t*>(store.data());
  quantize_row(dt, wf.data(), bytes, rows * k);
  if (dt == DType::kU4G128) ferrite::cpu::testing::u4_zero_point_ends(bytes);
  std::vector<float> want(static_cast<size_t>(rows * k));
  dequantize_row(dt, bytes, want.data(), rows * k);
  int64_t checked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kt = 0; kt < k / 128; ++kt) {
      const int64_t at = r * row_bytes + kt * Blocks<Q>::kBytes;
      const int o = piece_offset(at);
      ASSERT_LE(o + Blocks<Q>::kBytes, Blocks<Q>::kRawRow) << "row " << r << " block " << kt;
      // The kernel's pieces: kRawRow bytes from the block's first piece,
      // nothing past the weights' end (zero-filled).
      alignas(16) uint8_t raw[Blocks<Q>::kRawRow];
      std::memset(raw, 0, sizeof(raw));
      const int64_t start = piece_start(at);
      const int64_t n = std::min<int64_t>(Blocks<Q>::kRawRow, total - start);
      std::memcpy(raw, bytes + start, static_cast<size_t>(n));
      for (int part = 0; part < 4; ++part) {
        float v[32];
        values32<Q>(raw + o, part, v);
        for (int e = 0; e < 32; ++e) {
          const float w = want[static_cast<size_t>(r * k + kt * 128 + 32 * part + e)];
          ASSERT_EQ(v[e], w) << "row " << r << " block " << kt << " element " << 32 * part + e;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, rows * k);
}

TEST(MoeBlocks, ValuesAreTheReferenceDequantization) {
  // Rows of 792 / 396 bytes: blocks at offsets 0, 4, 8 and 12 of a piece;
  // the last block of the last row ends at the weights' end.
  check_blocks<kF8>(DType::kF8B128, 5, 768, 31);
  check_blocks<kF8>(DType::kF8B128, 4, 384, 32);
  // Rows of 216 / 432 bytes: blocks at offsets 0 and 8.
  check_blocks<kU4>(DType::kU4G128, 5, 384, 33);
  check_blocks<kU4>(DType::kU4G128, 3, 768, 34);
}

}  // namespace
}  // namespace ferrite::cuda::moeblocks
