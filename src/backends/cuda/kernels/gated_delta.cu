// Kernels of gated_delta_recurrent_attention: causal depthwise conv + SiLU
// over the conv state; the gated delta rule in f32, a block per (sequence,
// value head, 32-column slice of the state), recurrent form for decode /
// short spans and chunked (WY) form for spans of >= 16 tokens; then the
// gated RMSNorm times silu(z) as a separate pass, or in the recurrent
// launch (gated_delta_recurrent_norm_kernel). (The MoE kernels are in
// moe.cu.)
// Sequences are packed in order: sequence s owns rows
// [seq_last_row[s-1] + 1, seq_last_row[s]] (the provider checks this).
// A state slot < 0 (graph padding) reads zero state and writes none.
#include <cooperative_groups.h>

#include <type_traits>

#include "backends/cuda/kernels/causal_conv.cuh"
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/gated_delta.cuh"

namespace ferrite::cuda {
namespace {

__device__ __forceinline__ int seq_first(const StepMeta& m, int s) {
  return s == 0 ? 0 : m.seq_last_row[s - 1] + 1;
}

// pdl_trigger (Tuning::cuda_gated_delta_pdl): the gated delta rule after it
// is a programmatic dependent; its blocks may start now (they load their
// state and wait for this grid before reading x).
template <int K>
__global__ void conv_silu_kernel(StepMeta meta, int64_t sequences, float* x, int64_t C,
                                 const void* w, int wdt, float* conv_state, bool pdl_trigger) {
  if (pdl_trigger) pdl_launch_dependents();
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= sequences * C) return;
  const int s = static_cast<int>(idx / C);
  const int64_t ch = idx % C;
  const int first = seq_first(meta, s), last = meta.seq_last_row[s];
  const int slot = meta.seq_state_slot[s];
  float* st = slot >= 0 ? conv_state + static_cast<int64_t>(slot) * (K - 1) * C : nullptr;
  ConvChannel<K> cc;
  conv_load(cc, w, wdt, st, C, ch);
  for (int t = first; t <= last; ++t) {
    float* xv = x + static_cast<int64_t>(t) * C + ch;
    *xv = conv_silu_step(cc, *xv);
  }
  conv_store(cc, st, C, ch);
}

// --- gated delta rule ------------------------------------------------------------
//
// Column separability: for one value head, every column of the dk x dv state
// evolves on its own given q, k, g, beta and that column of v. So each block
// owns one (sequence, value head, slice of kDvSlice state columns); the
// slices of a head recompute the (cheap, shared) q / k work.
//
// The delta rule writes its output o (f32, before the gated norm) in place
// over the v columns it has just read (x's V section: each (token, value
// head, column) is read and then written by the same block); the gated
// RMSNorm times silu(z) needs the whole dv row, so it runs as a separate pass
// (gated_norm_kernel), or in a launch whose blocks of a head are a cluster
// (gated_delta_recurrent_norm_kernel).

constexpr int kDvSlice = 32;          // state columns per block (one per lane)
constexpr int kChunk = 64;            // tokens per chunk of the chunked form
constexpr int kChunkedMinTokens = kGatedDeltaChunkedMinTokens;  // shorter: recurrent
constexpr int kChunkThreads = 256;
constexpr int kRecurrentThreads = 128;
constexpr int kLdA = kChunk + 1;      // row stride of the chunk x chunk matrices

struct DeltaArgs {
  GatedDeltaShape g;
  const float* bb;
  const float* aa;
  const void* a_log;
  int alog_dt;
  const void* dt_bias;
  int dtb_dt;
  float* x;            // conv output; o is written over the V section
  float* delta_state;  // [slots, hv, dk, dv]
};

struct DeltaBlock {
  int s, h, kh, c0, first, n, slot;
  int64_t C;  // conv_dim (row stride of x)
  float A, dtb;
};

__device__ __forceinline__ DeltaBlock delta_block(const StepMeta& meta, const DeltaArgs& p) {
  const GatedDeltaShape& g = p.g;
  const int ns = (g.dv + kDvSlice - 1) / kDvSlice;
  DeltaBlock b;
  b.c0 = static_cast<int>(blockIdx.x % ns) * kDvSlice;
  b.h = static_cast<int>((blockIdx.x / ns) % g.hv);
  b.s = static_cast<int>(blockIdx.x / (int64_t(ns) * g.hv));
  b.kh = g.tiled ? b.h % g.hk : b.h / (g.hv / g.hk);
  b.first = seq_first(meta, b.s);
  b.n = meta.seq_last_row[b.s] - b.first + 1;
  b.slot = meta.seq_state_slot[b.s];
  b.C = 2LL * g.hk * g.dk + int64_t(g.hv) * g.dv;
  b.A = -expf(load_any(p.a_log, p.alog_dt, b.h));
  b.dtb = load_any(p.dt_bias, p.dtb_dt, b.h);
  return b;
}

// The block's state slice (dk rows x kDvSlice columns, zero beyond dv or for
// a slot < 0) to / from shared memory.
__device__ __forceinline__ float* delta_state_ptr(const DeltaArgs& p, const DeltaBlock& b) {
  return b.slot >= 0
             ? p.delta_state + (static_cast<int64_t>(b.slot) * p.g.hv + b.h) * p.g.dk * p.g.dv
             : nullptr;
}
// kStateBatch elements a thread are loaded before any is stored: a loop of
// one load and one shared store per element waited on a global round trip
// each time (32 per thread at dk 128), 24 us of a 35B-A3B decode layer's
// recurrent step under ncu, for 16 KB. (Stores wait on nothing: the store
// loop stays one element at a time.)
constexpr int kStateBatch = 16;
__device__ void load_state(const DeltaArgs& p, const DeltaBlock& b, float* S) {
  const float* gst = delta_state_ptr(p, b);
  const int total = p.g.dk * kDvSlice, step = static_cast<int>(blockDim.x);
  for (int base = threadIdx.x; base < total; base += kStateBatch * step) {
    float v[kStateBatch];
#pragma unroll
    for (int u = 0; u < kStateBatch; ++u) {
      const int i = base + u * step;
      const int d = i / kDvSlice, c = b.c0 + i % kDvSlice;
      v[u] = gst && i < total && c < p.g.dv ? gst[int64_t(d) * p.g.dv + c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kStateBatch; ++u)
      if (base + u * step < total) S[base + u * step] = v[u];
  }
}
__device__ void store_state(const DeltaArgs& p, const DeltaBlock& b, const float* S) {
  float* gst = delta_state_ptr(p, b);
  if (!gst) return;
  for (int i = threadIdx.x; i < p.g.dk * kDvSlice; i += blockDim.x) {
    const int d = i / kDvSlice, c = b.c0 + i % kDvSlice;
    if (c < p.g.dv) gst[int64_t(d) * p.g.dv + c] = S[i];
  }
}

__device__ __forceinline__ float delta_log_decay(const DeltaArgs& p, const DeltaBlock& b, int t) {
  const float sp_in = p.aa[static_cast<int64_t>(t) * p.g.hv + b.h] + b.dtb;
  const float sp = sp_in > 20.0f ? sp_in : log1pf(expf(sp_in));
  return b.A * sp;
}
__device__ __forceinline__ float delta_beta(const DeltaArgs& p, const DeltaBlock& b, int t) {
  return 1.0f / (1.0f + expf(-p.bb[static_cast<int64_t>(t) * p.g.hv + b.h]));
}

// Recurrent form over the block's tokens, in the reference's order: S *=
// decay; u = S^T k; d = beta (v - u); S += k d^T; o = S^T q. Warp w owns
// state rows w, w + nw, ...; lane = column; partial sums over rows are
// combined through shared memory. Shared: qs, ks [dk], red [2 nw],
// part [2][nw][32].
// o_keep (optional, shared memory [n][32]): each token's o of the block's
// columns (lane = column) as well, for the gated norm in the same launch.
__device__ void delta_recurrent(const DeltaArgs& p, const DeltaBlock& b, float* S, float* qs,
                                float* ks, float* red, float* part, float* o_keep = nullptr) {
  const int dk = p.g.dk;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int c = b.c0 + lane;
  const bool col = c < p.g.dv;
  const float q_dim_scale = rsqrtf(static_cast<float>(dk));
  const int64_t voff = 2LL * p.g.hk * dk + int64_t(b.h) * p.g.dv + c;
  float* part2 = part + nw * 32;
  for (int t = b.first; t < b.first + b.n; ++t) {
    float* xr = p.x + static_cast<int64_t>(t) * b.C;
    float pq = 0, pk = 0;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      const float qv = xr[b.kh * dk + i], kv = xr[p.g.hk * dk + b.kh * dk + i];
      qs[i] = qv;
      ks[i] = kv;
      pq += qv * qv;
      pk += kv * kv;
    }
    pq = warp_sum(pq);
    pk = warp_sum(pk);
    if (lane == 0) red[w] = pq, red[nw + w] = pk;
    const float vc = col ? xr[voff] : 0.0f;
    const float decay = expf(delta_log_decay(p, b, t));
    const float beta = delta_beta(p, b, t);
    __syncthreads();
    float qq = 0, kk = 0;
    for (int i = 0; i < nw; ++i) qq += red[i], kk += red[nw + i];
    const float qsc = rsqrtf(qq + 1e-6f) * q_dim_scale;
    const float ksc = rsqrtf(kk + 1e-6f);
    float u = 0;
    for (int d = w; d < dk; d += nw) {
      const float sv = S[d * kDvSlice + lane] * decay;
      S[d * kDvSlice + lane] = sv;
      u += sv * (ks[d] * ksc);
    }
    part[w * 32 + lane] = u;
    __syncthreads();
    u = 0;
    for (int i = 0; i < nw; ++i) u += part[i * 32 + lane];
    const float dd = beta * (vc - u);
    float o = 0;
    for (int d = w; d < dk; d += nw) {
      const float sv = S[d * kDvSlice + lane] + (ks[d] * ksc) * dd;
      S[d * kDvSlice + lane] = sv;
      o += sv * (qs[d] * qsc);
    }
    part2[w * 32 + lane] = o;
    __syncthreads();
    if (w == 0 && col) {
      o = 0;
      for (int i = 0; i < nw; ++i) o += part2[i * 32 + lane];
      xr[voff] = o;  // every warp has read v of this token (before the syncs)
    }
    if (o_keep && w == 0) o_keep[(t - b.first) * 32 + lane] = col ? o : 0.0f;
  }
}

__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// Shared memory of the chunked form (floats), dk % 4 == 0.
__host__ __device__ __forceinline__ int64_t chunk_ldk(int dk) { return dk + 4; }
__host__ __device__ __forceinline__ int64_t chunk_smem_floats(int dk) {
  return 2 * kChunk * chunk_ldk(dk)    // Qs, Ks
         + int64_t(dk) * kDvSlice      // S
         + 3 * kChunk * kLdA           // Am, Tm, QKm
         + 2 * kChunk * kDvSlice       // R, U
         + 4 * kChunk                  // Gs, Bs, Eg, Fs
         + 2 * dk + 2 * 8 + 2 * 8 * 32;  // the recurrent form's qs, ks, red, part
}
__host__ __device__ __forceinline__ int64_t recurrent_smem_floats(int dk, int nw) {
  return int64_t(dk) * kDvSlice + 2 * dk + 2 * nw + 2 * nw * 32;
}

// The chunked (WY) form over chunks of kChunk tokens, 256 threads. Per chunk
// of L tokens, with G the cumulative log-decay within the chunk:
//   Am[i][j] = -beta_i (k_i . k_j) exp(G_i - G_j) (j < i), T = (I - Am)^-1
//     (blocked: 16 x 16 diagonal blocks by forward substitution, then the
//     off-diagonal blocks T_IK = T_II sum_{K<=M<I} Am_IM T_MK);
//   R_i = beta_i (v_i - exp(G_i) k_i^T S), U = T R  (= W - KC S of the CPU form);
//   o_i = exp(G_i) q_i^T S + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) U_j;
//   S = exp(G_L) S + sum_j exp(G_L - G_j) k_j U_j^T.
__device__ void delta_chunked(const DeltaArgs& p, const DeltaBlock& b, float* smem) {
  const int dk = p.g.dk;
  const int ldk = static_cast<int>(chunk_ldk(dk));
  float* Qs = smem;
  float* Ks = Qs + kChunk * ldk;
  float* S = Ks + kChunk * ldk;
  float* Am = S + dk * kDvSlice;
  float* Tm = Am + kChunk * kLdA;
  float* QKm = Tm + kChunk * kLdA;
  float* R = QKm + kChunk * kLdA;
  float* U = R + kChunk * kDvSlice;
  float* Gs = U + kChunk * kDvSlice;
  float* Bs = Gs + kChunk;
  float* Eg = Bs + kChunk;
  float* Fs = Eg + kChunk;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;  // 8 warps
  const int c = b.c0 + lane;
  const bool col = c < p.g.dv;
  const float q_dim_scale = rsqrtf(static_cast<float>(dk));
  const int64_t qoff = int64_t(b.kh) * dk, koff = int64_t(p.g.hk) * dk + int64_t(b.kh) * dk;
  const int64_t voff = 2LL * p.g.hk * dk + int64_t(b.h) * p.g.dv + c;

  for (int c0 = 0; c0 < b.n; c0 += kChunk) {
    const int L = min(kChunk, b.n - c0);
    const int t0 = b.first + c0;
    // 1. Per-token log-decay and beta; G = inclusive prefix sum (warp 0,
    //    two tokens per lane).
    if (w == 0) {
      const int i0 = 2 * lane, i1 = i0 + 1;
      const float g0 = i0 < L ? delta_log_decay(p, b, t0 + i0) : 0.0f;
      const float g1 = i1 < L ? delta_log_decay(p, b, t0 + i1) : 0.0f;
      Bs[i0] = i0 < L ? delta_beta(p, b, t0 + i0) : 0.0f;
      Bs[i1] = i1 < L ? delta_beta(p, b, t0 + i1) : 0.0f;
      float sum = g0 + g1;
      for (int o = 1; o < 32; o <<= 1) {
        const float v = __shfl_up_sync(0xffffffffu, sum, o);
        if (lane >= o) sum += v;
      }
      float before = __shfl_up_sync(0xffffffffu, sum, 1);  // exclusive prefix
      if (lane == 0) before = 0.0f;
      Gs[i0] = before + g0;
      Gs[i1] = sum;
      const float gl = __shfl_sync(0xffffffffu, i0 == L - 1 ? before + g0 : sum, (L - 1) >> 1);
      Eg[i0] = expf(Gs[i0]);
      Eg[i1] = expf(Gs[i1]);
      Fs[i0] = expf(gl - Gs[i0]);  // rows >= L are never used with Fs
      Fs[i1] = expf(gl - Gs[i1]);
    }
    // 2. Normalised q (times 1/sqrt(dk)) and k rows; zero rows past L.
    for (int i = w; i < kChunk; i += 8) {
      const float* xr = p.x + static_cast<int64_t>(t0 + i) * b.C;
      float pq = 0, pk = 0;
      if (i < L)
        for (int d = lane; d < dk; d += 32) {
          const float qv = xr[qoff + d], kv = xr[koff + d];
          pq += qv * qv;
          pk += kv * kv;
        }
      pq = warp_sum(pq);
      pk = warp_sum(pk);
      const float qsc = rsqrtf(pq + 1e-6f) * q_dim_scale, ksc = rsqrtf(pk + 1e-6f);
      for (int d = lane; d < dk; d += 32) {
        Qs[i * ldk + d] = i < L ? xr[qoff + d] * qsc : 0.0f;
        Ks[i * ldk + d] = i < L ? xr[koff + d] * ksc : 0.0f;
      }
    }
    __syncthreads();
    // 3. Am and QKm: thread (ti, tj) owns rows ti + 16a, columns tj + 16b.
    {
      const int ti = tid & 15, tj = tid >> 4;
      float kk[4][4], qk[4][4];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) kk[a][bq] = 0.0f, qk[a][bq] = 0.0f;
      for (int d = 0; d < dk; d += 4) {
        float4 ki[4], qi[4], kj[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          ki[a] = *reinterpret_cast<const float4*>(Ks + (ti + 16 * a) * ldk + d);
          qi[a] = *reinterpret_cast<const float4*>(Qs + (ti + 16 * a) * ldk + d);
          kj[a] = *reinterpret_cast<const float4*>(Ks + (tj + 16 * a) * ldk + d);
        }
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int bq = 0; bq < 4; ++bq) {
            kk[a][bq] += dot4(ki[a], kj[bq]);
            qk[a][bq] += dot4(qi[a], kj[bq]);
          }
      }
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int bq = 0; bq < 4; ++bq) {
          const int i = ti + 16 * a, j = tj + 16 * bq;
          const bool in = i < L && j < L;
          const float e = in && j <= i ? expf(Gs[i] - Gs[j]) : 0.0f;
          Am[i * kLdA + j] = in && j < i ? -Bs[i] * kk[a][bq] * e : 0.0f;
          QKm[i * kLdA + j] = in && j <= i ? qk[a][bq] * e : 0.0f;
        }
    }
    __syncthreads();
    // 4. T = (I - Am)^-1. Diagonal 16 x 16 blocks: a thread per column,
    //    T[r][c] = sum_{c<=m<r} Am[r][m] T[m][c] (upper part zero).
    if (tid < kChunk) {
      const int base = tid & ~15, cc = tid;
      for (int r = base; r < base + 16; ++r) {
        float v = r == cc ? 1.0f : 0.0f;
        if (r > cc)
          for (int m = cc; m < r; ++m) v += Am[r * kLdA + m] * Tm[m * kLdA + cc];
        Tm[r * kLdA + cc] = v;
      }
    }
    __syncthreads();
    //    Off-diagonal blocks, row block by row block: X_K = sum_{K<=M<I}
    //    Am_IM T_MK (into U as scratch), then T_IK = T_II X_K.
    {
      const int r = tid >> 4, cq = tid & 15;
      for (int I = 1; I < kChunk / 16; ++I) {
        if (16 * I >= L) break;  // rows past L stay identity (never read)
        for (int K = 0; K < I; ++K) {
          float v = 0;
          for (int M = K; M < I; ++M)
#pragma unroll
            for (int m = 0; m < 16; ++m)
              v += Am[(16 * I + r) * kLdA + 16 * M + m] * Tm[(16 * M + m) * kLdA + 16 * K + cq];
          U[K * 256 + r * 16 + cq] = v;
        }
        __syncthreads();
        for (int K = 0; K < I; ++K) {
          float v = 0;
#pragma unroll
          for (int m = 0; m < 16; ++m)
            v += Tm[(16 * I + r) * kLdA + 16 * I + m] * U[K * 256 + m * 16 + cq];
          Tm[(16 * I + r) * kLdA + 16 * K + cq] = v;
        }
        __syncthreads();
      }
    }
    // 5. R = beta (v - exp(G) K S) and the inter-chunk output exp(G) Q S:
    //    warp w owns rows w + 8a, lane = column.
    float oacc[8];
    {
      float ka[8], qa[8];
#pragma unroll
      for (int a = 0; a < 8; ++a) ka[a] = 0.0f, qa[a] = 0.0f;
      for (int d = 0; d < dk; d += 4) {
        const float s0 = S[(d + 0) * kDvSlice + lane], s1 = S[(d + 1) * kDvSlice + lane];
        const float s2 = S[(d + 2) * kDvSlice + lane], s3 = S[(d + 3) * kDvSlice + lane];
        const float4 sv = make_float4(s0, s1, s2, s3);
#pragma unroll
        for (int a = 0; a < 8; ++a) {
          const int i = w + 8 * a;
          ka[a] += dot4(*reinterpret_cast<const float4*>(Ks + i * ldk + d), sv);
          qa[a] += dot4(*reinterpret_cast<const float4*>(Qs + i * ldk + d), sv);
        }
      }
#pragma unroll
      for (int a = 0; a < 8; ++a) {
        const int i = w + 8 * a;
        const float v = i < L && col ? p.x[static_cast<int64_t>(t0 + i) * b.C + voff] : 0.0f;
        R[i * kDvSlice + lane] = i < L ? Bs[i] * (v - Eg[i] * ka[a]) : 0.0f;
        oacc[a] = i < L ? Eg[i] * qa[a] : 0.0f;
      }
    }
    __syncthreads();
    // 6. U = T R (T lower, unit diagonal).
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      const int i = w + 8 * a;
      float v = 0;
      if (i < L)
        for (int j = 0; j <= i; ++j) v += Tm[i * kLdA + j] * R[j * kDvSlice + lane];
      U[i * kDvSlice + lane] = v;
    }
    __syncthreads();
    // 7. Intra-chunk output; o over the v columns just read.
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      const int i = w + 8 * a;
      if (i < L) {
        float v = oacc[a];
        for (int j = 0; j <= i; ++j) v += QKm[i * kLdA + j] * U[j * kDvSlice + lane];
        if (col) p.x[static_cast<int64_t>(t0 + i) * b.C + voff] = v;
      }
    }
    // 8. S = exp(G_L) S + sum_j exp(G_L - G_j) k_j U_j^T: warp w owns rows
    //    32 r + 4 w + (0..3).
    {
      const float el = Eg[L - 1];
      float acc[4][4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[r][e] = 0.0f;
      const int nr = (dk + 31) / 32;
      if (nr <= 4) {
        for (int j = 0; j < L; ++j) {
          const float u = U[j * kDvSlice + lane] * Fs[j];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int d0 = 32 * r + 4 * w;
            if (d0 < dk) {
              const float4 kv = *reinterpret_cast<const float4*>(Ks + j * ldk + d0);
              acc[r][0] += kv.x * u;
              acc[r][1] += kv.y * u;
              acc[r][2] += kv.z * u;
              acc[r][3] += kv.w * u;
            }
          }
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int d0 = 32 * r + 4 * w;
          if (d0 < dk)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              S[(d0 + e) * kDvSlice + lane] = el * S[(d0 + e) * kDvSlice + lane] + acc[r][e];
        }
      } else {  // dk > 128: rows one at a time
        for (int d = w; d < dk; d += 8) {
          float v = 0;
          for (int j = 0; j < L; ++j) v += Ks[j * ldk + d] * (U[j * kDvSlice + lane] * Fs[j]);
          S[d * kDvSlice + lane] = el * S[d * kDvSlice + lane] + v;
        }
      }
    }
    __syncthreads();
  }
}

// One block of the recurrent form: its state slice loaded to shared memory
// sm (S [dk][kDvSlice], then qs, ks [dk], red [2 nw], part [2 nw][32]:
// recurrent_smem_floats), the tokens run through it, the slice stored back.
// keep_o: each token's o also into shared memory after those ([n][32], as
// delta_recurrent's o_keep).
// Launched as a programmatic dependent of the conv (Tuning::
// cuda_gated_delta_pdl), the block reads the step's metadata, the head's
// constants and its state slice before pdl_wait(): the conv writes none of
// them (the state is this layer's rule's own, last written a step ago by a
// grid that completed before the conv started: the conv is launched
// normally), and only x, b, a after it. Launched normally, pdl_wait() is a
// no-op.
__device__ __forceinline__ DeltaBlock run_recurrent(const StepMeta& meta, const DeltaArgs& p,
                                                    float* sm, bool keep_o) {
  const DeltaBlock b = delta_block(meta, p);
  const int nw = blockDim.x >> 5;
  float* S = sm;
  float* qs = S + p.g.dk * kDvSlice;
  float* ks = qs + p.g.dk;
  float* red = ks + p.g.dk;
  float* part = red + 2 * nw;
  load_state(p, b, S);
  pdl_wait();
  __syncthreads();
  delta_recurrent(p, b, S, qs, ks, red, part, keep_o ? part + 2 * nw * 32 : nullptr);
  __syncthreads();
  store_state(p, b, S);
  return b;
}

// The recurrent form only (decode, short spans): 128 threads.
__global__ void __launch_bounds__(kRecurrentThreads)
    gated_delta_recurrent_kernel(StepMeta meta, DeltaArgs p) {
  extern __shared__ float4 delta_sm4[];  // 16-byte aligned (float4 loads)
  run_recurrent(meta, p, reinterpret_cast<float*>(delta_sm4), false);
}

// The gated RMSNorm times silu(z): a row's scale from its sum of squares ss
// (lane l over columns l, l + 32, ... in order, then warp_sum), and one
// element of it. Both gated norm kernels compute them here: the same bits.
__device__ __forceinline__ float gated_norm_inv(float ss, const GatedDeltaShape& g) {
  return rsqrtf(ss / static_cast<float>(g.dv) + g.eps);
}
__device__ __forceinline__ float gated_norm_out(const void* norm, int norm_dt, int e, float o,
                                                float inv, float zz) {
  return load_any(norm, norm_dt, e) * o * inv * (zz / (1.0f + expf(-zz)));
}

// The recurrent form and the gated RMSNorm times silu(z) in one launch
// (Tuning::cuda_gated_delta_fused_norm; every span shorter than
// kChunkedMinTokens): the ns = dv / 32 column slices of a (sequence, value
// head) are one cluster of ns blocks (rank = slice), each keeping its
// tokens' o in shared memory; after a cluster barrier every slice's lane l
// sums the squares of columns l, l + 32, ... in that order from the
// slices' shared memory, as gated_norm_kernel's lane l does over the row,
// then the same warp sum and expression: the same bits, one launch and one
// round trip of o fewer.
constexpr int kNormMaxTokens = kChunkedMinTokens;
constexpr int kMaxNormCluster = 8;  // slices a head: dv up to 256 (a portable cluster)
template <typename T>
__global__ void __launch_bounds__(kRecurrentThreads)
    gated_delta_recurrent_norm_kernel(StepMeta meta, DeltaArgs p, const float* z,
                                      const void* norm, int norm_dt, T* y, bool pdl_trigger) {
  namespace cg = cooperative_groups;
  if (pdl_trigger) pdl_launch_dependents();
  extern __shared__ float4 delta_sm4[];  // 16-byte aligned (float4 loads)
  float* sm = reinterpret_cast<float*>(delta_sm4);
  const int nw = blockDim.x >> 5;
  const DeltaBlock b = run_recurrent(meta, p, sm, true);
  const float* o_keep = sm + recurrent_smem_floats(p.g.dk, nw);
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every slice's o_keep written and visible
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int ns = (p.g.dv + kDvSlice - 1) / kDvSlice;
  const int c = b.c0 + lane;
  for (int i = w; i < b.n; i += nw) {
    float ss = 0;
    for (int j = 0; j < ns; ++j) {
      if (j * kDvSlice + lane < p.g.dv) {
        const float v = *cluster.map_shared_rank(o_keep + i * 32 + lane, j);
        ss += v * v;
      }
    }
    ss = warp_sum(ss);
    const float inv = gated_norm_inv(ss, p.g);
    if (c < p.g.dv) {
      const int64_t at = int64_t(b.first + i) * p.g.hv * p.g.dv + int64_t(b.h) * p.g.dv + c;
      y[at] = from_f<T>(gated_norm_out(norm, norm_dt, c, o_keep[i * 32 + lane], inv, z[at]));
    }
  }
  cluster.sync();  // no block leaves while a peer may still read its o_keep
}

// Spans of >= kChunkedMinTokens tokens in the chunked form, shorter ones
// (the decode rows of a mixed step) in the recurrent form: 256 threads.
__global__ void __launch_bounds__(kChunkThreads, 1)
    gated_delta_chunked_kernel(StepMeta meta, DeltaArgs p) {
  extern __shared__ float4 delta_sm4[];  // 16-byte aligned (float4 loads)
  float* sm = reinterpret_cast<float*>(delta_sm4);
  const DeltaBlock b = delta_block(meta, p);
  const int dk = p.g.dk;
  float* S = sm + 2 * kChunk * chunk_ldk(dk);
  load_state(p, b, S);
  __syncthreads();
  if (b.n >= kChunkedMinTokens) {
    delta_chunked(p, b, sm);
  } else {
    float* qs = sm + (chunk_smem_floats(dk) - (2 * dk + 2 * 8 + 2 * 8 * 32));
    delta_recurrent(p, b, S, qs, qs + dk, qs + 2 * dk, qs + 2 * dk + 16);
  }
  __syncthreads();
  store_state(p, b, S);
}

// y = norm_w * o * rsqrt(mean(o^2) + eps) * silu(z), one warp per (token,
// value head); o is x's V section (written by the delta rule). pdl_trigger
// (Tuning::cuda_pdl_trigger_small): the output projection after it (a
// programmatic dependent) may start copying its weights at once; it still
// waits for this grid before it reads y.
template <typename T>
__global__ void gated_norm_kernel(GatedDeltaShape g, int64_t rows, const float* x, const float* z,
                                  const void* norm, int norm_dt, T* y, bool pdl_trigger) {
  if (pdl_trigger) pdl_launch_dependents();
  const int64_t row = blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = row / g.hv;
  const int h = static_cast<int>(row % g.hv);
  const int64_t C = 2LL * g.hk * g.dk + int64_t(g.hv) * g.dv;
  const float* o = x + t * C + 2LL * g.hk * g.dk + int64_t(h) * g.dv;
  const int64_t at = t * int64_t(g.hv) * g.dv + int64_t(h) * g.dv;
  float ss = 0;
  for (int e = lane; e < g.dv; e += 32) ss += o[e] * o[e];
  ss = warp_sum(ss);
  const float inv = gated_norm_inv(ss, g);
  for (int e = lane; e < g.dv; e += 32)
    y[at + e] = from_f<T>(gated_norm_out(norm, norm_dt, e, o[e], inv, z[at + e]));
}

}  // namespace

Status launch_causal_conv_silu(cudaStream_t s, const StepMeta& meta, int64_t sequences, float* x,
                               int64_t conv_dim, const void* w, DType w_dt, int64_t kernel,
                               float* conv_state, bool pdl_trigger) {
  if (kernel < 1 || kernel > kMaxConv) return unsupported("causal conv: kernel must be 1..8");
  if (!small_ok(w_dt)) return bad_dtype("causal conv weight", w_dt);
  const int64_t n = sequences * conv_dim;
  if (n == 0) return Status::ok();
  const int threads = 256;
  const unsigned grid = static_cast<unsigned>((n + threads - 1) / threads);
  auto launch = [&](auto taps) {
    conv_silu_kernel<decltype(taps)::value><<<grid, threads, 0, s>>>(
        meta, sequences, x, conv_dim, w, dt_code(w_dt), conv_state, pdl_trigger);
  };
  switch (kernel) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 3: launch(std::integral_constant<int, 3>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 5: launch(std::integral_constant<int, 5>{}); break;
    case 6: launch(std::integral_constant<int, 6>{}); break;
    case 7: launch(std::integral_constant<int, 7>{}); break;
    default: launch(std::integral_constant<int, 8>{}); break;
  }
  return check_launch("conv_silu_kernel");
}

int64_t gated_delta_smem_bytes(const GatedDeltaShape& g) {
  return 4 * recurrent_smem_floats(g.dk, kRecurrentThreads / 32);
}

int64_t gated_delta_chunked_smem_bytes(const GatedDeltaShape& g) {
  if (g.dk % 4 != 0) return -1;
  return 4 * chunk_smem_floats(g.dk);
}

Status launch_gated_delta_rule(cudaStream_t s, const StepMeta& meta, int64_t sequences,
                               int64_t tokens, int64_t max_span, const GatedDeltaShape& g, float* x,
                               const float* z, const float* b, const float* a, const void* a_log,
                               DType a_log_dt, const void* dt_bias, DType dt_bias_dt,
                               const void* norm, DType norm_dt, float* delta_state, void* y,
                               DType act, bool pdl_trigger, bool fused_norm, bool pdl) {
  if (!small_ok(a_log_dt) || !small_ok(dt_bias_dt) || !small_ok(norm_dt))
    return unsupported("gated delta: small weights must be f32 / bf16 / f16");
  if (g.hk < 1 || g.hv % g.hk != 0 || g.dk < 1 || g.dv < 1)
    return unsupported("gated delta: bad head shape");
  const int64_t rsmem = gated_delta_smem_bytes(g);
  if (rsmem > 200 * 1024) return unsupported("gated delta: k_head_dim too large for shared memory");
  if (!dispatch_float(act, [](auto) {})) return bad_dtype("gated delta activation", act);
  const int64_t slices = (g.dv + kDvSlice - 1) / kDvSlice;
  const int64_t blocks = sequences * g.hv * slices;
  if (blocks == 0) return Status::ok();
  DeltaArgs p{g, b, a, a_log, dt_code(a_log_dt), dt_bias, dt_code(dt_bias_dt), x, delta_state};

  // The chunked kernel when some span is long enough and its shared memory
  // fits (prefill; never in a captured decode step).
  const int64_t csmem = gated_delta_chunked_smem_bytes(g);
  bool chunked = false;
  if (max_span >= kChunkedMinTokens && csmem > 0) {
    static const int optin = [] {
      int dev = 0, v = 0;
      if (cudaGetDevice(&dev) != cudaSuccess ||
          cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        v = 48 * 1024;
      return v;
    }();
    chunked = csmem <= optin;
  }
  if (chunked) {
    cudaFuncSetAttribute(gated_delta_chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(csmem));
    gated_delta_chunked_kernel<<<static_cast<unsigned>(blocks), kChunkThreads,
                                 static_cast<size_t>(csmem), s>>>(meta, p);
    FERRITE_RETURN_IF_ERROR(check_launch("gated_delta_chunked_kernel"));
  } else if (fused_norm && max_span < kNormMaxTokens &&
             (g.dv + kDvSlice - 1) / kDvSlice <= kMaxNormCluster) {
    // The recurrent form with the gated norm (one launch; see the kernel).
    const int ns = static_cast<int>((g.dv + kDvSlice - 1) / kDvSlice);
    const int64_t smem = rsmem + 4 * kNormMaxTokens * 32;
    cudaError_t err = cudaSuccess;
    const bool ok = dispatch_float(act, [&](auto tag) {
      using T = decltype(tag);
      auto kern = gated_delta_recurrent_norm_kernel<T>;
      if (smem > 48 * 1024)
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
      cudaLaunchAttribute attr[2];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = static_cast<unsigned>(ns);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[1].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(static_cast<unsigned>(blocks));
      cfg.blockDim = dim3(kRecurrentThreads);
      cfg.dynamicSmemBytes = static_cast<size_t>(smem);
      cfg.stream = s;
      cfg.attrs = attr;
      cfg.numAttrs = 2;
      err = cudaLaunchKernelEx(&cfg, kern, meta, p, z, norm, dt_code(norm_dt), static_cast<T*>(y),
                               pdl_trigger);
    });
    if (!ok) return bad_dtype("gated delta activation", act);
    if (err != cudaSuccess) return cuda_error(err, "gated_delta_recurrent_norm_kernel");
    return check_launch("gated_delta_recurrent_norm_kernel");
  } else {
    if (rsmem > 48 * 1024)
      cudaFuncSetAttribute(gated_delta_recurrent_kernel,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(rsmem));
    const cudaError_t err =
        launch_maybe_pdl(pdl, gated_delta_recurrent_kernel, dim3(static_cast<unsigned>(blocks)),
                         dim3(kRecurrentThreads), static_cast<size_t>(rsmem), s, meta, p);
    if (err != cudaSuccess) return cuda_error(err, "gated_delta_recurrent_kernel");
    FERRITE_RETURN_IF_ERROR(check_launch("gated_delta_recurrent_kernel"));
  }

  // The gated RMSNorm times silu(z), a warp per (token, value head).
  const int64_t rows = tokens * g.hv;
  if (rows == 0) return Status::ok();
  const bool ok = dispatch_float(act, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kWarps = 4;
    gated_norm_kernel<T><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kWarps * 32, 0,
                           s>>>(g, rows, x, z, norm, dt_code(norm_dt), static_cast<T*>(y),
                                pdl_trigger);
  });
  if (!ok) return bad_dtype("gated norm activation", act);
  return check_launch("gated_norm_kernel");
}

}  // namespace ferrite::cuda
