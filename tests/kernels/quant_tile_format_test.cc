// The block formats as the CUDA bf16 tensor-core tile reads them
// (backends/cuda/kernels/quant_tile_formats.h), checked on the CPU where CI
// runs (the tile itself runs in cuda_test and the conformance suite on the
// GPU):
//  - every lane's 8 values of every chunk reproduce dequantize_row (bitwise,
//    but for the K-quants' fused multiply-add: within an f32 rounding), at
//    the shared-memory placement the kernel uses (a step's bytes at their
//    offset within 16-byte pieces), with every read at an address of its
//    alignment;
//  - one warp's 32 rows x 8 tokens, emulated with the kernel's fragments and
//    the mma layouts of mma.cuh, give the product of the bf16-rounded weights
//    and activations.
#define FERRITE_TILE_CHECK_ALIGNMENT 1
#include "backends/cuda/kernels/quant_tile_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mma_emulation.h"
#include "tensor/dtype.h"
#include "test_util.h"

namespace ferrite::cuda::tile {
namespace {

using ferrite::cpu::testing::random_f32;

struct Rows {
  DType dt;
  int64_t rows, k, row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantize_row
};

Rows make_rows(DType dt, int64_t rows, int64_t k, uint32_t seed) {
  Rows w{dt, rows, k, dtype_bytes(dt, k), {}, {}};
  const std::vector<float> v = random_f32(rows * k, seed, -1.0f, 1.0f);
  w.bytes.resize(static_cast<size_t>(w.row_bytes * rows));
  quantize_row(dt, v.data(), w.bytes.data(), rows * k);
  if (dt == DType::kU4G128) ferrite::cpu::testing::u4_zero_point_ends(w.bytes.data());
  w.values.resize(static_cast<size_t>(rows * k));
  dequantize_row(dt, w.bytes.data(), w.values.data(), rows * k);
  return w;
}

// A row's step s as the kernel holds it in shared memory: the 16-byte
// pieces of the weight (16-byte aligned, rows packed) that cover the step's
// bytes, copied to a 16-byte aligned buffer; returns the step's first byte
// in it and its element count.
struct Step {
  alignas(16) uint8_t buf[512];
  const uint8_t* r = nullptr;
  int elems = 0;
};
void stage(const Rows& w, int64_t row, int s, Step* st) {
  const int64_t be = dtype_block_elems(w.dt), bb = dtype_bytes(w.dt, be);
  const int64_t k0 = int64_t{s} * kStepElems;
  st->elems = static_cast<int>(std::min<int64_t>(kStepElems, w.k - k0));
  const int64_t first = row * w.row_bytes + k0 / be * bb;
  const int64_t end = first + st->elems / be * bb;
  const int64_t a0 = first & ~int64_t{15};
  ASSERT_EQ(reinterpret_cast<uintptr_t>(w.bytes.data()) % 16, 0u);  // as cudaMalloc's
  // The kernel copies whole pieces; past the tensor's end there is nothing.
  const int64_t a1 = std::min<int64_t>((end + 15) & ~int64_t{15},
                                       static_cast<int64_t>(w.bytes.size()));
  std::memset(st->buf, 0xA5, sizeof(st->buf));
  std::memcpy(st->buf, w.bytes.data() + a0, static_cast<size_t>(a1 - a0));
  st->r = st->buf + (first - a0);
}

// --- The bf16 tile (quant_tile_formats.h) ----------------------------------

template <int F>
void check_values(DType dt, int64_t k) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " k " + std::to_string(k));
  const Rows w = make_rows(dt, 3, k, 11 + F);
  // The K-quants' s q - m is one fused multiply-add: within an f32 rounding
  // of the reference's s q, then - m (relative to s q).
  const bool fused = Values<F>::kKind == Kind::kMin;
  int64_t checked = 0;
  for (int64_t row = 0; row < w.rows; ++row) {
    for (int s = 0; s * kStepElems < k; ++s) {
      Step st;
      stage(w, row, s, &st);
      for (int kc = 0; kc < st.elems / 32; ++kc) {
        for (int tq = 0; tq < 4; ++tq) {
          float v[8];
          values<F>(st.r, kc, tq, v);
          const Scale sc = Values<F>::scale(st.r, kc, tq >> 1);
          for (int i = 0; i < 8; ++i) {
            const int64_t at = row * k + int64_t{s} * kStepElems + 32 * kc + 8 * tq + i;
            const float want = w.values[static_cast<size_t>(at)];
            const std::string where = "row " + std::to_string(row) + " step " +
                                      std::to_string(s) + " chunk " + std::to_string(kc) +
                                      " element " + std::to_string(8 * tq + i);
            if (fused) {
              const double sq = std::fabs(double(want) - sc.t);  // |s q|
              ASSERT_NEAR(v[i], want, std::ldexp(sq, -23) + 1e-30) << where;
            } else {
              ASSERT_EQ(v[i], want) << where;
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, w.rows * k);
}

TEST(QuantTileFormats, ValuesAreTheReferenceDequantization) {
  check_values<kQ8_0>(DType::kQ8_0, 512);
  check_values<kQ8_0>(DType::kQ8_0, 256 + 96);  // a last step of 3 blocks, rows of 374 bytes
  check_values<kQ4_0>(DType::kQ4_0, 512);
  check_values<kQ4_0>(DType::kQ4_0, 256 + 32);
  check_values<kQ4_K>(DType::kQ4_K, 768);
  check_values<kQ5_K>(DType::kQ5_K, 768);
  check_values<kQ6_K>(DType::kQ6_K, 256 * 9);  // every even offset in a 16-byte piece
  check_values<kQ6_K>(DType::kQ6_K, 768);      // rows of 630 bytes
  check_values<kF8B128>(DType::kF8B128, 512);
  check_values<kF8B128>(DType::kF8B128, 256 + 128);  // rows of 396 bytes
  check_values<kU4G128>(DType::kU4G128, 512);
  check_values<kU4G128>(DType::kU4G128, 256 + 128);
}

void emulate_mma_bf16(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], double (&c)[32][4]) {
  ferrite::cuda::testing::emulate_mma_m16n8k16(a, b, c, [](uint16_t h) { return bf16_to_f32(h); });
}

// One warp of the bf16 tile: rows 0..31 of w (two mma tiles) x tokens 0..7,
// with the kernel's values, fragments and per-lane indices (quant_tile.cu),
// against the f64 product of the bf16-rounded weights and activations.
template <int F>
void check_bf16_warp_tile(DType dt, int64_t k) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " k " + std::to_string(k));
  const Rows w = make_rows(dt, 32, k, 300 + F);
  const std::vector<float> xf = random_f32(8 * k, 400 + F, -2.0f, 2.0f);
  std::vector<uint16_t> xb(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xb[i] = f32_to_bf16(xf[i]);
  double acc[2][32][4] = {};
  for (int s = 0; s * kStepElems < k; ++s) {
    std::vector<Step> st(32);
    for (int r = 0; r < 32; ++r) stage(w, r, s, &st[r]);
    for (int kc = 0; kc < st[0].elems / 32; ++kc) {
      uint32_t a[2][2][32][4], b[2][32][2];  // a[tile][half], b[half]
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, tq = lane & 3;
        for (int mt = 0; mt < 2; ++mt) {
          float lo[8], hi[8];
          values<F>(st[16 * mt + g].r, kc, tq, lo);
          values<F>(st[16 * mt + g + 8].r, kc, tq, hi);
          for (int h = 0; h < 2; ++h) a_fragment(lo, hi, h, a[mt][h][lane]);
        }
        uint32_t x4[4];  // token g's 16-byte load
        std::memcpy(x4, xb.data() + g * k + int64_t{s} * kStepElems + 32 * kc + 8 * tq, 16);
        for (int h = 0; h < 2; ++h) b_fragment(x4, h, &b[h][lane][0], &b[h][lane][1]);
      }
      for (int mt = 0; mt < 2; ++mt)
        for (int h = 0; h < 2; ++h) emulate_mma_bf16(a[mt][h], b[h], acc[mt]);
    }
  }
  for (int mt = 0; mt < 2; ++mt) {
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, tq = lane & 3;
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * mt + g + (i >= 2 ? 8 : 0), t = 2 * tq + (i & 1);
        double exact = 0, mag = 0, largest = 0;
        for (int64_t e = 0; e < k; ++e) {
          const double p = double(bf16_to_f32(f32_to_bf16(w.values[row * k + e]))) *
                           bf16_to_f32(xb[t * k + e]);
          exact += p;
          mag += std::fabs(p);
          largest = std::max(largest, std::fabs(p));
        }
        // The same products in another order; the K-quants' fused values
        // may round to a neighbouring bf16 now and then (a product off by
        // 2^-8 of itself), a wrong fragment mapping is off by far more.
        const double flips = Values<F>::kKind == Kind::kMin ? largest / 64 : 0;
        EXPECT_NEAR(acc[mt][lane][i], exact, 1e-12 * (1 + mag) + flips)
            << "row " << row << " token " << t;
      }
    }
  }
}

TEST(QuantTileFormats, OneWarpTileMatchesTheProduct) {
  check_bf16_warp_tile<kQ8_0>(DType::kQ8_0, 256 + 96);
  check_bf16_warp_tile<kQ4_0>(DType::kQ4_0, 512);
  check_bf16_warp_tile<kQ4_K>(DType::kQ4_K, 512);
  check_bf16_warp_tile<kQ5_K>(DType::kQ5_K, 512);
  check_bf16_warp_tile<kQ6_K>(DType::kQ6_K, 768);  // rows at every even offset of a piece
  check_bf16_warp_tile<kF8B128>(DType::kF8B128, 384);
  check_bf16_warp_tile<kU4G128>(DType::kU4G128, 384);  // rows of 216 bytes: offsets 0 and 8
}

}  // namespace
}  // namespace ferrite::cuda::tile
