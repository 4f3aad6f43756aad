// Shared pieces of the op benchmarks: the measured memory bandwidth (the
// decode roofline) and a weight arena larger than the last-level cache.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/kernels/memory_bandwidth.h"
#include "base/thread_pool.h"

namespace ferrite::bench {

// Measured once per process (about a second).
inline double read_bandwidth() {
  static double bw = cpu::measure_read_bandwidth_bytes_per_s(ThreadPool::global());
  return bw;
}

// 16-bit weights spread over max(1.25 GiB, 4 x LLC), so that cycling through
// them measures DRAM, not the 300 MB L3 of this Xeon. Every 16-bit pattern is
// a small normal number both as bf16 and as f16 (1 <= |v| < 2 for f16).
class WeightArena {
 public:
  static WeightArena& get() {
    static WeightArena arena;
    return arena;
  }
  int64_t bytes() const { return static_cast<int64_t>(data_.size()) * 2; }
  // The k-th of the copies of a matrix of `bytes` that fit in the arena.
  const uint16_t* copy(int64_t k, int64_t bytes) const {
    int64_t copies = this->bytes() / bytes;
    return data_.data() + (k % copies) * (bytes / 2);
  }
  int64_t copies(int64_t bytes) const { return this->bytes() / bytes; }
  const uint16_t* at(int64_t elem_offset) const { return data_.data() + elem_offset; }

 private:
  WeightArena() {
    int64_t bytes = std::max<int64_t>(int64_t{5} << 28, 4 * cpu::last_level_cache_bytes());
    data_.resize(static_cast<size_t>(bytes / 2));
    std::vector<uint16_t> block(1 << 20);
    std::mt19937 rng(42);
    for (auto& v : block) v = static_cast<uint16_t>(0x3c00u | (rng() & 0x83ffu));
    for (size_t i = 0; i < data_.size(); i += block.size()) {
      std::memcpy(data_.data() + i, block.data(),
                  std::min(block.size(), data_.size() - i) * sizeof(uint16_t));
    }
  }
  std::vector<uint16_t> data_;
};

inline std::vector<float> random_activations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace ferrite::bench
