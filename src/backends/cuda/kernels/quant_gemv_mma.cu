// The fused decode GEMV (launch_quant_gemv_fused's contract, quant_gemv.cuh)
// on the tensor cores, for the 128-element block formats of Hugging Face
// checkpoints: f8_e4m3_b128 (FP8) and u4_g128 (GPTQ / AWQ / W4A16). It runs
// when QuantGemvArgs::mma is set and quant_gemv_mma_supported holds.
//
// Why: the other decode kernels multiply on the CUDA cores, one token at a
// time. For e4m3 codes that is a conversion and an f32 multiply-add per
// weight and token (no integer dot product exists for them): ~0.1 warp
// instructions a weight byte, so the FP8 GEMVs were issue-bound near 2 TB/s
// on the H200 and batch 8 cost 8 times batch 1. Here an m16n8k16 mma takes
// 16 weight rows x 16 k x all 8 token slots in one instruction: a lane
// converts its codes to f16 (one cvt per two e4m3 codes; two lop3 / hfma2 per
// two nibbles) and the weights are read once for up to 8 tokens at the same
// instruction count.
//
// Numerics: weight codes are exact in f16 (e4m3 -> f16 is exact; q - z is a
// small integer). Activations (normalised and rounded to the activation type
// as the rms_norm kernel stores them) are staged in f16 after a per-token
// power-of-two scale that puts the token's largest magnitude in [2^14, 2^15):
// bf16 values have 8 significant bits, so every one within 2^-28 of the
// token's largest is exact in f16. The mma sums each block's 128 products in
// f32; the block scale d multiplies that sum (f32), and the token's scale the
// total. Only the summation order differs from the reference's f32 products.
//
// Layout: one block of 8 warps per SM loops over tiles of 16 output rows
// (with swiglu: 16 columns, gate and up). The warps split k: warp w of a tile
// owns a fixed range of its row items (an item: 16 rows x 4 blocks, each row
// one bulk copy of 528 / 288 bytes), streamed through a ring of slots in
// shared memory on mbarriers, as the bulk-copy GEMV does (the first items
// are issued before the kernel waits for x: weights depend on no earlier
// kernel). A tile's warps add their partial sums in shared memory in warp
// order (deterministic); one __syncthreads per tile round, double-buffered.
//
// Lane (g = lane / 4, tq = lane % 4) holds rows g and g + 8 of a tile and, in
// its B fragment, token g's activations. Within each 64-element half block,
// mma step s (0..3) gives the lane's k slots codes that make its loads
// conflict-free and its conversions cheap (quant_gemv_mma_formats.h, checked
// on the CPU by tests/kernels/quant_gemv_mma_format_test.cc). The
// activations are staged in the same order, so a lane's 16 values of a half
// block are two 16-byte loads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/bulk_copy.cuh"
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/occupancy.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/quant_gemv.cuh"
#include "backends/cuda/kernels/quant_gemv_common.cuh"
#include "backends/cuda/kernels/quant_gemv_mma_formats.h"

namespace ferrite::cuda {
namespace {

using namespace qblocks;
using namespace gemv;

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kTileRows = 16;
constexpr int kItemBlocks = 4;  // 128-element blocks of a row per item
constexpr int kMaxSlots = 8;    // items in flight per warp, at most

static_assert(int{mmagemv::kF8} == int{kFmtF8B128} && int{mmagemv::kU4} == int{kFmtU4G128},
              "format codes");
using mmagemv::MmaFmt;

// Bytes of one row's item (a multiple of 16: one bulk copy).
template <int F>
constexpr int item_row_bytes() {
  return kItemBlocks * MmaFmt<F>::kBytes;
}

// Per-launch constants of the work split (host computed).
struct MmaShape {
  int wpt;     // warps a tile (each a range of the row's items)
  int subs;    // tiles a block takes at once (kWarps / wpt)
  int ipr;     // items a row
  int64_t tiles;
  int slots;   // ring slots a warp (a multiple of the row groups)
  int64_t xs_stride;  // staged activations: elements (A8: bytes) a token row
  uint32_t sx_off;    // A8: the group scales' offset from the staged rows (bytes)
};

// The staged activation rows' bytes, 128-aligned.
inline size_t xs_bytes(int64_t m, int64_t stride) {
  return (static_cast<size_t>(m * stride * 2) + 127) / 128 * 128;
}
// Cross-warp partial sums: two buffers x warps x row groups x 32 lanes x 4.
inline size_t red_bytes(int groups) {
  return static_cast<size_t>(2) * kWarps * groups * 32 * 4 * sizeof(float);
}
inline size_t bars_bytes(int slots) {
  return (static_cast<size_t>(kWarps) * slots * sizeof(uint64_t) + 127) / 128 * 128;
}

// The 8 elements of chunk c (8 consecutive elements, c a multiple of 8) of
// a staged row, in the format's staged order: 16-bit values (TX or f16) to
// and from their places (u4: one 16-byte run; f8: two 8-byte groups).
template <int F, typename T>
__device__ __forceinline__ void put8(T* row, int64_t c, const T (&v)[8]) {
  if constexpr (F == kFmtU4G128) {
    T o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[MmaFmt<F>::staged_pos(j)] = v[j];
    *reinterpret_cast<uint4*>(row + c) = *reinterpret_cast<const uint4*>(o);
  } else {
#pragma unroll
    for (int g = 0; g < 2; ++g)
      *reinterpret_cast<uint2*>(row + (c & ~int64_t{63}) +
                                MmaFmt<F>::staged_pos(static_cast<int>(c & 63) + 4 * g)) =
          *reinterpret_cast<const uint2*>(v + 4 * g);
  }
}
template <int F, typename T>
__device__ __forceinline__ void get8(const T* row, int64_t c, T (&v)[8]) {
  if constexpr (F == kFmtU4G128) {
    T o[8];
    *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(row + c);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = o[MmaFmt<F>::staged_pos(j)];
  } else {
#pragma unroll
    for (int g = 0; g < 2; ++g)
      *reinterpret_cast<uint2*>(v + 4 * g) = *reinterpret_cast<const uint2*>(
          row + (c & ~int64_t{63}) + MmaFmt<F>::staged_pos(static_cast<int>(c & 63) + 4 * g));
  }
}

// The norm's 1 / rms of each token from the threads' sums of squares ss:
// warp sums, then the warps' in warp order (deterministic), into inv (a
// __syncthreads after). red: kWarps x M floats of shared memory.
template <int M>
__device__ __forceinline__ void block_inv_rms(const float (&ss)[M], int64_t k, float eps,
                                              float (&red)[kWarps][M], float* inv) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int t = 0; t < M; ++t) {
    const float v = warp_sum(ss[t]);
    if (lane == 0) red[warp][t] = v;
  }
  __syncthreads();
  if (tid < M) {
    float tot = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) tot += red[w][tid];
    inv[tid] = rsqrtf(tot / static_cast<float>(k) + eps);
  }
  __syncthreads();
}

// x [m, k] into xs (f16, token rows of `stride` elements, each 64-run in the
// format's staged order) scaled by 2^-e_t per token, with tscale[t] = 2^e_t.
// One pass over x in global memory (it is read once, as TX, into its staged
// places, with the norm's sum of squares); the norm, the token's largest
// magnitude and the f16 conversion then work in place in shared memory,
// each thread on the chunks it wrote.
template <int F, typename TX, int M>
__device__ __forceinline__ void stage_x_f16(const TX* __restrict__ x, int m, int64_t k,
                                            const FusedParams& p, __half* xs, int64_t stride,
                                            float* tscale) {
  static_assert(sizeof(TX) == 2, "bf16 / f16 activations");
  __shared__ float red[kWarps][M];
  __shared__ float inv[M];
  __shared__ unsigned amax_bits[M];
  const int tid = threadIdx.x, lane = tid & 31;
  TX* xt = reinterpret_cast<TX*>(xs);  // the same places, first as TX
  if (tid < M) amax_bits[tid] = 0u;
  const int64_t chunks = k / 8;
  float ss[M], am[M];
#pragma unroll
  for (int t = 0; t < M; ++t) ss[t] = am[t] = 0.0f;
  for (int64_t ci = tid; ci < chunks; ci += kThreads) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if (t < m) {
        TX v[8];
        *reinterpret_cast<uint4*>(v) = __ldg(reinterpret_cast<const uint4*>(x + t * k + 8 * ci));
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float f = to_f(v[j]);
          ss[t] = fmaf(f, f, ss[t]);
          am[t] = fmaxf(am[t], fabsf(f));
        }
        put8<F>(xt + t * stride, 8 * ci, v);
      }
    }
  }
  if (p.norm) {
    block_inv_rms<M>(ss, k, p.eps, red, inv);
    // Normalised and rounded to TX (as the rms_norm kernel stores them), in place.
#pragma unroll
    for (int t = 0; t < M; ++t) am[t] = 0.0f;
    for (int64_t ci = tid; ci < chunks; ci += kThreads) {
      float w8[8];
      load8_any(p.norm, p.norm_dt, 8 * ci, w8);
#pragma unroll
      for (int t = 0; t < M; ++t) {
        if (t < m) {
          TX v[8];
          get8<F>(xt + t * stride, 8 * ci, v);
          const float s = inv[t];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            v[j] = from_f<TX>(to_f(v[j]) * s * (p.zero_centred ? 1.0f + w8[j] : w8[j]));
            am[t] = fmaxf(am[t], fabsf(to_f(v[j])));
          }
          put8<F>(xt + t * stride, 8 * ci, v);
        }
      }
    }
  }
  // Each token's largest magnitude (non-negative floats compare as integers).
#pragma unroll
  for (int t = 0; t < M; ++t) {
    float a = am[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if (lane == 0 && t < m && a > 0.0f) atomicMax(&amax_bits[t], __float_as_uint(a));
  }
  __syncthreads();
  if (tid < M) {
    // amax = f 2^E, f in [0.5, 1): scaled by 2^-(E - 15) it is below 2^15.
    int e = 0;
    const float a = __uint_as_float(amax_bits[tid]);
    if (a > 0.0f) (void)frexpf(a, &e);
    e = a > 0.0f ? min(max(e - 15, -100), 100) : 0;
    tscale[tid] = ldexpf(1.0f, e);
    inv[tid] = ldexpf(1.0f, -e);
  }
  __syncthreads();
  for (int64_t ci = tid; ci < chunks; ci += kThreads) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      if (t < m) {
        TX v[8];
        get8<F>(xt + t * stride, 8 * ci, v);
        const float sc = inv[t];
        __half h[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) h[j] = __float2half_rn(to_f(v[j]) * sc);
        put8<F>(xs + t * stride, 8 * ci, h);
      }
    }
  }
}

// A8 (f8_e4m3_b128 weights, QuantGemvArgs::mma_a8): x [m, k], normalised
// and rounded to TX as stage_x_f16 does, quantized to e4m3 per token and
// 128-element group as the FP8 checkpoints' recipe quantizes activations
// (dynamic, per token group): scale = amax / 448, code = e4m3(v / scale)
// (IEEE division, round to nearest even, saturating), codes in natural
// order into xq (token rows of `stride` bytes), scales into sx [m, k / 128].
// One group a half-warp (16 lanes x 8 values): the amax is a 16-lane
// shuffle reduction. x is read from global memory (L2) twice with a norm:
// once for the sum of squares, once for the values.
template <typename TX, int M>
__device__ __forceinline__ void stage_x_e4m3(const TX* __restrict__ x, int m, int64_t k,
                                             const FusedParams& p, uint8_t* xq, int64_t stride,
                                             float* sx) {
  static_assert(sizeof(TX) == 2, "bf16 / f16 activations");
  __shared__ float red[kWarps][M];
  __shared__ float inv[M];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (p.norm) {
    float ss[M];
#pragma unroll
    for (int t = 0; t < M; ++t) ss[t] = 0.0f;
    for (int64_t ci = tid; ci < k / 8; ci += kThreads) {
#pragma unroll
      for (int t = 0; t < M; ++t) {
        if (t < m) {
          TX v[8];
          *reinterpret_cast<uint4*>(v) = __ldg(reinterpret_cast<const uint4*>(x + t * k + 8 * ci));
#pragma unroll
          for (int j = 0; j < 8; ++j) ss[t] = fmaf(to_f(v[j]), to_f(v[j]), ss[t]);
        }
      }
    }
    block_inv_rms<M>(ss, k, p.eps, red, inv);
  }
  const int nb = static_cast<int>(k / 128);
  const int groups = m * nb;
  const int l16 = lane & 15;
  // Warp-uniform trip count (the shuffles take the whole warp).
  for (int base = 2 * warp; base < groups; base += 2 * kWarps) {
    const int gi = base + (lane >> 4);
    const bool valid = gi < groups;
    const int t = valid ? gi / nb : 0, grp = valid ? gi % nb : 0;
    const int64_t e0 = static_cast<int64_t>(grp) * 128 + 8 * l16;
    float f[8];
    float am = 0.0f;
    if (valid) {
      TX v[8];
      *reinterpret_cast<uint4*>(v) = __ldg(reinterpret_cast<const uint4*>(x + t * k + e0));
      float w8[8];
      if (p.norm) load8_any(p.norm, p.norm_dt, e0, w8);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        f[j] = p.norm ? to_f(from_f<TX>(to_f(v[j]) * inv[t] *
                                        (p.zero_centred ? 1.0f + w8[j] : w8[j])))
                      : to_f(v[j]);
        am = fmaxf(am, fabsf(f[j]));
      }
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    if (valid) {
      const float scale = am / 448.0f;
      uint32_t w[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t word = 0u;
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
          const float a = scale > 0.0f ? __fdiv_rn(f[4 * h + j], scale) : 0.0f;
          const float b = scale > 0.0f ? __fdiv_rn(f[4 * h + j + 1], scale) : 0.0f;
          const uint32_t two = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
          word |= two << (8 * j);
        }
        w[h] = word;
      }
      *reinterpret_cast<uint2*>(xq + t * stride + e0) = make_uint2(w[0], w[1]);
      if (l16 == 0) sx[t * nb + grp] = scale;
    }
  }
}

// R: row groups a tile (1, or 2 with swiglu: gate and up). A8: e4m3
// activations (stage_x_e4m3) and the e4m3 mma (f8_e4m3_b128 only).
template <int F, typename TX, typename TO, int M, int R, bool A8 = false>
__global__ void __launch_bounds__(kThreads, 1)
    quant_gemv_mma_kernel(const TX* __restrict__ x, int m, int64_t k, FusedParams p,
                          MmaShape sh, uint32_t xs_off, uint32_t red_off, uint32_t bars_off,
                          uint32_t ring_off) {
  using Fmt = MmaFmt<F>;
  constexpr int kRowBytes = item_row_bytes<F>();
  constexpr int kSlotBytes = kTileRows * kRowBytes;
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int nb = static_cast<int>(k / 128);
  const int slots = sh.slots;
  // This warp's tile slot within the block and range of row items.
  const int sub = warp / sh.wpt, part = warp % sh.wpt;
  const bool working = sub < sh.subs;
  const int it0 = working ? part * sh.ipr / sh.wpt : 0;
  const int it1 = working ? (part + 1) * sh.ipr / sh.wpt : 0;
  const int nit = it1 - it0;
  const int64_t tstride = static_cast<int64_t>(gridDim.x) * sh.subs;
  const int64_t tfirst = static_cast<int64_t>(blockIdx.x) * sh.subs;
  // Rounds of the block (uniform): every sub's tile of a round.
  const int64_t rounds = tfirst < sh.tiles ? (sh.tiles - tfirst + tstride - 1) / tstride : 0;
  const int64_t mytiles =
      working && tfirst + sub < sh.tiles ? (sh.tiles - tfirst - sub + tstride - 1) / tstride : 0;
  const int64_t items = mytiles * nit * R;

  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + bars_off) + warp * slots;
  unsigned char* ring = smem + ring_off + static_cast<size_t>(warp) * slots * kSlotBytes;

  // The issue cursor: item `issued` = tile ti of the warp, row item iit, row group irg.
  int64_t issued = 0, ti = 0;
  int iit = it0, irg = 0, islot = 0;
  uint64_t policy = 0;
  auto row_src = [&](int64_t tile, int rg, int r) -> const uint8_t* {
    const int64_t row = tile * kTileRows + r;
    if (p.swiglu) return (rg == 0 ? p.w[0] : p.w[1]) + (row < p.n[0] ? row : 0) * p.row_bytes;
    return locate(p, row).w;
  };
  auto issue = [&]() {  // the whole warp, uniformly
    const int64_t tile = tfirst + sub + ti * tstride;
    const int64_t off = static_cast<int64_t>(iit) * kRowBytes;
    const uint32_t len =
        static_cast<uint32_t>(p.row_bytes - off < kRowBytes ? p.row_bytes - off : kRowBytes);
    if (lane == 0) mbar_expect_tx(bars + islot, kTileRows * len);
    __syncwarp();
    if (lane < kTileRows)
      bulk_copy_g2s(ring + islot * kSlotBytes + lane * kRowBytes, row_src(tile, irg, lane) + off,
                    len, bars + islot, policy);
    ++issued;
    if (++islot == slots) islot = 0;
    if (++irg == R) {
      irg = 0;
      if (++iit == it1) {
        iit = it0;
        ++ti;
      }
    }
  };
  if (items > 0) {
    if (lane == 0) {
      for (int s = 0; s < slots; ++s) mbar_init(bars + s, 1);
      mbar_init_fence();
    }
    __syncwarp();
    if (lane < kTileRows) policy = l2_evict_first_policy();
    while (issued < items && issued < slots) issue();
  }
  prefetch_norm(p, k);
  pdl_wait();

  static_assert(!A8 || F == kFmtF8B128, "e4m3 activations with e4m3 weights");
  __half* xs = reinterpret_cast<__half*>(smem + xs_off);
  uint8_t* xq = smem + xs_off;  // A8: the codes
  float* sx = reinterpret_cast<float*>(smem + xs_off + sh.sx_off);
  float* red = reinterpret_cast<float*>(smem + red_off);
  __shared__ float tscale[M];
  if constexpr (A8) {
    stage_x_e4m3<TX, M>(x, m, k, p, xq, sh.xs_stride, sx);
    if (threadIdx.x < M) tscale[threadIdx.x] = 1.0f;
  } else {
    stage_x_f16<F, TX, M>(x, m, k, p, xs, sh.xs_stride, tscale);
  }
  __syncthreads();

  int cslot = 0;
  uint32_t phase = 0;
  const __half* xrow = xs + static_cast<int64_t>(g) * sh.xs_stride;
  const bool has_token = g < m;
  for (int64_t round = 0; round < rounds; ++round) {
    float acc[R][4];
#pragma unroll
    for (int rg = 0; rg < R; ++rg)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[rg][c] = 0.0f;
    if (round < mytiles) {
      for (int it = it0; it < it1; ++it) {
        const uint8_t* sl[R];
#pragma unroll
        for (int rg = 0; rg < R; ++rg) {
          const int s = cslot + rg < slots ? cslot + rg : cslot + rg - slots;
          mbar_wait(bars + s, s < cslot ? phase ^ 1u : phase);
          sl[rg] = ring + s * kSlotBytes;
        }
        const int nblk = min(kItemBlocks, nb - it * kItemBlocks);
        // One 128-element block j of the item: its 16 rows x all token slots
        // into acc. A whole item is unrolled, so that the blocks' loads and
        // conversions overlap the other blocks' mma chains (a warp is most of
        // an SM scheduler's work here: 8 warps an SM); the sums are the same,
        // in the same order, either way.
        auto block = [&](const int j) {
          const int64_t kc = (static_cast<int64_t>(it) * kItemBlocks + j) * 128;
          float ct[R][4];
#pragma unroll
          for (int rg = 0; rg < R; ++rg)
#pragma unroll
            for (int c = 0; c < 4; ++c) ct[rg][c] = 0.0f;
          if constexpr (A8) {
            // The e4m3 codes of weights and activations straight into the
            // mma's 8-bit fragments (natural order: rows 528 bytes apart fall
            // 4 banks apart, token rows k + 16 bytes apart as well).
            const uint8_t* xr = xq + static_cast<int64_t>(g) * sh.xs_stride + kc;
#pragma unroll
            for (int s = 0; s < 4; ++s) {
              const uint32_t b0 = has_token ? *reinterpret_cast<const uint32_t*>(xr + 32 * s + 4 * tq) : 0u;
              const uint32_t b1 =
                  has_token ? *reinterpret_cast<const uint32_t*>(xr + 32 * s + 16 + 4 * tq) : 0u;
#pragma unroll
              for (int rg = 0; rg < R; ++rg) {
                const uint8_t* r0 = sl[rg] + g * kRowBytes + j * Fmt::kBytes + 4 + 32 * s + 4 * tq;
                const uint8_t* r1 = r0 + 8 * kRowBytes;
                const uint32_t a[4] = {*reinterpret_cast<const uint32_t*>(r0),
                                       *reinterpret_cast<const uint32_t*>(r1),
                                       *reinterpret_cast<const uint32_t*>(r0 + 16),
                                       *reinterpret_cast<const uint32_t*>(r1 + 16)};
                mma16832_e4m3(ct[rg], a, b0, b1);
              }
            }
          } else {
            typename Fmt::Row rc[R][2];
#pragma unroll
            for (int rg = 0; rg < R; ++rg) {
              rc[rg][0] = Fmt::row_consts(sl[rg] + g * kRowBytes + j * Fmt::kBytes);
              rc[rg][1] = Fmt::row_consts(sl[rg] + (g + 8) * kRowBytes + j * Fmt::kBytes);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              uint32_t b[8];
              if (has_token) {
                const uint4 u0 = *reinterpret_cast<const uint4*>(xrow + kc + 64 * h + 16 * tq);
                const uint4 u1 = *reinterpret_cast<const uint4*>(xrow + kc + 64 * h + 16 * tq + 8);
                b[0] = u0.x, b[1] = u0.y, b[2] = u0.z, b[3] = u0.w;
                b[4] = u1.x, b[5] = u1.y, b[6] = u1.z, b[7] = u1.w;
              } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) b[i] = 0u;
              }
#pragma unroll
              for (int rg = 0; rg < R; ++rg) {
                uint32_t w0[4], w1[4], lo0[4], hi0[4], lo1[4], hi1[4];
                Fmt::words(sl[rg] + g * kRowBytes + j * Fmt::kBytes, h, tq, w0);
                Fmt::words(sl[rg] + (g + 8) * kRowBytes + j * Fmt::kBytes, h, tq, w1);
                Fmt::decode(w0, rc[rg][0], lo0, hi0);
                Fmt::decode(w1, rc[rg][1], lo1, hi1);
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                  const uint32_t a[4] = {lo0[s], lo1[s], hi0[s], hi1[s]};
                  mma16816<__half>(ct[rg], a, b[2 * s], b[2 * s + 1]);
                }
              }
            }
          }
#pragma unroll
          for (int rg = 0; rg < R; ++rg) {
            const float d0 = *reinterpret_cast<const float*>(sl[rg] + g * kRowBytes + j * Fmt::kBytes);
            const float d1 =
                *reinterpret_cast<const float*>(sl[rg] + (g + 8) * kRowBytes + j * Fmt::kBytes);
            if constexpr (A8) {
              // C columns 2 tq, 2 tq + 1 are tokens: their groups' scales.
              const int blk = static_cast<int>(kc / 128);
              const float s0 = 2 * tq < m ? sx[2 * tq * nb + blk] : 0.0f;
              const float s1 = 2 * tq + 1 < m ? sx[(2 * tq + 1) * nb + blk] : 0.0f;
              acc[rg][0] = fmaf(d0 * s0, ct[rg][0], acc[rg][0]);
              acc[rg][1] = fmaf(d0 * s1, ct[rg][1], acc[rg][1]);
              acc[rg][2] = fmaf(d1 * s0, ct[rg][2], acc[rg][2]);
              acc[rg][3] = fmaf(d1 * s1, ct[rg][3], acc[rg][3]);
            } else {
              acc[rg][0] = fmaf(d0, ct[rg][0], acc[rg][0]);
              acc[rg][1] = fmaf(d0, ct[rg][1], acc[rg][1]);
              acc[rg][2] = fmaf(d1, ct[rg][2], acc[rg][2]);
              acc[rg][3] = fmaf(d1, ct[rg][3], acc[rg][3]);
            }
          }
        };
        if (nblk == kItemBlocks) {
#pragma unroll
          for (int j = 0; j < kItemBlocks; ++j) block(j);
        } else {
          for (int j = 0; j < nblk; ++j) block(j);
        }
        // Every lane has read the R slots: refill them with the items `slots` on.
        __syncwarp();
        fence_proxy_async_shared();
#pragma unroll
        for (int rg = 0; rg < R; ++rg) {
          if (issued < items) issue();
          if (++cslot == slots) {
            cslot = 0;
            phase ^= 1u;
          }
        }
      }
    }
    // The tile's warps add up in warp order; one buffer a round, alternating.
    float* rb = red + static_cast<size_t>(round & 1) * kWarps * R * 128;
    if (working) {
#pragma unroll
      for (int rg = 0; rg < R; ++rg)
        *reinterpret_cast<float4*>(rb + ((warp * R + rg) * 32 + lane) * 4) =
            make_float4(acc[rg][0], acc[rg][1], acc[rg][2], acc[rg][3]);
    }
    __syncthreads();
    // Outputs of the round: subs x 16 rows x m tokens.
    const int outs = sh.subs * kTileRows * m;
    for (int o = threadIdx.x; o < outs; o += kThreads) {
      const int su = o / (kTileRows * m), rem = o % (kTileRows * m);
      const int r = rem / m, t = rem % m;
      const int64_t ot = tfirst + su + round * tstride;
      if (ot >= sh.tiles) continue;
      // (row r, token t) in the C fragment: lane 4 (r % 8) + t / 2, entry 2 (r / 8) + t % 2.
      const int ln = 4 * (r & 7) + (t >> 1), en = 2 * (r >> 3) + (t & 1);
      float s[R];
#pragma unroll
      for (int rg = 0; rg < R; ++rg) {
        float v = 0.0f;
        for (int w = su * sh.wpt; w < (su + 1) * sh.wpt; ++w)
          v += rb[((w * R + rg) * 32 + ln) * 4 + en];
        s[rg] = v * tscale[t];
      }
      const int64_t row = ot * kTileRows + r;
      if constexpr (R == 2) {
        if (row >= p.n[0]) continue;
        // Each product rounded to TX, as the unfused path stores it.
        const float gt = to_f(from_f<TX>(s[0])), up = to_f(from_f<TX>(s[1]));
        static_cast<TO*>(p.out[0])[t * p.n[0] + row] = from_f<TO>(gt / (1.0f + expf(-gt)) * up);
      } else {
        const RowRef rr = locate(p, row);
        if (!rr.active) continue;
        TO* dst = static_cast<TO*>(rr.out) + t * rr.n + rr.col;
        float v = s[0] + (p.bias ? load_any(p.bias, p.bias_dt, rr.col) : 0.0f);
        if (p.accumulate) v += to_f(*dst);
        *dst = from_f<TO>(v);
      }
    }
  }
}

struct Plan {
  MmaShape sh{};
  int grid = 0;
  uint32_t xs_off = 0, red_off = 0, bars_off = 0, ring_off = 0;
  size_t smem = 0;
  bool ok = false;
};

int row_bytes_of(int f) {
  return f == kFmtF8B128 ? item_row_bytes<kFmtF8B128>() : item_row_bytes<kFmtU4G128>();
}

Plan plan_of(const QuantGemvArgs& a) {
  Plan pl;
  const int f = qfmt(a.w_dt);
  const FusedParams p = fused_params(a);
  const int R = a.swiglu ? 2 : 1;
  MmaShape& sh = pl.sh;
  const int item = row_bytes_of(f);
  sh.ipr = static_cast<int>((p.row_bytes + item - 1) / item);
  sh.wpt = std::min(kWarps, sh.ipr);
  sh.subs = kWarps / sh.wpt;
  sh.tiles = (p.total + kTileRows - 1) / kTileRows;
  // 16 bytes of padding: token rows 4 banks apart (A8: rows of byte codes,
  // then the groups' f32 scales).
  const bool a8 = a.mma_a8 && f == kFmtF8B128;
  sh.xs_stride = a8 ? a.k + 16 : a.k + 8;
  const size_t codes_bytes = (static_cast<size_t>(a.m * sh.xs_stride) + 127) / 128 * 128;
  sh.sx_off = a8 ? static_cast<uint32_t>(codes_bytes) : 0u;
  const size_t staged = a8 ? codes_bytes + (static_cast<size_t>(a.m * (a.k / 128)) * 4 + 127) / 128 * 128
                           : xs_bytes(a.m, sh.xs_stride);
  pl.grid = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(num_sms(), (sh.tiles + sh.subs - 1) / sh.subs)));
  // Shared memory: staged x, the partial sums, then the barriers and the rings.
  pl.xs_off = 0;
  pl.red_off = static_cast<uint32_t>(staged);
  const size_t fixed = pl.red_off + red_bytes(R);
  const size_t slot = static_cast<size_t>(kTileRows) * item;
  // The runtime's 1 KiB a block and the kernel's static shared memory (the
  // staging's reductions, tscale): 2 KiB off the opt-in limit.
  const size_t full = static_cast<size_t>(std::max(0, max_dynamic_smem() - 2048));
  const size_t least = fixed + bars_bytes(R) + kWarps * R * slot;
  if (full < least) return pl;
  // A smaller budget (QuantGemvArgs::mma_smem_kib) where the plan fits it:
  // a block of the next launch can then be resident beside this one.
  size_t cap = full;
  if (a.mma_smem_kib > 0 && static_cast<size_t>(a.mma_smem_kib) * 1024 >= least)
    cap = std::min(full, static_cast<size_t>(a.mma_smem_kib) * 1024);
  // Slots: as many as fit (whole row-group sets), up to kMaxSlots and what a
  // warp has to read.
  const int64_t per_warp_items =
      ((sh.tiles + int64_t{pl.grid} * sh.subs - 1) / (int64_t{pl.grid} * sh.subs)) *
      ((sh.ipr + sh.wpt - 1) / sh.wpt) * R;
  int s = R;
  while (s + R <= kMaxSlots && s + R <= std::max<int64_t>(R, per_warp_items) &&
         fixed + bars_bytes(s + R) + kWarps * (s + R) * slot <= cap)
    s += R;
  sh.slots = s;
  pl.bars_off = static_cast<uint32_t>(fixed);
  pl.ring_off = static_cast<uint32_t>(fixed + bars_bytes(s));
  pl.smem = pl.ring_off + static_cast<size_t>(kWarps) * s * slot;
  pl.ok = true;
  return pl;
}

// One kernel instantiation's launch; its shared-memory opt-in once (a
// static per instantiation: kernels of one signature differ in F and R).
template <int F, typename TX, typename TO, int M, int R, bool A8 = false>
cudaError_t launch_kernel(const Plan& pl, cudaStream_t s, const TX* x, int m, int64_t k,
                          const FusedParams& p) {
  auto kern = quant_gemv_mma_kernel<F, TX, TO, M, R, A8>;
  // The whole carveout as shared memory: with a smaller plan
  // (mma_smem_kib) a block of the next launch then fits beside this one's.
  static const cudaError_t opted = [&] {
    const cudaError_t e = cudaFuncSetAttribute(
        kern, cudaFuncAttributeMaxDynamicSharedMemorySize, max_dynamic_smem() - 2048);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared);
  }();
  if (opted != cudaSuccess) return opted;
  return launch_pdl_weights(kern, pl.grid, kThreads, pl.smem, s, x, m, k, p, pl.sh, pl.xs_off,
                            pl.red_off, pl.bars_off, pl.ring_off);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The kernel's conditions but for the shared-memory plan.
bool mma_args_ok(const QuantGemvArgs& a) {
  if (a.w_dt != DType::kF8B128 && a.w_dt != DType::kU4G128) return false;
  if (a.x_dt != DType::kBF16 && a.x_dt != DType::kF16) return false;
  if (!quant_gemv_fused_args_ok(a)) return false;  // its own shared-memory plan below
  // Whole rows are bulk copies of 16-byte multiples: k of 512 (f8) or 256
  // (u4) elements; rows and weights 16-byte aligned.
  if (a.k % (a.w_dt == DType::kF8B128 ? 512 : 256) != 0) return false;
  if (dtype_bytes(a.w_dt, a.k) % 16 != 0) return false;
  for (int i = 0; i < a.count; ++i)
    if (!aligned16(a.segs[i].w)) return false;
  return true;
}

}  // namespace

bool quant_gemv_mma_supported(const QuantGemvArgs& a) { return mma_args_ok(a) && plan_of(a).ok; }

Status launch_quant_gemv_mma(cudaStream_t s, const QuantGemvArgs& a) {
  const Plan pl = mma_args_ok(a) ? plan_of(a) : Plan{};
  if (!pl.ok) return unsupported("quant gemv (mma): unsupported shape, format, types or alignment");
  const FusedParams p = fused_params(a);
  if (p.total == 0) return Status::ok();
  const int mi = static_cast<int>(a.m);
  cudaError_t err = cudaSuccess;
  const bool ok = dispatch_gemv(a, [&](auto fc, auto tx, auto to, auto mc) {
    constexpr int F = decltype(fc)::value;
    using TX = decltype(tx);
    using TO = decltype(to);
    constexpr int M = decltype(mc)::value;
    if constexpr ((F == kFmtF8B128 || F == kFmtU4G128) && !std::is_same_v<TX, float>) {
      const TX* x = static_cast<const TX*>(a.x);
      if constexpr (F == kFmtF8B128) {
        if (a.mma_a8) {
          err = a.swiglu ? launch_kernel<F, TX, TO, M, 2, true>(pl, s, x, mi, a.k, p)
                         : launch_kernel<F, TX, TO, M, 1, true>(pl, s, x, mi, a.k, p);
          return;
        }
      }
      err = a.swiglu ? launch_kernel<F, TX, TO, M, 2>(pl, s, x, mi, a.k, p)
                     : launch_kernel<F, TX, TO, M, 1>(pl, s, x, mi, a.k, p);
    }
  });
  if (!ok) return bad_dtype("quant gemv (mma)", a.w_dt);
  if (err != cudaSuccess) return cuda_error(err, "quant gemv (mma) launch");
  return check_launch("quant_gemv_mma");
}

}  // namespace ferrite::cuda
