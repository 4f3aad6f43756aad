// Fused decode attention: for a step in which every token is its sequence's
// newest position, one kernel does what qk_rope_kv + attention_decode (+
// the combine when the KV is not split) do in three: bias, q/k RMS norm and
// RoPE of the token's q heads and its new K/V, the K/V write into the paged
// cache, and the attention over the cached positions.
//
// Why: at batch 1 a decode step of an 8B model spends ~15 us per layer in
// those three small kernels (ncu, H200), most of it launch and dependent-
// load latency, against ~100 us of weight streaming; the 0.6B model spends
// a third of its step there.
//
// Layout: one block of 8 warps per (token, KV head, part, split); a part is
// up to 4 query heads of the KV head's group (groups of 5-8 heads take two
// blocks, reading the same K/V from L2: registers and shuffles grow with
// the heads a block holds). Each warp takes
// kU consecutive positions per round; a lane holds HD/32 contiguous dims of
// q, K, V, so a K row is one coalesced 2*HD-byte read per warp. Scores of
// the kU positions and the group's heads are reduced with independent
// butterflies (ILP), then an online-softmax update per head. The page table,
// the first round of K/V (positions written by earlier steps, which no
// kernel of this step touches), the bias and norm weights and RoPE's cos /
// sin of the position are loaded or computed before pdl_wait(). The warps'
// (max, sum, acc) are merged in shared memory (each head's factors once);
// with one split the block writes the output (and the output gate),
// otherwise the (acc, max, sum) partials. With `counters` the last block of a (token, KV head) to finish
// merges the splits' partials itself (in split order: deterministic) and
// resets its counter; without, attention_combine merges them (a launch).
//
// Numerics follow qk_rope_kv + attention_decode: f32 throughout, q and the
// new K/V rounded to the activation dtype after RoPE, scores scaled q.K.
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/attention_decode.cuh"
#include "backends/cuda/kernels/attention_decode_rows.cuh"
#include "backends/cuda/kernels/warp_reduce_scatter.h"

namespace ferrite::cuda {
namespace {

constexpr int kWarps = 8;

// Shared memory floats of the kernel for (HD, MAXG).
template <int HD, int MAXG>
constexpr int fused_smem_floats() {
  return MAXG * HD + 2 * HD + 3 * kWarps * MAXG + 2 * MAXG + kWarps * MAXG * HD;
}

// Two blocks per SM where the registers allow it without spilling (large
// batches fill the GPU with blocks; up to 4 heads x 128 dims).
// kScatter (Tuning::cuda_decode_reduce_scatter): the scores' warp sums by
// warp::reduce_scatter_sum (warp_reduce_scatter.h) and each position's V
// unpacked once for all heads; bitwise the same outputs.
template <typename T, int HD, int MAXG, bool kScatter = false>
__global__ void __launch_bounds__(kWarps * 32, MAXG * HD <= 512 ? 2 : 1)
    attention_decode_fused_kernel(AttentionShape a, StepMeta meta, int32_t page_size, T* q,
                                  const T* k, const T* v, DecodeWeights wts, T* k_cache,
                                  T* v_cache, T* out, int splits, float* partials,
                                  int32_t* counters) {
  constexpr int D = HD / 32;                  // dims per lane
  constexpr int kU = MAXG * D <= 8 ? 8 : 4;  // positions per warp and round
  extern __shared__ float smem[];
  float* q_s = smem;                       // [MAXG, HD] roped, rounded, scaled
  float* kv_s = q_s + MAXG * HD;           // [2, HD] the new K and V, rounded
  float* m_w = kv_s + 2 * HD;              // [kWarps, MAXG]
  float* l_w = m_w + kWarps * MAXG;        // [kWarps, MAXG]
  float* f_w = l_w + kWarps * MAXG;        // [kWarps, MAXG] exp(m_w - max)
  float* mx_s = f_w + kWarps * MAXG;       // [MAXG] the heads' max over warps
  float* den_s = mx_s + MAXG;              // [MAXG] and their merged sums
  float* o_w = den_s + MAXG;               // [kWarps, MAXG, HD]

  const int64_t t = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;
  const int parts = gridDim.y / a.num_kv_heads;  // fused_decode_parts(group)
  const int gsub = (group + parts - 1) / parts;  // <= MAXG
  const int kvh = blockIdx.y / parts, part = blockIdx.y % parts, split = blockIdx.z;
  const int g0 = part * gsub;               // the block's first head in the group
  const int ng = min(gsub, group - g0);     // and its number of heads
  const int h0 = kvh * group + g0;          // first query head of the block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nkv = a.num_kv_heads;

  // Step metadata and the cached K/V are not written by this step's earlier
  // kernels: read them before waiting for the Q/K/V projection.
  const int32_t seq = meta.token_seq[t];
  const int32_t pos = meta.token_pos[t];
  const bool real = meta.seq_len[seq] > 0;
  const int len = real ? pos + 1 : 0;
  const int per_split = (len + splits - 1) / splits;
  const int p0 = min(len, split * per_split), p1 = min(len, p0 + per_split);
  constexpr int kRound = kWarps * kU;
  const int rounds = (p1 - p0 + kRound - 1) / kRound;

  uint32_t kw[kU][D / 2], vw[kU][D / 2];
  auto load_round = [&](int r) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int p = p0 + (r * kWarps + warp) * kU + u;
      if (p < p1 && p != pos) {
        const int64_t base = paged_kv_offset(meta, seq, p, page_size, nkv, HD, kvh) + lane * D;
        load_words<D>(k_cache + base, kw[u]);
        load_words<D>(v_cache + base, vw[u]);
      } else {
#pragma unroll
        for (int i = 0; i < D / 2; ++i) kw[u][i] = vw[u][i] = 0u;
      }
    }
  };
  if (rounds > 0) load_round(0);

  // --- the block's q heads, the token's new K and V ------------------------------
  // Row i < ng: q head h0+i; row ng: K; row ng+1: V; warp i takes row i
  // (ng + 2 <= kWarps). Bias, RMS norm (q, k), then RoPE through shared
  // memory (the pair of dim d is d +- rope_dim/2, in another lane). What
  // depends only on weights and the position (the bias and norm weights,
  // RoPE's cos / sin) is read and computed before the wait, so that it
  // overlaps the Q/K/V projection still running.
  static_assert(MAXG + 2 <= kWarps, "a warp per row");
  const int half = a.rope_dim / 2;
  const int row = warp;
  const DecodeRowRole rr = decode_row_role(a, wts, row, ng, h0, kvh, HD);
  float bv[D], nw[D], cs[D], sn[D];
#pragma unroll
  for (int e = 0; e < D; ++e) {
    const int d = lane * D + e;
    bv[e] = rr.has_row && rr.bias ? load_any(rr.bias, wts.bias_dt, rr.bias_off + d) : 0.0f;
    const float wi = rr.has_row && rr.norm ? load_any(rr.norm_w, wts.norm_dt, d) : 0.0f;
    nw[e] = a.zero_centred ? 1.0f + wi : wi;
    cs[e] = 1.0f;
    sn[e] = 0.0f;
    if (rr.has_row && rr.rope && d < 2 * half) {
      const float angle = static_cast<float>(pos) * a.inv_freq[d < half ? d : d - half];
      cs[e] = cosf(angle);
      sn[e] = sinf(angle);
    }
  }
  pdl_launch_dependents();
  pdl_wait();

  if (rr.has_row) {
    const T* src;
    float* dst = rr.kind == 0 ? q_s + row * HD : kv_s + (rr.kind - 1) * HD;
    if (rr.kind == 0)
      src = q + t * a.q_row + static_cast<int64_t>(h0 + row) * a.q_stride;
    else
      src = (rr.kind == 1 ? k : v) + (t * nkv + kvh) * HD;
    float x[D];
    uint32_t raw[D / 2];
    load_words<D>(src + lane * D, raw);
    unpack_words<T, D>(raw, x);
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < D; ++e) {
      if (rr.bias) x[e] += bv[e];
      ss = fmaf(x[e], x[e], ss);
    }
    if (rr.norm) {
      const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(HD) + a.eps);
#pragma unroll
      for (int e = 0; e < D; ++e) x[e] = x[e] * inv * nw[e];
    }
    if (rr.rope) {
#pragma unroll
      for (int e = 0; e < D; ++e) dst[lane * D + e] = x[e];
      __syncwarp();
      float y[D];
#pragma unroll
      for (int e = 0; e < D; ++e) {
        // As qk_rope_kv: x cos - pair sin (d < half), x cos + pair sin
        // (half <= d < 2 half); dims past 2 half keep x.
        const int d = lane * D + e;
        if (d < half)
          y[e] = x[e] * cs[e] - dst[d + half] * sn[e];
        else if (d < 2 * half)
          y[e] = x[e] * cs[e] + dst[d - half] * sn[e];
        else
          y[e] = x[e];
      }
      __syncwarp();
#pragma unroll
      for (int e = 0; e < D; ++e) x[e] = y[e];
    }
    // Round as the cache (and the unfused q buffer) store them; part 0 of
    // the split holding the newest position writes K / V to the cache.
    T* slot = nullptr;
    if (rr.kind > 0 && real && part == 0 && pos >= p0 && pos < p1)
      slot = (rr.kind == 1 ? k_cache : v_cache) +
             paged_kv_offset(meta, seq, pos, page_size, nkv, HD, kvh) + lane * D;
#pragma unroll
    for (int e = 0; e < D; ++e) {
      const T r = from_f<T>(x[e]);
      dst[lane * D + e] = rr.kind == 0 ? to_f(r) * a.scale : to_f(r);
      if (slot) slot[e] = r;
    }
    // The combine kernel applies the output gate from q: it must see the
    // biased gate, as qk_rope_kv leaves it in place.
    if (rr.kind == 0 && a.output_gate && wts.q_bias && splits > 1 && !counters && split == 0) {
      T* g = q + t * a.q_row + static_cast<int64_t>(h0 + row) * a.q_stride + HD;
#pragma unroll
      for (int e = 0; e < D; ++e) {
        const int d = lane * D + e;
        g[d] = from_f<T>(to_f(g[d]) + load_any(wts.q_bias, wts.bias_dt, rr.bias_off + HD + d));
      }
    }
  }
  __syncthreads();

  // --- attention over [p0, p1) ------------------------------------------------
  float qf[MAXG][D], o[MAXG][D], m[MAXG], l[MAXG];
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < D; ++e) {
      qf[g][e] = g < ng ? q_s[g * HD + lane * D + e] : 0.0f;
      o[g][e] = 0.0f;
    }
  }
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) load_round(r);
    float s[kU][MAXG];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int p = p0 + (r * kWarps + warp) * kU + u;
      float kf[D];
      if (p == pos) {
#pragma unroll
        for (int e = 0; e < D; ++e) kf[e] = kv_s[lane * D + e];
      } else {
        unpack_words<T, D>(kw[u], kf);
      }
#pragma unroll
      for (int g = 0; g < MAXG; ++g) {
        float acc = 0.0f;
#pragma unroll
        for (int e = 0; e < D; ++e) acc = fmaf(qf[g][e], kf[e], acc);
        s[u][g] = acc;
      }
    }
    if constexpr (kScatter) {
      float flat[kU * MAXG];
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int g = 0; g < MAXG; ++g) flat[u * MAXG + g] = s[u][g];
      auto shfl_xor = [](float x, int off) { return __shfl_xor_sync(0xffffffffu, x, off); };
      const float own = warp::reduce_scatter_sum<kU * MAXG>(flat, lane, shfl_xor);
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int g = 0; g < MAXG; ++g)
          s[u][g] = __shfl_sync(0xffffffffu, own, warp::owned_lane<kU * MAXG>(u * MAXG + g));
    } else {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
        for (int u = 0; u < kU; ++u) {
#pragma unroll
          for (int g = 0; g < MAXG; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
        }
      }
    }
    // The lane's V dims of the round's position u (the new V from shared
    // memory): once for all heads (kScatter), else per head below.
    auto load_v = [&](int u, float (&vf)[D]) {
      const int p = p0 + (r * kWarps + warp) * kU + u;
      if (p == pos) {
#pragma unroll
        for (int e = 0; e < D; ++e) vf[e] = kv_s[HD + lane * D + e];
      } else {
        unpack_words<T, D>(vw[u], vf);
      }
    };
    float vfs[kScatter ? kU : 1][D];
    if constexpr (kScatter) {
#pragma unroll
      for (int u = 0; u < kU; ++u) load_v(u, vfs[u]);
    }
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int p = p0 + (r * kWarps + warp) * kU + u;
        if (p >= p1) s[u][g] = -INFINITY;
        mx = fmaxf(mx, s[u][g]);
      }
      if (mx == -INFINITY) continue;  // no position of this warp in the round
      const float m_new = fmaxf(m[g], mx);
      const float alpha = m[g] == -INFINITY ? 0.0f : expf(m[g] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < D; ++e) o[g][e] *= alpha;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const float pr = s[u][g] == -INFINITY ? 0.0f : expf(s[u][g] - m_new);
        sum += pr;
        float vf[D];
        if constexpr (kScatter) {
#pragma unroll
          for (int e = 0; e < D; ++e) vf[e] = vfs[u][e];
        } else {
          load_v(u, vf);
        }
#pragma unroll
        for (int e = 0; e < D; ++e) o[g][e] = fmaf(pr, vf[e], o[g][e]);
      }
      l[g] = l[g] * alpha + sum;
      m[g] = m_new;
    }
  }

  // --- merge the warps ----------------------------------------------------------
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    if (lane == 0) {
      m_w[warp * MAXG + g] = m[g];
      l_w[warp * MAXG + g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < D; ++e) o_w[(warp * MAXG + g) * HD + lane * D + e] = o[g][e];
  }
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
  // exp(m_w - max) and the merged sum, once instead of in every thread of
  // the head's HD outputs.
  if (threadIdx.x < ng) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_w[w * MAXG + g]);
    float den = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = m_w[w * MAXG + g];
      const float f = mw == -INFINITY ? 0.0f : expf(mw - mx);
      f_w[w * MAXG + g] = f;
      if (mw != -INFINITY) den = fmaf(f, l_w[w * MAXG + g], den);
    }
    mx_s[g] = mx;
    den_s[g] = den;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < ng * HD; i += blockDim.x) {
    const int g = i / HD, d = i % HD;
    const int h = h0 + g;
    const float mx = mx_s[g], den = den_s[g];
    float num = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (m_w[w * MAXG + g] == -INFINITY) continue;
      num = fmaf(f_w[w * MAXG + g], o_w[(w * MAXG + g) * HD + d], num);
    }
    if (splits == 1) {
      finish(h, d, num, den);
    } else {
      float* part = partials + ((t * a.num_heads + h) * splits + split) * (HD + 2);
      part[d] = num;
      if (d == 0) {
        part[HD] = mx;
        part[HD + 1] = den;
      }
    }
  }
  if (splits == 1 || !counters) return;

  // --- the last block of (token, KV head) merges the splits ------------------
  __shared__ int is_last;
  __threadfence();  // this block's partials before its arrival
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* c = counters + t * gridDim.y + blockIdx.y;
    is_last = atomicAdd(c, 1) == splits - 1;
    if (is_last) *c = 0;  // ready for the next layer / step
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int i = threadIdx.x; i < ng * HD; i += blockDim.x) {
    const int g = i / HD, d = i % HD;
    const int h = h0 + g;
    const float* base = partials + (t * a.num_heads + h) * splits * (HD + 2);
    // The first kHeld splits' (max, num, sum) in one round of loads (the
    // usual split counts), the rest read in two passes; the same sums in
    // the same order either way.
    constexpr int kHeld = 8;
    float hm[kHeld], hn[kHeld], hl[kHeld];
    float mx = -INFINITY;
#pragma unroll
    for (int sp = 0; sp < kHeld; ++sp) {
      hm[sp] = -INFINITY;
      hn[sp] = hl[sp] = 0.0f;
      if (sp < splits) {
        const float* part = base + sp * (HD + 2);
        hm[sp] = __ldcg(part + HD);
        hn[sp] = __ldcg(part + d);
        hl[sp] = __ldcg(part + HD + 1);
      }
    }
#pragma unroll
    for (int sp = 0; sp < kHeld; ++sp)
      if (sp < splits) mx = fmaxf(mx, hm[sp]);
    for (int sp = kHeld; sp < splits; ++sp) mx = fmaxf(mx, __ldcg(base + sp * (HD + 2) + HD));
    float num = 0.0f, den = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int sp = 0; sp < kHeld; ++sp) {
        if (sp >= splits || hm[sp] == -INFINITY) continue;
        const float f = expf(hm[sp] - mx);
        num += f * hn[sp];
        den += f * hl[sp];
      }
      for (int sp = kHeld; sp < splits; ++sp) {
        const float* part = base + sp * (HD + 2);
        const float m = __ldcg(part + HD);
        if (m == -INFINITY) continue;
        const float f = expf(m - mx);
        num += f * __ldcg(part + d);
        den += f * __ldcg(part + HD + 1);
      }
    }
    finish(h, d, num, den);
  }
}

template <typename T, int HD, int MAXG>
cudaError_t launch_fused(dim3 grid, cudaStream_t s, bool pdl, const AttentionShape& a,
                         const DecodeAttentionIo& io, int splits, float* partials,
                         int32_t* counters, bool scatter) {
  auto kern = scatter ? attention_decode_fused_kernel<T, HD, MAXG, true>
                      : attention_decode_fused_kernel<T, HD, MAXG, false>;
  const size_t smem = sizeof(float) * fused_smem_floats<HD, MAXG>();
  if (smem > 48 * 1024) cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  return launch_maybe_pdl(pdl, kern, grid, kWarps * 32, smem, s, a, io.meta, io.page_size,
                          static_cast<T*>(io.q), static_cast<const T*>(io.k),
                          static_cast<const T*>(io.v), decode_weights(io),
                          static_cast<T*>(io.k_cache), static_cast<T*>(io.v_cache),
                          static_cast<T*>(io.out), splits, partials, counters);
}

template <typename T, int HD>
cudaError_t launch_fused_group(int group, dim3 grid, cudaStream_t s, bool pdl,
                               const AttentionShape& a, const DecodeAttentionIo& io, int splits,
                               float* partials, int32_t* counters, bool scatter) {
  const int parts = fused_decode_parts(group);
  if ((group + parts - 1) / parts <= 2)
    return launch_fused<T, HD, 2>(grid, s, pdl, a, io, splits, partials, counters, scatter);
  return launch_fused<T, HD, 4>(grid, s, pdl, a, io, splits, partials, counters, scatter);
}

}  // namespace

DecodeWeights decode_weights(const DecodeAttentionIo& io) {
  return DecodeWeights{io.q_norm, io.k_norm, dt_code(io.norm_dt), io.q_bias, io.k_bias,
                       io.v_bias, dt_code(io.bias_dt)};
}

int fused_decode_parts(int group) { return (group + 3) / 4; }

bool attention_decode_fused_supported(const AttentionShape& a, DType act) {
  const int group = a.num_kv_heads > 0 ? a.num_heads / a.num_kv_heads : 0;
  return (act == DType::kBF16 || act == DType::kF16) &&
         (a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256) && group >= 1 &&
         a.rope_dim <= a.head_dim;
}

Status launch_attention_decode_fused(cudaStream_t s, const AttentionShape& a,
                                     const DecodeAttentionIo& io, int splits, float* partials,
                                     int32_t* split_counters, int64_t num_counters, bool pdl,
                                     bool scatter) {
  const int64_t tokens = io.tokens;
  if (tokens == 0) return Status::ok();
  if (!attention_decode_fused_supported(a, io.act))
    return unsupported("fused decode attention: bf16 / f16, head_dim 64 / 128 / 256");
  if (splits > 1 && !partials) return internal_error("fused decode attention: no partials");
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t blocks_y = static_cast<int64_t>(a.num_kv_heads) * fused_decode_parts(group);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(blocks_y), splits);
  int32_t* counters =
      split_counters && tokens * blocks_y <= num_counters ? split_counters : nullptr;
  cudaError_t e = cudaSuccess;
  bool ok = dispatch_float(io.act, [&](auto ta) {
    using T = decltype(ta);
    if constexpr (!std::is_same_v<T, float>) {
      if (a.head_dim == 64)
        e = launch_fused_group<T, 64>(group, grid, s, pdl, a, io, splits, partials, counters, scatter);
      else if (a.head_dim == 128)
        e = launch_fused_group<T, 128>(group, grid, s, pdl, a, io, splits, partials, counters, scatter);
      else
        e = launch_fused_group<T, 256>(group, grid, s, pdl, a, io, splits, partials, counters, scatter);
    }
  });
  if (!ok) return bad_dtype("fused decode attention", io.act);
  if (e != cudaSuccess) return cuda_error(e, "fused decode attention launch");
  FERRITE_RETURN_IF_ERROR(check_launch("attention_decode_fused"));
  if (splits > 1 && !counters)
    return launch_attention_combine(s, a, tokens, io.q, io.act, io.out, splits, partials);
  return Status::ok();
}

}  // namespace ferrite::cuda
