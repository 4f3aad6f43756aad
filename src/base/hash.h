// Stable 64-bit hashing (FNV-1a) for fingerprints of contracts, providers,
// plans and prefix-cache pages. Stable across runs and machines.
#pragma once

#include <cstdint>
#include <string_view>

namespace ferrite {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;  // 0xcbf29ce484222325
constexpr uint64_t kFnvPrime = 1099511628211ull;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnvOffset) {
  return fnv1a(s.data(), s.size(), h);
}
inline uint64_t hash_combine(uint64_t h, uint64_t v) { return fnv1a(&v, sizeof v, h); }

}  // namespace ferrite
