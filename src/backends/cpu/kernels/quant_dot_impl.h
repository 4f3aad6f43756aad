// Internal to the integer block matmul (quant_dot.h): the quantized
// activation row layout and the per-ISA kernel table. The ISA files
// (quant_dot_avx512.cc, quant_dot_avx2.cc) are compiled with their own
// instruction-set flags and include only this header and <immintrin.h>, so
// no inline function is emitted in two ISAs (everything here has internal
// linkage).
#pragma once

#include <cstdint>
#include <cstring>

namespace ferrite::cpu::qdot {
namespace {

// Weight formats of the kernels: the GGUF blocks, and u4_g128 (the 4-bit
// GPTQ / AWQ / compressed-tensors blocks, tensor/dtype.h).
enum Fmt : int { kQ8_0 = 0, kQ4_0 = 1, kQ4_K = 2, kQ5_K = 3, kQ6_K = 4, kU4 = 5 };

constexpr bool is_kquant(int f) { return f >= kQ4_K && f <= kQ6_K; }
constexpr int64_t block_elems(int f) { return f <= kQ4_0 ? 32 : f == kU4 ? 128 : 256; }
constexpr int64_t block_bytes(int f) {
  return f == kQ8_0 ? 34
         : f == kQ4_0 ? 18
         : f == kQ4_K ? 144
         : f == kQ5_K ? 176
         : f == kQ6_K ? 210
                      : 72;
}
constexpr int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// One quantized activation row of n elements (n whole blocks of the format),
// 64-byte aligned parts:
//  - q: n bytes (block-32 formats: padded to a whole block pair), in the
//    format's layout:
//      q8_0, q6_k: natural order;
//      q4_0: per block pair [b0 0..15, b1 0..15, b0 16..31, b1 16..31];
//      q4_k, q5_k: per 256-block the 32-element sub-blocks 0,2,1,3,4,6,5,7;
//      the AVX-512 VNNI kernels (no AMX) write and read the k-quants'
//      blocks interleaved instead (quant_dot_avx512.cc, kIlDwords*): a
//      permutation of each block's bytes, the same values and sums.
//    k-quants: int8 q; block-32 formats: uint8 q + 128 (the padding: 128),
//    so that the signed weights are vpdpbusd's signed operand.
//  - block-32 formats: per pair dx[16] (f32: the scale of lane l's block; 0
//    for the padding block).
//  - k-quants: d[n / 256] (f32) and bsum[n / 16] (int16: sums of 16 natural
//    elements).
//  - u4_g128: int8 q, per 128-block its 64 even elements (0, 2, .., 126) then
//    its 64 odd ones (the weight's byte j holds elements 2j and 2j + 1 in its
//    low and high nibble, so the unpacked nibbles meet their activations in
//    vpdpbusd's lanes); d[n / 128] (f32) and bsum[n / 128] (int16: the sum
//    of the block's q, for the zero point).
struct Layout {
  int64_t q = 0, dx = 0, d = 0, bsum = 0, stride = 0;
};
inline Layout layout(int f, int64_t n) {
  Layout l;
  if (f <= kQ4_0) {
    const int64_t pairs = (n / 32 + 1) / 2;
    l.dx = round_up(pairs * 64, 64);
    l.stride = round_up(l.dx + pairs * 64, 64);
  } else if (f == kU4) {
    l.d = round_up(n, 64);
    l.bsum = l.d + round_up(n / 128 * 4, 64);
    l.stride = round_up(l.bsum + n / 128 * 2, 64);
  } else {
    l.d = round_up(n, 64);
    l.bsum = l.d + round_up(n / 256 * 4, 64);
    l.stride = round_up(l.bsum + n / 16 * 2, 64);
  }
  return l;
}

// Position (within its 256-block) of natural sub-block j in the q4_k / q5_k
// layout.
constexpr int kSubPos[8] = {0, 2, 1, 3, 4, 6, 5, 7};

inline float rd_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact
    const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The 8 six-bit scales and mins of a q4_k / q5_k block (12 bytes), as
// bytes sc[0..7] = out[0..7], m[0..7] = out[8..15].
inline void k4_scales(const uint8_t* s, uint8_t* out) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
  const uint32_t sc_lo = a & m6;                                   // sc 0..3
  const uint32_t sc_hi = (c & m4) | (((a >> 6) & m2) << 4);        // sc 4..7
  const uint32_t mn_lo = b & m6;                                   // m 0..3
  const uint32_t mn_hi = ((c >> 4) & m4) | (((b >> 6) & m2) << 4);  // m 4..7
  std::memcpy(out, &sc_lo, 4);
  std::memcpy(out + 4, &sc_hi, 4);
  std::memcpy(out + 8, &mn_lo, 4);
  std::memcpy(out + 12, &mn_hi, 4);
}

}  // namespace

// The kernels of one ISA.
//  quantize: row x (n elements) into `dst` (layout(f, n)).
//  tile: y[t * ldy + r] (+)= the product of weight rows r < nrows (w, row
//    `row_bytes` apart) with activation rows t < ntok (`act`, `stride` apart).
//  panel: (nullable) the same products as `tile` for up to kPanelRows
//    weight rows against ntok activation rows (kPanelTokens or more), the
//    activation rows readable up to ntok rounded up to kPanelTokens (the
//    caller pads with zero rows); the weight rows are repacked once per call
//    into `scratch` (panel_scratch_bytes, 64-byte aligned, the calling
//    thread's) so that a vector lane is a weight row. Only the formats whose
//    bit (1 << f) is set in panel_formats: the AMX table's k-quants and
//    q8_0 on AMX-INT8 tiles, the AVX-512 table's q8_0 on vpdpbusd.
struct Kernels {
  void (*quantize)(int f, const float* x, int64_t n, uint8_t* dst);
  void (*tile)(int f, const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
               int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate);
  void (*panel)(int f, const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
                int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate,
                void* scratch) = nullptr;
  uint32_t panel_formats = 0;
  // Of those, the formats whose panel pays for its repacking only from
  // 2 * kPanelTokens tokens (the VNNI q8_0 panel's gathers: at 16 tokens
  // it measured 27 % slower than the tiles, at 32 faster; session 29).
  uint32_t panel_formats_from_32 = 0;
};

// The panel kernels' shape: weight rows per call, token granule.
constexpr int64_t kPanelRows = 16;
constexpr int64_t kPanelTokens = 16;
constexpr int64_t kPanelBlockBytes = 5760;
constexpr int64_t kPanelBlock32Bytes = 640;
constexpr uint32_t kAmxPanelFormats = 1u << kQ8_0 | 1u << kQ4_K | 1u << kQ5_K | 1u << kQ6_K;
constexpr uint32_t kVnniPanelFormats = 1u << kQ8_0 | 1u << kQ4_K | 1u << kQ5_K | 1u << kQ6_K;
// The panel scratch for rows of n elements.
static constexpr int64_t panel_scratch_bytes(int f, int64_t n) {
  return f == kQ8_0 ? n / 32 * kPanelBlock32Bytes : n / 256 * kPanelBlockBytes;
}

// The AMX table: the AVX-512 quantize / tile plus the AMX-INT8 panel
// (nullptr where the compiler lacks AMX). amx_usable() asks the OS for the
// tile data state (once per process) and reports whether it was granted.
const Kernels* amx_kernels();
bool amx_usable();

// Defined in the ISA files (nullptr tables where the compiler lacks the ISA).
const Kernels* avx512_kernels();
const Kernels* avx2_kernels();
const Kernels* scalar_kernels();

}  // namespace ferrite::cpu::qdot
