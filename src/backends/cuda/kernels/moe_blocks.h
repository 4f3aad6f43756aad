// The 128-element block formats as the grouped expert GEMM (moe.cu,
// moe_mma_kernel's kQ) reads them: a stage copies the 16-byte pieces that
// cover each weight row's block into shared memory (the block starts
// piece_offset bytes into its first piece), and a thread then turns 32
// elements of the block (part 0..3: elements 32 part .. + 31) into the
// reference dequantization's f32 values (tensor/dtype.h, the same single
// rounding of each product), which the kernel rounds to the activation type.
//
//   format          bytes  pieces   element
//   f8_e4m3_b128    132    9        f32(e4m3 code) * d
//   u4_g128         72     5        d * (q - z)
//
// Plain C++ on the host, so that tests/kernels checks every element against
// dequantize_row on the CPU, where CI runs (the kernel runs in cuda_test).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/quant_tile_formats.h"  // tile::rd32, rd_f32, mul_rn

namespace ferrite::cuda::moeblocks {

enum Fmt : int { kF8 = 5, kU4 = 6 };  // qblocks::QFmt's codes

template <int Q>
struct Blocks;
// 132 bytes at a 4-byte aligned offset lie within 9 pieces of 16 bytes.
template <>
struct Blocks<kF8> {
  static constexpr int kBytes = 132, kRawRow = 144;
};
// 72 bytes at an 8-byte aligned offset lie within 5 pieces.
template <>
struct Blocks<kU4> {
  static constexpr int kBytes = 72, kRawRow = 80;
};

// A block at byte `at` of 16-byte aligned weights: its first piece's offset
// and where it starts within that piece.
FERRITE_TILE_HD int64_t piece_start(int64_t at) { return at & ~int64_t{15}; }
FERRITE_TILE_HD int piece_offset(int64_t at) { return static_cast<int>(at & 15); }

// Elements 32 part .. 32 part + 31 of the block whose first byte is blk
// (4-byte aligned), as dequantize_row's f32.
template <int Q>
FERRITE_TILE_HD void values32(const uint8_t* blk, int part, float (&v)[32]) {
  const float d = tile::rd_f32(blk);
  if constexpr (Q == kU4) {
    // 16 bytes of nibbles: word i holds elements 8 i .. 8 i + 7 (element 2 j:
    // the low nibble of byte j).
    const int z = blk[4];
    for (int i = 0; i < 4; ++i) {
      const uint32_t word = tile::rd32(blk + 8 + 16 * part + 4 * i);
      for (int n = 0; n < 8; ++n) {
        const int q = static_cast<int>((word >> (4 * n)) & 15u);
        v[8 * i + n] = tile::mul_rn(d, static_cast<float>(q - z));
      }
    }
  } else {
    for (int i = 0; i < 8; ++i) {
      const uint32_t word = tile::rd32(blk + 4 + 32 * part + 4 * i);
      for (int h = 0; h < 2; ++h) {
#ifdef __CUDA_ARCH__
        // Two codes a conversion; e4m3fn -> f16 -> f32 is exact.
        const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>((word >> (16 * h)) & 0xFFFFu), __NV_E4M3);
        const float2 f = __half22float2(__half2(hr));
        v[4 * i + 2 * h] = tile::mul_rn(f.x, d);
        v[4 * i + 2 * h + 1] = tile::mul_rn(f.y, d);
#else
        for (int e = 0; e < 2; ++e)
          v[4 * i + 2 * h + e] = tile::mul_rn(
              f8e4m3_to_f32(static_cast<uint8_t>(word >> (16 * h + 8 * e))), d);
#endif
      }
    }
  }
}

}  // namespace ferrite::cuda::moeblocks
