// Tensor-core flash attention for prompt tokens over the paged KV cache
// (bf16 / f16, head_dim 64, 128 or 256), FlashAttention-2 style on
// mma.sync.m16n8k16 (f32 accumulate).
//
// One block of 4 warps per (query head, query tile of kPrefillTileQ = 64
// consecutive rows of one sequence); warp w owns query rows 16w .. 16w+15.
// Per key tile (64 keys; 32 at head_dim 256):
//   S = Q K^T        mma.sync, S stays in registers (accumulator fragments);
//   online softmax   in f32, in the log2 domain (exp2f, scale * log2(e)
//                    folded into one FMA), P rounded to the activation type;
//   O = alpha O + P V  P taken straight from the S registers as the A
//                    operand (see "fragment layouts"), O in registers.
// K/V tiles are gathered row by row from the paged cache (a tile may span
// several pages) with 16-byte cp.async into a double buffer: the next tile
// loads while the current one is computed. Shared memory rows are XOR-
// swizzled in 16-byte chunks so that ldmatrix (8 rows x 16 bytes per 8x8
// matrix) and the cp.async stores hit 8 distinct bank groups.
//
// Causality: key tiles stop at the tile's last query position; a warp skips
// the key tiles that lie wholly after its last row, and masks only the tiles
// that cross its rows' diagonal. Blocks run heaviest (latest) query tiles
// first. Rows past the tile's valid count are computed on zero-filled data
// and not written.
#include <atomic>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/attention_prefill.cuh"
#include "backends/cuda/kernels/mma.cuh"

namespace ferrite::cuda {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kBq = kPrefillTileQ;
static_assert(kBq == 16 * kWarps, "one 16-row mma tile per warp");

// Per head_dim: key tile, and whether Q fragments live in registers for the
// whole block (64 / 128) or are re-read from shared memory per key tile
// (256: O alone takes 128 registers per thread there). kOcc (head_dim 128,
// Tuning::cuda_prefill_short_tiles): 32-key tiles and Q re-read from shared
// memory, 168 registers (ptxas, sm_90a), so that 3 blocks (12 warps) fit on
// an SM instead of 2: the kernel is latency-bound at 2 warps a scheduler
// (ncu, docs/perf-log.md session 19).
template <int HD, bool kOcc = false>
struct Cfg {
  static constexpr int kBk = HD == 256 || kOcc ? 32 : 64;
  static constexpr bool kQInRegs = HD <= 128 && !kOcc;
  static constexpr int kTile = kBk * HD;  // elements of one K (or V) tile
  // Blocks per SM the register allocation must allow (ptxas -v, sm_90a):
  // 64: 155 registers, 3 blocks (12 warps); 128: 219, 2; 256: 255, 2;
  // 128 with kOcc: 168, 3 (shared memory per block 32 / 64 / 96 / 48 KiB).
  // Asking 3 at 128 with 64-key tiles and Q in registers spills.
  static constexpr int kMinBlocks = HD == 64 || kOcc ? 3 : 2;
  // Double-buffered K and V; with Q in registers, Q is staged in the second
  // buffer's K slot before the first key tile goes there.
  static constexpr size_t kSmem =
      sizeof(uint16_t) * (4 * kTile + (kQInRegs ? 0 : kBq * HD));
  static_assert(!kQInRegs || kBq * HD <= kTile, "Q fits in one K tile slot");
};

// Offset of element (r, c) (c a multiple of 8) in a [rows][HD] tile whose
// 16-byte chunks are XOR-swizzled by the row's low 3 bits: the 8 rows an
// 8x8 ldmatrix reads (same logical chunk) land in 8 distinct 16-byte bank
// groups. Needs HD / 8 >= 8 chunks per row (HD >= 64).
template <int HD>
__device__ __forceinline__ int swz(int r, int c) {
  return r * HD + (((c >> 3) ^ (r & 7)) << 3);
}
// The same in bytes for the ldmatrix address of a lane: row lrow (+ a
// multiple of 8 rows), chunk 2 * step + b (b < 2). As (2s + b) ^ r =
// 2s ^ (b ^ r) for r < 8, the step XORs in as s * 32 bytes on a per-lane
// constant (the chunk field of a row, HD * 2 bytes, holds s * 32 for s <
// HD / 16): address = base + row0 bytes + (lane_off ^ (s * 32)), one LOP per
// step instead of one hoisted register per (row block, step).
template <int HD>
__device__ __forceinline__ uint32_t lane_off(int lrow, int b) {
  return static_cast<uint32_t>(lrow * HD * 2 + ((b ^ (lrow & 7)) << 4));
}

// Two floats rounded to T, lo in the low half (the lower column index, as
// ldmatrix / the mma fragments order a pair).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Fragment layouts of mma.m16n8k16 (lane l: g = l >> 2, t = l & 3; each
// 32-bit register holds two consecutive-column elements, lower column low):
//   A (16x16, row major) a0: (g,   2t..2t+1)   a1: (g+8, 2t..2t+1)
//                        a2: (g,   2t+8..+9)   a3: (g+8, 2t+8..+9)
//   B (16x8, k x n)      b0: (k = 2t..2t+1, n = g)  b1: (k = 2t+8..+9, n = g)
//   C (16x8, f32)        c0,c1: (g, 2t..2t+1)   c2,c3: (g+8, 2t..2t+1)
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i, and
// register i of every lane receives matrix i as (row g, cols 2t..2t+1)
// (.trans: (rows 2t..2t+1, col g)).
//  - Q (A, row major [row][d]): matrices (rows 0-7, d 0-7), (rows 8-15, d 0-7),
//    (rows 0-7, d 8-15), (rows 8-15, d 8-15) = a0..a3: lane l addresses row
//    l & 15, column 8 * (l >> 4).
//  - K (B of S = Q K^T: B[k=d][n=key] = K[key][d], i.e. [n][k] row major, no
//    transpose): b0 of key block n0 is the matrix (keys n0..n0+7, d k0..k0+7)
//    read as (row g = key, cols 2t = d). x4 = (n0, k0), (n0, k0+8),
//    (n0+8, k0), (n0+8, k0+8) = b0,b1 of keys n0.., b0,b1 of keys n0+8..:
//    lane l addresses key n0 + (l & 7) + 8 * (l >> 4), d k0 + 8 * ((l >> 3) & 1).
//  - V (B of O = P V: B[k=key][n=d] = V[key][d], [k][n] row major, so
//    .trans): b0 of d block d0 is (keys k0..k0+7, d d0..d0+7) transposed,
//    giving (keys 2t..2t+1, d g). x4 = (k0, d0), (k0+8, d0), (k0, d0+8),
//    (k0+8, d0+8) = b0,b1 of d0.., b0,b1 of d0+8..: lane l addresses key
//    k0 + (l & 7) + 8 * ((l >> 3) & 1), d d0 + 8 * (l >> 4).
//  - P (A of O = P V over keys 16c..16c+15): the S accumulators of key blocks
//    2c and 2c+1 hold (g, 2t..), (g+8, 2t..) of each, which is exactly
//    a0 = S[2c].c0c1, a1 = S[2c].c2c3, a2 = S[2c+1].c0c1, a3 = S[2c+1].c2c3.
template <typename T, int HD, bool kOcc = false>
__global__ void __launch_bounds__(kThreads, Cfg<HD, kOcc>::kMinBlocks)
    prefill_kernel(AttentionShape a, StepMeta meta, int32_t page_size, int32_t page_shift,
                   const int32_t* tile_seq,
                   const int32_t* tile_row, int64_t tokens, const T* __restrict__ q,
                   const T* __restrict__ k_cache, const T* __restrict__ v_cache, T* out) {
  using C = Cfg<HD, kOcc>;
  constexpr int kBk = C::kBk, kTile = C::kTile;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  constexpr int kKc = HD / 16;     // k16 steps of Q K^T
  constexpr int kNs = kBk / 8;     // n8 blocks of S
  constexpr int kNo = HD / 8;      // n8 blocks of O
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const kv_s = reinterpret_cast<T*>(smem_raw);  // stage s: K at 2s*kTile, V at (2s+1)*kTile
  T* const q_s = C::kQInRegs ? kv_s + 2 * kTile : kv_s + 4 * kTile;

  // Heaviest (latest) query tiles first: causal work grows with the tile.
  // Heads vary fastest, so the heads of one KV group run side by side.
  const int tile = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x;
  const int kvh = h / (a.num_heads / a.num_kv_heads);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, t4 = lane & 3;
  const int32_t seq = tile_seq[tile];
  const int64_t r0 = tile_row[tile];
  const bool row_ok = tid < kBq && r0 + tid < tokens && meta.token_seq[r0 + tid] == seq;
  const int nvalid = __syncthreads_count(row_ok);
  if (nvalid == 0) return;  // block-uniform
  // Rows of a tile are consecutive prompt positions of one sequence.
  const int32_t qpos0 = meta.token_pos[r0];
  const int32_t qmax = qpos0 + nvalid - 1;
  const int32_t* table = meta.block_tables + meta.seq_block_off[seq];
  const int kv_tiles = qmax / kBk + 1;
  const T* q_tile = q + r0 * a.q_row + static_cast<int64_t>(h) * a.q_stride;

  // Q tile -> shared (rows past nvalid zero).
  for (int idx = tid; idx < kBq * kChunks; idx += kThreads) {
    const int i = idx / kChunks, c = (idx % kChunks) * 8;
    const bool ok = i < nvalid;
    cp_async16(q_s + swz<HD>(i, c), ok ? q_tile + i * static_cast<int64_t>(a.q_row) + c : q_tile,
               ok);
  }
  cp_async_commit();

  // K/V tile kt -> stage: row j is position kt*kBk + j, found through the
  // block table (pages of any size); positions past qmax are zero-filled
  // (never attended by a written row, and 0 * V stays finite). A thread
  // copies the same 16-byte chunk c_ld of rows j_ld + kRowsPerPass * it,
  // and a power-of-two page size (the engine's 16; page_shift is its log2,
  // else -1) takes a shift and a mask instead of a division and a modulo
  // per row, which were most of a key tile's integer work (by reading the
  // code; not measured apart). At head_dim 256 (255 registers) the hoisted
  // terms would spill: there each row's offset is computed whole.
  constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0, "a thread keeps its chunk across passes");
  const int c_ld = (tid % kChunks) * 8, j_ld = tid / kChunks;
  auto load_kv = [&](int kt, int stage) {
    T* ks = kv_s + 2 * stage * kTile;
    T* vs = ks + kTile;
#pragma unroll
    for (int it = 0; it < kBk * kChunks / kThreads; ++it) {
      if constexpr (HD == 256) {
        const int idx = tid + it * kThreads;
        const int j = idx / kChunks, c = (idx % kChunks) * 8;
        const int pos = kt * kBk + j;
        const bool ok = pos <= qmax;
        int64_t off = 0;
        if (ok)
          off = ((static_cast<int64_t>(table[pos / page_size]) * page_size + pos % page_size) *
                     a.num_kv_heads + kvh) * HD + c;
        cp_async16(ks + swz<HD>(j, c), k_cache + off, ok);
        cp_async16(vs + swz<HD>(j, c), v_cache + off, ok);
      } else {
        const int j = j_ld + it * kRowsPerPass;
        const int pos = kt * kBk + j;
        const bool ok = pos <= qmax;
        int64_t off = 0;
        if (ok) {
          int page, in_page;
          if (page_shift >= 0) {
            page = pos >> page_shift;
            in_page = pos & (page_size - 1);
          } else {
            page = pos / page_size;
            in_page = pos - page * page_size;
          }
          off = ((static_cast<int64_t>(table[page]) * page_size + in_page) * a.num_kv_heads +
                 kvh) * HD + c_ld;
        }
        cp_async16(ks + swz<HD>(j, c_ld), k_cache + off, ok);
        cp_async16(vs + swz<HD>(j, c_ld), v_cache + off, ok);
      }
    }
  };
  static_assert(kBk * kChunks % kThreads == 0, "whole K/V tile per pass");
  load_kv(0, 0);
  cp_async_commit();

  cp_async_wait<1>();  // Q landed (tile 0 may be in flight)
  __syncthreads();
  const int wrow0 = warp * 16;  // this warp's first row in the tile
  // ldmatrix lane offsets (see the fragment layouts above): Q rows l & 15,
  // chunk l >> 4; K rows (l & 7) + 8 (l >> 4), chunk (l >> 3) & 1; V rows
  // (l & 7) + 8 ((l >> 3) & 1), chunk l >> 4.
  const uint32_t q_addr = smem_addr(q_s) + wrow0 * HD * 2;
  const uint32_t q_off = lane_off<HD>(lane & 15, lane >> 4);
  const uint32_t k_off = lane_off<HD>((lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1);
  const uint32_t v_off = lane_off<HD>((lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4);
  uint32_t qf[C::kQInRegs ? kKc : 1][4];
  if constexpr (C::kQInRegs) {
#pragma unroll
    for (int kc = 0; kc < kKc; ++kc)
      ldmatrix_x4(qf[kc], q_addr + (q_off ^ (kc * 32)));
  }
  // (The first loop barrier orders these reads before tile 1 overwrites q_s.)

  // Positions: this warp's rows wpos_lo..wpos_hi (valid rows only), this
  // lane's two rows g and g+8 (C fragment rows).
  const bool warp_active = wrow0 < nvalid;
  const int32_t wpos_lo = qpos0 + wrow0;
  const int32_t wpos_hi = qpos0 + min(wrow0 + 15, nvalid - 1);
  const int32_t pos_a = qpos0 + wrow0 + g, pos_b = pos_a + 8;
  const float sl2 = a.scale * 1.4426950408889634f;  // exp(x * scale) = exp2(x * sl2)

  float o[kNo][4];
#pragma unroll
  for (int n = 0; n < kNo; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  // Running max (raw score units) and per-lane partial sums of rows g, g+8.
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  for (int kt = 0; kt < kv_tiles; ++kt) {
    __syncthreads();  // every warp is done with the stage tile kt+1 goes to
    if (kt + 1 < kv_tiles) {
      load_kv(kt + 1, (kt + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile kt visible to every warp
    const int kv0 = kt * kBk;
    if (!warp_active || kv0 > wpos_hi) continue;  // wholly after this warp's rows
    const uint32_t k_addr = smem_addr(kv_s) + (kt & 1) * 4 * kTile;  // bytes: 2 tiles of 2-byte T
    const uint32_t v_addr = k_addr + 2 * kTile;

    // S = Q K^T (16 x kBk per warp).
    float s[kNs][4];
#pragma unroll
    for (int n = 0; n < kNs; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < kKc; ++kc) {
      uint32_t af[4];
      if constexpr (C::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) af[e] = qf[kc][e];
      } else {
        ldmatrix_x4(af, q_addr + (q_off ^ (kc * 32)));
      }
#pragma unroll
      for (int nb = 0; nb < kNs / 2; ++nb) {
        uint32_t bf[4];
        ldmatrix_x4(bf, k_addr + nb * 16 * HD * 2 + (k_off ^ (kc * 32)));
        mma16816<T>(s[2 * nb], af, bf[0], bf[1]);
        mma16816<T>(s[2 * nb + 1], af, bf[2], bf[3]);
      }
    }

    // Causal mask, only where the tile crosses the diagonal of this warp's
    // rows: s[n][e] is key kv0 + 8n + 2*t4 + (e & 1) of row g (e < 2) or
    // g+8 (e >= 2).
    if (kv0 + kBk - 1 > wpos_lo) {
      const int lim_a = pos_a - kv0 - 2 * t4, lim_b = pos_b - kv0 - 2 * t4;
#pragma unroll
      for (int n = 0; n < kNs; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (8 * n + (e & 1) > (e < 2 ? lim_a : lim_b)) s[n][e] = -INFINITY;
    }
    // Online softmax. Row max over the lane's columns, then over the 4 lanes
    // of the quad (lanes 4g..4g+3 share rows g, g+8).
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int n = 0; n < kNs; ++n) {
      mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    // A row with every key so far masked keeps max -inf: subtract 0 instead
    // (its p are exp2(-inf) = 0, alpha = 0), never -inf - -inf.
    const float mu_a = mx_a == -INFINITY ? 0.0f : mx_a * sl2;
    const float mu_b = mx_b == -INFINITY ? 0.0f : mx_b * sl2;
    const float alpha_a = exp2f(m_a * sl2 - mu_a), alpha_b = exp2f(m_b * sl2 - mu_b);
    m_a = mx_a;
    m_b = mx_b;
    l_a *= alpha_a;
    l_b *= alpha_b;
    // O's rescale only when some row's max moved: alpha is exactly 1
    // otherwise (exp2f(0)), and x * 1 is x, so skipping it changes no bit.
    // Past the first key tiles a row's max seldom moves.
    if (__any_sync(0xffffffffu, alpha_a != 1.0f || alpha_b != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kNo; ++n) {
        o[n][0] *= alpha_a;
        o[n][1] *= alpha_a;
        o[n][2] *= alpha_b;
        o[n][3] *= alpha_b;
      }
    }
    // p = exp(scale * (s - max)) = exp2(s * sl2 - max * sl2); the sums take
    // the f32 p, the product P rounded to T (as the reference contract).
    uint32_t pf[kNs][2];
#pragma unroll
    for (int n = 0; n < kNs; ++n) {
      const float p0 = exp2f(fmaf(s[n][0], sl2, -mu_a)), p1 = exp2f(fmaf(s[n][1], sl2, -mu_a));
      const float p2 = exp2f(fmaf(s[n][2], sl2, -mu_b)), p3 = exp2f(fmaf(s[n][3], sl2, -mu_b));
      l_a += p0 + p1;
      l_b += p2 + p3;
      pf[n][0] = pack2<T>(p0, p1);  // row g
      pf[n][1] = pack2<T>(p2, p3);  // row g+8
    }

    // O += P V, k16 steps over the tile's keys.
#pragma unroll
    for (int kc = 0; kc < kBk / 16; ++kc) {
      const uint32_t pa[4] = {pf[2 * kc][0], pf[2 * kc][1], pf[2 * kc + 1][0], pf[2 * kc + 1][1]};
#pragma unroll
      for (int nd = 0; nd < HD / 16; ++nd) {
        uint32_t bf[4];
        ldmatrix_x4_trans(bf, v_addr + kc * 16 * HD * 2 + (v_off ^ (nd * 32)));
        mma16816<T>(o[2 * nd], pa, bf[0], bf[1]);
        mma16816<T>(o[2 * nd + 1], pa, bf[2], bf[3]);
      }
    }
  }
  if (!warp_active) return;

  // Row sums over the quad, normalise, optional sigmoid gate (the q row's
  // second half), store pairs: o[n] holds d = 8n + 2*t4 (+1) of rows g, g+8.
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = wrow0 + g + 8 * half;
    if (row >= nvalid) continue;
    const float l = half ? l_b : l_a;
    const float inv = l > 0.0f ? __frcp_rn(l) : 0.0f;
    const T* gate = q_tile + row * static_cast<int64_t>(a.q_row) + HD;
    T* dst = out + ((r0 + row) * a.num_heads + h) * static_cast<int64_t>(HD);
#pragma unroll
    for (int n = 0; n < kNo; ++n) {
      const int d = 8 * n + 2 * t4;
      float v0 = o[n][2 * half] * inv, v1 = o[n][2 * half + 1] * inv;
      if (a.output_gate) {
        v0 *= __frcp_rn(1.0f + expf(-to_f(gate[d])));
        v1 *= __frcp_rn(1.0f + expf(-to_f(gate[d + 1])));
      }
      *reinterpret_cast<uint32_t*>(dst + d) = pack2<T>(v0, v1);
    }
  }
}

template <typename T, int HD, bool kOcc = false>
Status launch(cudaStream_t s, const AttentionShape& a, const StepMeta& meta, int32_t page_size,
              const int32_t* tile_seq, const int32_t* tile_row, int64_t tiles, int64_t tokens,
              const void* q, const void* k_cache, const void* v_cache, void* out) {
  constexpr size_t smem = Cfg<HD, kOcc>::kSmem;
  auto kern = prefill_kernel<T, HD, kOcc>;
  if (smem > 48 * 1024) {
    // Once per device (the attribute is per device and function).
    static std::atomic<uint32_t> set_on{0};
    int dev = 0;
    FERRITE_CUDA_RETURN(cudaGetDevice(&dev));
    const uint32_t bit = dev < 32 ? 1u << dev : 0u;
    if (!(set_on.load(std::memory_order_relaxed) & bit)) {
      FERRITE_CUDA_RETURN(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem)));
      set_on.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  int32_t page_shift = -1;  // log2(page_size) when a power of two
  for (int b = 0; b < 31; ++b)
    if (page_size == (1 << b)) page_shift = b;
  kern<<<dim3(a.num_heads, static_cast<unsigned>(tiles)), kThreads, smem, s>>>(
      a, meta, page_size, page_shift, tile_seq, tile_row, tokens, static_cast<const T*>(q),
      static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), static_cast<T*>(out));
  return check_launch("attention_prefill");
}

template <typename T>
Status launch_hd(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                 int32_t page_size, const int32_t* tile_seq, const int32_t* tile_row,
                 int64_t tiles, int64_t tokens, const void* q, const void* k_cache,
                 const void* v_cache, void* out, bool short_tiles) {
  switch (a.head_dim) {
    case 64:
      return launch<T, 64>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
    case 128:
      if (short_tiles)
        return launch<T, 128, true>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
      return launch<T, 128>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
    default:
      return launch<T, 256>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
  }
}

}  // namespace

bool attention_prefill_supported(const AttentionShape& a, DType act) {
  return (act == DType::kBF16 || act == DType::kF16) &&
         (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256);
}

Status launch_attention_prefill(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                                int32_t page_size, const int32_t* tile_seq,
                                const int32_t* tile_row, int64_t tiles, int64_t tokens,
                                const void* q, DType act, const void* k_cache,
                                const void* v_cache, void* out, bool short_tiles) {
  if (tiles == 0) return Status::ok();
  if (!attention_prefill_supported(a, act)) return unsupported("attention prefill: shape / dtype");
  if (tiles > 65535) return unsupported("attention prefill: more than 65535 query tiles");
  if (act == DType::kBF16)
    return launch_hd<__nv_bfloat16>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out, short_tiles);
  return launch_hd<__half>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out, short_tiles);
}

}  // namespace ferrite::cuda
