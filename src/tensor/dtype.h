// Element types. Quantized block types describe a block of elements.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace ferrite {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // FP8 weights (e4m3fn)
  kU8,
  kU32,
  kI32,
  kI64,
  kQ8_0,  // GGUF block types: a block of kQ*BlockElems elements
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ4_0,
  kF8B128,  // Hugging Face formats, repacked at load (below): f8_e4m3_b128, u4_g128
  kU4G128,
};

std::string_view dtype_name(DType t);                      // "f32", "bf16", ...
std::optional<DType> dtype_from_name(std::string_view s);  // inverse of dtype_name
// Elements per storage block (1 for scalar types).
int64_t dtype_block_elems(DType t);
// Bytes per storage block (the element size for scalar types).
int64_t dtype_block_bytes(DType t);
// Bytes for n elements; n must be a multiple of the block size.
int64_t dtype_bytes(DType t, int64_t n);
bool dtype_is_float(DType t);  // f32, f16, bf16, f8
// Block formats: the GGUF ones (q8_0, q4_0, q4_k, q5_k, q6_k) and the
// repacked Hugging Face ones (f8_e4m3_b128, u4_g128).
bool dtype_is_quantized(DType t);
// The repacked Hugging Face formats (f8_e4m3_b128, u4_g128): CPU only for now.
bool dtype_is_hf_quant(DType t);
// Types a weight may be stored in and dequantized from: f32, f16, bf16 and
// the GGUF block formats.
bool dtype_is_weight_format(DType t);

// bf16 / f16 <-> f32 scalar conversions (round to nearest even).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// float8 e4m3fn (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no
// infinities, S.1111.111 is NaN) to f32, exactly; and f32 to the nearest
// e4m3fn (ties to even, saturating at +-448).
float f8e4m3_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3(float f);

// Element i of an f32 / bf16 / f16 array as f32, and the store back (rounded
// to nearest even). Other dtypes are a bug in the caller (checked).
// Element i of an f32 / bf16 / f16 array as f32, and the store back (rounded
// to nearest even). load_as_f32 also reads element i of an array of GGUF
// blocks (its value as the block's dequantization defines it); other dtypes
// are a bug in the caller (checked).
float load_as_f32(const void* data, DType dtype, int64_t i);
void store_from_f32(void* data, DType dtype, int64_t i, float value);

// --- GGUF / ggml quantized block formats ----------------------------------
//
// Byte layouts exactly as ggml-common.h defines them (little endian, no
// padding); `d` / `dmin` are IEEE f16. Element order inside a block is the
// order of dequantize_row below, which follows ggml-quants.c's reference
// dequantize_row_* operation by operation (the same f32 products and
// differences in the same order, so results are bitwise those of ggml's
// scalar reference).
//
//   q8_0 (32 el, 34 B):  d; int8 qs[32]                      x = d * q
//   q4_0 (32 el, 18 B):  d; u8 qs[16]: element j (< 16) is qs[j] & 15,
//                        element j + 16 is qs[j] >> 4         x = d * (q - 8)
//   q4_k (256 el, 144 B): d, dmin; u8 scales[12] (8 x 6-bit scale + 8 x 6-bit
//                        min, get_scale_min_k4); u8 qs[128]: 64-element
//                        chunk c uses qs[32c..32c+31], low nibbles the first
//                        32 elements (sub-block 2c), high nibbles the next 32
//                        x = (d * sc) * q - (dmin * m)
//   q5_k (256 el, 176 B): d, dmin; scales[12] as q4_k; u8 qh[32]; u8 qs[128]:
//                        q = nibble as q4_k + 16 * bit (2c or 2c + 1 of qh[l])
//   q6_k (256 el, 210 B): u8 ql[128]; u8 qh[64]; int8 scales[16]; d:
//                        128-element halves, x = (d * sc) * (q - 32), q of
//                        6 bits from a nibble of ql and 2 bits of qh
namespace quant {
constexpr int64_t kQK8_0 = 32;
constexpr int64_t kQK4_0 = 32;
constexpr int64_t kQK_K = 256;
constexpr int64_t kScaleBytesK = 12;

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kScaleBytesK];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kScaleBytesK];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// --- Hugging Face quantized checkpoints, repacked (models/hf_quant.h) ------
//
// What FP8 / GPTQ / AWQ / compressed-tensors checkpoints store (an e4m3
// matrix + a scale grid; int32-packed nibbles + scale, zero and g_idx
// tensors) is repacked at load into self-contained row blocks of 128
// elements along the input dimension, so that a [out, in] weight is rows of
// whole blocks like the GGUF formats and every provider reads it through
// dequantize_row. Scales are kept in f32 (the checkpoints' f32, f16 and bf16
// scales all convert exactly), so the dequantized values are exactly the
// checkpoint's scale x code products, each rounded once to f32.
//
//   f8_e4m3_b128 (128 el, 132 B): f32 d; u8 qs[128] (e4m3fn)   x = f32(q) * d
//     (fp8 block 128x128: d = the block's weight_scale_inv; per-channel /
//     per-tensor fp8: d = the row's / tensor's weight_scale)
//   u4_g128 (128 el, 72 B): f32 d; u8 z; 3 bytes 0; u8 qs[64]: element 2j is
//     qs[j] & 15, element 2j + 1 is qs[j] >> 4     x = d * f32(q - z)
//     (z in 0..16: GPTQ v1 stores z - 1, read back as stored + 1)
constexpr int64_t kQKHf = 128;
struct BlockF8B128 {
  float d;
  uint8_t qs[kQKHf];
};
struct BlockU4G128 {
  float d;
  uint8_t z;
  uint8_t pad[3];
  uint8_t qs[kQKHf / 2];
};
static_assert(sizeof(BlockF8B128) == 132 && sizeof(BlockU4G128) == 72);

// Scale and min j (0..7) of a q4_k / q5_k block's 12 scale bytes (6 bits
// each; ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
}  // namespace quant

// n elements (a multiple of the block size) of `src` in `t` (any weight
// format) to f32: the reference dequantization. `src` needs no alignment.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// The reference quantizers that make test and dummy weights in a block
// format (or round to f32 / f16 / bf16): q8_0 and q4_0 as ggml's
// quantize_row_*_ref; q4_k / q5_k by the min-max of each 32-element
// sub-block with 6-bit scales and mins; q6_k by the absolute max of each
// 16-element sub-block. Any bytes they write are valid blocks; they need not
// match llama-quantize bit for bit (the dequantization is what is specified).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace ferrite
