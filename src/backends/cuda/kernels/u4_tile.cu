#include <cuda_bf16.h>

#include <type_traits>

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
// A row's step in shared memory: the five 16-byte pieces that cover its
// 72-byte block (which starts 0 or 8 bytes into a piece). 80 bytes apart,
// the 8 rows g of a fragment load start in 8 different 16-byte bank groups.
constexpr int kPieces = 5;
constexpr int kWStride = 16 * kPieces;
// A token's step: 256 bytes + 64, so that the two tokens of a 16-byte load
// phase (lanes 8i .. 8i + 7: tokens g, g + 1 x quads) fill all 32 banks.
constexpr int kXStride = 2 * kGroup + 64;
constexpr int kSmemBudget = 227 * 1024;

// The mma.sync tile's warps over its 128 rows x kBT tokens: kMT 16-row mma
// tiles a warp; 8 / (8 / kMT) warps share a row range and split the tokens.
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
template <int kBT>
constexpr int stage_bytes() {
  return kRows * kWStride + kBT * kXStride;
}
template <int kBT>
constexpr int num_stages() {
  constexpr int s = kSmemBudget / blocks_per_sm<kBT>() / stage_bytes<kBT>();
  return s < 2 ? 2 : (s > 4 ? 4 : s);
}
template <int kBT>
constexpr int smem_bytes() {
  return num_stages<kBT>() * stage_bytes<kBT>();
}

// The 16-byte pieces of a block's row blocks that one thread copies each
// step: piece i = tid + 256 j (i < 640) is row i / 5, piece i % 5 of the
// row's block (72 bytes from 0 or 8 bytes into its first piece: always five
// pieces). Where the pieces come from is worked out once, in one word a
// piece (registers are what the tile runs short of): its offset from the
// tile's first row, the row's start rounded down to 16 bytes (a tile's 128
// rows span less than 2^31 bytes: k < 2^22), plus 16 x the piece, with
// flags in the low bits: kSkip (not a row of the tensor), kShift (the row's
// first byte is 8 bytes into a piece; a row's blocks are 72 bytes apart, so
// step s starts 8 s bytes, mod 16, further in).
struct RowPieces {
  static constexpr int kPerThread = (kRows * kPieces + kThreads - 1) / kThreads;
  static constexpr int kSkip = 1, kShift = 8;
  const uint8_t* tile;
  int code[kPerThread];

  __device__ __forceinline__ RowPieces(const TileParams& p, int64_t n0)
      : tile(p.w + n0 * p.row_bytes) {  // 16-byte aligned: n0 % 128 == 0, row_bytes % 8 == 0
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = static_cast<int>(threadIdx.x) + kThreads * j;
      const int r = i / kPieces, piece = i - kPieces * r;
      const int off = static_cast<int>(r * p.row_bytes);
      code[j] = i < kRows * kPieces && n0 + r < p.n ? (off & ~15) + 16 * piece + (off & kShift)
                                                     : kSkip;
    }
  }
  // Step s's pieces into `base` (row r at r * kWStride). Rows past n are
  // left as they are: their sums are never stored.
  __device__ __forceinline__ void load(int s, uint8_t* base) const {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int c = code[j];
      if (c & kSkip) continue;
      const int i = static_cast<int>(threadIdx.x) + kThreads * j;
      cp_async16(base + 16 * i, tile + (c & ~15) + (((c & kShift) + kBlockBytes * s) & ~15), true);
    }
  }
};

// Step s's activations of tokens [t0, + kBT) (zeros past m): piece i (0 ..
// 16 kBT - 1) is token t = i / 16, elements 8 c .. + 7 (c = i % 16) of the
// step, copied to xs + at(t, c).
template <int kBT, typename At>
__device__ __forceinline__ void load_x_pieces(const TileParams& p, int64_t t0, int s, uint8_t* xs,
                                              At&& at) {
  const int tid = threadIdx.x, c = tid & 15;
#pragma unroll
  for (int j = 0; j < kBT / 16; ++j) {
    const int t = (tid >> 4) + 16 * j;
    const bool valid = t0 + t < p.m;
    const __nv_bfloat16* src =
        valid ? p.x + (t0 + t) * p.k + static_cast<int64_t>(s) * kGroup + 8 * c : p.x;
    cp_async16(xs + at(t, c), src, valid);
  }
}

// Tokens [kBT blockIdx.x, + kBT) x rows [128 blockIdx.y, + 128) over the k
// steps of split blockIdx.z. Per step each warp multiplies its rows' q - z
// (u4_tile_formats.h code_values) by the activations into f32 step sums,
// then adds d times them to its accumulators.
template <int kBT>
__global__ void __launch_bounds__(kThreads, blocks_per_sm<kBT>())
    u4_tile_kernel(const TileParams p) {
  using L = WarpLayout<kBT>;
  constexpr int kMT = L::kMT, kNJ = L::kNJ;
  constexpr int kStage = stage_bytes<kBT>();
  constexpr int kStages = num_stages<kBT>();
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int last_split;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int rw = warp % L::kRowWarps, tw = warp / L::kRowWarps;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBT;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kRows;
  int s_begin, s_end;
  split_steps(p, &s_begin, &s_end);

  const RowPieces pieces(p, n0);
  auto load_w = [&](int s, int st) { pieces.load(s, smem + st * kStage); };
  auto load_x = [&](int s, int st) {
    load_x_pieces<kBT>(p, t0, s, smem + st * kStage + kRows * kWStride,
                       [](int t, int c) { return t * kXStride + 16 * c; });
  };

  // acc[mt][j][i]: row 16 kMT rw + 16 mt + g + 8 (i / 2), token 8 kNJ tw +
  // 8 j + 2 tq + i % 2.
  float acc[kMT][kNJ][4];
  auto each = [&](auto&& f) { each_fragment<kMT, kNJ>(f); };
  each([&](int mt, int j, int i) { acc[mt][j][i] = 0.0f; });

  tile_prologue<kStages>(s_begin, s_end, load_w, load_x);

  // This lane's rows q = 2 mt + h: 16 kMT rw + 8 q + g; where each row's
  // bytes start within a piece (0 or 8) at step 0.
  int row_shift[2 * kMT];
#pragma unroll
  for (int q = 0; q < 2 * kMT; ++q)
    row_shift[q] = static_cast<int>(((n0 + 16 * kMT * rw + 8 * q + g) * p.row_bytes) & 15);
  const int x_lane = (8 * kNJ * tw + g) * kXStride + 16 * tq;

  for (int s = s_begin; s < s_end; ++s) {
    const int it = s - s_begin;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step s is in; every warp is done with stage (it - 1)
    {
      const int nx = s + kStages - 1;
      if (nx < s_end) {
        load_w(nx, (it + kStages - 1) % kStages);
        load_x(nx, (it + kStages - 1) % kStages);
      }
      cp_async_commit();  // one group an iteration (maybe empty)
    }
    const uint8_t* base = smem + (it % kStages) * kStage;
    const uint8_t* xs = base + kRows * kWStride + x_lane;
    const uint8_t* rp[2 * kMT];
    uint32_t zz[2 * kMT];
#pragma unroll
    for (int q = 0; q < 2 * kMT; ++q) {
      // 72 s = 8 s (mod 16): odd steps start 8 bytes further into a piece.
      rp[q] = base + (16 * kMT * rw + 8 * q + g) * kWStride + ((row_shift[q] + 8 * s) & 15);
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
          code_values(*reinterpret_cast<const uint32_t*>(rp[2 * mt + h] + kCodesOffset + 16 * c +
                                                         4 * tq),
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
        const uint4 xv = *reinterpret_cast<const uint4*>(xs + 8 * j * kXStride + 64 * c);
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const uint32_t b0 = kk ? xv.z : xv.x, b1 = kk ? xv.w : xv.y;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) mma16816<__nv_bfloat16>(part[mt][j], a[mt][kk], b0, b1);
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
// a k16 overlaps the previous wgmma (two A register sets, wait_group 1).

template <int kBT>
constexpr int wg_stage_bytes() {
  return kRows * kWStride + kBT * 2 * kGroup;
}
template <int kBT>
constexpr int wg_num_stages() {
  constexpr int s = kSmemBudget / wg_stage_bytes<kBT>();
  return s < 2 ? 2 : (s > 4 ? 4 : s);
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
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int last_split;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int wgi = warp >> 2, wq = warp & 3;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBT;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kRows;
  int s_begin, s_end;
  split_steps(p, &s_begin, &s_end);

  const RowPieces pieces(p, n0);
  auto load_w = [&](int s, int st) { pieces.load(s, smem + st * kStage); };
  // Each 8-element piece into its core-matrix row.
  auto load_x = [&](int s, int st) {
    load_x_pieces<kBT>(p, t0, s, smem + st * kStage + kRows * kWStride, wgmma_x_offset);
  };

  // acc[4 j + i]: row 64 wgi + 16 wq + g + 8 (i / 2), token 8 j + 2 tq + i % 2.
  float acc[kNJ * 4];
#pragma unroll
  for (int i = 0; i < kNJ * 4; ++i) acc[i] = 0.0f;

  tile_prologue<kStages>(s_begin, s_end, load_w, load_x);

  const int row0 = 64 * wgi + 16 * wq + g;  // and row0 + 8
  int row_shift[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    row_shift[h] = static_cast<int>(((n0 + row0 + 8 * h) * p.row_bytes) & 15);
  const uint32_t sel = byte_pair_selector(static_cast<uint32_t>(tq));

  for (int s = s_begin; s < s_end; ++s) {
    const int it = s - s_begin;
    cp_async_wait<kStages - 2>();
    wg::fence_proxy_async();  // this thread's copies, visible to the tensor cores' reads
    __syncthreads();          // step s is in; both warpgroups are done with stage (it - 1)
    {
      const int nx = s + kStages - 1;
      if (nx < s_end) {
        load_w(nx, (it + kStages - 1) % kStages);
        load_x(nx, (it + kStages - 1) % kStages);
      }
      cp_async_commit();
    }
    const uint8_t* base = smem + (it % kStages) * kStage;
    const uint8_t* xs = base + kRows * kWStride;
    const uint8_t* rp[2];
    RowScale sc[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rp[h] = base + (row0 + 8 * h) * kWStride + ((row_shift[h] + 8 * s) & 15);
      sc[h] = block_scale(rp[h]);
    }
    uint32_t a[2][4];
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
    wg::wait<0>();  // this stage's reads are done before the next barrier
#pragma unroll
    for (int i = 0; i < 4; ++i) wg::fence_operand(a[1][i]);  // the last wgmma's A set
  }
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
      const cudaError_t e = cudaFuncSetAttribute(
          u4_tile_kernel<kBT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<kBT>());
      if (first == cudaSuccess) first = e;
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
  if (k <= 0 || k % kGroup != 0) return false;
  return reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

Status launch_u4_tile(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m, int64_t k,
                      const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                      bool accumulate, const void* bias, DType bias_dt,
                      const QuantTileScratch& scratch, bool wgmma) {
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
  if (wgmma)
    dispatch_tokens<128>(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      launch(bt, u4_wgmma_kernel<kBT>, wg_smem_bytes<kBT>());
    });
  else
    dispatch_tokens<64>(m, [&](auto bt) {
      constexpr int kBT = decltype(bt)::value;
      launch(bt, u4_tile_kernel<kBT>, smem_bytes<kBT>());
    });
  if (err != cudaSuccess) return cuda_error(err, "u4_tile launch");
  return check_launch("u4_tile");
}

}  // namespace ferrite::cuda
