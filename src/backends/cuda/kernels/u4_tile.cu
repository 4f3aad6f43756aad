#include <cuda_bf16.h>

#include <type_traits>
#include <utility>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/u4_tile.cuh"
#include "backends/cuda/kernels/u4_tile_formats.h"
#include "backends/cuda/kernels/weight_tile.cuh"
#include "backends/cuda/kernels/wgmma.cuh"

namespace ferrite::cuda {
namespace {

using namespace u4tile;

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kRows = 128;  // weight rows a block
constexpr int kSmemBudget = 227 * 1024;

// A pipeline stage holds kSteps k steps (1 or 2). Two steps a stage read
// 144 contiguous bytes a row instead of 72 (half as many DRAM page openings
// for the same bytes) in fewer, larger stages: on the H200 7-12 % faster
// for 16-token tiles (24576 x 4096: 36.3 against 39.0 us; three blocks an
// SM still fit, two stages each), slower for 32 / 64 (their larger stages
// cost blocks an SM: 57.3 against 48.8 us at 32). default_stage_steps
// picks; BackendState::u4_tile_stage_steps overrides (benchmarks, tests).
template <int kSteps>
struct StageGeometry {
  // The 16-byte pieces that cover a row's kSteps blocks (72 kSteps bytes
  // from 0 or 8 bytes into the first piece).
  static constexpr int kPieces = kSteps == 1 ? 5 : 10;
  // A row's stride in shared memory: 5 or 11 pieces, an odd number, so the
  // 8 rows g of a fragment load start in 8 different 16-byte bank groups.
  static constexpr int kWStride = kSteps == 1 ? 80 : 176;
  // A token's stride: its kSteps x 256 bytes + 64, so that the two tokens
  // of a 16-byte load phase (lanes 8i .. 8i + 7: tokens g, g + 1 x quads)
  // fill all 32 banks.
  static constexpr int kXStride = kSteps * 2 * kGroup + 64;
};

// The mma.sync tile's warps over its 128 rows x kBT tokens: kMT 16-row mma
// tiles a warp; kTokenWarps warps share a row range and split the tokens.
// Up to 32 tokens each warp owns 16 rows and every token: each weight is
// decoded once. At 64 tokens two warps share 32 rows: the decode is done
// twice, but each activation fragment feeds two mma instead of one (one
// 16-byte shared-memory load a mma would bound the tile below the tensor
// cores' rate).
template <int kBT>
struct WarpLayout {
  static constexpr int kMT = kBT >= 64 ? 2 : 1;
  static constexpr int kRowWarps = kRows / (16 * kMT);
  static constexpr int kTokenWarps = kWarps / kRowWarps;
  static constexpr int kNJ = kBT / kTokenWarps / 8;  // n8 tiles a warp
};

// Blocks an SM: three of 16 / 32 tokens (more warps to hide the weight
// stream's latency), two of 64.
template <int kBT>
constexpr int blocks_per_sm() {
  return kBT >= 64 ? 2 : 3;
}
template <int kBT, int kSteps>
constexpr int stage_bytes() {
  using G = StageGeometry<kSteps>;
  return kRows * G::kWStride + kBT * G::kXStride;
}
template <int kBT, int kSteps>
constexpr int num_stages() {
  constexpr int s = kSmemBudget / blocks_per_sm<kBT>() / stage_bytes<kBT, kSteps>();
  return s < 2 ? 2 : (s > 4 ? 4 : s);
}
template <int kBT, int kSteps>
constexpr int smem_bytes() {
  return num_stages<kBT, kSteps>() * stage_bytes<kBT, kSteps>();
}

// The 16-byte pieces of a block's rows that one thread copies each stage:
// piece i = tid + 256 j (i < 128 kPieces) is row i / kPieces, piece i %
// kPieces of the row's stage (its kSteps blocks, 72 bytes apart, from 0 or
// 8 bytes into the first piece). Where the pieces come from and go is
// worked out once (registers are what the tile runs short of), two words a
// piece:
//  - code: the piece's offset from the tile's first row at stage 0, the
//    row's start rounded down to 16 bytes (a tile's 128 rows span less than
//    2^31 bytes: k < 2^22) plus 16 x the piece, with flags in the low bits:
//    kSkip (not a row of the tensor), kShift (the row's first byte is 8
//    bytes into a piece; step s starts 8 s bytes, mod 16, further in);
//  - place (two steps a stage only): its shared-memory offset, plus the
//    piece number << 16 (a piece past the row's last block is not copied:
//    the last row's would read past the tensor). With one step a stage
//    piece i goes to 16 i (rows 5 pieces apart) and every piece of a step
//    holds a byte of its block.
template <int kSteps>
struct RowPieces {
  using G = StageGeometry<kSteps>;
  static constexpr int kPerThread = (kRows * G::kPieces + kThreads - 1) / kThreads;
  static constexpr int kSkip = 1, kShift = 8;
  const uint8_t* tile;
  int code[kPerThread], place[kSteps == 1 ? 1 : kPerThread];

  __device__ __forceinline__ RowPieces(const TileParams& p, int64_t n0)
      : tile(p.w + n0 * p.row_bytes) {  // 16-byte aligned: n0 % 128 == 0, row_bytes % 8 == 0
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = static_cast<int>(threadIdx.x) + kThreads * j;
      const int r = i / G::kPieces, piece = i - G::kPieces * r;
      const int off = static_cast<int>(r * p.row_bytes);
      code[j] = i < kRows * G::kPieces && n0 + r < p.n
                    ? (off & ~15) + 16 * piece + (off & kShift)
                    : kSkip;
      if constexpr (kSteps > 1) place[j] = r * G::kWStride + 16 * piece + (piece << 16);
    }
  }
  // The pieces of the stage that starts at step s into `base`. Rows past n
  // are left as they are: their sums are never stored.
  __device__ __forceinline__ void load(const TileParams& p, int s, uint8_t* base) const {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int c = code[j];
      if (c & kSkip) continue;
      const int shift = c & kShift;
      const int at = (shift + kBlockBytes * s) & ~15;
      if constexpr (kSteps == 1) {
        cp_async16(base + 16 * (static_cast<int>(threadIdx.x) + kThreads * j), tile + (c & ~15) + at,
                   true);
      } else {
        // The piece's bytes from the row's start: at + 16 piece - shift.
        if (at + 16 * (place[j] >> 16) - shift >= p.row_bytes) continue;
        cp_async16(base + (place[j] & 0xFFFF), tile + (c & ~15) + at, true);
      }
    }
  }
};

// The same pieces (one step a stage) worked out at every copy, holding no
// registers across the k loop: the wgmma form's 128-token tile has none to
// spare (RowPieces' words spill there), and its instruction budget a step
// is not what bounds it.
struct RowPiecesOnTheFly {
  int64_t n0;
  __device__ __forceinline__ RowPiecesOnTheFly(const TileParams&, int64_t n0_) : n0(n0_) {}
  __device__ __forceinline__ void load(const TileParams& p, int s, uint8_t* base) const {
    constexpr int kPieces = StageGeometry<1>::kPieces;
#pragma unroll
    for (int j = 0; j < (kRows * kPieces + kThreads - 1) / kThreads; ++j) {
      const int i = static_cast<int>(threadIdx.x) + kThreads * j;
      const int r = i / kPieces, piece = i - kPieces * r;
      if (i >= kRows * kPieces || n0 + r >= p.n) continue;
      const int64_t first = (n0 + r) * p.row_bytes + static_cast<int64_t>(kBlockBytes) * s;
      cp_async16(base + 16 * i, p.w + (first & ~int64_t{15}) + 16 * piece, true);
    }
  }
};

// The same for the tiled layout (U4Layout::kTiles): a tile's k step is one
// contiguous run of 128 blocks, copied as it lies (row r's block at 72 r).
struct TilePieces {
  static constexpr int kPieces = static_cast<int>(kTileStepBytes / 16);  // 576
  static constexpr int kPerThread = (kPieces + kThreads - 1) / kThreads;
  const uint8_t* tile;  // the row tile's step 0

  __device__ __forceinline__ TilePieces(const TileParams& p, int64_t n0)
      : tile(p.w + (n0 / kTileRows) * p.steps * kTileStepBytes) {}
  __device__ __forceinline__ void load(const TileParams&, int s, uint8_t* base) const {
    const uint8_t* src = tile + static_cast<int64_t>(s) * kTileStepBytes;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = static_cast<int>(threadIdx.x) + kThreads * j;
      if (kPieces % kThreads == 0 || i < kPieces) cp_async16(base + 16 * i, src + 16 * i, true);
    }
  }
};

// The activations of tokens [t0, + kBT) for the kSteps steps from s (zeros
// past m and past k): piece i (0 .. 16 kSteps kBT - 1) is token t = i / (16
// kSteps), elements 8 c .. + 7 (c = i % (16 kSteps)) from step s's first,
// copied to xs + at(t, c).
template <int kBT, int kSteps, typename At>
__device__ __forceinline__ void load_x_pieces(const TileParams& p, int64_t t0, int s, uint8_t* xs,
                                              At&& at) {
  constexpr int kPerToken = 16 * kSteps, kTokensAPass = kThreads / kPerToken;
  const int tid = threadIdx.x, c = tid % kPerToken;
  const int64_t e = static_cast<int64_t>(s) * kGroup + 8 * c;
#pragma unroll
  for (int j = 0; j < kBT / kTokensAPass; ++j) {
    const int t = tid / kPerToken + kTokensAPass * j;
    const bool valid = t0 + t < p.m && e < p.k;
    const __nv_bfloat16* src = valid ? p.x + (t0 + t) * p.k + e : p.x;
    cp_async16(xs + at(t, c), src, valid);
  }
}

// Tokens [kBT blockIdx.x, + kBT) x rows [128 blockIdx.y, + 128) over the k
// steps of split blockIdx.z, kSteps a pipeline stage, the weights row-major
// or tiled (kTiled: one step a stage, rows 72 bytes apart in shared memory).
// Per step each warp multiplies its rows' q - z (u4_tile_formats.h
// code_values) by the activations into f32 step sums, then adds d times
// them to its accumulators.
template <int kBT, int kSteps, bool kTiled>
__global__ void __launch_bounds__(kThreads, blocks_per_sm<kBT>())
    u4_tile_kernel(const TileParams p) {
  static_assert(!kTiled || kSteps == 1, "the tiled layout: one k step a stage");
  using L = WarpLayout<kBT>;
  using G = StageGeometry<kSteps>;
  using Pieces = std::conditional_t<kTiled, TilePieces, RowPieces<kSteps>>;
  constexpr int kRowStride = kTiled ? kBlockBytes : G::kWStride;
  constexpr int kMT = L::kMT, kNJ = L::kNJ;
  constexpr int kStage = stage_bytes<kBT, kSteps>();
  constexpr int kStages = num_stages<kBT, kSteps>();
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int last_split;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int rw = warp % L::kRowWarps, tw = warp / L::kRowWarps;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBT;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kRows;
  int s_begin, s_end;
  split_steps(p, &s_begin, &s_end);
  const int stages = (s_end - s_begin + kSteps - 1) / kSteps;  // pipeline stages (u)

  const Pieces pieces(p, n0);
  auto load_w = [&](int u, int st) {
    pieces.load(p, s_begin + kSteps * u, smem + st * kStage);
  };
  auto load_x = [&](int u, int st) {
    load_x_pieces<kBT, kSteps>(p, t0, s_begin + kSteps * u, smem + st * kStage + kRows * G::kWStride,
                               [](int t, int c) { return t * G::kXStride + 16 * c; });
  };

  // acc[mt][j][i]: row 16 kMT rw + 16 mt + g + 8 (i / 2), token 8 kNJ tw +
  // 8 j + 2 tq + i % 2.
  float acc[kMT][kNJ][4];
  auto each = [&](auto&& f) { each_fragment<kMT, kNJ>(f); };
  each([&](int mt, int j, int i) { acc[mt][j][i] = 0.0f; });

  tile_prologue<kStages>(0, stages, load_w, load_x);

  // This lane's rows q = 2 mt + h: 16 kMT rw + 8 q + g; where each row's
  // bytes start within a piece (0 or 8) at step 0.
  // (Tiled: 0, each block 72 r bytes into its step's run.)
  int row_shift[2 * kMT];
#pragma unroll
  for (int q = 0; q < 2 * kMT; ++q)
    row_shift[q] =
        kTiled ? 0 : static_cast<int>(((n0 + 16 * kMT * rw + 8 * q + g) * p.row_bytes) & 15);
  const int x_lane = (8 * kNJ * tw + g) * G::kXStride + 16 * tq;

  for (int u = 0; u < stages; ++u) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage u is in; every warp is done with stage u - 1
    {
      const int nx = u + kStages - 1;
      if (nx < stages) {
        load_w(nx, nx % kStages);
        load_x(nx, nx % kStages);
      }
      cp_async_commit();  // one group an iteration (maybe empty)
    }
    const uint8_t* base = smem + (u % kStages) * kStage;
    const int s0 = s_begin + kSteps * u;
#pragma unroll
    for (int ss = 0; ss < kSteps; ++ss) {
      if (s0 + ss >= s_end) break;
      const uint8_t* xs = base + kRows * G::kWStride + x_lane + 2 * kGroup * ss;
      const uint8_t* rp[2 * kMT];
      uint32_t zz[2 * kMT];
#pragma unroll
      for (int q = 0; q < 2 * kMT; ++q) {
        // 72 s = 8 s (mod 16): odd steps start 8 bytes further into a piece.
        rp[q] = base + (16 * kMT * rw + 8 * q + g) * kRowStride +
                (kTiled ? 0 : ((row_shift[q] + 8 * s0) & 15)) + kBlockBytes * ss;
        zz[q] = zero_pairs(rp[q][4]);
      }
      // part[mt][j][i]: this step's sums of (q - z) x, as acc.
      float part[kMT][kNJ][4];
      each([&](int mt, int j, int i) { part[mt][j][i] = 0.0f; });
#pragma unroll 1
      for (int c = 0; c < kGroup / 32; ++c) {
        // a[mt][kk]: rows 16 kMT rw + 16 mt + g (+ 8), mma half kk of chunk c.
        uint32_t a[kMT][2][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          uint32_t v[2][4];
#pragma unroll
          for (int h = 0; h < 2; ++h)
            code_values(*reinterpret_cast<const uint32_t*>(rp[2 * mt + h] + kCodesOffset +
                                                           16 * c + 4 * tq),
                        zz[2 * mt + h], v[h]);
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            a[mt][kk][0] = v[0][2 * kk];
            a[mt][kk][1] = v[1][2 * kk];
            a[mt][kk][2] = v[0][2 * kk + 1];
            a[mt][kk][3] = v[1][2 * kk + 1];
          }
        }
#pragma unroll
        for (int j = 0; j < kNJ; ++j) {
          // Token 8 kNJ tw + 8 j + g, elements 8 tq .. 8 tq + 7 of the chunk.
          const uint4 xv = *reinterpret_cast<const uint4*>(xs + 8 * j * G::kXStride + 64 * c);
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            const uint32_t b0 = kk ? xv.z : xv.x, b1 = kk ? xv.w : xv.y;
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
              mma16816<__nv_bfloat16>(part[mt][j], a[mt][kk], b0, b1);
          }
        }
      }
      float d[2 * kMT];
#pragma unroll
      for (int q = 0; q < 2 * kMT; ++q) d[q] = *reinterpret_cast<const float*>(rp[q]);
      each([&](int mt, int j, int i) {
        acc[mt][j][i] = fmaf(d[2 * mt + (i >> 1)], part[mt][j][i], acc[mt][j][i]);
      });
    }
  }
  cp_async_wait<0>();

  // acc[mt][j][i]'s place in a tile's sums (lanes fastest), row and token.
  auto each_acc = [&](auto&& f) {
    each([&](int mt, int j, int i) {
      f(acc[mt][j][i], (((warp * kMT + mt) * kNJ + j) * 4 + i) * 32 + lane,
        n0 + 16 * kMT * rw + 16 * mt + g + 8 * (i >> 1), t0 + 8 * kNJ * tw + 8 * j + 2 * tq + (i & 1));
    });
  };
  finish_tile(p, int64_t{kRows} * kBT, true, &last_split, each_acc);
}

// The wgmma form (Tuning::cuda_u4_tile_wgmma): the same block tile, k steps
// and split k, but each warpgroup (warps 0-3, 4-7) takes 64 rows x all kBT
// tokens with m64nNk16 wgmma (wgmma.cuh): A, the decoded weights, from
// registers (natural k order, u4_tile_formats.h a_fragments_natural), B,
// the activations, read by the tensor cores from shared memory, where the
// step's kBT x 128 tile lies as K-major core matrices: token t, elements 8 c
// .. + 7 of the step at (t / 8) 2048 + 128 c + 16 (t % 8) (LBO 128 between a
// k16's two core matrices, SBO 2048 between 8-token groups). The decode of
// a k16 overlaps the previous wgmma (two A register sets, wait_group 1), also
// across steps: the copies run kStages - 2 steps ahead, into the stage read
// two steps before, whose wgmmas the wait_group 1 after the previous step's
// first wgmma has covered, so no step waits for its last wgmma (a drain of
// the tensor pipe per step, with the next step's first decode behind it).

template <int kBT>
constexpr int wg_stage_bytes() {
  return kRows * StageGeometry<1>::kWStride + kBT * 2 * kGroup;
}
template <int kBT>
constexpr int wg_num_stages() {
  constexpr int s = kSmemBudget / wg_stage_bytes<kBT>();
  return s < 3 ? 3 : (s > 5 ? 5 : s);
}
template <int kBT>
constexpr int wg_smem_bytes() {
  return wg_num_stages<kBT>() * wg_stage_bytes<kBT>();
}

template <int kBT>
__global__ void __launch_bounds__(kThreads, 1) u4_wgmma_kernel(const TileParams p) {
  constexpr int kNJ = kBT / 8;  // n8 tiles (every token, per warpgroup)
  constexpr int kStage = wg_stage_bytes<kBT>();
  constexpr int kStages = wg_num_stages<kBT>();
  constexpr int kAhead = kStages - 2;  // steps the copies run ahead
  static_assert(kAhead >= 1 && wg_smem_bytes<kBT>() <= kSmemBudget, "the wgmma tile's stages");
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int last_split;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int wgi = warp >> 2, wq = warp & 3;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBT;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kRows;
  int s_begin, s_end;
  split_steps(p, &s_begin, &s_end);

  using G = StageGeometry<1>;
  const RowPiecesOnTheFly pieces(p, n0);
  auto load_w = [&](int s, int st) { pieces.load(p, s, smem + st * kStage); };
  // Each 8-element piece into its core-matrix row.
  auto load_x = [&](int s, int st) {
    load_x_pieces<kBT, 1>(p, t0, s, smem + st * kStage + kRows * G::kWStride, wgmma_x_offset);
  };

  // acc[4 j + i]: row 64 wgi + 16 wq + g + 8 (i / 2), token 8 j + 2 tq + i % 2.
  float acc[kNJ * 4];
#pragma unroll
  for (int i = 0; i < kNJ * 4; ++i) acc[i] = 0.0f;

  tile_prologue<kAhead + 1>(s_begin, s_end, load_w, load_x);  // steps 0 .. kAhead - 1

  const int row0 = 64 * wgi + 16 * wq + g;  // and row0 + 8
  int row_shift[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    row_shift[h] = static_cast<int>(((n0 + row0 + 8 * h) * p.row_bytes) & 15);
  const uint32_t sel = byte_pair_selector(static_cast<uint32_t>(tq));

  // The two A register sets, alternating over every k16 of every step (8 a
  // step: step s's first set is the one step s - 1's first wgmma read).
  uint32_t a[2][4];
  for (int s = s_begin; s < s_end; ++s) {
    const int it = s - s_begin;
    cp_async_wait<kAhead - 1>();
    wg::fence_proxy_async();  // this thread's copies, visible to the tensor cores' reads
    // Step s is in; every thread has passed the wait_group 1 after step s -
    // 1's first wgmma, so every wgmma of step s - 2 is done: its stage, (it +
    // kAhead) % kStages, may be written.
    __syncthreads();
    {
      const int nx = s + kAhead;
      if (nx < s_end) {
        load_w(nx, (it + kAhead) % kStages);
        load_x(nx, (it + kAhead) % kStages);
      }
      cp_async_commit();
    }
    const uint8_t* base = smem + (it % kStages) * kStage;
    const uint8_t* xs = base + kRows * G::kWStride;
    const uint8_t* rp[2];
    RowScale sc[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rp[h] = base + (row0 + 8 * h) * G::kWStride + ((row_shift[h] + 8 * s) & 15);
      sc[h] = block_scale(rp[h]);
    }
#pragma unroll
    for (int ks = 0; ks < kGroup / 16; ++ks) {
      const int c = ks >> 1, kk = ks & 1;
      // The chunk's four code words of both rows (8-byte aligned pairs).
      uint32_t words[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 lo = *reinterpret_cast<const uint2*>(rp[h] + kCodesOffset + 16 * c);
        const uint2 hi = *reinterpret_cast<const uint2*>(rp[h] + kCodesOffset + 16 * c + 8);
        words[h][0] = lo.x;
        words[h][1] = lo.y;
        words[h][2] = hi.x;
        words[h][3] = hi.y;
      }
      a_fragments_natural(words, sc, kk, sel, a[ks & 1]);
      wg::fence();
      wg::mma_rs_bf16<kBT>(acc, a[ks & 1],
                           wg::descriptor(xs + wgmma_ks_offset(ks), kWgmmaLbo, kWgmmaSbo));
      wg::commit();
      wg::wait<1>();  // wgmma ks - 1 is done: its A registers may be written again
#pragma unroll
      for (int i = 0; i < 4; ++i) wg::fence_operand(a[(ks + 1) & 1][i]);
    }
  }
  wg::wait<0>();
#pragma unroll
  for (int i = 0; i < 4; ++i) wg::fence_operand(a[1][i]);  // the last wgmma's A set
  cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < kNJ * 4; ++i) wg::fence_operand(acc[i]);

  // acc[4 j + i]'s place in a tile's sums (lanes fastest), row and token.
  auto each_acc = [&](auto&& f) {
    each_fragment<1, kNJ>([&](int, int j, int i) {
      f(acc[4 * j + i], ((warp * kNJ + j) * 4 + i) * 32 + lane, n0 + row0 + 8 * (i >> 1),
        t0 + 8 * j + 2 * tq + (i & 1));
    });
  };
  finish_tile(p, int64_t{kRows} * kBT, true, &last_split, each_acc);
}

template <int kBT>
constexpr int default_stage_steps() {
  return kBT == 16 ? 2 : 1;
}

// The token tile of m tokens: the smallest that holds them (padding tokens
// cost mma work and split-k partial sums), kMax beyond (the mma.sync tile's
// largest is 64 tokens: more tokens take more token tiles, whose blocks read
// the same rows next to each other, from L2).
template <int kMax, typename Fn>
void dispatch_tokens(int64_t m, Fn&& fn) {
  if (m <= 16)
    fn(std::integral_constant<int, 16>{});
  else if (m <= 32)
    fn(std::integral_constant<int, 32>{});
  else if (m <= 64 || kMax == 64)
    fn(std::integral_constant<int, 64>{});
  else
    fn(std::integral_constant<int, kMax>{});
}

}  // namespace

Status u4_tile_init() {
  cudaError_t first = cudaSuccess;
  for (int64_t m : {16, 32, 64, 128}) {
    dispatch_tokens<64>(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      for (auto [kernel, smem] : {std::pair{u4_tile_kernel<kBT, 1, false>, smem_bytes<kBT, 1>()},
                                  std::pair{u4_tile_kernel<kBT, 2, false>, smem_bytes<kBT, 2>()},
                                  std::pair{u4_tile_kernel<kBT, 1, true>, smem_bytes<kBT, 1>()}}) {
        const cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (first == cudaSuccess) first = e;
      }
    });
    dispatch_tokens<128>(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      const cudaError_t e = cudaFuncSetAttribute(
          u4_wgmma_kernel<kBT>, cudaFuncAttributeMaxDynamicSharedMemorySize, wg_smem_bytes<kBT>());
      if (first == cudaSuccess) first = e;
    });
  }
  return first == cudaSuccess ? Status::ok() : cuda_error(first, "u4 tile: shared memory opt-in");
}

int64_t u4_tile_partial_floats(int num_sms) { return int64_t{4} * num_sms * kRows * 128; }

bool u4_tile_supported(DType x_dt, const void* x, DType w_dt, const void* w, int64_t k,
                       DType out_dt) {
  if (w_dt != DType::kU4G128 || x_dt != DType::kBF16 || !small_ok(out_dt)) return false;
  // k < 2^22: a 128-row tile's byte offsets fit an int (RowPieces).
  if (k <= 0 || k % kGroup != 0 || k >= (int64_t{1} << 22)) return false;
  return reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

Status launch_u4_tile(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m, int64_t k,
                      const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                      bool accumulate, const void* bias, DType bias_dt,
                      const QuantTileScratch& scratch, bool wgmma, int stage_steps,
                      U4Layout layout) {
  if (m == 0 || n == 0) return Status::ok();
  if (!u4_tile_supported(x_dt, x, w_dt, w, k, out_dt))
    return unsupported("u4 tile: unsupported format, types or alignment");
  if (bias && !small_ok(bias_dt)) return bad_dtype("u4 tile bias", bias_dt);
  const int steps = static_cast<int>(k / kGroup);
  const int64_t row_tiles = (n + kRows - 1) / kRows;
  if (row_tiles > 65535) return unsupported("u4 tile: too many weight rows");
  cudaError_t err = cudaSuccess;
  auto launch = [&](auto bt, auto kernel, int smem) {
    constexpr int kBT = decltype(bt)::value;
    dim3 grid;
    const TileParams p = tile_launch<kRows, kBT>(x, m, k, w, w_dt, n, out, out_dt, accumulate, bias,
                                                 bias_dt, steps, num_sms, scratch, &grid);
    err = launch_pdl_weights(kernel, grid, dim3(kThreads), smem, s, p);
  };
  if (layout == U4Layout::kTiles) {
    if (wgmma || stage_steps == 2)
      return unsupported("u4 tile: tiled weights take the mma.sync form, one k step a stage");
    dispatch_tokens<64>(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      launch(bt, u4_tile_kernel<kBT, 1, true>, smem_bytes<kBT, 1>());
    });
  } else if (wgmma) {
    dispatch_tokens<128>(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      launch(bt, u4_wgmma_kernel<kBT>, wg_smem_bytes<kBT>());
    });
  } else {
    dispatch_tokens<64>(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      if ((stage_steps == 0 ? default_stage_steps<kBT>() : stage_steps) == 2)
        launch(bt, u4_tile_kernel<kBT, 2, false>, smem_bytes<kBT, 2>());
      else
        launch(bt, u4_tile_kernel<kBT, 1, false>, smem_bytes<kBT, 1>());
    });
  }
  if (err != cudaSuccess) return cuda_error(err, "u4_tile launch");
  return check_launch("u4_tile");
}

}  // namespace ferrite::cuda
