// How the 4-bit tile (u4_tile.cu) turns u4_g128 codes (tensor/dtype.h:
// f32 d, u8 z, 3 bytes 0, u8 qs[64]; element 2j = qs[j] & 15, element 2j + 1
// = qs[j] >> 4; value d (q - z)) into bf16 mma fragments, in plain C++ for
// host and device so that tests/kernels checks it on the CPU, where CI runs.
//
// The mma.sync tile multiplies the integers q - z, not the weights: a lane
// of quad position tq takes code word tq of a row's 32-element chunk
// (elements 8 tq .. 8 tq + 7) and turns its byte b into the bf16 pair
// (128 + q[2 b], 128 + q[2 b + 1]) with one byte permute and one mask-and-
// magic operation (byte_pair), then subtracts 128 + z (one bf16x2
// subtract, exact: code_values). The pairs are in the natural k order, so
// the lane's activations x[8 tq .. 8 tq + 7] (one 16-byte load) are its B
// fragments as they lie. A k step's sums of (q - z) x are exact bf16
// products added in f32; the kernel scales them by the block's f32 d once a
// step, in f32. ~1.6 instructions a weight, and the result is closer to
// the f32 dequantized weights than any bf16 rounding of them.
//
// The wgmma tile (a_fragments_natural) keeps the older arithmetic: exact
// values in bf16. With p = 128 + q and zz = 128 + z (both integers below
// 256, exact), p - zz = q - z exactly; the scale is split d = d_hi + d_lo
// (d_hi = bf16(d), d_lo = bf16(d - d_hi)) and
//
//    value = fma(q - z, d_hi, bf16(q - z) * d_lo))      (bf16x2 ops)
//
// rounds once. For scales that are f16 or bf16 numbers (GPTQ and AWQ store
// f16) d_lo holds the rest of d exactly and (q - z) d_lo is exact, so the
// value is bf16(d (q - z)) bitwise: what dequantizing the rows to bf16 for
// cuBLASLt gives (gemm.cc). Other f32 scales are within a bf16 rounding of it.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#define FERRITE_U4_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define FERRITE_U4_HD inline
#endif

namespace ferrite::cuda::u4tile {

inline constexpr int kGroup = 128;               // elements a u4_g128 block (a k step of the tile)
inline constexpr int kBlockBytes = 72;           // its bytes
inline constexpr int kCodesOffset = 8;           // where its codes start
inline constexpr uint32_t kMagic = 0x43004300u;  // bf16x2 (128, 128)

// __byte_perm on the host too: byte i of the result is byte sel[4 i .. 4 i
// + 2] of the eight bytes (a, b).
FERRITE_U4_HD uint32_t permute_bytes(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, sel);
#else
  const uint64_t v = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<uint32_t>((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

// The natural-order decode (both tiles): the bf16 pair (128 + q[2 b], 128 + q[2 b + 1]) of
// byte b (0..3) of a code word w, with w4 = w >> 4 (computed once a word) and
// sel = byte_pair_selector(b).
FERRITE_U4_HD uint32_t byte_pair_selector(uint32_t b) {
  return b | (b << 4) | ((4 + b) << 8) | ((4 + b) << 12);
}
FERRITE_U4_HD uint32_t byte_pair(uint32_t w, uint32_t w4, uint32_t sel) {
  // Byte b of w (low nibble q[2 b]) in byte 0, byte b of w4 (low nibble
  // q[2 b + 1]) in byte 2; the mask keeps the two nibbles.
  return (permute_bytes(w, w4, sel) & 0x000F000Fu) | kMagic;
}

// The 4-bit tile's own weight layout (U4Layout::kTiles, u4_tile.cuh; not
// yet produced by the loader): the u4_g128 blocks of each 128 rows, k step
// by k step. Block (r, s) lies at ((r / 128) steps + s) 9216 + (r % 128) 72,
// rows past n (up to a multiple of 128) are zero blocks. A tile's k step is
// then one contiguous 9,216-byte run instead of 128 runs of 72 bytes, 72
// steps apart (the row-major layout: each DRAM page opened for ~80 bytes).
inline constexpr int kTileRows = 128;
inline constexpr int64_t kTileStepBytes = int64_t{kTileRows} * kBlockBytes;
FERRITE_U4_HD int64_t tiled_block_offset(int64_t r, int64_t s, int64_t steps) {
  return ((r / kTileRows) * steps + s) * kTileStepBytes + (r % kTileRows) * kBlockBytes;
}
inline int64_t tiled_bytes(int64_t n, int64_t k) {
  return (n + kTileRows - 1) / kTileRows * (k / kGroup) * kTileStepBytes;
}
// Row-major u4_g128 rows [n, k] (k a multiple of 128) into the tiled
// layout (tiled_bytes(n, k) bytes).
inline void tile_u4_rows(const uint8_t* rows, uint8_t* tiles, int64_t n, int64_t k) {
  const int64_t steps = k / kGroup;
  std::memset(tiles, 0, static_cast<size_t>(tiled_bytes(n, k)));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t s = 0; s < steps; ++s)
      std::memcpy(tiles + tiled_block_offset(r, s, steps), rows + (r * steps + s) * kBlockBytes,
                  kBlockBytes);
}

// Where the wgmma tile puts a step's activations in shared memory: K-major
// core matrices without swizzle (PTX ISA, wgmma's canonical layout
// ((8, m), (T, 2k)) : ((1T, SBO), (1, LBO)), T = 8 bf16 = 16 bytes): token t,
// elements 8 c .. + 7 of the step (c = 0..15) at byte wgmma_x_offset(t, c);
// the k16 sub-step ks starts at byte 256 ks, LBO (between its two 8-element
// column groups) 128, SBO (between 8-token groups) 2048.
inline constexpr uint32_t kWgmmaLbo = 128, kWgmmaSbo = 16 * 128;
FERRITE_U4_HD int wgmma_x_offset(int t, int c) {
  return (t >> 3) * static_cast<int>(kWgmmaSbo) + static_cast<int>(kWgmmaLbo) * c + 16 * (t & 7);
}
FERRITE_U4_HD int wgmma_ks_offset(int ks) { return 2 * static_cast<int>(kWgmmaLbo) * ks; }

// 128 + z in both bf16 halves of a word (z <= 127: exact).
FERRITE_U4_HD uint32_t zero_pairs(uint32_t z) { return (0x4300u | z) * 0x10001u; }

// A row's step constants, each a bf16 number in both halves of a word.
struct RowScale {
  uint32_t zz, d_hi, d_lo;
};

#ifdef __CUDACC__
__device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t u) {
  __nv_bfloat162 v;
  std::memcpy(&v, &u, 4);
  return v;
}
__device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
#endif

// bf16 helpers of the host path (round to nearest even from an exact double).
#ifndef __CUDA_ARCH__
inline float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t bf16_round(double v) {
  if (v == 0.0) return std::signbit(v) ? 0x8000 : 0;
  int e = 0;
  std::frexp(v, &e);                          // |v| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, e - 8);  // 8 significant bits
  const double r = std::nearbyint(v / ulp) * ulp;
  const float f = static_cast<float>(r);  // exact: 8 bits
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
#endif

FERRITE_U4_HD RowScale row_scale(float d, uint32_t z) {
  RowScale s;
  s.zz = zero_pairs(z);
#ifdef __CUDA_ARCH__
  const __nv_bfloat16 hi = __float2bfloat16_rn(d);
  const __nv_bfloat16 lo = __float2bfloat16_rn(d - __bfloat162float(hi));
  s.d_hi = as_u32(__halves2bfloat162(hi, hi));
  s.d_lo = as_u32(__halves2bfloat162(lo, lo));
#else
  const uint16_t hi = bf16_round(d);
  const uint16_t lo = bf16_round(static_cast<double>(d) - bf16_value(hi));
  s.d_hi = hi * 0x10001u;
  s.d_lo = lo * 0x10001u;
#endif
  return s;
}

// The step constants of the u4_g128 block at blk (4-byte aligned).
FERRITE_U4_HD RowScale block_scale(const uint8_t* blk) {
  float d;
#ifdef __CUDA_ARCH__
  d = *reinterpret_cast<const float*>(blk);
#else
  std::memcpy(&d, blk, 4);
#endif
  return row_scale(d, blk[4]);
}

// The bf16x2 values of a code pair p (code_pairs) under the row's scale.
FERRITE_U4_HD uint32_t pair_values(uint32_t p, const RowScale& s) {
#ifdef __CUDA_ARCH__
  const __nv_bfloat162 q = __hsub2(as_bf162(p), as_bf162(s.zz));  // q - z, exact
  const __nv_bfloat162 t = __hmul2_rn(q, as_bf162(s.d_lo));
  return as_u32(__hfma2(q, as_bf162(s.d_hi), t));
#else
  uint32_t out = 0;
  for (int h = 0; h < 2; ++h) {
    auto half = [&](uint32_t w) { return bf16_value(static_cast<uint16_t>(w >> (16 * h))); };
    const double q = static_cast<double>(half(p)) - half(s.zz);
    const double t = bf16_value(bf16_round(q * half(s.d_lo)));
    out |= static_cast<uint32_t>(bf16_round(q * half(s.d_hi) + t)) << (16 * h);
  }
  return out;
#endif
}

// bf16x2 p - zz, both halves integers below 256: exact.
FERRITE_U4_HD uint32_t sub_pairs(uint32_t p, uint32_t zz) {
#ifdef __CUDA_ARCH__
  return as_u32(__hsub2(as_bf162(p), as_bf162(zz)));
#else
  uint32_t out = 0;
  for (int h = 0; h < 2; ++h) {
    const float v = bf16_value(static_cast<uint16_t>(p >> (16 * h))) -
                    bf16_value(static_cast<uint16_t>(zz >> (16 * h)));
    out |= static_cast<uint32_t>(bf16_round(v)) << (16 * h);
  }
  return out;
#endif
}

// The mma.sync tile's decode: the bf16 pairs (q[2 b] - z, q[2 b + 1] - z),
// b = 0..3, of code word w (elements 8 tq .. 8 tq + 7 of a chunk), zz the
// row's zero point as RowScale::zz. Lane (g, tq)'s A fragment of mma half
// kk, rows g / g + 8 with values v / v8: {v[2 kk], v8[2 kk], v[2 kk + 1],
// v8[2 kk + 1]}; its B fragment, activation words x[0..3] (elements 8 tq ..
// 8 tq + 7 of the chunk): b0 = x[2 kk], b1 = x[2 kk + 1].
FERRITE_U4_HD void code_values(uint32_t w, uint32_t zz, uint32_t (&v)[4]) {
  const uint32_t w4 = w >> 4;
  for (uint32_t b = 0; b < 4; ++b) v[b] = sub_pairs(byte_pair(w, w4, byte_pair_selector(b)), zz);
}

// The natural-order A fragment registers of rows (g, g + 8) for mma half kk
// of a chunk (words[h][0..3]: row h's code words of the chunk), lane quad
// position tq: a[0] / a[1] (k 16 kk + 2 tq, + 1) of rows g / g + 8 from byte
// tq of word 2 kk, a[2] / a[3] (k 16 kk + 8 + 2 tq, + 1) from byte tq of
// word 2 kk + 1.
FERRITE_U4_HD void a_fragments_natural(const uint32_t (&words)[2][4], const RowScale (&s)[2],
                                       int kk, uint32_t sel, uint32_t (&a)[4]) {
  for (int h = 0; h < 2; ++h)
    for (int half = 0; half < 2; ++half) {
      const uint32_t w = words[h][2 * kk + half];
      a[2 * half + h] = pair_values(byte_pair(w, w >> 4, sel), s[h]);
    }
}

}  // namespace ferrite::cuda::u4tile
