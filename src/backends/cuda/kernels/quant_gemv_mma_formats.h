// The 128-element block formats as the tensor-core decode GEMV of
// quant_gemv_mma.cu reads them: for one weight row's block b (its bytes in
// shared memory), half h (64 elements) and lane quad tq (0..3),
//
//   words(b, h, tq, w):    the lane's raw words of the half;
//   row_consts(b):         what decode needs of the block besides its codes;
//   decode(w, rc, lo, hi): the f16 pairs of mma step s (0..3) of the half:
//                          lo[s] for the lane's k slots (2 tq, 2 tq + 1),
//                          hi[s] for (2 tq + 8, 2 tq + 9) (mma.cuh's A layout);
//   staged_pos(c):         where element c of a 64-element run of x is
//                          staged, so that the lane's 16 values of the half,
//                          at 16 tq .. 16 tq + 15, meet its codes slot for slot.
//
// The values are the codes exactly in f16 (e4m3 -> f16 is exact; u4: q - z),
// to be multiplied by the block's f32 d (its first 4 bytes) after the mma:
//
//   f8_e4m3_b128 (132 bytes: f32 d, 128 e4m3): step s takes codes
//     16 s + 4 tq .. + 3 of the half: the 4 lanes of a row read 4
//     consecutive words (rows 528 bytes apart fall 4 banks apart);
//   u4_g128 (72 bytes: f32 d, u8 z, 3 bytes, 64 of nibbles, element 2 j the
//     low nibble of byte j): the lane's 16 codes 16 tq .. + 15 (one 64-bit
//     load); step 2 i + j from word i: nibble pairs (e0, e4), (e1, e5) for
//     j = 0 and (e2, e6), (e3, e7) for j = 1 of its 8 codes, the pairs that a
//     lop3 with 0x64006400 turns into f16 1024 + q (or 1024 + 16 q).
//
// Plain C++ on the host (bitwise the device's results: the f16 arithmetic
// there is exact), so that tests/kernels checks the layout on the CPU, where
// CI runs.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cuda/kernels/quant_tile_formats.h"  // tile::rd32, tile::f16_bits

#ifdef __CUDACC__
#define FERRITE_MMA_HD __host__ __device__ __forceinline__
#else
#define FERRITE_MMA_HD inline
#endif

namespace ferrite::cuda::mmagemv {

// The format codes (qblocks::QFmt's).
enum Fmt : int { kF8 = 5, kU4 = 6 };

using tile::rd32;

// f16 bits <-> f32 (exact for the values here).
FERRITE_MMA_HD float h2f(uint32_t h) { return tile::f16_bits(h); }
FERRITE_MMA_HD uint32_t f2h(float f) {
#ifdef __CUDA_ARCH__
  return __half_as_ushort(__float2half_rn(f));
#else
  return f32_to_f16(f);
#endif
}

template <int F>
struct MmaFmt;

template <>
struct MmaFmt<kF8> {
  static constexpr int kBytes = 132;
  static FERRITE_MMA_HD void words(const uint8_t* b, int h, int tq, uint32_t (&w)[4]) {
    const uint8_t* q = b + 4 + 64 * h + 4 * tq;
    for (int s = 0; s < 4; ++s) w[s] = rd32(q + 16 * s);
  }
  struct Row {};
  static FERRITE_MMA_HD Row row_consts(const uint8_t*) { return {}; }
  // Two e4m3 codes (the low byte first) as an f16 pair (the low half first).
  static FERRITE_MMA_HD uint32_t pair(uint32_t two) {
#ifdef __CUDA_ARCH__
    const __half2_raw r =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
    return static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16);
#else
    return f2h(f8e4m3_to_f32(static_cast<uint8_t>(two & 0xFFu))) |
           (f2h(f8e4m3_to_f32(static_cast<uint8_t>(two >> 8))) << 16);
#endif
  }
  static FERRITE_MMA_HD void decode(const uint32_t (&w)[4], Row, uint32_t (&lo)[4],
                                    uint32_t (&hi)[4]) {
    for (int s = 0; s < 4; ++s) {
      lo[s] = pair(w[s] & 0xFFFFu);
      hi[s] = pair(w[s] >> 16);
    }
  }
  // Element c of a 64-element run (c = 16 s + 4 t + i) is staged at 16 t + 4 s + i.
  static FERRITE_MMA_HD int staged_pos(int c) {
    const int s = (c >> 4) & 3, t = (c >> 2) & 3;
    return (c & ~63) + 16 * t + 4 * s + (c & 3);
  }
};

template <>
struct MmaFmt<kU4> {
  static constexpr int kBytes = 72;
  static FERRITE_MMA_HD void words(const uint8_t* b, int h, int tq, uint32_t (&w)[4]) {
    const uint8_t* q = b + 8 + 32 * h + 8 * tq;  // 8-byte aligned: one 64-bit load
#ifdef __CUDA_ARCH__
    const uint2 v = *reinterpret_cast<const uint2*>(q);
    w[0] = v.x;
    w[1] = v.y;
#else
    w[0] = rd32(q);
    w[1] = rd32(q + 4);
#endif
    w[2] = w[3] = 0u;
  }
  struct Row {
    uint32_t sub;  // f16x2 (1024 + z) twice: (1024 + q) - (1024 + z) = q - z
    uint32_t add;  // f16x2 -(64 + z) twice: (1024 + 16 q) / 16 - (64 + z) = q - z
  };
  static FERRITE_MMA_HD Row row_consts(const uint8_t* b) {
    const uint32_t z = b[4];
    const uint32_t s = 0x6400u | z;  // 1024 + z (z < 1024)
    const uint32_t a = f2h(-64.0f - static_cast<float>(z));
    return {s | (s << 16), a | (a << 16)};
  }
  static FERRITE_MMA_HD uint32_t lop3_or(uint32_t a, uint32_t mask) {  // (a & mask) | 0x64006400
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(0x64006400u));
    return r;
#else
    return (a & mask) | 0x64006400u;
#endif
  }
  static FERRITE_MMA_HD uint32_t hsub2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    __half2 r = __hsub2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
#else
    return f2h(h2f(a & 0xFFFFu) - h2f(b & 0xFFFFu)) |
           (f2h(h2f(a >> 16) - h2f(b >> 16)) << 16);
#endif
  }
  static FERRITE_MMA_HD uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
    __half2 r = __hfma2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b),
                        *reinterpret_cast<const __half2*>(&c));
    return *reinterpret_cast<uint32_t*>(&r);
#else  // exact here: (1024 + 16 q) / 16 + c is a small integer
    return f2h(h2f(a & 0xFFFFu) * h2f(b & 0xFFFFu) + h2f(c & 0xFFFFu)) |
           (f2h(h2f(a >> 16) * h2f(b >> 16) + h2f(c >> 16)) << 16);
#endif
  }
  static FERRITE_MMA_HD void decode(const uint32_t (&w)[4], Row rc, uint32_t (&lo)[4],
                                    uint32_t (&hi)[4]) {
    constexpr uint32_t kSixteenth = 0x2C002C00u;  // f16x2 1/16
    for (int i = 0; i < 2; ++i) {
      const uint32_t v = w[i], v8 = w[i] >> 8;
      lo[2 * i] = hsub2(lop3_or(v, 0x000F000Fu), rc.sub);                   // (e0, e4)
      hi[2 * i] = hfma2(lop3_or(v, 0x00F000F0u), kSixteenth, rc.add);       // (e1, e5)
      lo[2 * i + 1] = hsub2(lop3_or(v8, 0x000F000Fu), rc.sub);              // (e2, e6)
      hi[2 * i + 1] = hfma2(lop3_or(v8, 0x00F000F0u), kSixteenth, rc.add);  // (e3, e7)
    }
  }
  // Each run of 8 as e0, e4, e1, e5, e2, e6, e3, e7.
  static FERRITE_MMA_HD int staged_pos(int c) {
    const int i = c & 7;
    return (c & ~7) + (i < 4 ? 2 * i : 2 * (i - 4) + 1);
  }
};

}  // namespace ferrite::cuda::mmagemv
