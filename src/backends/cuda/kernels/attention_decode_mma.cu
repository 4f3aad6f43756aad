// Decode attention on the tensor cores: the fused decode kernel's contract
// (attention_decode.cuh: bias, q/k RMS norm, RoPE, the K/V write into the
// paged cache, attention over the cached positions) with the scores and
// the value sums as mma.sync.m16n8k16 products instead of per-lane FMAs and
// warp butterflies.
//
// Why: at batch 64 the fused kernel spends ~290 warp instructions a cached
// position and warp (ncu, H200, docs/perf-log.md session 28): the score
// butterflies (5 shuffle + add levels for each of 4 positions x 4 heads),
// V unpacked once per head, per-position masks. Here a warp takes 16
// positions at a time: S = Q K^T is HD / 8 mma (the group's query heads
// are the rows of the A operand, padded to 8 or 16), P V another HD / 8,
// and the softmax works on 4 scores a lane.
//
// Layout: one block of 4 warps per (token, KV head, split), all the heads
// of the KV head's group (up to 16) in the rows of one 16-row mma tile.
// Warp w takes the 16-position tiles w, w + 4, w + 8, ... of the split's
// range [p0, p1); each warp gathers its tiles' K and V rows (16 x HD, one
// paged-cache row each) with 16-byte cp.async into its own two-stage ring
// of swizzled shared-memory tiles, so that the next tile loads while the
// current one is computed and no block barrier is needed in the loop. The
// token's own position (written by this block's prologue) is taken from
// the prologue's rounded K/V, never read back from the cache. The warps'
// (max, sum, O) are merged in shared memory as the fused kernel does; one
// split writes the output (and the output gate), more write the partials
// that launch_attention_combine merges.
//
// Numerics: q, K, V and P as the activation type into f32 accumulators (as
// the flash prefill, kernels/attention_prefill.cu); scores scaled by
// scale * log2(e) after the product, online softmax in the log2 domain
// (exp2f); the row sums add the rounded P that the value product uses.
// The fused kernel keeps f32 probabilities: outputs agree within the
// activation type's rounding (CudaDecodeMmaTest), not bitwise.
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/attention_decode.cuh"
#include "backends/cuda/kernels/mma.cuh"

namespace ferrite::cuda {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTileKeys = 16;  // positions a warp takes at a time (the P V mma's k)
constexpr int kStages = 2;     // a warp's ring of K/V tiles
constexpr unsigned kFull = 0xffffffffu;

// Element offset of (row r, column c; c a multiple of 8) in a [16][HD] tile
// whose 16-byte chunks are XOR-swizzled by the row's low 3 bits: the 8 rows
// an 8x8 ldmatrix reads land in 8 distinct bank groups (HD >= 64).
template <int HD>
__device__ __forceinline__ int swz(int r, int c) {
  return r * HD + (((c >> 3) ^ (r & 7)) << 3);
}

// Shared memory: the warps' K/V rings (the merge's O rows reuse them), then
// f32 q rows [kRows][HD], the new K and V [2][HD], the merge's per-warp
// (max, sum, factor) [3][kWarps][kRows] and per-head (max, sum) [2][kRows].
template <int HD>
constexpr size_t ring_bytes() {
  return static_cast<size_t>(kWarps) * kStages * 2 * kTileKeys * HD * 2;
}
template <int HD, int kRows>
constexpr size_t mma_smem_bytes() {
  return ring_bytes<HD>() + sizeof(float) * (kRows * HD + 2 * HD + 3 * kWarps * kRows + 2 * kRows);
}

// d += a * b on the tile's rows 0-7 only (a1 = a3 = 0, the rows 8-15 of C
// discarded): group sizes up to 8 keep 2 accumulators a fragment.
template <typename T>
__device__ __forceinline__ void mma_rows8(float (&d)[2], uint32_t a0, uint32_t a2, uint32_t b0,
                                          uint32_t b1) {
  float z2, z3;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(z2), "=f"(z3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]), "f"(0.0f), "f"(0.0f));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(z2), "=f"(z3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]), "f"(0.0f), "f"(0.0f));
  }
  (void)z2;
  (void)z3;
}

// Two floats rounded to T, lo in the low half; and the rounded values back.
template <typename T>
__device__ __forceinline__ uint32_t pack_round(float lo, float hi, float& rlo, float& rhi) {
  const T l = from_f<T>(lo), h = from_f<T>(hi);
  rlo = to_f(l);
  rhi = to_f(h);
  return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&l)) |
         (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&h)) << 16);
}

// The softmax state of one row (head) of the tile in a lane: the running
// max (log2 domain), the lane's part of the row sum, and the lane's O
// columns of that row (dims 8 nb + 2 (lane & 3) + e).
template <int HD>
struct RowState {
  float m = -INFINITY, l = 0.0f;
  float o[HD / 8][2] = {};
};

// One row's online-softmax update for a tile: s[j][e] the raw scores of
// keys 8 j + 2 (lane & 3) + e of the tile (`valid` bit 2 j + e), returns
// the probabilities rounded to T (packed as the A fragment words of keys
// 2t.. and 8 + 2t..) after rescaling the row's O.
template <typename T, int HD>
__device__ __forceinline__ void softmax_row(RowState<HD>& st, const float (&s)[2][2], unsigned valid,
                                            float scale_log2, uint32_t& p_lo, uint32_t& p_hi) {
  float x[2][2];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      x[j][e] = (valid >> (2 * j + e)) & 1u ? s[j][e] * scale_log2 : -INFINITY;
      mx = fmaxf(mx, x[j][e]);
    }
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
  // The tile's first key is always in range, so mx and m_new are finite.
  const float m_new = fmaxf(st.m, mx);
  const float alpha = exp2f(st.m - m_new);  // 0 for the first tile (m = -inf)
  float r[2][2];
  p_lo = pack_round<T>(exp2f(x[0][0] - m_new), exp2f(x[0][1] - m_new), r[0][0], r[0][1]);
  p_hi = pack_round<T>(exp2f(x[1][0] - m_new), exp2f(x[1][1] - m_new), r[1][0], r[1][1]);
  st.l = st.l * alpha + ((r[0][0] + r[0][1]) + (r[1][0] + r[1][1]));
  st.m = m_new;
#pragma unroll
  for (int nb = 0; nb < HD / 8; ++nb) {
    st.o[nb][0] *= alpha;
    st.o[nb][1] *= alpha;
  }
}

template <typename T, int HD, bool kHi>
__global__ void __launch_bounds__(kThreads)
    attention_decode_mma_kernel(AttentionShape a, StepMeta meta, int32_t page_size, T* q,
                                const T* k, const T* v, DecodeWeights wts, T* k_cache, T* v_cache,
                                T* out, int splits, float* partials) {
  constexpr int D = HD / 32;      // dims per lane in the prologue
  constexpr int C = HD / 8;       // 16-byte chunks of a K / V row
  constexpr int kRows = kHi ? 16 : 8;
  constexpr int kTile = kTileKeys * HD;  // elements of one K (or V) tile
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ring = reinterpret_cast<T*>(smem_raw);
  float* q_s = reinterpret_cast<float*>(smem_raw + ring_bytes<HD>());  // [kRows][HD]
  float* kv_s = q_s + kRows * HD;            // [2][HD] the new K and V, rounded
  float* m_w = kv_s + 2 * HD;                // [kWarps][kRows]
  float* l_w = m_w + kWarps * kRows;         // [kWarps][kRows]
  float* f_w = l_w + kWarps * kRows;         // [kWarps][kRows] exp2(m_w - max)
  float* mx_s = f_w + kWarps * kRows;        // [kRows]
  float* den_s = mx_s + kRows;               // [kRows]
  float* o_w = reinterpret_cast<float*>(smem_raw);  // [kWarps][group][HD], after the loop

  const int64_t t = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;  // <= kRows
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int h0 = kvh * group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nkv = a.num_kv_heads;

  const int32_t seq = meta.token_seq[t];
  const int32_t pos = meta.token_pos[t];
  const bool real = meta.seq_len[seq] > 0;
  const int len = real ? pos + 1 : 0;
  const int per_split = (len + splits - 1) / splits;
  const int p0 = min(len, split * per_split), p1 = min(len, p0 + per_split);
  const int ntiles = (p1 - p0 + kTileKeys - 1) / kTileKeys;

  // Tile i of the range into stage `stage` of this warp's ring: lane r < 16
  // finds row r's cache offset (-1: past the range, zero-filled so that
  // P = 0 meets finite V; -2: the token's own position, filled from kv_s
  // after the prologue), every lane then copies C / 2 of the tile's 16 x C
  // chunks of K and of V.
  auto stage_tile = [&](int i, int stage) {
    const int base = p0 + i * kTileKeys;
    long long off = -1;
    if (lane < kTileKeys) {
      const int p = base + lane;
      if (p < p1)
        off = p == pos ? -2 : static_cast<long long>(
                                  paged_kv_offset(meta, seq, p, page_size, nkv, HD, kvh));
    }
    T* kd = ring + (warp * kStages + stage) * 2 * kTile;
    T* vd = kd + kTile;
#pragma unroll
    for (int it = 0; it < C / 2; ++it) {
      const int j = lane + 32 * it, r = j / C, c = j % C;
      const long long o = __shfl_sync(kFull, off, r);
      if (o == -2) continue;
      const bool ok = o >= 0;
      const int at = swz<HD>(r, 8 * c);
      cp_async16(kd + at, ok ? k_cache + o + 8 * c : k_cache, ok);
      cp_async16(vd + at, ok ? v_cache + o + 8 * c : v_cache, ok);
    }
  };
  // Positions before the token's own were written by earlier steps: their
  // loads go out before the prologue.
  if (warp < ntiles) stage_tile(warp, 0);
  cp_async_commit();
  if (warp + kWarps < ntiles) stage_tile(warp + kWarps, 1);
  cp_async_commit();

  pdl_launch_dependents();
  pdl_wait();

  // --- the q heads, the token's new K and V (rows group, group + 1) ----------
  // As the fused kernel: bias, RMS norm (q, k), RoPE through shared memory
  // (the pair of dim d is d +- rope_dim/2, in another lane), rounded to T.
  // q is kept unscaled (the scale is applied to the scores).
  const int half = a.rope_dim / 2;
  for (int row = warp; row < group + 2; row += kWarps) {
    const int kind = row < group ? 0 : row - group + 1;  // 0 q, 1 k, 2 v
    const void* bias = kind == 0 ? wts.q_bias : kind == 1 ? wts.k_bias : wts.v_bias;
    const int64_t bias_off = kind == 0 ? static_cast<int64_t>(h0 + row) * a.q_stride
                                       : static_cast<int64_t>(kvh) * HD;
    const bool norm = kind < 2 && a.qk_norm, rope = kind < 2 && half > 0;
    float* dst = kind == 0 ? q_s + row * HD : kv_s + (kind - 1) * HD;
    const T* src = kind == 0 ? q + t * a.q_row + static_cast<int64_t>(h0 + row) * a.q_stride
                             : (kind == 1 ? k : v) + (t * nkv + kvh) * HD;
    float x[D];
    uint32_t raw[D / 2];
    load_words<D>(src + lane * D, raw);
    unpack_words<T, D>(raw, x);
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < D; ++e) {
      if (bias) x[e] += load_any(bias, wts.bias_dt, bias_off + lane * D + e);
      ss = fmaf(x[e], x[e], ss);
    }
    if (norm) {
      const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(HD) + a.eps);
      const void* nwp = kind == 0 ? wts.q_norm : wts.k_norm;
#pragma unroll
      for (int e = 0; e < D; ++e) {
        const float wi = load_any(nwp, wts.norm_dt, lane * D + e);
        x[e] = x[e] * inv * (a.zero_centred ? 1.0f + wi : wi);
      }
    }
    if (rope) {
#pragma unroll
      for (int e = 0; e < D; ++e) dst[lane * D + e] = x[e];
      __syncwarp();
      float y[D];
#pragma unroll
      for (int e = 0; e < D; ++e) {
        // As qk_rope_kv: x cos - pair sin (d < half), x cos + pair sin
        // (half <= d < 2 half); dims past 2 half keep x.
        const int d = lane * D + e;
        if (d < 2 * half) {
          const float angle = static_cast<float>(pos) * a.inv_freq[d < half ? d : d - half];
          const float cs = cosf(angle), sn = sinf(angle);
          y[e] = d < half ? x[e] * cs - dst[d + half] * sn : x[e] * cs + dst[d - half] * sn;
        } else {
          y[e] = x[e];
        }
      }
      __syncwarp();
#pragma unroll
      for (int e = 0; e < D; ++e) x[e] = y[e];
    }
    // Round as the cache stores them; the split holding the newest position
    // writes K / V to the cache.
    T* slot = nullptr;
    if (kind > 0 && real && pos >= p0 && pos < p1)
      slot = (kind == 1 ? k_cache : v_cache) +
             paged_kv_offset(meta, seq, pos, page_size, nkv, HD, kvh) + lane * D;
#pragma unroll
    for (int e = 0; e < D; ++e) {
      const T r = from_f<T>(x[e]);
      dst[lane * D + e] = to_f(r);
      if (slot) slot[e] = r;
    }
    // The combine kernel applies the output gate from q: it must see the
    // biased gate, as qk_rope_kv leaves it in place.
    if (kind == 0 && a.output_gate && wts.q_bias && splits > 1 && split == 0) {
      T* g = q + t * a.q_row + static_cast<int64_t>(h0 + row) * a.q_stride + HD;
#pragma unroll
      for (int e = 0; e < D; ++e) {
        const int d = lane * D + e;
        g[d] = from_f<T>(to_f(g[d]) + load_any(wts.q_bias, wts.bias_dt, bias_off + HD + d));
      }
    }
  }
  for (int i = threadIdx.x; i < (kRows - group) * HD; i += kThreads) q_s[group * HD + i] = 0.0f;
  __syncthreads();

  // --- the query rows as A fragments (exact: the values are T's) ------------
  const int g = lane >> 2, tq = lane & 3;
  uint32_t aq[HD / 16][4];
#pragma unroll
  for (int s = 0; s < HD / 16; ++s) {
    float r0, r1;
    const float* lo = q_s + g * HD + 16 * s + 2 * tq;
    aq[s][0] = pack_round<T>(lo[0], lo[1], r0, r1);
    aq[s][2] = pack_round<T>(lo[8], lo[9], r0, r1);
    if constexpr (kHi) {
      const float* hi = lo + 8 * HD;
      aq[s][1] = pack_round<T>(hi[0], hi[1], r0, r1);
      aq[s][3] = pack_round<T>(hi[8], hi[9], r0, r1);
    } else {
      aq[s][1] = aq[s][3] = 0u;
    }
  }

  // --- the warp's tiles ----------------------------------------------------------
  const float scale_log2 = a.scale * 1.4426950408889634f;
  RowState<HD> lo_row;
  RowState<HD> hi_row;  // rows 8-15 (kHi only; otherwise unused and removed)
  // ldmatrix lane addresses (elements, before the tile base): K as the B
  // operand of S = Q K^T (keys as n, no transpose), V as the B operand of
  // O = P V (keys as k, transposed).
  const int k_row = (lane & 7) + 8 * (lane >> 4), k_half = (lane >> 3) & 1;
  const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1), v_half = lane >> 4;
  int stage = 0;
  for (int i = warp; i < ntiles; i += kWarps, stage ^= 1) {
    cp_async_wait<1>();
    __syncwarp();
    const int base = p0 + i * kTileKeys;
    T* kd = ring + (warp * kStages + stage) * 2 * kTile;
    T* vd = kd + kTile;
    if (pos >= base && pos < base + kTileKeys && pos < p1) {
      const int r = pos - base;
      for (int d = lane; d < HD; d += 32) {
        kd[swz<HD>(r, d & ~7) + (d & 7)] = from_f<T>(kv_s[d]);
        vd[swz<HD>(r, d & ~7) + (d & 7)] = from_f<T>(kv_s[HD + d]);
      }
      __syncwarp();
    }
    // S = Q K^T: key blocks 0 (keys 0-7) and 1 (keys 8-15) of the tile.
    float s_lo[2][2] = {}, s_hi[2][4] = {};
    const uint32_t kbase = smem_addr(kd);
#pragma unroll
    for (int s = 0; s < HD / 16; ++s) {
      uint32_t kb[4];
      ldmatrix_x4(kb, kbase + 2 * swz<HD>(k_row, 16 * s + 8 * k_half));
      if constexpr (kHi) {
        mma16816<T>(s_hi[0], aq[s], kb[0], kb[1]);
        mma16816<T>(s_hi[1], aq[s], kb[2], kb[3]);
      } else {
        mma_rows8<T>(s_lo[0], aq[s][0], aq[s][2], kb[0], kb[1]);
        mma_rows8<T>(s_lo[1], aq[s][0], aq[s][2], kb[2], kb[3]);
      }
    }
    // Keys in range: bit 2 j + e for key base + 8 j + 2 tq + e.
    unsigned valid = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) valid |= (base + 8 * j + 2 * tq + e < p1 ? 1u : 0u) << (2 * j + e);
    uint32_t ap[4];
    if constexpr (kHi) {
      const float slo[2][2] = {{s_hi[0][0], s_hi[0][1]}, {s_hi[1][0], s_hi[1][1]}};
      const float shi[2][2] = {{s_hi[0][2], s_hi[0][3]}, {s_hi[1][2], s_hi[1][3]}};
      softmax_row<T, HD>(lo_row, slo, valid, scale_log2, ap[0], ap[2]);
      softmax_row<T, HD>(hi_row, shi, valid, scale_log2, ap[1], ap[3]);
    } else {
      softmax_row<T, HD>(lo_row, s_lo, valid, scale_log2, ap[0], ap[2]);
      ap[1] = ap[3] = 0u;
    }
    // O += P V, dims 16 db .. 16 db + 15 a step (two n blocks of 8).
    const uint32_t vbase = smem_addr(vd);
#pragma unroll
    for (int db = 0; db < HD / 16; ++db) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, vbase + 2 * swz<HD>(v_row, 16 * db + 8 * v_half));
      if constexpr (kHi) {
        float c0[4] = {lo_row.o[2 * db][0], lo_row.o[2 * db][1], hi_row.o[2 * db][0],
                       hi_row.o[2 * db][1]};
        float c1[4] = {lo_row.o[2 * db + 1][0], lo_row.o[2 * db + 1][1],
                       hi_row.o[2 * db + 1][0], hi_row.o[2 * db + 1][1]};
        mma16816<T>(c0, ap, vb[0], vb[1]);
        mma16816<T>(c1, ap, vb[2], vb[3]);
        lo_row.o[2 * db][0] = c0[0], lo_row.o[2 * db][1] = c0[1];
        hi_row.o[2 * db][0] = c0[2], hi_row.o[2 * db][1] = c0[3];
        lo_row.o[2 * db + 1][0] = c1[0], lo_row.o[2 * db + 1][1] = c1[1];
        hi_row.o[2 * db + 1][0] = c1[2], hi_row.o[2 * db + 1][1] = c1[3];
      } else {
        mma_rows8<T>(lo_row.o[2 * db], ap[0], ap[2], vb[0], vb[1]);
        mma_rows8<T>(lo_row.o[2 * db + 1], ap[0], ap[2], vb[2], vb[3]);
      }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
    if (i + kStages * kWarps < ntiles) stage_tile(i + kStages * kWarps, stage);
    cp_async_commit();
  }
  cp_async_wait<0>();

  // --- merge the warps -------------------------------------------------------------
  // A row's sum is spread over its 4 lanes (tq); the max is already shared.
  lo_row.l += __shfl_xor_sync(kFull, lo_row.l, 1);
  lo_row.l += __shfl_xor_sync(kFull, lo_row.l, 2);
  if constexpr (kHi) {
    hi_row.l += __shfl_xor_sync(kFull, hi_row.l, 1);
    hi_row.l += __shfl_xor_sync(kFull, hi_row.l, 2);
  }
  __syncthreads();  // every warp is done with the rings: o_w reuses them
  auto keep_row = [&](const RowState<HD>& st, int row) {
    if (row >= group) return;
    if (tq == 0) {
      m_w[warp * kRows + row] = st.m;
      l_w[warp * kRows + row] = st.l;
    }
    float* dst = o_w + (warp * group + row) * HD;
#pragma unroll
    for (int nb = 0; nb < HD / 8; ++nb)
      *reinterpret_cast<float2*>(dst + 8 * nb + 2 * tq) = make_float2(st.o[nb][0], st.o[nb][1]);
  };
  keep_row(lo_row, g);
  if constexpr (kHi) keep_row(hi_row, g + 8);
  __syncthreads();
  // The output of head h, dim d from its merged (num, max, sum).
  auto finish = [&](int h, int d, float num, float den) {
    float val = den > 0.0f ? num / den : 0.0f;
    if (a.output_gate) {
      const int64_t gi = t * a.q_row + static_cast<int64_t>(h) * a.q_stride + HD + d;
      float gate = to_f(q[gi]);
      if (wts.q_bias)
        gate = to_f(from_f<T>(gate + load_any(wts.q_bias, wts.bias_dt,
                                              static_cast<int64_t>(h) * a.q_stride + HD + d)));
      val *= 1.0f / (1.0f + expf(-gate));
    }
    out[(t * a.num_heads + h) * HD + d] = from_f<T>(val);
  };
  // Per head (a thread each): the max over the warps, each warp's factor
  // and the merged sum.
  if (threadIdx.x < group) {
    const int r = threadIdx.x;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_w[w * kRows + r]);
    float den = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = m_w[w * kRows + r];
      const float f = mw == -INFINITY ? 0.0f : exp2f(mw - mx);
      f_w[w * kRows + r] = f;
      if (mw != -INFINITY) den = fmaf(f, l_w[w * kRows + r], den);
    }
    mx_s[r] = mx;
    den_s[r] = den;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * HD; i += kThreads) {
    const int r = i / HD, d = i % HD;
    const int h = h0 + r;
    float num = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (m_w[w * kRows + r] == -INFINITY) continue;
      num = fmaf(f_w[w * kRows + r], o_w[(w * group + r) * HD + d], num);
    }
    if (splits == 1) {
      finish(h, d, num, den_s[r]);
    } else {
      // The combine kernel works in the natural-log domain.
      float* part = partials + ((t * a.num_heads + h) * splits + split) * (HD + 2);
      part[d] = num;
      if (d == 0) {
        part[HD] = mx_s[r] * 0.6931471805599453f;  // -inf stays -inf
        part[HD + 1] = den_s[r];
      }
    }
  }
}

template <typename T, int HD, bool kHi>
cudaError_t launch_mma(dim3 grid, cudaStream_t s, bool pdl, const AttentionShape& a,
                       const DecodeAttentionIo& io, int splits, float* partials) {
  auto kern = attention_decode_mma_kernel<T, HD, kHi>;
  constexpr size_t smem = mma_smem_bytes<HD, kHi ? 16 : 8>();
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
  }
  return launch_maybe_pdl(pdl, kern, grid, kThreads, smem, s, a, io.meta, io.page_size,
                          static_cast<T*>(io.q), static_cast<const T*>(io.k),
                          static_cast<const T*>(io.v), decode_weights(io),
                          static_cast<T*>(io.k_cache), static_cast<T*>(io.v_cache),
                          static_cast<T*>(io.out), splits, partials);
}

}  // namespace

bool attention_decode_mma_supported(const AttentionShape& a, DType act) {
  const int group = a.num_kv_heads > 0 ? a.num_heads / a.num_kv_heads : 0;
  return (act == DType::kBF16 || act == DType::kF16) && (a.head_dim == 64 || a.head_dim == 128) &&
         group >= 1 && group <= 16 && a.num_heads % a.num_kv_heads == 0 &&
         a.rope_dim <= a.head_dim;
}

Status launch_attention_decode_mma(cudaStream_t s, const AttentionShape& a,
                                   const DecodeAttentionIo& io, int splits, float* partials,
                                   bool pdl) {
  const int64_t tokens = io.tokens;
  if (tokens == 0) return Status::ok();
  if (!attention_decode_mma_supported(a, io.act))
    return unsupported("tensor-core decode attention: bf16 / f16, head_dim 64 / 128, up to 16 "
                       "query heads a KV head");
  if (splits < 1) return internal_error("tensor-core decode attention: splits < 1");
  if (splits > 1 && !partials) return internal_error("tensor-core decode attention: no partials");
  const bool hi = a.num_heads / a.num_kv_heads > 8;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(splits));
  cudaError_t e = cudaSuccess;
  auto go = [&](auto ta, auto hd) {
    using T = decltype(ta);
    constexpr int HD = decltype(hd)::value;
    e = hi ? launch_mma<T, HD, true>(grid, s, pdl, a, io, splits, partials)
           : launch_mma<T, HD, false>(grid, s, pdl, a, io, splits, partials);
  };
  bool ok = dispatch_float(io.act, [&](auto ta) {
    using T = decltype(ta);
    if constexpr (!std::is_same_v<T, float>) {
      if (a.head_dim == 64)
        go(T{}, std::integral_constant<int, 64>{});
      else
        go(T{}, std::integral_constant<int, 128>{});
    }
  });
  if (!ok) return bad_dtype("tensor-core decode attention", io.act);
  if (e != cudaSuccess) return cuda_error(e, "tensor-core decode attention launch");
  FERRITE_RETURN_IF_ERROR(check_launch("attention_decode_mma"));
  if (splits > 1)
    return launch_attention_combine(s, a, tokens, io.q, io.act, io.out, splits, partials);
  return Status::ok();
}

}  // namespace ferrite::cuda
