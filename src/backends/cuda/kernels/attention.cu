// Attention kernels over the paged KV cache:
//  - qk_rope_kv: bias, q/k RMS norm, RoPE (partial), K/V written to pages;
//  - decode: one block per (token, KV head, split); the query heads of the
//    KV head's group share each K/V tile (GQA); online softmax; splits are
//    merged by a combine kernel (flash-decoding). It is exact for any token
//    (prefill too), the reference path of every batch shape;
//  - prefill (attention_prefill.cu): tensor-core flash attention.
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/attention.cuh"

namespace ferrite::cuda {
namespace {

// Row h of token t's heads (the q heads, then K's, then V's, as qk_rope_kv's
// kernels number them): its kind (0 q, 1 k, 2 v), its head within the kind,
// where it lies in q / k / v (head_dim hd) and its bias (null without).
template <typename T, typename TW>
struct HeadRow {
  int kind, head;
  T* ptr;
  const TW* bias;
};
template <typename T, typename TW>
__device__ __forceinline__ HeadRow<T, TW> head_row(const AttentionShape& a, int64_t t, int h,
                                                   int hd, T* q, T* k, T* v, const TW* q_bias,
                                                   const TW* k_bias, const TW* v_bias) {
  if (h < a.num_heads) {
    const int64_t off = static_cast<int64_t>(h) * a.q_stride;
    return {0, h, q + t * a.q_row + off, q_bias ? q_bias + off : nullptr};
  }
  const int kind = h < a.num_heads + a.num_kv_heads ? 1 : 2;
  const int head = h - a.num_heads - (kind == 2 ? a.num_kv_heads : 0);
  const int64_t off = static_cast<int64_t>(head) * hd;
  const TW* b = kind == 1 ? k_bias : v_bias;
  return {kind, head, (kind == 1 ? k : v) + t * a.num_kv_heads * hd + off, b ? b + off : nullptr};
}

template <typename T, typename TW>
__global__ void qk_rope_kv_kernel(AttentionShape a, StepMeta meta, int32_t page_size, T* q, T* k,
                                  T* v, const TW* q_norm, const TW* k_norm, const TW* q_bias,
                                  const TW* k_bias, const TW* v_bias, T* k_cache, T* v_cache) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float vals[256];
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int hd = a.head_dim;
  const int32_t seq = meta.token_seq[t];
  const int32_t pos = meta.token_pos[t];
  const bool real = meta.seq_len[seq] > 0;
  const auto [kind, head, ptr, bias] = head_row(a, t, h, hd, q, k, v, q_bias, k_bias, v_bias);
  float ss = 0;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float x = to_f(ptr[d]) + (bias ? to_f(bias[d]) : 0.0f);
    vals[d] = x;
    ss += x * x;
    if (kind == 0 && a.output_gate && bias) ptr[hd + d] = from_f<T>(to_f(ptr[hd + d]) + to_f(bias[hd + d]));
  }
  if (a.qk_norm && kind < 2) {
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
      float tot = 0;
      for (int i = 0; i < (blockDim.x + 31) / 32; ++i) tot += red[i];
      red[0] = rsqrtf(tot / static_cast<float>(hd) + a.eps);
    }
    __syncthreads();
    const float inv = red[0];
    const TW* w = kind == 0 ? q_norm : k_norm;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float wi = to_f(w[d]);
      vals[d] = vals[d] * inv * (a.zero_centred ? 1.0f + wi : wi);
    }
  }
  __syncthreads();
  if (kind < 2) {
    const int half = a.rope_dim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const float angle = static_cast<float>(pos) * a.inv_freq[i];
      const float c = cosf(angle), s = sinf(angle);
      const float x0 = vals[i], x1 = vals[i + half];
      vals[i] = x0 * c - x1 * s;
      vals[i + half] = x1 * c + x0 * s;
    }
    __syncthreads();
  }
  if (kind == 0) {
    for (int d = threadIdx.x; d < hd; d += blockDim.x) ptr[d] = from_f<T>(vals[d]);
  } else if (real) {
    T* cache = kind == 1 ? k_cache : v_cache;
    const int64_t base = paged_kv_offset(meta, seq, pos, page_size, a.num_kv_heads, hd, head);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) cache[base + d] = from_f<T>(vals[d]);
  }
}

// The same for 16-bit activations and head_dim = 32 D (D = 2, 4, 8): a warp
// per (token, head) row, 8 rows a block, each lane D contiguous values
// loaded and stored as one access; the norm's sum is the lane's fmaf chain
// then a butterfly, and RoPE's pair comes through the warp's shared row, as
// in the fused decode kernel (attention_decode.cu), so that a prompt's K/V
// and a decoded token's are computed the same way. (The block-per-row
// kernel above spent ~280 us a layer on a 4,096-token Qwen3-8B prefill,
// measured on the H200: 196,608 blocks of 128 threads, 3 barriers each.)
constexpr int kRopeWarps = 8;
template <typename T, typename TW, int D>
__global__ void __launch_bounds__(kRopeWarps * 32)
    qk_rope_kv_warp_kernel(AttentionShape a, StepMeta meta, int32_t page_size, int64_t rows,
                           T* q, T* k, T* v, const TW* q_norm, const TW* k_norm,
                           const TW* q_bias, const TW* k_bias, const TW* v_bias, T* k_cache,
                           T* v_cache) {
  constexpr int HD = 32 * D;
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float pair_s[kRopeWarps][HD];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRopeWarps + warp;
  if (r >= rows) return;  // warp-uniform; no block barrier follows
  const int heads = a.num_heads + 2 * a.num_kv_heads;
  const int64_t t = r / heads;
  const int h = static_cast<int>(r % heads);
  const int32_t seq = meta.token_seq[t];
  const int32_t pos = meta.token_pos[t];
  const bool real = meta.seq_len[seq] > 0;
  const auto [kind, head, ptr, bias] = head_row(a, t, h, HD, q, k, v, q_bias, k_bias, v_bias);
  const int d0 = lane * D;
  float x[D];
  uint32_t raw[D / 2];
  load_words<D>(ptr + d0, raw);
  unpack_words<T, D>(raw, x);
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < D; ++e) {
    if (bias) x[e] += to_f(bias[d0 + e]);
    ss = fmaf(x[e], x[e], ss);
  }
  if (kind == 0 && a.output_gate && bias) {  // the gate half, biased in place
    float g[D];
    load_words<D>(ptr + HD + d0, raw);
    unpack_words<T, D>(raw, g);
#pragma unroll
    for (int e = 0; e < D; ++e) g[e] += to_f(bias[HD + d0 + e]);
    store_words<T, D>(ptr + HD + d0, g);
  }
  if (kind < 2 && a.qk_norm) {
    const TW* w = kind == 0 ? q_norm : k_norm;
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(HD) + a.eps);
#pragma unroll
    for (int e = 0; e < D; ++e) {
      const float wi = to_f(w[d0 + e]);
      x[e] = x[e] * inv * (a.zero_centred ? 1.0f + wi : wi);
    }
  }
  const int half = a.rope_dim / 2;
  if (kind < 2 && half > 0) {
    float* row = pair_s[warp];
#pragma unroll
    for (int e = 0; e < D; ++e) row[d0 + e] = x[e];
    __syncwarp();
    float y[D];
#pragma unroll
    for (int e = 0; e < D; ++e) {
      // x cos - pair sin (d < half), x cos + pair sin (half <= d < 2 half);
      // dims past 2 half keep x.
      const int d = d0 + e;
      if (d < 2 * half) {
        const float angle = static_cast<float>(pos) * a.inv_freq[d < half ? d : d - half];
        const float c = cosf(angle), sn = sinf(angle);
        y[e] = d < half ? x[e] * c - row[d + half] * sn : x[e] * c + row[d - half] * sn;
      } else {
        y[e] = x[e];
      }
    }
#pragma unroll
    for (int e = 0; e < D; ++e) x[e] = y[e];
  }
  if (kind == 0) {
    store_words<T, D>(ptr + d0, x);
  } else if (real) {
    T* cache = kind == 1 ? k_cache : v_cache;
    store_words<T, D>(cache + paged_kv_offset(meta, seq, pos, page_size, a.num_kv_heads, HD, head) + d0, x);
  }
}

// The same with a warp per token over all its heads (Tuning::
// cuda_rope_token_warps): the token's metadata, cache slot, RoPE cos / sin
// and norm weights once a token instead of once a head, and kRopeBatch
// heads' rows loaded before any is computed (the warp-per-row kernel waits
// on a chain of dependent loads per row: ~125 us a layer on a 4,096-token
// Qwen3-8B prefill, measured on the H200, for ~100 MB of traffic). RoPE's
// pair comes from lane +- hl (hl = rope_dim / 2 / D, whole: the launcher
// checks), every element as the warp-per-row kernel computes it.
constexpr int kRopeBatch = 4;
template <typename T, typename TW, int D>
__global__ void __launch_bounds__(kRopeWarps * 32)
    qk_rope_kv_token_kernel(AttentionShape a, StepMeta meta, int32_t page_size, int64_t tokens,
                            T* q, T* k, T* v, const TW* q_norm, const TW* k_norm,
                            const TW* q_bias, const TW* k_bias, const TW* v_bias, T* k_cache,
                            T* v_cache) {
  constexpr int HD = 32 * D;
  pdl_launch_dependents();
  pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRopeWarps + warp;
  if (t >= tokens) return;
  const int nh = a.num_heads, nkv = a.num_kv_heads, heads = nh + 2 * nkv;
  const int32_t seq = meta.token_seq[t];
  const int32_t pos = meta.token_pos[t];
  const bool real = meta.seq_len[seq] > 0;
  const int64_t slot = real ? paged_kv_offset(meta, seq, pos, page_size, nkv, HD, 0) : 0;
  const int d0 = lane * D;
  const int half = a.rope_dim / 2, hl = half / D;
  // This lane's dims are all below half, all in [half, 2 half), or all past.
  const int pair_lane = lane < hl ? lane + hl : lane < 2 * hl ? lane - hl : lane;
  const bool rope_lo = lane < hl, rope_any = lane < 2 * hl;
  float cs[D], sn[D], qn[D], kn[D];
#pragma unroll
  for (int e = 0; e < D; ++e) {
    const int d = d0 + e;
    cs[e] = 1.0f;
    sn[e] = 0.0f;
    if (rope_any) {
      const float angle = static_cast<float>(pos) * a.inv_freq[d < half ? d : d - half];
      cs[e] = cosf(angle);
      sn[e] = sinf(angle);
    }
    const float wq = a.qk_norm ? to_f(q_norm[d]) : 0.0f, wk = a.qk_norm ? to_f(k_norm[d]) : 0.0f;
    qn[e] = a.zero_centred ? 1.0f + wq : wq;
    kn[e] = a.zero_centred ? 1.0f + wk : wk;
  }
  for (int h0 = 0; h0 < heads; h0 += kRopeBatch) {
    float x[kRopeBatch][D];
    T* dst[kRopeBatch];
    const TW* bias[kRopeBatch];
    int kind[kRopeBatch];
#pragma unroll
    for (int b = 0; b < kRopeBatch; ++b) {
      const int h = h0 + b;
      T* src = nullptr;
      kind[b] = 3;  // past the last head
      bias[b] = nullptr;
      dst[b] = nullptr;
      if (h < heads) {
        const HeadRow<T, TW> row = head_row(a, t, h, HD, q, k, v, q_bias, k_bias, v_bias);
        kind[b] = row.kind;
        src = row.ptr;
        bias[b] = row.bias;
        if (row.kind == 0)
          dst[b] = src;  // q in place
        else if (real)
          dst[b] = (row.kind == 1 ? k_cache : v_cache) + slot + static_cast<int64_t>(row.head) * HD;
      }
      if (src) {
        uint32_t raw[D / 2];
        load_words<D>(src + d0, raw);
        unpack_words<T, D>(raw, x[b]);
      } else {
#pragma unroll
        for (int e = 0; e < D; ++e) x[b][e] = 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kRopeBatch; ++b) {
      if (kind[b] == 3) continue;  // warp-uniform
      float ss = 0.0f;
#pragma unroll
      for (int e = 0; e < D; ++e) {
        if (bias[b]) x[b][e] += to_f(bias[b][d0 + e]);
        ss = fmaf(x[b][e], x[b][e], ss);
      }
      if (kind[b] == 0 && a.output_gate && bias[b]) {  // the gate half, biased in place
        float g[D];
        uint32_t raw[D / 2];
        load_words<D>(dst[b] + HD + d0, raw);
        unpack_words<T, D>(raw, g);
#pragma unroll
        for (int e = 0; e < D; ++e) g[e] += to_f(bias[b][HD + d0 + e]);
        store_words<T, D>(dst[b] + HD + d0, g);
      }
      if (kind[b] < 2 && a.qk_norm) {
        const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(HD) + a.eps);
#pragma unroll
        for (int e = 0; e < D; ++e) x[b][e] = x[b][e] * inv * (kind[b] == 0 ? qn[e] : kn[e]);
      }
      if (kind[b] < 2 && half > 0) {
        float y[D];
#pragma unroll
        for (int e = 0; e < D; ++e) {
          const float p = __shfl_sync(0xffffffffu, x[b][e], pair_lane);
          y[e] = !rope_any ? x[b][e]
                 : rope_lo ? x[b][e] * cs[e] - p * sn[e]
                           : x[b][e] * cs[e] + p * sn[e];
        }
#pragma unroll
        for (int e = 0; e < D; ++e) x[b][e] = y[e];
      }
      if (dst[b]) store_words<T, D>(dst[b] + d0, x[b]);
    }
  }
}

constexpr int kBn = 32;  // positions per K/V tile in the decode kernel

template <typename T>
__global__ void __launch_bounds__(128) attention_decode_kernel(AttentionShape a, StepMeta meta,
                                                               int32_t page_size, const T* q,
                                                               const T* k_cache,
                                                               const T* v_cache, T* out,
                                                               int splits, float* partials) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ float smem[];
  const int hd = a.head_dim;
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  float* q_s = smem;                      // [group, hd]
  float* k_s = q_s + group * hd;          // [kBn, hd + 1]
  float* v_s = k_s + kBn * (hd + 1);      // [kBn, hd]
  float* p_s = v_s + kBn * hd;            // [group, kBn]
  float* o_s = p_s + group * kBn;         // [group, hd]
  float* m_s = o_s + group * hd;          // [group]
  float* l_s = m_s + group;               // [group]
  float* alpha_s = l_s + group;           // [group]

  const int32_t seq = meta.token_seq[t];
  const int32_t len = meta.seq_len[seq] > 0 ? meta.token_pos[t] + 1 : 0;
  const int tiles = (len + kBn - 1) / kBn;
  const int per_split = (tiles + splits - 1) / splits;
  const int tile0 = split * per_split;
  const int tile1 = min(tiles, tile0 + per_split);

  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    const int h = kvh * group + g;
    q_s[i] = to_f(q[t * a.q_row + static_cast<int64_t>(h) * a.q_stride + d]) * a.scale;
    o_s[i] = 0.0f;
  }
  for (int g = threadIdx.x; g < group; g += blockDim.x) {
    m_s[g] = -INFINITY;
    l_s[g] = 0.0f;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int tile = tile0; tile < tile1; ++tile) {
    const int p0 = tile * kBn;
    if (sizeof(T) == 2 && hd % 8 == 0) {
      // 16-byte loads: 8 elements of one position per thread and step.
      const int vecs = hd / 8;
      for (int i = threadIdx.x; i < kBn * vecs; i += blockDim.x) {
        const int j = i / vecs, d = (i % vecs) * 8;
        const int pos = p0 + j;
        float kf[8], vf[8];
        if (pos < len) {
          const int64_t base =
              paged_kv_offset(meta, seq, pos, page_size, a.num_kv_heads, hd, kvh) + d;
          const uint4 kraw = *reinterpret_cast<const uint4*>(k_cache + base);
          const uint4 vraw = *reinterpret_cast<const uint4*>(v_cache + base);
          const T* kp = reinterpret_cast<const T*>(&kraw);
          const T* vp = reinterpret_cast<const T*>(&vraw);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            kf[e] = to_f(kp[e]);
            vf[e] = to_f(vp[e]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) kf[e] = vf[e] = 0.0f;
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          k_s[j * (hd + 1) + d + e] = kf[e];
          v_s[j * hd + d + e] = vf[e];
        }
      }
    } else {
      for (int i = threadIdx.x; i < kBn * hd; i += blockDim.x) {
        const int j = i / hd, d = i % hd;
        const int pos = p0 + j;
        float kv = 0.0f, vv = 0.0f;
        if (pos < len) {
          const int64_t base = paged_kv_offset(meta, seq, pos, page_size, a.num_kv_heads, hd, kvh);
          kv = to_f(k_cache[base + d]);
          vv = to_f(v_cache[base + d]);
        }
        k_s[j * (hd + 1) + d] = kv;
        v_s[j * hd + d] = vv;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * kBn; i += blockDim.x) {
      const int g = i / kBn, j = i % kBn;
      float sc = -INFINITY;
      if (p0 + j < len) {
        sc = 0.0f;
        const float* qg = q_s + g * hd;
        const float* kj = k_s + j * (hd + 1);
        for (int d = 0; d < hd; ++d) sc = fmaf(qg[d], kj[d], sc);
      }
      p_s[i] = sc;
    }
    __syncthreads();
    for (int g = warp; g < group; g += warps) {
      const float sc = p_s[g * kBn + lane];
      const float mx = warp_max(sc);
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, mx);
      const float p = sc == -INFINITY ? 0.0f : expf(sc - m_new);
      const float sum = warp_sum(p);
      p_s[g * kBn + lane] = p;
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        alpha_s[g] = alpha;
        l_s[g] = l_s[g] * alpha + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
      const int g = i / hd, d = i % hd;
      float acc = o_s[i] * alpha_s[g];
      const float* pg = p_s + g * kBn;
#pragma unroll 8
      for (int j = 0; j < kBn; ++j) acc = fmaf(pg[j], v_s[j * hd + d], acc);
      o_s[i] = acc;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    const int h = kvh * group + g;
    if (splits == 1) {
      float val = l_s[g] > 0.0f ? o_s[i] / l_s[g] : 0.0f;
      if (a.output_gate) {
        const float gate = to_f(q[t * a.q_row + static_cast<int64_t>(h) * a.q_stride + hd + d]);
        val *= 1.0f / (1.0f + expf(-gate));
      }
      out[(t * a.num_heads + h) * hd + d] = from_f<T>(val);
    } else {
      float* part = partials + ((t * a.num_heads + h) * splits + split) * (hd + 2);
      part[d] = o_s[i];
      if (d == 0) {
        part[hd] = m_s[g];
        part[hd + 1] = l_s[g];
      }
    }
  }
}

template <typename T>
__global__ void attention_combine_kernel(AttentionShape a, const T* q, T* out, int splits,
                                         const float* partials) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int hd = a.head_dim;
  const float* base = partials + (t * a.num_heads + h) * splits * (hd + 2);
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, base[s * (hd + 2) + hd]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    if (mx != -INFINITY) {
      for (int s = 0; s < splits; ++s) {
        const float* part = base + s * (hd + 2);
        const float m = part[hd];
        if (m == -INFINITY) continue;
        const float w = expf(m - mx);
        num += w * part[d];
        den += w * part[hd + 1];
      }
    }
    float val = den > 0.0f ? num / den : 0.0f;
    if (a.output_gate) {
      const float gate = to_f(q[t * a.q_row + static_cast<int64_t>(h) * a.q_stride + hd + d]);
      val *= 1.0f / (1.0f + expf(-gate));
    }
    out[(t * a.num_heads + h) * hd + d] = from_f<T>(val);
  }
}

}  // namespace

Status launch_qk_rope_kv(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                         int32_t page_size, int64_t tokens, void* q, void* k, void* v, DType act,
                         const void* q_norm, const void* k_norm, DType norm_dt, const void* q_bias,
                         const void* k_bias, const void* v_bias, DType bias_dt, void* k_cache,
                         void* v_cache, bool token_warps) {
  if (tokens == 0) return Status::ok();
  if (a.head_dim > 256 || a.rope_dim > 256) return unsupported("attention: head_dim > 256");
  if ((q_bias || k_bias || v_bias) && (q_norm || k_norm) && bias_dt != norm_dt)
    return unsupported("attention: bias and norm weights of different dtypes");
  const DType w_dt = (q_norm || k_norm) ? norm_dt : bias_dt;
  // The warp-per-row kernel: 16-bit activations, head_dim 64 / 128 / 256,
  // rows whose D values a lane loads as one aligned access.
  const int d = a.head_dim / 32;
  auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % (2 * d) == 0; };
  const bool warp_rows = (act == DType::kBF16 || act == DType::kF16) && a.head_dim % 32 == 0 &&
                         (d == 2 || d == 4 || d == 8) && aligned(q) && aligned(k) && aligned(v) &&
                         aligned(k_cache) && aligned(v_cache) && a.q_stride % d == 0 &&
                         a.q_row % d == 0;
  if (warp_rows) {
    // A warp per token (token_warps, where RoPE's pairs are whole lanes
    // apart) or per (token, head) row.
    const bool per_token = token_warps && (a.rope_dim / 2) % d == 0;
    const int64_t warps = per_token ? tokens : tokens * (a.num_heads + 2 * a.num_kv_heads);
    const unsigned blocks = static_cast<unsigned>((warps + kRopeWarps - 1) / kRopeWarps);
    bool ok = dispatch_float(act, [&](auto ta) {
      using T = decltype(ta);
      if constexpr (sizeof(T) == 2) {
        dispatch_float(w_dt, [&](auto tw) {
          using TW = decltype(tw);
          auto go = [&](auto dc) {
            constexpr int D = decltype(dc)::value;
            (void)launch_pdl(per_token ? qk_rope_kv_token_kernel<T, TW, D>
                                       : qk_rope_kv_warp_kernel<T, TW, D>,
                             blocks, kRopeWarps * 32, 0, s, a, meta, page_size, warps,
                             static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v),
                             static_cast<const TW*>(q_norm), static_cast<const TW*>(k_norm),
                             static_cast<const TW*>(q_bias), static_cast<const TW*>(k_bias),
                             static_cast<const TW*>(v_bias), static_cast<T*>(k_cache),
                             static_cast<T*>(v_cache));
          };
          if (d == 2) go(std::integral_constant<int, 2>{});
          else if (d == 4) go(std::integral_constant<int, 4>{});
          else go(std::integral_constant<int, 8>{});
        });
      }
    });
    if (!ok) return bad_dtype("qk_rope_kv", act);
    return check_launch("qk_rope_kv");
  }
  dim3 grid(static_cast<unsigned>(tokens), a.num_heads + 2 * a.num_kv_heads);
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    dispatch_float(w_dt, [&](auto tw) {
      using TW = decltype(tw);
      (void)launch_pdl(qk_rope_kv_kernel<T, TW>, grid, 128, 0, s,
          a, meta, page_size, static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v),
          static_cast<const TW*>(q_norm), static_cast<const TW*>(k_norm),
          static_cast<const TW*>(q_bias), static_cast<const TW*>(k_bias),
          static_cast<const TW*>(v_bias), static_cast<T*>(k_cache), static_cast<T*>(v_cache));
    });
  });
  if (!ok) return bad_dtype("qk_rope_kv", act);
  return check_launch("qk_rope_kv");
}

Status launch_attention_decode(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                               int32_t page_size, int64_t tokens, const void* q, DType act,
                               const void* k_cache, const void* v_cache, void* out, int splits,
                               float* partials) {
  if (tokens == 0) return Status::ok();
  const int group = a.num_heads / a.num_kv_heads;
  const int hd = a.head_dim;
  const size_t smem = sizeof(float) * (group * hd * 2 + kBn * (hd + 1) + kBn * hd +
                                       group * kBn + 3 * group);
  if (smem > 200 * 1024) return unsupported("attention decode: head group too large");
  dim3 grid(static_cast<unsigned>(tokens), a.num_kv_heads, splits);
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    auto kern = attention_decode_kernel<T>;
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    (void)launch_pdl(kern, grid, 128, smem, s, a, meta, page_size, static_cast<const T*>(q),
                                 static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
                                 static_cast<T*>(out), splits, partials);
  });
  if (!ok) return bad_dtype("attention decode", act);
  FERRITE_RETURN_IF_ERROR(check_launch("attention_decode"));
  return splits > 1 ? launch_attention_combine(s, a, tokens, q, act, out, splits, partials)
                    : Status::ok();
}

Status launch_attention_combine(cudaStream_t s, const AttentionShape& a, int64_t tokens,
                                const void* q, DType act, void* out, int splits,
                                const float* partials) {
  if (tokens == 0) return Status::ok();
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    (void)launch_pdl(attention_combine_kernel<T>, dim3(static_cast<unsigned>(tokens), a.num_heads),
                     128, 0, s, a, static_cast<const T*>(q), static_cast<T*>(out), splits, partials);
  });
  if (!ok) return bad_dtype("attention combine", act);
  return check_launch("attention_combine");
}

}  // namespace ferrite::cuda
