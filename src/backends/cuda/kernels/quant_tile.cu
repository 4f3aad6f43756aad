#include "backends/cuda/kernels/quant_tile.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"
#include "backends/cuda/kernels/quant_tile_formats.h"
#include "backends/cuda/kernels/weight_tile.cuh"

namespace ferrite::cuda {
namespace {

using namespace tile;

constexpr int kWarps = 8, kThreads = 32 * kWarps;
// Weight rows a block: warps 0..3 and 4..7 take rows 32 (warp % 4) .. + 31,
// the former chunks 0..3 of every step, the latter chunks 4..7.
constexpr int kRows = 128;
// Bytes a token's step takes in shared memory: 512 + 64, so that the 8
// lanes of a 16-byte load phase (2 tokens x 4 quads) read 8 different
// 16-byte bank groups.
constexpr int kXStride = 2 * kStepElems + 64;
// The step's Scales: 16 groups a row, rows 18 apart (8 rows x 2 groups of
// one load land in 16 different bank pairs).
constexpr int kScaleStride = 18;
constexpr int kScaleBytes = kRows * kScaleStride * static_cast<int>(sizeof(Scale));
// Shared memory of one block an SM (the H200's opt-in limit a block).
constexpr int kSmemBudget = 227 * 1024;

// A step's raw bytes of one row in shared memory: the 16-byte pieces that
// cover them (a row starts where its predecessor ends, at any offset of a
// piece its format's alignment allows).
template <int F>
constexpr int raw_pieces() {
  return (step_bytes<F>(kStepElems) + 15 + 15) / 16;
}
template <int F>
constexpr int raw_stride() {
  return 16 * raw_pieces<F>();
}
template <int F, int kBT>
constexpr int stage_bytes() {
  return kRows * raw_stride<F>() + kBT * kXStride;
}
template <int F, int kBT>
constexpr int num_stages() {
  constexpr int s = (kSmemBudget - kScaleBytes) / stage_bytes<F, kBT>();
  return s < 2 ? 2 : (s > 6 ? 6 : s);
}
template <int F, int kBT>
constexpr int smem_bytes() {
  constexpr int pipe = num_stages<F, kBT>() * stage_bytes<F, kBT>();
  constexpr int sums = 4 * kRows * kBT;  // the half-steps' sums, after the pipeline
  return kScaleBytes + (pipe > sums ? pipe : sums);
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Tokens [kBT blockIdx.x, + kBT) x rows [128 blockIdx.y, + 128) over the
// steps of split blockIdx.z (fragments: quant_tile_formats.h).
template <int F, int kBT>
__global__ void __launch_bounds__(kThreads, 1) quant_tile_kernel(const TileParams p) {
  using V = Values<F>;
  constexpr int kNJ = kBT / 8;  // token groups of 8
  constexpr int kRS = raw_stride<F>();
  constexpr int kPieces = raw_pieces<F>();
  constexpr int kStage = stage_bytes<F, kBT>();
  constexpr int kStages = num_stages<F, kBT>();
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int last_split;
  Scale* scales = reinterpret_cast<Scale*>(smem);
  uint8_t* stages = smem + kScaleBytes;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int rg = warp & 3, kh = warp >> 2;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBT;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kRows;
  int s_begin, s_end;
  split_steps(p, &s_begin, &s_end);

  // Step s's blocks of the 128 rows into stage st (cp.async; rows past n
  // are left as they are: their sums are never stored). Warp w copies rows
  // 16 w .. + 15, a lane a piece (two rows at a time when a row's pieces
  // fit half a warp): row r's step is bytes [r row_bytes + off0, + len) of w
  // (16-byte aligned), copied as the pieces from the one holding its first
  // byte to the one holding its last (never past the tensor's last piece).
  constexpr int kRowsAtOnce = kPieces <= 16 ? 2 : 1;
  const int piece = kRowsAtOnce == 2 ? lane & 15 : lane;
  const int64_t my_row0 = n0 + 16 * warp + (kRowsAtOnce == 2 ? lane >> 4 : 0);
  auto load_w = [&](int s, int st) {
    uint8_t* base = stages + st * kStage;
    const int64_t k0 = static_cast<int64_t>(s) * kStepElems;
    const int64_t off0 = k0 / V::kBlockElems * V::kBlockBytes;
    const int64_t len = min64(kStepElems, p.k - k0) / V::kBlockElems * V::kBlockBytes;
    if (piece >= kPieces) return;
#pragma unroll
    for (int i = 0; i < 16 / kRowsAtOnce; ++i) {
      const int64_t row = my_row0 + kRowsAtOnce * i;
      if (row >= p.n) break;
      const int64_t first = row * p.row_bytes + off0;
      const int64_t a = (first & ~int64_t{15}) + 16 * piece;
      if (a < first + len) cp_async16(base + (row - n0) * kRS + 16 * piece, p.w + a, true);
    }
  };
  // Step s's activations of the block's tokens (zeros past m): warp w copies
  // tokens w, w + 8, ..., a lane 8 of a token's 256 activations.
  auto load_x = [&](int s, int st) {
    uint8_t* xs = stages + st * kStage + kRows * kRS;
    const int64_t k0 = static_cast<int64_t>(s) * kStepElems;
    if (8 * lane >= min64(kStepElems, p.k - k0)) return;
#pragma unroll
    for (int i = 0; i < kBT / 8; ++i) {
      const int t = warp + 8 * i;
      const bool valid = t0 + t < p.m;
      const __nv_bfloat16* src = valid ? p.x + (t0 + t) * p.k + k0 + 8 * lane : p.x;
      cp_async16(xs + t * kXStride + 16 * lane, src, valid);
    }
  };

  // acc[mt][j][i] of this lane: row 32 rg + 16 mt + g + 8 (i / 2), token 8 j
  // + 2 tq + i % 2. each(f) calls f(mt, j, i) for every one (unrolled).
  float acc[2][kNJ][4];
  auto each = [&](auto&& f) { each_fragment<2, kNJ>(f); };
  each([&](int mt, int j, int i) { acc[mt][j][i] = 0.0f; });

  tile_prologue<kStages>(s_begin, s_end, load_w, load_x);

  // Where a row's bytes start within a piece: ((n0 + r) row_bytes + off0) % 16.
  // The Scales of a step: thread t does row t / 2, chunks 4 (t % 2) .. + 3.
  const int sc_row = tid >> 1, sc_kc0 = 4 * (tid & 1);
  const int sc_shift = static_cast<int>(((n0 + sc_row) * p.row_bytes) & 15);
  int row_shift[4];  // this lane's rows 32 rg + g + 8 q (tile q / 2, fragment rows g / g + 8)
#pragma unroll
  for (int q = 0; q < 4; ++q)
    row_shift[q] = static_cast<int>(((n0 + 32 * rg + g + 8 * q) * p.row_bytes) & 15);

  for (int s = s_begin; s < s_end; ++s) {
    const int it = s - s_begin;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step s is in; every warp is done with stage (it - 1) and the Scales
    {
      const int nx = s + kStages - 1;
      if (nx < s_end) {
        load_w(nx, (it + kStages - 1) % kStages);
        load_x(nx, (it + kStages - 1) % kStages);
      }
      cp_async_commit();  // one group an iteration (maybe empty)
    }
    const uint8_t* base = stages + (it % kStages) * kStage;
    const uint8_t* xs = base + kRows * kRS;
    const int64_t k0 = static_cast<int64_t>(s) * kStepElems;
    const int chunks = static_cast<int>(min64(kStepElems, p.k - k0) / 32);
    const int off16 = static_cast<int>((k0 / V::kBlockElems * V::kBlockBytes) & 15);
    {
      const uint8_t* r = base + sc_row * kRS + ((sc_shift + off16) & 15);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int kc = sc_kc0 + c;
        if (kc < chunks) {
          scales[sc_row * kScaleStride + 2 * kc] = V::scale(r, kc, 0);
          scales[sc_row * kScaleStride + 2 * kc + 1] = V::scale(r, kc, 1);
        }
      }
    }
    __syncthreads();  // the Scales are in
    const uint8_t* rp[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      rp[q] = base + (32 * rg + g + 8 * q) * kRS + ((row_shift[q] + off16) & 15);
    const Scale* my_scales = scales + (32 * rg + g) * kScaleStride + (tq >> 1);
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) {
      const int kc = 4 * kh + cc;
      if (kc >= chunks) break;  // the last step of a k that is not a multiple of 256
      // a[tile][half]: rows 32 rg + 16 tile + g (+ 8), both halves of the chunk.
      uint32_t a[2][2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        float lo[8], hi[8];
        uint32_t w[2];
        V::codes(rp[2 * mt], kc, tq, w);
        decode<V::kKind>(w, my_scales[(16 * mt) * kScaleStride + 2 * kc], lo);
        V::codes(rp[2 * mt + 1], kc, tq, w);
        decode<V::kKind>(w, my_scales[(16 * mt + 8) * kScaleStride + 2 * kc], hi);
        a_fragment(lo, hi, 0, a[mt][0]);
        a_fragment(lo, hi, 1, a[mt][1]);
      }
#pragma unroll
      for (int j = 0; j < kNJ; ++j) {
        // Token 8 j + g, elements 8 tq .. 8 tq + 7 of the chunk.
        const uint4 xv =
            *reinterpret_cast<const uint4*>(xs + (8 * j + g) * kXStride + 2 * (32 * kc + 8 * tq));
        const uint32_t x4[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t b0, b1;
          b_fragment(x4, h, &b0, &b1);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) mma16816<__nv_bfloat16>(acc[mt][j], a[mt][h], b0, b1);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free: the half-steps' sums go there

  // An accumulator's place in the sums (lanes fastest).
  auto at = [&](int mt, int j, int i) { return (((rg * 2 + mt) * kNJ + j) * 4 + i) * 32 + lane; };
  float* sums = reinterpret_cast<float*>(stages);
  if (kh == 1) each([&](int mt, int j, int i) { sums[at(mt, j, i)] = acc[mt][j][i]; });
  __syncthreads();
  if (kh == 0) each([&](int mt, int j, int i) { acc[mt][j][i] += sums[at(mt, j, i)]; });

  // acc[mt][j][i]'s place in a tile's sums, row and token.
  auto each_acc = [&](auto&& f) {
    each([&](int mt, int j, int i) {
      f(acc[mt][j][i], at(mt, j, i), n0 + 32 * rg + 16 * mt + g + 8 * (i >> 1),
        t0 + 8 * j + 2 * tq + (i & 1));
    });
  };
  finish_tile(p, int64_t{kRows} * kBT, kh == 0, &last_split, each_acc);
}

// The token tile of m tokens: the smallest that holds them (padding tokens
// cost mma work), 64 beyond.
template <typename Fn>
void dispatch_tokens(int64_t m, Fn&& fn) {
  if (m <= 16)
    fn(std::integral_constant<int, 16>{});
  else if (m <= 32)
    fn(std::integral_constant<int, 32>{});
  else
    fn(std::integral_constant<int, 64>{});
}

bool tile_format(DType t) { return qblocks::qfmt(t) >= 0; }
// The format codes are qblocks::QFmt's.
constexpr bool same_code(int a, int b) { return a == b; }
static_assert(same_code(kQ8_0, qblocks::kFmtQ8_0) && same_code(kQ4_0, qblocks::kFmtQ4_0) &&
              same_code(kQ4_K, qblocks::kFmtQ4_K) && same_code(kQ5_K, qblocks::kFmtQ5_K) &&
              same_code(kQ6_K, qblocks::kFmtQ6_K) && same_code(kF8B128, qblocks::kFmtF8B128) &&
              same_code(kU4G128, qblocks::kFmtU4G128));

}  // namespace

Status quant_tile_init() {
  // Every instantiation's shared memory is above 48 KiB, which a kernel must
  // opt in to, once: here, at backend start, never inside a graph capture.
  cudaError_t first = cudaSuccess;
  for (DType t : qblocks::kFmtDTypes) {
    qblocks::dispatch_fmt(t, [&](auto fc) {
      constexpr int F = decltype(fc)::value;
      for (int64_t m : {16, 32, 64}) {
        dispatch_tokens(m, [&](auto bt) {
          constexpr int kBT = decltype(bt)::value;
          const cudaError_t e = cudaFuncSetAttribute(quant_tile_kernel<F, kBT>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     smem_bytes<F, kBT>());
          if (first == cudaSuccess) first = e;
        });
      }
    });
  }
  return first == cudaSuccess ? Status::ok() : cuda_error(first, "quant tile: shared memory opt-in");
}

int64_t quant_tile_partial_floats(int num_sms) {
  // Splits are chosen for about one wave: tiles x splits of at most a few
  // blocks an SM, each tile of 128 rows x 64 tokens at most.
  return int64_t{4} * num_sms * kRows * 64;
}

int quant_tile_splits(int64_t tiles, int steps, int sms, int64_t tile_floats,
                      const QuantTileScratch& sc) {
  auto waves = [&](int64_t blocks) { return (blocks + sms - 1) / sms; };
  double best_cost = static_cast<double>(waves(tiles) * steps);
  int best = 1;
  if (tiles > sc.counter_count) return 1;
  for (int s = 2; s <= std::min(steps, 32); ++s) {
    const int per = (steps + s - 1) / s;
    if ((steps + per - 1) / per != s) continue;  // the same splits as a smaller s
    if (tiles * s * tile_floats > sc.partial_floats) break;
    const double cost = static_cast<double>(waves(tiles * s) * per) + 0.25 * s;
    if (cost < best_cost) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

bool quant_tile_supported(DType x_dt, const void* x, DType w_dt, const void* w, int64_t k,
                          DType out_dt) {
  if (!tile_format(w_dt) || x_dt != DType::kBF16 || !small_ok(out_dt)) return false;
  if (k <= 0 || k % dtype_block_elems(w_dt) != 0 || k % 8 != 0) return false;
  return reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

Status launch_quant_tile(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m,
                         int64_t k, const void* w, DType w_dt, int64_t n, void* out,
                         DType out_dt, bool accumulate, const void* bias, DType bias_dt,
                         const QuantTileScratch& scratch) {
  if (m == 0 || n == 0) return Status::ok();
  if (!quant_tile_supported(x_dt, x, w_dt, w, k, out_dt))
    return unsupported("quant tile: unsupported format, types or alignment");
  if (bias && !small_ok(bias_dt)) return bad_dtype("quant tile bias", bias_dt);
  const int steps = static_cast<int>((k + kStepElems - 1) / kStepElems);
  const int64_t row_tiles = (n + kRows - 1) / kRows;
  if (row_tiles > 65535) return unsupported("quant tile: too many weight rows");
  cudaError_t err = cudaSuccess;
  qblocks::dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    dispatch_tokens(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      dim3 grid;
      const TileParams p = tile_launch<kRows, kBT>(x, m, k, w, w_dt, n, out, out_dt, accumulate,
                                                   bias, bias_dt, steps, num_sms, scratch, &grid);
      err = launch_pdl_weights(quant_tile_kernel<F, kBT>, grid, dim3(kThreads),
                               smem_bytes<F, kBT>(), s, p);
    });
  });
  if (err != cudaSuccess) return cuda_error(err, "quant_tile launch");
  return check_launch("quant_tile");
}

}  // namespace ferrite::cuda
