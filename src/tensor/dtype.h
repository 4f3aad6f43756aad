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

// Element i of an f32 / bf16 / f16 array as f32, and the store back (rounded
// to nearest even). Other dtypes are a bug in the caller (checked).
float load_as_f32(const void* data, DType dtype, int64_t i);
void store_from_f32(void* data, DType dtype, int64_t i, float value);

}  // namespace ferrite
