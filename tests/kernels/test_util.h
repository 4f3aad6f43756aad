// Random data and weight encodings for the kernel tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace ferrite::cpu::testing {

inline std::vector<float> random_f32(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// u4_g128 rows (bytes: at least two 72-byte blocks) at the zero-point range
// ends: z = 0 and z = 16 (GPTQ v1's stored 15 + 1) in the first two blocks,
// with codes 0 and 15 beside them.
inline void u4_zero_point_ends(uint8_t* bytes) {
  bytes[4] = 0;
  bytes[72 + 4] = 16;
  bytes[8] = 0xF0;
  bytes[72 + 8] = 0x0F;
}

// A weight in one of the matmul dtypes: raw bytes plus the exact f32 values
// they encode (for references).
struct Weight {
  DType dtype;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  const void* data() const { return bytes.data(); }
};

inline Weight make_weight(DType t, int64_t n, uint32_t seed) {
  std::vector<float> v = random_f32(n, seed);
  Weight w{t, {}, {}};
  w.values.resize(static_cast<size_t>(n));
  if (t == DType::kF32) {
    w.bytes.resize(static_cast<size_t>(n) * 4);
    std::memcpy(w.bytes.data(), v.data(), w.bytes.size());
    w.values = v;
  } else {
    w.bytes.resize(static_cast<size_t>(n) * 2);
    auto* h = reinterpret_cast<uint16_t*>(w.bytes.data());
    for (int64_t i = 0; i < n; ++i) {
      h[i] = t == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      w.values[i] = t == DType::kBF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    }
  }
  return w;
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// a * b + c as the kernels compute it: fused, except in a build without
// hardware FMA.
inline float kernel_fma(float a, float b, float c) {
#if defined(__FMA__) || defined(__aarch64__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// The canonical dot order of simd.h in plain scalar code.
inline float canonical_dot(const float* x, const float* w, int64_t n) {
  float lane[16] = {};
  auto fma = kernel_fma;
  for (int64_t i = 0; i < n; ++i) lane[i % 16] = fma(x[i], w[i], lane[i % 16]);
  // Zero-padded tail lanes add fma(0, 0, acc) = acc + 0 (turns -0 into +0).
  if (n % 16 != 0) {
    for (int64_t j = n % 16; j < 16; ++j) lane[j] = fma(0.0f, 0.0f, lane[j]);
  }
  float b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j) b[j] = lane[j] + lane[j + 8];
  for (int j = 0; j < 4; ++j) c[j] = b[j] + b[j + 4];
  for (int j = 0; j < 2; ++j) d[j] = c[j] + c[j + 2];
  return d[0] + d[1];
}

}  // namespace ferrite::cpu::testing
