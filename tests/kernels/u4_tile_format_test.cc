// The 4-bit tile's decode (backends/cuda/kernels/u4_tile_formats.h), checked
// on the CPU where CI runs (the kernel itself runs in cuda_test and the
// conformance suite on the GPU):
//  - the mma.sync tile's code values are q - z exactly, and d times them is
//    the dequantized weight (f32, bitwise);
//  - one warp's 16 rows x 8 tokens x 128-element step, emulated with the
//    mma.sync tile's fragments (a code word a lane, the activations as they
//    lie) and the mma layouts of mma.cuh, then scaled by d, gives the
//    product of the f32 dequantized weights: the k order of A and B agree;
//  - the wgmma tile's values are bf16(d (q - z)) bitwise for f16 scales
//    (GPTQ / AWQ), within a bf16 rounding for any f32 scale, and its
//    natural-order fragments give the product of those bf16 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/kernels/u4_tile_formats.h"
#include "mma_emulation.h"
#include "tensor/dtype.h"

namespace ferrite::cuda::u4tile {
namespace {

// A row of u4_g128 blocks with random codes, zero points 0..16 and scales
// that are f16 numbers (f16_scales) or arbitrary f32.
std::vector<uint8_t> random_row(int64_t k, bool f16_scales, std::mt19937& rng) {
  std::vector<uint8_t> row(static_cast<size_t>(dtype_bytes(DType::kU4G128, k)));
  std::uniform_int_distribution<int> byte(0, 255), zero(0, 16);
  std::uniform_real_distribution<float> mag(-12.0f, 2.0f);
  for (int64_t b = 0; b < k / kGroup; ++b) {
    uint8_t* blk = row.data() + b * kBlockBytes;
    float d = std::ldexp(1.0f + std::uniform_real_distribution<float>(0.0f, 1.0f)(rng),
                         static_cast<int>(mag(rng)));
    if (byte(rng) & 1) d = -d;
    if (f16_scales) d = f16_to_f32(f32_to_f16(d));
    std::memcpy(blk, &d, 4);
    blk[4] = static_cast<uint8_t>(zero(rng));
    blk[5] = blk[6] = blk[7] = 0;
    for (int i = 0; i < kGroup / 2; ++i) blk[kCodesOffset + i] = static_cast<uint8_t>(byte(rng));
  }
  return row;
}

uint32_t word_at(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

float ref_value(const uint8_t* blk, int e) {  // bf16 of dequantize_row's value
  float v[kGroup];
  dequantize_row(DType::kU4G128, blk, v, kGroup);
  return bf16_to_f32(f32_to_bf16(v[e]));
}

// One warp's inputs for one k step: 16 rows of one u4_g128 block (f16 or
// f32 scales) and 8 tokens' bf16 activations.
struct WarpStep {
  std::vector<std::vector<uint8_t>> rows;
  std::vector<uint16_t> x;  // [8][128]
};
WarpStep random_warp_step(bool f16_scales, std::mt19937& rng) {
  WarpStep w;
  for (int r = 0; r < 16; ++r) w.rows.push_back(random_row(kGroup, f16_scales, rng));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  w.x.resize(8 * kGroup);
  for (uint16_t& v : w.x) v = f32_to_bf16(nd(rng));
  return w;
}

float dequantized(const uint8_t* blk, int e) {
  float v[kGroup];
  dequantize_row(DType::kU4G128, blk, v, kGroup);
  return v[e];
}

TEST(U4TileFormat, CodeValuesTimesTheScaleAreTheDequantizedWeights) {
  std::mt19937 rng(11);
  for (bool f16_scales : {true, false}) {
    const std::vector<uint8_t> row = random_row(kGroup * 64, f16_scales, rng);
    for (int b = 0; b < 64; ++b) {
      const uint8_t* blk = row.data() + b * kBlockBytes;
      float d;
      std::memcpy(&d, blk, 4);
      for (int w = 0; w < kGroup / 8; ++w) {  // code word w: elements 8 w .. 8 w + 7
        uint32_t v[4];
        code_values(word_at(blk + kCodesOffset + 4 * w), zero_pairs(blk[4]), v);
        for (int p = 0; p < 4; ++p)
          for (int h = 0; h < 2; ++h) {
            const int e = 8 * w + 2 * p + h;
            const float q = bf16_to_f32(static_cast<uint16_t>(v[p] >> (16 * h)));
            const int code = (blk[kCodesOffset + e / 2] >> (4 * (e % 2))) & 15;
            ASSERT_EQ(q, static_cast<float>(code - blk[4])) << "block " << b << " element " << e;
            ASSERT_EQ(d * q, dequantized(blk, e)) << "block " << b << " element " << e;
          }
      }
    }
  }
}

TEST(U4TileFormat, OneWarpStepIsTheProductOfTheDequantizedWeights) {
  std::mt19937 rng(5);
  constexpr int k = kGroup;
  for (int trial = 0; trial < 4; ++trial) {
    const WarpStep step = random_warp_step(trial % 2 == 0, rng);
    const std::vector<std::vector<uint8_t>>& rows = step.rows;
    const std::vector<uint16_t>& x = step.x;
    double part[32][4] = {};  // the step's sums of (q - z) x
    for (int c = 0; c < kGroup / 32; ++c) {
      // Lane (g, tq): rows g and g + 8, code word tq of chunk c; token g,
      // activations 8 tq .. 8 tq + 7 of the chunk.
      uint32_t a[2][32][4], b[2][32][2];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, tq = lane & 3;
        uint32_t v[2][4];
        for (int h = 0; h < 2; ++h) {
          const uint8_t* blk = rows[g + 8 * h].data();
          code_values(word_at(blk + kCodesOffset + 16 * c + 4 * tq), zero_pairs(blk[4]), v[h]);
        }
        uint32_t x4[4];
        std::memcpy(x4, x.data() + g * k + 32 * c + 8 * tq, 16);
        for (int kk = 0; kk < 2; ++kk) {
          const uint32_t frag[4] = {v[0][2 * kk], v[1][2 * kk], v[0][2 * kk + 1],
                                    v[1][2 * kk + 1]};
          for (int i = 0; i < 4; ++i) a[kk][lane][i] = frag[i];
          b[kk][lane][0] = x4[2 * kk];
          b[kk][lane][1] = x4[2 * kk + 1];
        }
      }
      for (int kk = 0; kk < 2; ++kk)
        testing::emulate_mma_m16n8k16(a[kk], b[kk], part,
                                      [](uint16_t h) { return bf16_to_f32(h); });
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, tq = lane & 3;
      for (int i = 0; i < 4; ++i) {
        const int r = g + 8 * (i >> 1), t = 2 * tq + (i & 1);
        float d;
        std::memcpy(&d, rows[r].data(), 4);
        double want = 0.0, size = 0.0;
        for (int e = 0; e < k; ++e) {
          const double term = double(dequantized(rows[r].data(), e)) * bf16_to_f32(x[t * k + e]);
          want += term;
          size += std::fabs(term);
        }
        // f16 scales: d (q - z) is exact in f32; other f32 scales: the
        // dequantized weights are rounded to f32 (2^-24 of each).
        const double tol = (trial % 2 == 0 ? 1e-12 : 0x1p-23) * size + 1e-12;
        EXPECT_NEAR(d * part[lane][i], want, tol) << "row " << r << " token " << t;
      }
    }
  }
}

// The wgmma tile's values: the bf16 of the dequantized weights, bitwise for
// f16 scales.
TEST(U4TileFormat, WgmmaValuesAreTheBf16OfTheDequantizedWeights) {
  std::mt19937 rng(13);
  for (bool f16_scales : {true, false}) {
    const std::vector<uint8_t> row = random_row(kGroup * 64, f16_scales, rng);
    int64_t off_by_one = 0;
    for (int b = 0; b < 64; ++b) {
      const uint8_t* blk = row.data() + b * kBlockBytes;
      const RowScale s = block_scale(blk);
      for (int w = 0; w < kGroup / 8; ++w) {
        const uint32_t word = word_at(blk + kCodesOffset + 4 * w);
        for (uint32_t p = 0; p < 4; ++p) {
          const uint32_t v = pair_values(byte_pair(word, word >> 4, byte_pair_selector(p)), s);
          for (int h = 0; h < 2; ++h) {
            const float got = bf16_to_f32(static_cast<uint16_t>(v >> (16 * h)));
            const float want = ref_value(blk, 8 * w + 2 * static_cast<int>(p) + h);
            if (f16_scales) {
              ASSERT_EQ(got, want) << "block " << b << " word " << w << " pair " << p;
            } else {
              const float ulp = std::ldexp(1.0f, std::ilogb(want == 0.0f ? 1e-30f : want) - 7);
              ASSERT_LE(std::fabs(got - want), ulp) << "block " << b;
              off_by_one += got != want;
            }
          }
        }
      }
    }
    if (!f16_scales) {
      EXPECT_LT(off_by_one, 64 * kGroup / 20);  // rare: double roundings only
    }
  }
}

// The wgmma tile's natural-order fragments (the activations as they lie):
// one warp's 16 rows x 8 tokens per mma half of every chunk.
TEST(U4TileFormat, NaturalOrderFragmentsGiveTheProductOfTheBf16Values) {
  std::mt19937 rng(9);
  constexpr int k = kGroup;
  for (int trial = 0; trial < 4; ++trial) {
    const WarpStep step = random_warp_step(trial % 2 == 0, rng);
    const std::vector<std::vector<uint8_t>>& rows = step.rows;
    const std::vector<uint16_t>& x = step.x;
    for (int c = 0; c < kGroup / 32; ++c)
      for (int kk = 0; kk < 2; ++kk) {
        uint32_t a[32][4], b[32][2];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, tq = lane & 3;
          uint32_t words[2][4];
          RowScale s[2];
          for (int h = 0; h < 2; ++h) {
            const uint8_t* blk = rows[g + 8 * h].data();
            s[h] = block_scale(blk);
            for (int j = 0; j < 4; ++j) words[h][j] = word_at(blk + kCodesOffset + 16 * c + 4 * j);
          }
          a_fragments_natural(words, s, kk, byte_pair_selector(tq), a[lane]);
          const uint16_t* xt = x.data() + g * k + 32 * c + 16 * kk + 2 * tq;
          b[lane][0] = xt[0] | (static_cast<uint32_t>(xt[1]) << 16);
          b[lane][1] = xt[8] | (static_cast<uint32_t>(xt[9]) << 16);
        }
        double out[32][4] = {};
        testing::emulate_mma_m16n8k16(a, b, out, [](uint16_t h) { return bf16_to_f32(h); });
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, tq = lane & 3;
          for (int i = 0; i < 4; ++i) {
            const int r = g + 8 * (i >> 1), t = 2 * tq + (i & 1);
            double want = 0.0;
            for (int e = 32 * c + 16 * kk; e < 32 * c + 16 * kk + 16; ++e)
              want += double(ref_value(rows[r].data(), e)) * bf16_to_f32(x[t * k + e]);
            // f16 scales: the values are exact; f32 scales: within a bf16 unit.
            const double tol =
                trial % 2 == 0 ? 1e-9 * (1.0 + std::fabs(want)) : 0.05 * (1.0 + std::fabs(want));
            EXPECT_NEAR(out[lane][i], want, tol) << "chunk " << c << " half " << kk << " row " << r;
          }
        }
      }
  }
}

// The tiled layout (U4Layout::kTiles): every block of the rows lands at
// tiled_block_offset, each tile's k step is one 9,216-byte run, the rows
// past n are zero blocks and nothing else is written.
TEST(U4TileFormat, TiledLayoutHoldsEveryBlockOnceInItsStepRun) {
  std::mt19937 rng(17);
  for (int64_t n : {1, 128, 200, 300}) {
    const int64_t k = 3 * kGroup, steps = k / kGroup;
    std::vector<uint8_t> rows;
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<uint8_t> row = random_row(k, true, rng);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    const int64_t bytes = tiled_bytes(n, k);
    ASSERT_EQ(bytes, (n + 127) / 128 * steps * 128 * kBlockBytes);
    std::vector<uint8_t> tiles(static_cast<size_t>(bytes), 0xAB);
    tile_u4_rows(rows.data(), tiles.data(), n, k);
    std::vector<int> owner(static_cast<size_t>(bytes / kBlockBytes), -1);
    for (int64_t r = 0; r < (n + 127) / 128 * 128; ++r)
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t at = tiled_block_offset(r, s, steps);
        ASSERT_EQ(at % kBlockBytes, 0);
        // The step's run: tile r / 128, step s, rows in order.
        ASSERT_EQ(at / kTileStepBytes, r / 128 * steps + s);
        ASSERT_EQ(owner[static_cast<size_t>(at / kBlockBytes)], -1) << "row " << r << " step " << s;
        owner[static_cast<size_t>(at / kBlockBytes)] = static_cast<int>(r * steps + s);
        const uint8_t* got = tiles.data() + at;
        if (r < n) {
          ASSERT_EQ(std::memcmp(got, rows.data() + (r * steps + s) * kBlockBytes, kBlockBytes), 0)
              << "n " << n << " row " << r << " step " << s;
        } else {
          for (int b = 0; b < kBlockBytes; ++b) ASSERT_EQ(got[b], 0) << "padding row " << r;
        }
      }
  }
}

// The wgmma tile's activations in shared memory are where the tensor cores
// read B: for every k16 sub-step, token n and k, PTX's canonical K-major
// unswizzled layout at the descriptor's start, LBO and SBO holds x[n][16 ks
// + k] as load_x puts it (wgmma_x_offset), and no two elements share bytes.
TEST(U4TileFormat, WgmmaActivationLayoutIsTheCanonicalKMajorOne) {
  constexpr int kTokens = 128;
  std::vector<int> owner(static_cast<size_t>(kTokens * 2 * kGroup), -1);
  for (int t = 0; t < kTokens; ++t)
    for (int e = 0; e < kGroup; ++e) {
      const int at = wgmma_x_offset(t, e / 8) + 2 * (e % 8);
      ASSERT_LT(at + 1, static_cast<int>(owner.size()));
      ASSERT_EQ(owner[at], -1) << "token " << t << " element " << e;
      owner[at] = t * kGroup + e;
    }
  for (int ks = 0; ks < kGroup / 16; ++ks)
    for (int n = 0; n < kTokens; ++n)
      for (int k = 0; k < 16; ++k) {
        // ((8, m), (T, 2k)) : ((1T, SBO), (1, LBO)) in bytes, T = 16 bytes.
        const int canonical = wgmma_ks_offset(ks) + 16 * (n % 8) +
                              static_cast<int>(kWgmmaSbo) * (n / 8) + 2 * (k % 8) +
                              static_cast<int>(kWgmmaLbo) * (k / 8);
        EXPECT_EQ(owner[canonical], n * kGroup + 16 * ks + k)
            << "ks " << ks << " n " << n << " k " << k;
      }
}

}  // namespace
}  // namespace ferrite::cuda::u4tile
