#include "tensor/dtype.h"

#include "base/check.h"

namespace ferrite {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF8E4M3:
      return "f8_e4m3";
    case DType::kU8:
      return "u8";
    case DType::kU32:
      return "u32";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view s) {
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kU8, DType::kU32,
        DType::kI32, DType::kI64, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    if (dtype_name(t) == s) return t;
  }
  return std::nullopt;
}

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kU8:
    case DType::kU32:
    case DType::kI32:
    case DType::kI64:
      return 1;
    case DType::kQ8_0:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 256;
  }
  return 1;
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
    case DType::kU8:
      return 1;
    case DType::kU32:
      return 4;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kQ8_0:
      return 34;  // f16 scale + 32 x i8
    case DType::kQ4_K:
      return 144;  // ggml block_q4_K
    case DType::kQ5_K:
      return 176;
    case DType::kQ6_K:
      return 210;
  }
  return 1;
}

int64_t dtype_bytes(DType t, int64_t n) {
  int64_t be = dtype_block_elems(t);
  FERRITE_CHECK(n % be == 0) << n << " elements of " << dtype_name(t);
  return n / be * dtype_block_bytes(t);
}

bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xff);
  uint32_t mant = u & 0x7fffffu;
  if (exp == 255) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;  // may carry into exp: correct
  return static_cast<uint16_t>(half);
}

namespace {

// Element i of `data` through memcpy: checkpoint tensors viewed in place need
// not be aligned to their element size (safetensors headers of any length),
// and the copy compiles to a plain load.
template <typename T>
T load_elem(const void* data, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(data) + i * static_cast<int64_t>(sizeof(T)),
              sizeof(T));
  return v;
}

template <typename T>
void store_elem(void* data, int64_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(data) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

}  // namespace

float load_as_f32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32: return load_elem<float>(data, i);
    case DType::kBF16: return bf16_to_f32(load_elem<uint16_t>(data, i));
    case DType::kF16: return f16_to_f32(load_elem<uint16_t>(data, i));
    case DType::kF8E4M3: case DType::kU8: case DType::kU32: case DType::kI32: case DType::kI64:
    case DType::kQ8_0: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      break;
  }
  FERRITE_CHECK(false) << "load_as_f32 of " << dtype_name(dtype);
  return 0;
}

void store_from_f32(void* data, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::kF32: store_elem<float>(data, i, value); return;
    case DType::kBF16: store_elem<uint16_t>(data, i, f32_to_bf16(value)); return;
    case DType::kF16: store_elem<uint16_t>(data, i, f32_to_f16(value)); return;
    case DType::kF8E4M3: case DType::kU8: case DType::kU32: case DType::kI32: case DType::kI64:
    case DType::kQ8_0: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      break;
  }
  FERRITE_CHECK(false) << "store_from_f32 of " << dtype_name(dtype);
}

}  // namespace ferrite
