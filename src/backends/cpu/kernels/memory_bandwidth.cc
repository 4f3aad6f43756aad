#include "backends/cpu/kernels/memory_bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "base/check.h"

namespace ferrite::cpu {
namespace {

int64_t parse_cache_size(const std::string& s) {
  if (s.empty()) return 0;
  int64_t v = std::atoll(s.c_str());
  char unit = s.back();
  if (unit == '\n' && s.size() >= 2) unit = s[s.size() - 2];
  if (unit == 'K') return v << 10;
  if (unit == 'M') return v << 20;
  if (unit == 'G') return v << 30;
  return v;
}

// Sums the buffer so that the loads cannot be dropped; wide loads with
// independent accumulators keep enough requests in flight.
uint64_t read_range(const char* p, int64_t bytes) {
#if defined(__AVX512F__)
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(a0));
#else
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  int64_t n = bytes / 8, i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += q[i];
    s1 += q[i + 1];
    s2 += q[i + 2];
    s3 += q[i + 3];
  }
  return s0 + s1 + s2 + s3;
#endif
}

}  // namespace

int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    if (!f) continue;
    std::string s;
    std::getline(f, s);
    best = std::max(best, parse_cache_size(s));
  }
  return best;
}

double measure_read_bandwidth_bytes_per_s(ThreadPool& pool) {
  int64_t bytes = std::max<int64_t>(int64_t{1} << 30, 4 * last_level_cache_bytes());
  return measure_read_bandwidth_bytes_per_s(pool, bytes, 4);
}

double measure_read_bandwidth_bytes_per_s(ThreadPool& pool, int64_t bytes, int reps) {
  constexpr int64_t kAlign = 2 << 20;  // huge-page aligned: fewer TLB misses
  bytes = std::max<int64_t>(kAlign, bytes / kAlign * kAlign);
  void* mem = std::aligned_alloc(kAlign, static_cast<size_t>(bytes));
  FERRITE_CHECK(mem != nullptr) << "bandwidth buffer of " << bytes << " bytes";
#if defined(MADV_HUGEPAGE)
  madvise(mem, static_cast<size_t>(bytes), MADV_HUGEPAGE);
#endif
  char* buf = static_cast<char*>(mem);
  // Split in 256-byte units, like the read loop.
  int64_t units = bytes / 256;
  // First touch by the thread that later reads the range (NUMA placement).
  pool.parallel_for(units, [&](int64_t b, int64_t e) {
    std::memset(buf + b * 256, 1, static_cast<size_t>((e - b) * 256));
  });
  std::atomic<uint64_t> sink{0};
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(units, [&](int64_t b, int64_t e) {
      sink.fetch_add(read_range(buf + b * 256, (e - b) * 256), std::memory_order_relaxed);
    });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s);
  }
  std::free(mem);
  FERRITE_CHECK(sink.load() != 1);  // keeps the sums alive
  return best;
}

}  // namespace ferrite::cpu
