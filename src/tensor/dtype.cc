#include "tensor/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

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
    case DType::kQ4_0:
      return "q4_0";
    case DType::kF8B128:
      return "f8_e4m3_b128";
    case DType::kU4G128:
      return "u4_g128";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view s) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kU8, DType::kU32,
                  DType::kI32, DType::kI64, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kQ4_0, DType::kF8B128, DType::kU4G128}) {
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
    case DType::kQ4_0:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 256;
    case DType::kF8B128:
    case DType::kU4G128:
      return 128;
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
    case DType::kQ4_0:
      return 18;  // f16 scale + 16 bytes of nibbles
    case DType::kF8B128:
      return 132;  // f32 scale + 128 x e4m3
    case DType::kU4G128:
      return 72;  // f32 scale, u8 zero, 3 pad, 64 bytes of nibbles
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

bool dtype_is_quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K || dtype_is_hf_quant(t);
}

bool dtype_is_hf_quant(DType t) { return t == DType::kF8B128 || t == DType::kU4G128; }

bool dtype_is_weight_format(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || dtype_is_quantized(t);
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
float f8e4m3_decode(uint8_t v);
// All 256 values, made once from the definition (f8e4m3_decode).
const float* f8e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = f8e4m3_decode(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}
}  // namespace

float f8e4m3_to_f32(uint8_t v) { return f8e4m3_table()[v]; }

namespace {
float f8e4m3_decode(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 15, mant = v & 7;
  float x;
  if (exp == 15 && mant == 7) {
    x = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    x = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant / 8 * 2^-6
  } else {
    x = std::ldexp(static_cast<float>(8 + mant), exp - 10);  // (1 + mant / 8) * 2^(exp - 7)
  }
  return sign ? -x : x;
}
}  // namespace

uint8_t f32_to_f8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), 448.0f);
  // nearbyint rounds half to even (the default rounding mode).
  if (a < 0x1p-6f) {  // subnormal: a multiple of 2^-9 (code 8 is 2^-6, the smallest normal)
    return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(std::ldexp(a, 9))));
  }
  int e;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): exponent e - 1
  int exp = e - 1;
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exp)));  // in [8, 16]
  if (q == 16) {
    q = 8;
    ++exp;
  }
  return static_cast<uint8_t>(sign | ((exp + 7) << 3) | (q - 8));
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

uint16_t rd16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

using namespace quant;

// Element j of one block, the same operations as the row dequantization.
float dequantize_element(DType t, const uint8_t* b, int j) {
  switch (t) {
    case DType::kQ8_0: {
      const float d = f16_to_f32(rd16(b));
      return static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
    }
    case DType::kQ4_0: {
      const float d = f16_to_f32(rd16(b));
      const uint8_t q = b[2 + (j & 15)];
      const int v = (j < 16 ? (q & 0xF) : (q >> 4)) - 8;
      return static_cast<float>(v) * d;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const float d = f16_to_f32(rd16(b)), dmin = f16_to_f32(rd16(b + 2));
      const uint8_t* scales = b + 4;
      const int sub = j / 32, chunk = j / 64, l = j % 32;
      uint8_t sc, m;
      scale_min_k4(sub, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      const uint8_t* qs = b + (t == DType::kQ4_K ? 16 : 48);
      const uint8_t byte = qs[chunk * 32 + l];
      int q = (sub & 1) ? (byte >> 4) : (byte & 0xF);
      if (t == DType::kQ5_K) {
        const uint8_t* qh = b + 16;
        if (qh[l] & (1u << sub)) q += 16;
      }
      return d1 * static_cast<float>(q) - m1;
    }
    case DType::kQ6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = f16_to_f32(rd16(b + 208));
      const int half = j / 128, r = j % 128, quarter = r / 32, l = r % 32;
      ql += 64 * half;
      qh += 32 * half;
      sc += 8 * half;
      const int lo = (quarter & 1) ? ql[l + 32] : ql[l];
      const int nib = quarter < 2 ? (lo & 0xF) : (lo >> 4);
      const int hi = (qh[l] >> (2 * quarter)) & 3;
      const int q = static_cast<int8_t>(nib | (hi << 4)) - 32;
      return d * static_cast<float>(sc[l / 16 + 2 * quarter]) * static_cast<float>(q);
    }
    case DType::kF8B128: {
      float d;
      std::memcpy(&d, b, 4);
      return f8e4m3_to_f32(b[4 + j]) * d;
    }
    case DType::kU4G128: {
      float d;
      std::memcpy(&d, b, 4);
      const uint8_t byte = b[8 + j / 2];
      const int q = (j & 1) ? (byte >> 4) : (byte & 0xF);
      return d * static_cast<float>(q - b[4]);
    }
    default:
      break;
  }
  FERRITE_CHECK(false) << "dequantize_element of " << dtype_name(t);
  return 0;
}

}  // namespace

float load_as_f32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return load_elem<float>(data, i);
    case DType::kBF16:
      return bf16_to_f32(load_elem<uint16_t>(data, i));
    case DType::kF16:
      return f16_to_f32(load_elem<uint16_t>(data, i));
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kF8B128:
    case DType::kU4G128: {
      const int64_t be = dtype_block_elems(dtype);
      const auto* block = static_cast<const uint8_t*>(data) + (i / be) * dtype_block_bytes(dtype);
      return dequantize_element(dtype, block, static_cast<int>(i % be));
    }
    case DType::kF8E4M3:
    case DType::kU8:
    case DType::kU32:
    case DType::kI32:
    case DType::kI64:
      break;
  }
  FERRITE_CHECK(false) << "load_as_f32 of " << dtype_name(dtype);
  return 0;
}

void store_from_f32(void* data, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::kF32:
      store_elem<float>(data, i, value);
      return;
    case DType::kBF16:
      store_elem<uint16_t>(data, i, f32_to_bf16(value));
      return;
    case DType::kF16:
      store_elem<uint16_t>(data, i, f32_to_f16(value));
      return;
    case DType::kF8E4M3:
    case DType::kU8:
    case DType::kU32:
    case DType::kI32:
    case DType::kI64:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ4_0:
    case DType::kF8B128:
    case DType::kU4G128:
      break;
  }
  FERRITE_CHECK(false) << "store_from_f32 of " << dtype_name(dtype);
}

namespace {

void wr16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// ggml's nearest_int: round half to even through the f32 mantissa trick.
int nearest_int(float f) {
  float val = f + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

void dequantize_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const float d = f16_to_f32(rd16(b));
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }
}

void dequantize_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = f16_to_f32(rd16(b));
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q45_k(bool five, const uint8_t* b, float* y, int64_t nb) {
  const int64_t bytes = five ? 176 : 144;
  for (int64_t i = 0; i < nb; ++i, b += bytes) {
    const float d = f16_to_f32(rd16(b)), dmin = f16_to_f32(rd16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + (five ? 48 : 16);
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      scale_min_k4(2 * c, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(2 * c + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c)),
                    u2 = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) {
        const int hi = five && (qh[l] & u1) ? 16 : 0;
        *y++ = d1 * static_cast<float>((q[l] & 0xF) + hi) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int hi = five && (qh[l] & u2) ? 16 : 0;
        *y++ = d2 * static_cast<float>((q[l] >> 4) + hi) - m2;
      }
    }
  }
}

void dequantize_q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const float d = f16_to_f32(rd16(b + 208));
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int n = 0; n < 256; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void dequantize_f8_b128(const uint8_t* b, float* y, int64_t nb) {
  const float* value = f8e4m3_table();
  for (int64_t i = 0; i < nb; ++i, b += 132, y += 128) {
    float d;
    std::memcpy(&d, b, 4);
    for (int j = 0; j < 128; ++j) y[j] = value[b[4 + j]] * d;
  }
}

void dequantize_u4_g128(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 72, y += 128) {
    float d;
    std::memcpy(&d, b, 4);
    const int z = b[4];
    for (int j = 0; j < 64; ++j) {
      y[2 * j] = d * static_cast<float>((b[8 + j] & 0xF) - z);
      y[2 * j + 1] = d * static_cast<float>((b[8 + j] >> 4) - z);
    }
  }
}

// Absolute max of each block to e4m3's 448 (the scale in f32).
void quantize_f8_b128(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 128, b += 132) {
    float amax = 0;
    for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 448.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    std::memcpy(b, &d, 4);
    for (int j = 0; j < 128; ++j) b[4 + j] = f32_to_f8e4m3(x[j] * id);
  }
}

// Min-max (asymmetric) 4-bit codes of each block, as AWQ / GPTQ with
// sym=False: d = (max - min) / 15, z = round(-min / d).
void quantize_u4_g128(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 128, b += 72) {
    float lo = 0, hi = 0;
    for (int j = 0; j < 128; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const int z = std::clamp(static_cast<int>(std::lround(-lo * id)), 0, 15);
    std::memset(b, 0, 72);
    std::memcpy(b, &d, 4);
    b[4] = static_cast<uint8_t>(z);
    for (int j = 0; j < 128; ++j) {
      const int q = std::clamp(static_cast<int>(std::lround(x[j] * id)) + z, 0, 15);
      b[8 + j / 2] |= static_cast<uint8_t>((j & 1) ? q << 4 : q);
    }
  }
}

void quantize_q8_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 34) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    wr16(b, f32_to_f16(d));
    for (int j = 0; j < 32; ++j)
      b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

void quantize_q4_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 18) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    wr16(b, f32_to_f16(d));
    for (int j = 0; j < 16; ++j) {
      const int x0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int x1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b[2 + j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

// 6-bit scales and mins of a q4_k / q5_k block (the inverse of scale_min_k4).
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Min-max quantization of each 32-element sub-block to 0..nmax with
// x ~ d * sc * q - dmin * m, the scale and the min rounded to 6 bits.
void quantize_q45_k(bool five, const float* x, uint8_t* b, int64_t nb) {
  const int nmax = five ? 31 : 15;
  const int64_t bytes = five ? 176 : 144;
  for (int64_t i = 0; i < nb; ++i, x += 256, b += bytes) {
    float scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float lo = x[32 * j], hi = x[32 * j];
      for (int l = 1; l < 32; ++l) {
        lo = std::min(lo, x[32 * j + l]);
        hi = std::max(hi, x[32 * j + l]);
      }
      lo = std::min(lo, 0.0f);  // the min is subtracted: mins >= 0
      scales[j] = (hi - lo) / nmax;
      mins[j] = -lo;
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
      ls[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
      lm[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
    }
    wr16(b, f32_to_f16(max_scale / 63.f));
    wr16(b + 2, f32_to_f16(max_min / 63.f));
    pack_scale_min_k4(ls, lm, b + 4);
    const float d = f16_to_f32(rd16(b)), dmin = f16_to_f32(rd16(b + 2));
    uint8_t L[256];
    for (int j = 0; j < 8; ++j) {
      const float dj = d * ls[j];
      const float mj = dmin * lm[j];
      for (int l = 0; l < 32; ++l) {
        int q = dj != 0 ? nearest_int((x[32 * j + l] + mj) / dj) : 0;
        L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
      }
    }
    uint8_t* qh = b + 16;
    uint8_t* q = b + (five ? 48 : 16);
    if (five) std::memset(qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t a = L[64 * c + l], e = L[64 * c + 32 + l];
        q[32 * c + l] = static_cast<uint8_t>((a & 0xF) | ((e & 0xF) << 4));
        if (five) {
          if (a & 16) qh[l] |= static_cast<uint8_t>(1u << (2 * c));
          if (e & 16) qh[l] |= static_cast<uint8_t>(2u << (2 * c));
        }
      }
    }
  }
}

// Absolute-max quantization of each 16-element sub-block to -32..31 with
// int8 scales under one f16 super-scale.
void quantize_q6_k(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 210) {
    float scales[16];
    float max_abs_scale = 0, max_scale = 0;
    for (int s = 0; s < 16; ++s) {
      float amax = 0, vmax = 0;
      for (int l = 0; l < 16; ++l) {
        if (std::fabs(x[16 * s + l]) > amax) {
          amax = std::fabs(x[16 * s + l]);
          vmax = x[16 * s + l];
        }
      }
      scales[s] = vmax / -32;  // as ggml: the extreme maps to -32
      if (std::fabs(scales[s]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    std::memset(b, 0, 210);
    const float iscale = max_scale != 0 ? -128.f / max_scale : 0.f;
    wr16(b + 208, f32_to_f16(iscale != 0 ? 1 / iscale : 0.f));
    const float d = f16_to_f32(rd16(b + 208));
    int8_t L[256];
    for (int s = 0; s < 16; ++s) {
      sc[s] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[s])));
      const float ds = d * sc[s];
      for (int l = 0; l < 16; ++l) {
        int q = ds != 0 ? nearest_int(x[16 * s + l] / ds) : 0;
        L[16 * s + l] = static_cast<int8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    for (int n = 0; n < 2; ++n) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[128 * n + l], q2 = L[128 * n + l + 32];
        const int q3 = L[128 * n + l + 64], q4 = L[128 * n + l + 96];
        ql[64 * n + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[64 * n + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[32 * n + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                              ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  const int64_t be = dtype_block_elems(t);
  FERRITE_CHECK(n % be == 0) << n << " elements of " << dtype_name(t);
  const int64_t nb = n / be;
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, 4 * n);
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as_f32(src, t, i);
      return;
    case DType::kQ8_0:
      dequantize_q8_0(b, dst, nb);
      return;
    case DType::kQ4_0:
      dequantize_q4_0(b, dst, nb);
      return;
    case DType::kQ4_K:
      dequantize_q45_k(false, b, dst, nb);
      return;
    case DType::kQ5_K:
      dequantize_q45_k(true, b, dst, nb);
      return;
    case DType::kQ6_K:
      dequantize_q6_k(b, dst, nb);
      return;
    case DType::kF8B128:
      dequantize_f8_b128(b, dst, nb);
      return;
    case DType::kU4G128:
      dequantize_u4_g128(b, dst, nb);
      return;
    default:
      break;
  }
  FERRITE_CHECK(false) << "dequantize_row of " << dtype_name(t);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  auto* b = static_cast<uint8_t*>(dst);
  const int64_t be = dtype_block_elems(t);
  FERRITE_CHECK(n % be == 0) << n << " elements of " << dtype_name(t);
  const int64_t nb = n / be;
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) store_from_f32(dst, t, i, src[i]);
      return;
    case DType::kQ8_0:
      quantize_q8_0(src, b, nb);
      return;
    case DType::kQ4_0:
      quantize_q4_0(src, b, nb);
      return;
    case DType::kQ4_K:
      quantize_q45_k(false, src, b, nb);
      return;
    case DType::kQ5_K:
      quantize_q45_k(true, src, b, nb);
      return;
    case DType::kQ6_K:
      quantize_q6_k(src, b, nb);
      return;
    case DType::kF8B128:
      quantize_f8_b128(src, b, nb);
      return;
    case DType::kU4G128:
      quantize_u4_g128(src, b, nb);
      return;
    default:
      break;
  }
  FERRITE_CHECK(false) << "quantize_row of " << dtype_name(t);
}

}  // namespace ferrite
