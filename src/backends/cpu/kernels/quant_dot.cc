#include "backends/cpu/kernels/quant_dot.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backends/cpu/kernels/quant_dot_impl.h"
#include "base/check.h"

namespace ferrite::cpu {
namespace qdot {
namespace {

// --- scalar kernels: the canonical definition ------------------------------

// Quantizes one block of `be` elements: q (natural order), returns d.
float quantize_block(const float* x, int64_t be, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < be; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int64_t i = 0; i < be; ++i) {
    long v = std::lrintf(x[i] * id);
    q[i] = static_cast<int8_t>(std::clamp<long>(v, -127, 127));
  }
  return d;
}

// Layout position of element e of block b (block-32 formats: within the row).
inline int64_t pos32(int f, int64_t b, int64_t e) {
  if (f == kQ8_0) return 32 * b + e;
  const int64_t p = b / 2, h = b % 2;
  return 64 * p + 16 * h + (e < 16 ? e : 16 + e);
}
// Block of lane l of a pair (block-32 formats).
inline int64_t lane_block(int f, int64_t p, int l) {
  return 2 * p + (f == kQ8_0 ? l / 8 : (l / 4) % 2);
}

void scalar_quantize(int f, const float* x, int64_t n, uint8_t* dst) {
  const Layout L = layout(f, n);
  auto* q = reinterpret_cast<int8_t*>(dst + L.q);
  const int64_t be = block_elems(f), nb = n / be;
  int8_t tmp[256];
  if (f <= kQ4_0) {
    const int64_t pairs = (nb + 1) / 2;
    std::memset(q, 0x80, static_cast<size_t>(pairs * 64));
    std::vector<float> d(static_cast<size_t>(pairs * 2), 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      d[b] = quantize_block(x + 32 * b, 32, tmp);
      for (int e = 0; e < 32; ++e) q[pos32(f, b, e)] = static_cast<int8_t>(tmp[e] ^ 0x80);
    }
    auto* dx = reinterpret_cast<float*>(dst + L.dx);
    for (int64_t p = 0; p < pairs; ++p)
      for (int l = 0; l < 16; ++l) dx[16 * p + l] = d[lane_block(f, p, l)];
    return;
  }
  auto* d = reinterpret_cast<float*>(dst + L.d);
  auto* bsum = reinterpret_cast<int16_t*>(dst + L.bsum);
  if (f == kU4) {
    for (int64_t b = 0; b < nb; ++b) {
      d[b] = quantize_block(x + 128 * b, 128, tmp);
      int s = 0;
      for (int e = 0; e < 128; ++e) {
        s += tmp[e];
        q[128 * b + (e % 2) * 64 + e / 2] = tmp[e];
      }
      bsum[b] = static_cast<int16_t>(s);
    }
    return;
  }
  for (int64_t b = 0; b < nb; ++b) {
    d[b] = quantize_block(x + 256 * b, 256, tmp);
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int e = 0; e < 16; ++e) s += tmp[16 * j + e];
      bsum[16 * b + j] = static_cast<int16_t>(s);
    }
    for (int j = 0; j < 8; ++j) {
      const int64_t at = 256 * b + 32 * ((f == kQ6_K) ? j : kSubPos[j]);
      std::memcpy(q + at, tmp + 32 * j, 32);
    }
  }
}

// The fixed lane tree of simd.h: (j, j+8), (j, j+4), (j, j+2), (0, 1).
float tree16(float* a) {
  for (int j = 0; j < 8; ++j) a[j] += a[j + 8];
  for (int j = 0; j < 4; ++j) a[j] += a[j + 4];
  for (int j = 0; j < 2; ++j) a[j] += a[j + 2];
  return a[0] + a[1];
}

// Signed weight value (q8_0: q; q4_0: the nibble - 8; 0 past the row) at
// layout position o (0..63) of pair p.
inline int32_t w32(int f, const uint8_t* row, int64_t nb, int64_t p, int64_t o) {
  int64_t b, e;
  if (f == kQ8_0) {
    b = 2 * p + o / 32;
    e = o % 32;
  } else {
    b = 2 * p + (o / 16) % 2;
    e = (o / 32) * 16 + o % 16;
  }
  if (b >= nb) return 0;
  const uint8_t* blk = row + b * block_bytes(f);
  if (f == kQ8_0) return static_cast<int8_t>(blk[2 + e]);
  return (e < 16 ? (blk[2 + e] & 15) : (blk[2 + e - 16] >> 4)) - 8;
}

// q8_0: per block the exact integer dot S_b, acc = fma(S_b, dw_b * dx_b, acc)
// in increasing b.
float scalar_row_q8(const uint8_t* row, const uint8_t* act, int64_t n) {
  const Layout L = layout(kQ8_0, n);
  const uint8_t* q = act + L.q;
  const auto* dx = reinterpret_cast<const float*>(act + L.dx);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = row + b * block_bytes(kQ8_0);
    int32_t v = 0;
    for (int e = 0; e < 32; ++e)
      v += static_cast<int8_t>(blk[2 + e]) * (static_cast<int32_t>(q[32 * b + e]) - 128);
    acc = std::fma(static_cast<float>(v), rd_f16(blk) * dx[16 * (b / 2) + 8 * (b % 2)], acc);
  }
  return acc;
}

float scalar_row32(int f, const uint8_t* row, const uint8_t* act, int64_t n) {
  if (f == kQ8_0) return scalar_row_q8(row, act, n);
  const Layout L = layout(f, n);
  const uint8_t* q = act + L.q;
  const auto* dx = reinterpret_cast<const float*>(act + L.dx);
  const int64_t nb = n / 32, pairs = (nb + 1) / 2;
  float acc[16] = {};
  for (int64_t p = 0; p < pairs; ++p) {
    for (int l = 0; l < 16; ++l) {
      int32_t v = 0;
      for (int k = 0; k < 4; ++k)
        v += w32(f, row, nb, p, 4 * l + k) * (static_cast<int32_t>(q[64 * p + 4 * l + k]) - 128);
      const int64_t b = lane_block(f, p, l);
      const float dw = b < nb ? rd_f16(row + b * block_bytes(f)) : 0.0f;
      acc[l] = std::fma(static_cast<float>(v), dw * dx[16 * p + l], acc[l]);
    }
  }
  return tree16(acc);
}

float scalar_row_k(int f, const uint8_t* row, const uint8_t* act, int64_t n) {
  const Layout L = layout(f, n);
  const auto* q = reinterpret_cast<const int8_t*>(act + L.q);
  const auto* d = reinterpret_cast<const float*>(act + L.d);
  const auto* bsum = reinterpret_cast<const int16_t*>(act + L.bsum);
  float acc = 0.0f, accm = 0.0f;
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* blk = row + b * block_bytes(f);
    const int8_t* xq = q + 256 * b;
    const int16_t* bs = bsum + 16 * b;
    if (f == kQ6_K) {
      const uint8_t* ql = blk;
      const uint8_t* qh = blk + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      int32_t s1 = 0;
      for (int j = 0; j < 16; ++j) {
        int32_t dot = 0;
        for (int e = 16 * j; e < 16 * j + 16; ++e) {
          const int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
          const uint8_t* L8 = ql + 64 * half;
          const uint8_t lo = (k == 0 || k == 2) ? L8[l] : L8[l + 32];
          const int n4 = (k < 2) ? (lo & 15) : (lo >> 4);
          const int h2 = (qh[32 * half + l] >> (2 * k)) & 3;
          dot += (n4 | (h2 << 4)) * xq[e];
        }
        s1 += sc[j] * (dot - 32 * bs[j]);
      }
      acc = std::fma(rd_f16(blk + 208) * d[b], static_cast<float>(s1), acc);
      continue;
    }
    uint8_t sm[16];
    k4_scales(blk + 4, sm);
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (f == kQ5_K ? 48 : 16);
    int32_t s1 = 0, s2 = 0;
    for (int j = 0; j < 8; ++j) {
      const int c = j / 2;
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) {
        int v = (j % 2 == 0) ? (qs[32 * c + l] & 15) : (qs[32 * c + l] >> 4);
        if (f == kQ5_K && ((qh[l] >> j) & 1)) v += 16;
        dot += v * xq[32 * kSubPos[j] + l];
      }
      s1 += sm[j] * dot;
      s2 += sm[8 + j] * (bs[2 * j] + bs[2 * j + 1]);
    }
    acc = std::fma(rd_f16(blk) * d[b], static_cast<float>(s1), acc);
    accm = std::fma(rd_f16(blk + 2) * d[b], static_cast<float>(s2), accm);
  }
  return acc - accm;
}

// u4_g128: per 128-block b and lane l (0..15), the exact integer v_l = sum of
// the nibble codes times activations of elements 8l .. 8l + 7, then
// acc[l] = fma(v_l, dw_b * dx_b, acc[l]) and, for the zero point,
// accz = fma(z_b * bsum_b, dw_b * dx_b, accz), in increasing b;
// y = tree16(acc) - accz.
float scalar_row_u4(const uint8_t* row, const uint8_t* act, int64_t n) {
  const Layout L = layout(kU4, n);
  const auto* q = reinterpret_cast<const int8_t*>(act + L.q);
  const auto* d = reinterpret_cast<const float*>(act + L.d);
  const auto* bsum = reinterpret_cast<const int16_t*>(act + L.bsum);
  float acc[16] = {}, accz = 0.0f;
  for (int64_t b = 0; b < n / 128; ++b) {
    const uint8_t* blk = row + b * block_bytes(kU4);
    float dw;
    std::memcpy(&dw, blk, 4);
    const int z = blk[4];
    const uint8_t* qs = blk + 8;
    const int8_t* xq = q + 128 * b;
    const float s = dw * d[b];
    for (int l = 0; l < 16; ++l) {
      int32_t v = 0;
      for (int e = 8 * l; e < 8 * l + 8; ++e) {
        const int code = (e % 2 == 0) ? (qs[e / 2] & 15) : (qs[e / 2] >> 4);
        v += code * xq[(e % 2) * 64 + e / 2];
      }
      acc[l] = std::fma(static_cast<float>(v), s, acc[l]);
    }
    accz = std::fma(static_cast<float>(z * bsum[b]), s, accz);
  }
  return tree16(acc) - accz;
}

void scalar_tile(int f, const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
                 int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate) {
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t t = 0; t < ntok; ++t) {
      const uint8_t* row = w + r * row_bytes;
      const uint8_t* a = act + t * stride;
      const float v = f <= kQ4_0  ? scalar_row32(f, row, a, n)
                      : f == kU4 ? scalar_row_u4(row, a, n)
                                 : scalar_row_k(f, row, a, n);
      float* p = y + t * ldy + r;
      *p = accumulate ? *p + v : v;
    }
  }
}

const Kernels kScalar = {&scalar_quantize, &scalar_tile};

}  // namespace

const Kernels* scalar_kernels() { return &kScalar; }

}  // namespace qdot

namespace {

int fmt_of(DType t) {
  switch (t) {
    case DType::kQ8_0: return qdot::kQ8_0;
    case DType::kQ4_0: return qdot::kQ4_0;
    case DType::kQ4_K: return qdot::kQ4_K;
    case DType::kQ5_K: return qdot::kQ5_K;
    case DType::kQ6_K: return qdot::kQ6_K;
    case DType::kU4G128: return qdot::kU4;
    default: FERRITE_CHECK(false) << "not a block format: " << dtype_name(t);
  }
  return -1;
}

const qdot::Kernels* kernels_for(QuantIsa isa) {
  const qdot::Kernels* k = nullptr;
  if (isa == QuantIsa::kAmx) k = qdot::amx_kernels();
  if (isa == QuantIsa::kAvx512Vnni) k = qdot::avx512_kernels();
  if (isa == QuantIsa::kAvx2) k = qdot::avx2_kernels();
  return k != nullptr ? k : qdot::scalar_kernels();
}

std::atomic<bool> g_integer{true};
std::atomic<int> g_isa{0};

// Tokens per tile (activation rows that share one pass over a weight row).
constexpr int64_t kTileTokens = 8;
// Weight rows per work item: decode (one token) 16; prefill 64, so that the
// per-(item, token tile) work of the tiles (the AVX-512 tiles transpose the
// tile's activation scales once) is spread over more rows (an item's rows,
// up to 64 x a few KiB, stay in L2 while its token tiles pass).
constexpr int64_t kRowsPerItem = 16;
constexpr int64_t kRowsPerPrefillItem = 64;
// Bytes of quantized activations a token block may use (stays in L2 while
// every weight row of an item passes over it).
constexpr int64_t kTokenBlockBytes = 256 << 10;
// Weight bytes below which a part is not worth a thread.
constexpr int64_t kMinBytesPerPart = 1 << 14;
// AMX panels: bytes of quantized activations a token block may use (the
// unpacked 16-row panel is reused by every token of the block).
constexpr int64_t kPanelTokenBlockBytes = 1 << 20;

}  // namespace

namespace qdot {
bool amx_usable() {
#if defined(__linux__) && defined(__x86_64__)
  // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: once per process.
  static const bool ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ok;
#else
  return false;
#endif
}
}  // namespace qdot

bool quant_dot_supports(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K || t == DType::kU4G128;
}

QuantIsa quant_isa_detected() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (qdot::avx512_kernels() != nullptr && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni")) {
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    const bool amx = qdot::amx_kernels() != nullptr && __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7) &&
                     (d7 & (1u << 24)) != 0 && (d7 & (1u << 25)) != 0 && qdot::amx_usable();
    return amx ? QuantIsa::kAmx : QuantIsa::kAvx512Vnni;
  }
  // F16C through cpuid: clang 14's __builtin_cpu_supports has no "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  if (qdot::avx2_kernels() != nullptr && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma") && f16c)
    return QuantIsa::kAvx2;
#endif
  return QuantIsa::kScalar;
}

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kAmx: return "amx";
    case QuantIsa::kAvx512Vnni: return "avx512vnni";
    case QuantIsa::kAvx2: return "avx2";
    case QuantIsa::kScalar: return "scalar";
  }
  return "?";
}

void set_quant_matmul_mode(bool integer, int isa) {
  g_integer.store(integer);
  const int best = static_cast<int>(quant_isa_detected());
  g_isa.store(isa <= 0 ? best : std::min(isa, best));
}

bool quant_matmul_integer() { return g_integer.load(std::memory_order_relaxed); }

QuantIsa quant_matmul_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v == 0) {
    v = static_cast<int>(quant_isa_detected());
    g_isa.store(v);
  }
  return static_cast<QuantIsa>(v);
}

void quantize_activation_row(DType w_dtype, const float* x, int64_t n, int8_t* q, float* d) {
  const int f = fmt_of(w_dtype);
  const qdot::Layout L = qdot::layout(f, n);
  std::vector<uint8_t> buf(static_cast<size_t>(L.stride));
  qdot::scalar_kernels()->quantize(f, x, n, buf.data());
  const auto* lq = reinterpret_cast<const int8_t*>(buf.data() + L.q);
  const int64_t be = qdot::block_elems(f), nb = n / be;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t e = 0; e < be; ++e) {
      int64_t at;
      if (f <= qdot::kQ4_0) {
        at = qdot::pos32(f, b, e);
      } else if (f == qdot::kU4) {
        at = 128 * b + (e % 2) * 64 + e / 2;
      } else if (f == qdot::kQ6_K) {
        at = 256 * b + e;
      } else {
        at = 256 * b + 32 * qdot::kSubPos[e / 32] + e % 32;
      }
      q[b * be + e] = f <= qdot::kQ4_0 ? static_cast<int8_t>(lq[at] ^ 0x80) : lq[at];
    }
    if (f <= qdot::kQ4_0) {
      const auto* dx = reinterpret_cast<const float*>(buf.data() + L.dx);
      // Lane 0 of pair b / 2 is block 2p, lane 4 (q4_0) / 8 (q8_0) block 2p + 1.
      d[b] = dx[16 * (b / 2) + (b % 2 ? (f == qdot::kQ8_0 ? 8 : 4) : 0)];
    } else {
      d[b] = reinterpret_cast<const float*>(buf.data() + L.d)[b];
    }
  }
}

void quant_matmul_rows(const float* x, int64_t ldx, int64_t tokens, int64_t in, const void* w,
                       DType w_dtype, int64_t o_begin, int64_t o_end, float* y, int64_t ldy,
                       bool accumulate, ThreadPool* pool, QuantIsa isa) {
  const int f = fmt_of(w_dtype);
  FERRITE_CHECK(in % qdot::block_elems(f) == 0);
  const qdot::Kernels* k = kernels_for(isa);
  const qdot::Layout L = qdot::layout(f, in);
  const int64_t rows = o_end - o_begin;
  if (tokens <= 0 || rows <= 0) return;
  const int64_t row_bytes = in / qdot::block_elems(f) * qdot::block_bytes(f);
  const auto* w0 = static_cast<const uint8_t*>(w) + o_begin * row_bytes;

  // Panels (AMX: k-quants and q8_0; AVX-512 VNNI: q8_0) from one token
  // granule on (the same bits as the tiles, so the switch changes no result).
  const int64_t panel_tokens =
      (k->panel_formats_from_32 >> f & 1u) != 0 ? 2 * qdot::kPanelTokens : qdot::kPanelTokens;
  const bool panels = k->panel != nullptr && (k->panel_formats >> f & 1u) != 0 &&
                      tokens >= panel_tokens;
  const int64_t padded = panels ? qdot::round_up(tokens, qdot::kPanelTokens) : tokens;

  // The activations, quantized once (the calling thread's buffer); panel
  // calls read whole token granules, the padding rows are zero.
  thread_local std::vector<uint8_t> buf;
  const size_t need = static_cast<size_t>(L.stride * padded + 64);
  if (buf.size() < need) buf.resize(need);
  uint8_t* act = buf.data() + ((64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64);
  auto quantize = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) k->quantize(f, x + t * ldx, in, act + t * L.stride);
  };
  if (pool != nullptr && tokens > 1) {
    pool->parallel_for(tokens, quantize, 8);
  } else {
    quantize(0, tokens);
  }
  if (padded > tokens)
    std::memset(act + tokens * L.stride, 0, static_cast<size_t>((padded - tokens) * L.stride));

  if (panels) {
    int64_t tblock = std::max<int64_t>(qdot::kPanelTokens, kPanelTokenBlockBytes / L.stride /
                                                               qdot::kPanelTokens * qdot::kPanelTokens);
    tblock = std::min(tblock, padded);
    const int64_t tblocks = (tokens + tblock - 1) / tblock;
    const int64_t groups = (rows + qdot::kPanelRows - 1) / qdot::kPanelRows;
    auto body = [&](int64_t i0, int64_t i1) {
      thread_local std::vector<uint8_t> scratch;
      const size_t sneed = static_cast<size_t>(qdot::panel_scratch_bytes(f, in) + 64);
      if (scratch.size() < sneed) scratch.resize(sneed);
      uint8_t* sp =
          scratch.data() + ((64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64);
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t g = item / tblocks, tb = item % tblocks;
        const int64_t r0 = g * qdot::kPanelRows, r1 = std::min(rows, r0 + qdot::kPanelRows);
        const int64_t t0 = tb * tblock, t1 = std::min(tokens, t0 + tblock);
        k->panel(f, w0 + r0 * row_bytes, row_bytes, r1 - r0, act + t0 * L.stride, L.stride, t1 - t0,
                 in, y + t0 * ldy + r0, ldy, accumulate, sp);
      }
    };
    const int64_t items = groups * tblocks;
    if (pool != nullptr) {
      pool->parallel_for(items, body, 1);
    } else {
      body(0, items);
    }
    return;
  }

  // Work items: (row group, token block); every output is computed by one
  // tile over the whole reduction, so the split does not change any bit.
  int64_t tblock = std::max<int64_t>(kTileTokens, kTokenBlockBytes / L.stride / kTileTokens *
                                                      kTileTokens);
  tblock = std::min(tblock, (tokens + kTileTokens - 1) / kTileTokens * kTileTokens);
  const int64_t tblocks = (tokens + tblock - 1) / tblock;
  const int64_t item_rows = tokens == 1 ? kRowsPerItem : kRowsPerPrefillItem;
  const int64_t groups = (rows + item_rows - 1) / item_rows;
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t g = item / tblocks, tb = item % tblocks;
      const int64_t r0 = g * item_rows, r1 = std::min(rows, r0 + item_rows);
      const int64_t t0 = tb * tblock, t1 = std::min(tokens, t0 + tblock);
      // A tile's activation rows stay in L1 while the item's weight rows
      // (L2) pass over them.
      for (int64_t t = t0; t < t1; t += kTileTokens) {
        const int64_t nt = std::min(kTileTokens, t1 - t);
        k->tile(f, w0 + r0 * row_bytes, row_bytes, r1 - r0, act + t * L.stride, L.stride, nt, in,
                y + t * ldy + r0, ldy, accumulate);
      }
    }
  };
  const int64_t items = groups * tblocks;
  const int64_t grain =
      std::max<int64_t>(1, kMinBytesPerPart / (item_rows * row_bytes * tblock + 1));
  if (pool != nullptr) {
    pool->parallel_for(items, body, grain);
  } else {
    body(0, items);
  }
}

}  // namespace ferrite::cpu
