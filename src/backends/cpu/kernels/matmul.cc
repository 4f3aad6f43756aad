#include "backends/cpu/kernels/matmul.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/quant_dot.h"
#include "backends/cpu/kernels/simd.h"
#include "base/check.h"

namespace ferrite::cpu {
namespace {

using simd::V16;

// Register tile: kTileT tokens x kTileO weight rows, one 16-lane accumulator
// each. AVX-512: 24 accumulators + 4 x vectors + 1 w vector of 32 registers;
// every w vector feeds 4 FMAs and every x vector 6.
#if defined(FERRITE_KERNELS_AVX512)
constexpr int kTileT = 4;
constexpr int kTileO = 6;
#elif defined(FERRITE_KERNELS_AVX2)
constexpr int kTileT = 2;  // a V16 is two ymm registers; 16 registers in all
constexpr int kTileO = 2;
#else
constexpr int kTileT = 2;
constexpr int kTileO = 4;
#endif

// From this many tokens the prefill path converts W panels once to f32 and
// reuses them; below it, converting in registers while streaming W is cheaper.
constexpr int64_t kPackMinTokens = 2 * kTileT;
// Bytes of x rows a token block may use, so that the block stays in L2 while
// every W panel of a row group passes over it.
constexpr int64_t kTokenBlockBytes = 1 << 20;
// Longer rows are reduced in blocks of kReductionBlock in the prefill path:
// a tile's x rows and panel rows then fit L1 together (4 x 2 KiB + 6 x 2 KiB).
constexpr int64_t kMaxReductionBlock = 1024;
constexpr int64_t kReductionBlock = 512;
// Weight rows per work item of the prefill path.
constexpr int64_t kPanelsPerGroup = 16;
// Weight elements below which a part is not worth a thread.
constexpr int64_t kMinElemsPerPart = 1 << 15;

// A tile may cover only a block [k0, k1) of the reduction (prefill with long
// rows, so that the panel and x slices stay in L1). Its 16-lane accumulators
// then start from / end in `state` instead of zero / the output; lane order is
// unchanged, so the result is bitwise that of one pass.
enum TilePhase : int {
  kWhole = 0,
  kLoadState = 1,  // accumulators start from state, not zero
  kSaveState = 2,  // accumulators go to state; y is not written
};

using TileFn = void (*)(const float* x, int64_t ldx, const void* w, int64_t ldw, int64_t n,
                        float* y, int64_t ldy, bool accumulate, float* state, int phase);

// Streaming W from DRAM, each tile reads TO rows of `in` elements side by
// side: short interleaved streams that the hardware prefetchers ramp up on
// too late (a 1024-wide bf16 row is only 32 lines). Prefetching the next
// tile's rows into L2, one tile ahead, keeps more misses in flight: +15-40%
// on one thread in measurements. Past the last row the prefetch is harmless
// (prefetches never fault).
inline void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }  // prefetcht1 on x86

template <typename WL, int TT, int TO, bool kPrefetch>
void dot_tile(const float* x, int64_t ldx, const void* wv, int64_t ldw, int64_t n, float* y,
              int64_t ldy, bool accumulate, float* state, int phase) {
  using T = typename WL::T;
  const T* w = static_cast<const T*>(wv);
  V16 acc[TT][TO];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 8
    for (int o = 0; o < TO; ++o) {
      acc[t][o] = (phase & kLoadState) ? simd::F32::load(state + (t * TO + o) * 16) : simd::zero();
    }
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V16 xv[TT];
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) xv[t] = simd::F32::load(x + t * ldx + i);
#pragma GCC unroll 8
    for (int o = 0; o < TO; ++o) {
      V16 wo = WL::load(w + o * ldw + i);
      if constexpr (kPrefetch) prefetch_l2(w + (o + TO) * ldw + i);
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) acc[t][o] = simd::fma(xv[t], wo, acc[t][o]);
    }
  }
  if (i < n) {
    int r = static_cast<int>(n - i);
    V16 xv[TT];
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) xv[t] = simd::F32::load_partial(x + t * ldx + i, r);
#pragma GCC unroll 8
    for (int o = 0; o < TO; ++o) {
      V16 wo = WL::load_partial(w + o * ldw + i, r);
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) acc[t][o] = simd::fma(xv[t], wo, acc[t][o]);
    }
  }
  if (phase & kSaveState) {
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 8
      for (int o = 0; o < TO; ++o) simd::store(state + (t * TO + o) * 16, acc[t][o]);
    }
    return;
  }
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 8
    for (int o = 0; o < TO; ++o) {
      float s = simd::reduce(acc[t][o]);
      float* p = y + t * ldy + o;
      *p = accumulate ? *p + s : s;
    }
  }
}

// table[(tt - 1) * kTileO + (to - 1)] is the tt x to tile.
template <typename WL, bool kPrefetch, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> make_tiles(std::index_sequence<I...>) {
  return {{&dot_tile<WL, static_cast<int>(I) / kTileO + 1, static_cast<int>(I) % kTileO + 1,
                     kPrefetch>...}};
}
template <typename WL, bool kPrefetch>
constexpr auto kTiles = make_tiles<WL, kPrefetch>(std::make_index_sequence<kTileT * kTileO>());

// Tiles that stream W of dtype t from memory (with prefetch).
const TileFn* streaming_tiles(DType t) {
  switch (t) {
    case DType::kF32:
      return kTiles<simd::F32, true>.data();
    case DType::kBF16:
      return kTiles<simd::BF16, true>.data();
    case DType::kF16:
      return kTiles<simd::F16, true>.data();
    default:
      return nullptr;
  }
}
// Tiles over an f32 panel already in cache.
const TileFn* panel_tiles() { return kTiles<simd::F32, false>.data(); }

inline TileFn tile(const TileFn* table, int64_t tt, int64_t to) {
  return table[(tt - 1) * kTileO + (to - 1)];
}

template <typename WL>
void pack_rows_impl(const void* wv, int64_t ldw, int64_t rows, int64_t n, float* dst, int64_t ldd) {
  const auto* w = static_cast<const typename WL::T*>(wv);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* src = w + r * ldw;
    float* d = dst + r * ldd;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) simd::store(d + i, WL::load(src + i));
    if (i < n) {
      int rem = static_cast<int>(n - i);
      simd::store_partial(d + i, WL::load_partial(src + i, rem), rem);
    }
  }
}

void pack_rows(DType t, const void* w, int64_t ldw, int64_t rows, int64_t n, float* dst,
               int64_t ldd) {
  if (dtype_is_quantized(t)) {  // rows of GGUF blocks: ldw and n are elements
    const int64_t row_bytes = dtype_bytes(t, ldw);
    for (int64_t r = 0; r < rows; ++r)
      dequantize_row_fast(t, static_cast<const char*>(w) + r * row_bytes, dst + r * ldd, n);
    return;
  }
  if (t == DType::kBF16) {
    pack_rows_impl<simd::BF16>(w, ldw, rows, n, dst, ldd);
  } else {
    pack_rows_impl<simd::F16>(w, ldw, rows, n, dst, ldd);
  }
}

const char* at_row(const void* w, DType t, int64_t row, int64_t in) {
  return static_cast<const char*>(w) + row * dtype_bytes(t, in);
}

// Decode with weights in GGUF blocks: each row group of kTileO rows is
// dequantized once into a per-thread f32 panel (L1) and every token tile runs
// over it; the next group's blocks are prefetched into L2. The dot products
// are the canonical ones of the dequantized rows, so results are bitwise
// those of an f32 matmul on the dequantized weights.
void run_streaming_quant(const float* x, int64_t ldx, int64_t tokens, int64_t in, const void* w,
                         DType wt, int64_t o_begin, int64_t o_end, float* y, int64_t ldy,
                         bool accumulate, ThreadPool* pool) {
  const TileFn* table = panel_tiles();
  const int64_t rows = o_end - o_begin;
  const int64_t groups = (rows + kTileO - 1) / kTileO;
  const int64_t row_bytes = dtype_bytes(wt, in);
  const int64_t ldp = (in + 15) / 16 * 16 + 16;
  auto body = [&](int64_t g0, int64_t g1) {
    thread_local std::vector<float> panel;
    if (static_cast<int64_t>(panel.size()) < kTileO * ldp) panel.resize(kTileO * ldp);
    for (int64_t g = g0; g < g1; ++g) {
      int64_t r0 = g * kTileO;
      int64_t nr = std::min<int64_t>(kTileO, rows - r0);
      const char* wr = at_row(w, wt, o_begin + r0, in);
      if (g + 1 < g1) {
        const char* next = wr + kTileO * row_bytes;
        const int64_t next_bytes = std::min<int64_t>(kTileO, rows - r0 - kTileO) * row_bytes;
        for (int64_t b = 0; b < next_bytes; b += 64) prefetch_l2(next + b);
      }
      pack_rows(wt, wr, in, nr, in, panel.data(), ldp);
      for (int64_t t0 = 0; t0 < tokens; t0 += kTileT) {
        int64_t nt = std::min<int64_t>(kTileT, tokens - t0);
        tile(table, nt, nr)(x + t0 * ldx, ldx, panel.data(), ldp, in, y + t0 * ldy + r0, ldy,
                            accumulate, nullptr, kWhole);
      }
    }
  };
  int64_t grain = std::max<int64_t>(1, kMinElemsPerPart / (kTileO * in * tokens + 1));
  if (pool != nullptr) {
    pool->parallel_for(groups, body, grain);
  } else {
    body(0, groups);
  }
}

// Decode / small batches: each row group of kTileO rows is read once from
// memory and converted in registers; tokens are the inner loop so that the
// rows stay in L1 for the later token tiles.
void run_streaming(const float* x, int64_t ldx, int64_t tokens, int64_t in, const void* w, DType wt,
                   int64_t o_begin, int64_t o_end, float* y, int64_t ldy, bool accumulate,
                   ThreadPool* pool) {
  if (dtype_is_quantized(wt)) {
    run_streaming_quant(x, ldx, tokens, in, w, wt, o_begin, o_end, y, ldy, accumulate, pool);
    return;
  }
  const TileFn* table = streaming_tiles(wt);
  int64_t rows = o_end - o_begin;
  int64_t groups = (rows + kTileO - 1) / kTileO;
  auto body = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      int64_t r0 = g * kTileO;
      int64_t nr = std::min<int64_t>(kTileO, rows - r0);
      const void* wr = at_row(w, wt, o_begin + r0, in);
      for (int64_t t0 = 0; t0 < tokens; t0 += kTileT) {
        int64_t nt = std::min<int64_t>(kTileT, tokens - t0);
        tile(table, nt, nr)(x + t0 * ldx, ldx, wr, in, in, y + t0 * ldy + r0, ldy, accumulate,
                            nullptr, kWhole);
      }
    }
  };
  int64_t grain = std::max<int64_t>(1, kMinElemsPerPart / (kTileO * in * tokens + 1));
  if (pool != nullptr) {
    pool->parallel_for(groups, body, grain);
  } else {
    body(0, groups);
  }
}

// Prefill: work items are (row group, token block). For each panel of
// kTileO rows the item converts the panel to f32 once (per-thread scratch,
// a few KiB to a few tens of KiB) and runs every token tile of its block
// over it, the block's x rows staying in L2.
void run_packed(const float* x, int64_t ldx, int64_t tokens, int64_t in, const void* w, DType wt,
                int64_t o_begin, int64_t o_end, float* y, int64_t ldy, bool accumulate,
                ThreadPool* pool) {
  const TileFn* table = panel_tiles();
  const bool direct = wt == DType::kF32;
  int64_t rows = o_end - o_begin;
  int64_t panels = (rows + kTileO - 1) / kTileO;
  int64_t groups = (panels + kPanelsPerGroup - 1) / kPanelsPerGroup;
  int64_t block = kTokenBlockBytes / (in * 4);
  block = std::clamp<int64_t>(block / kTileT * kTileT, kTileT, 256);
  int64_t tblocks = (tokens + block - 1) / block;
  // Padded panel stride: 16-float multiple plus one line, so that the rows of
  // a panel do not all map to the same L1 sets.
  int64_t ldp = (in + 15) / 16 * 16 + 16;

  // Reduction blocks: a multiple of 16 (the zero-padded tail stays last).
  const int64_t kc = in <= kMaxReductionBlock ? in : kReductionBlock;
  constexpr int64_t kStateFloats = kTileT * kTileO * 16;

  auto body = [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> state;
    if (kc < in && static_cast<int64_t>(state.size()) < (block / kTileT + 1) * kStateFloats) {
      state.resize((block / kTileT + 1) * kStateFloats);
    }
    thread_local std::vector<float> scratch;
    if (!direct && static_cast<int64_t>(scratch.size()) < kTileO * ldp) {
      scratch.resize(kTileO * ldp);
    }
    for (int64_t item = i0; item < i1; ++item) {
      int64_t g = item / tblocks, tb = item % tblocks;
      int64_t tb0 = tb * block, tb1 = std::min(tokens, tb0 + block);
      int64_t p1 = std::min(panels, (g + 1) * kPanelsPerGroup);
      for (int64_t p = g * kPanelsPerGroup; p < p1; ++p) {
        int64_t r0 = p * kTileO;
        int64_t nr = std::min<int64_t>(kTileO, rows - r0);
        const void* wr = at_row(w, wt, o_begin + r0, in);
        const float* panel;
        int64_t ldw;
        if (direct) {
          panel = static_cast<const float*>(wr);
          ldw = in;
        } else {
          pack_rows(wt, wr, in, nr, in, scratch.data(), ldp);
          panel = scratch.data();
          ldw = ldp;
        }
        for (int64_t k0 = 0; k0 < in; k0 += kc) {
          int64_t k1 = std::min(in, k0 + kc);
          int phase = (k0 > 0 ? kLoadState : 0) | (k1 < in ? kSaveState : 0);
          for (int64_t t0 = tb0; t0 < tb1; t0 += kTileT) {
            int64_t nt = std::min<int64_t>(kTileT, tb1 - t0);
            // No state when one k block covers the input (state stays empty:
            // no pointer arithmetic on its null data()).
            float* st = kc < in ? state.data() + (t0 - tb0) / kTileT * kStateFloats : nullptr;
            tile(table, nt, nr)(x + t0 * ldx + k0, ldx, panel + k0, ldw, k1 - k0, y + t0 * ldy + r0,
                                ldy, accumulate, st, phase);
          }
        }
      }
    }
  };
  int64_t items = groups * tblocks;
  if (pool != nullptr) {
    pool->parallel_for(items, body, 1);
  } else {
    body(0, items);
  }
}

}  // namespace

bool matmul_supports(DType w_dtype) {
  return streaming_tiles(w_dtype) != nullptr || dtype_is_quantized(w_dtype);
}

void matmul_rows(const float* x, int64_t ldx, int64_t tokens, int64_t in, const void* w,
                 DType w_dtype, int64_t o_begin, int64_t o_end, float* y, int64_t ldy,
                 bool accumulate, ThreadPool* pool) {
  FERRITE_CHECK(matmul_supports(w_dtype)) << "matmul weight dtype " << dtype_name(w_dtype);
  FERRITE_CHECK(in >= 0 && tokens >= 0 && o_begin >= 0 && o_begin <= o_end);
  FERRITE_CHECK(in % dtype_block_elems(w_dtype) == 0)
      << "rows of " << in << " elements are not whole " << dtype_name(w_dtype) << " blocks";
  if (tokens == 0 || o_end == o_begin) return;
  if (in == 0) {  // empty sums: y = 0, or y unchanged
    for (int64_t t = 0; t < tokens && !accumulate; ++t) {
      for (int64_t o = 0; o < o_end - o_begin; ++o) y[t * ldy + o] = 0.0f;
    }
    return;
  }
  if (quant_matmul_integer() && quant_dot_supports(w_dtype)) {
    quant_matmul_rows(x, ldx, tokens, in, w, w_dtype, o_begin, o_end, y, ldy, accumulate, pool,
                      quant_matmul_isa());
    return;
  }
  if (tokens < kPackMinTokens) {
    run_streaming(x, ldx, tokens, in, w, w_dtype, o_begin, o_end, y, ldy, accumulate, pool);
  } else {
    run_packed(x, ldx, tokens, in, w, w_dtype, o_begin, o_end, y, ldy, accumulate, pool);
  }
}

void matmul(const float* x, int64_t tokens, int64_t in, const void* w, DType w_dtype, int64_t out,
            float* y, ThreadPool* pool) {
  matmul_rows(x, in, tokens, in, w, w_dtype, 0, out, y, out, false, pool);
}

void matmul_accumulate(const float* x, int64_t tokens, int64_t in, const void* w, DType w_dtype,
                       int64_t out, float* y, ThreadPool* pool) {
  matmul_rows(x, in, tokens, in, w, w_dtype, 0, out, y, out, true, pool);
}

}  // namespace ferrite::cpu
