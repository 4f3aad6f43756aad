// Kernels of the hybrid and MoE contracts:
//  - gated_delta_recurrent_attention: causal depthwise conv + SiLU over the
//    conv state, the gated delta rule (recurrent form, f32 state in shared
//    memory) with the gated RMSNorm and silu(z);
//  - routed_swiglu_moe: softmax + top-k routing, a device-side counting sort
//    of (token, k) pairs by expert, grouped per-expert products, the per-token
//    combine (experts in increasing id, then the shared expert, then the
//    residual).
// Sequences are packed in order: sequence s owns rows
// [seq_last_row[s-1] + 1, seq_last_row[s]] (the provider checks this).
// A state slot < 0 (graph padding) reads zero state and writes none.
#include "backends/cuda/cuda_types.cuh"
#include "backends/cuda/kernels.h"

namespace ferrite::cuda {
namespace {

constexpr int kMaxConv = 8;

// Small weights of any float type: 0 f32, 1 bf16, 2 f16.
__device__ __forceinline__ float load_any(const void* p, int dt, int64_t i) {
  if (dt == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (dt == 2) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

int dt_code(DType dt) { return dt == DType::kBF16 ? 1 : dt == DType::kF16 ? 2 : 0; }
bool small_ok(DType dt) { return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16; }

__device__ __forceinline__ int seq_first(const StepMeta& m, int s) {
  return s == 0 ? 0 : m.seq_last_row[s - 1] + 1;
}

// Sum over the block (blockDim a multiple of 32); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = 0;
  for (int i = 0; i < nw; ++i) t += red[i];
  __syncthreads();
  return t;
}

__global__ void conv_silu_kernel(StepMeta meta, int64_t sequences, float* x, int64_t C,
                                 const void* w, int wdt, int K, float* conv_state) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= sequences * C) return;
  const int s = static_cast<int>(idx / C);
  const int64_t ch = idx % C;
  const int first = seq_first(meta, s), last = meta.seq_last_row[s];
  const int slot = meta.seq_state_slot[s];
  float* st = slot >= 0 ? conv_state + static_cast<int64_t>(slot) * (K - 1) * C : nullptr;
  float wt[kMaxConv], hist[kMaxConv];
  for (int j = 0; j < K; ++j) wt[j] = load_any(w, wdt, ch * K + j);
  for (int j = 0; j < K - 1; ++j) hist[j] = st ? st[j * C + ch] : 0.0f;
  for (int t = first; t <= last; ++t) {
    float* xv = x + static_cast<int64_t>(t) * C + ch;
    hist[K - 1] = *xv;
    float acc = 0;
    for (int j = 0; j < K; ++j) acc += wt[j] * hist[j];
    for (int j = 0; j + 1 < K; ++j) hist[j] = hist[j + 1];
    *xv = acc / (1.0f + expf(-acc));
  }
  if (st)
    for (int j = 0; j < K - 1; ++j) st[j * C + ch] = hist[j];
}

template <typename T>
__global__ void gated_delta_kernel(StepMeta meta, GatedDeltaShape g, const float* x,
                                   const float* z, const float* bb, const float* aa,
                                   const void* a_log, int alog_dt, const void* dt_bias, int dtb_dt,
                                   const void* norm, int norm_dt, float* delta_state, T* y) {
  extern __shared__ float sm[];
  const int dk = g.dk, dv = g.dv, hv = g.hv, hk = g.hk;
  const int64_t C = 2LL * hk * dk + int64_t(hv) * dv;
  const int64_t VD = int64_t(hv) * dv;
  float* S = sm;
  float* qs = S + dk * dv;
  float* ks = qs + dk;
  float* os = ks + dk;
  float* red = os + dv;
  const int s = blockIdx.x / hv, h = blockIdx.x % hv;
  const int first = seq_first(meta, s), last = meta.seq_last_row[s];
  const int slot = meta.seq_state_slot[s];
  float* gst =
      slot >= 0 ? delta_state + (static_cast<int64_t>(slot) * hv + h) * dk * dv : nullptr;
  for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) S[i] = gst ? gst[i] : 0.0f;
  const int kh = h / (hv / hk);
  const float A = -expf(load_any(a_log, alog_dt, h));
  const float dtb = load_any(dt_bias, dtb_dt, h);
  const float q_dim_scale = rsqrtf(static_cast<float>(dk));
  __syncthreads();
  for (int t = first; t <= last; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * C;
    float pq = 0, pk = 0;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      const float qv = xr[kh * dk + i], kv = xr[hk * dk + kh * dk + i];
      qs[i] = qv;
      ks[i] = kv;
      pq += qv * qv;
      pk += kv * kv;
    }
    const float qq = block_sum(pq, red);  // also publishes qs / ks
    const float kk = block_sum(pk, red);
    const float qsc = rsqrtf(qq + 1e-6f) * q_dim_scale;
    const float ksc = rsqrtf(kk + 1e-6f);
    const float beta = 1.0f / (1.0f + expf(-bb[static_cast<int64_t>(t) * hv + h]));
    const float sp_in = aa[static_cast<int64_t>(t) * hv + h] + dtb;
    const float sp = sp_in > 20.0f ? sp_in : log1pf(expf(sp_in));
    const float decay = expf(A * sp);
    const float* vr = xr + 2LL * hk * dk + int64_t(h) * dv;
    float po = 0;
    for (int e = threadIdx.x; e < dv; e += blockDim.x) {
      float u = 0;
      for (int i = 0; i < dk; ++i) {
        const float sv = S[i * dv + e] * decay;
        S[i * dv + e] = sv;
        u += sv * (ks[i] * ksc);
      }
      const float d = beta * (vr[e] - u);
      float o = 0;
      for (int i = 0; i < dk; ++i) {
        const float sv = S[i * dv + e] + (ks[i] * ksc) * d;
        S[i * dv + e] = sv;
        o += sv * (qs[i] * qsc);
      }
      os[e] = o;
      po += o * o;
    }
    const float ss = block_sum(po, red);
    const float inv = rsqrtf(ss / static_cast<float>(dv) + g.eps);
    for (int e = threadIdx.x; e < dv; e += blockDim.x) {
      const int64_t at = static_cast<int64_t>(t) * VD + int64_t(h) * dv + e;
      const float zz = z[at];
      y[at] = from_f<T>(load_any(norm, norm_dt, e) * os[e] * inv * (zz / (1.0f + expf(-zz))));
    }
    __syncthreads();
  }
  if (gst)
    for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) gst[i] = S[i];
}

// --- MoE -----------------------------------------------------------------------

// One thread per token: softmax (f32), top-k (ties: lower id), ids in
// increasing order, optional renormalisation.
__global__ void route_kernel(const float* logits, int64_t tokens, int E, int K, bool normalize,
                             int32_t* ids, float* weights) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const float* l = logits + t * E;
  float mx = -INFINITY;
  for (int e = 0; e < E; ++e) mx = fmaxf(mx, l[e]);
  float sum = 0;
  for (int e = 0; e < E; ++e) sum += expf(l[e] - mx);
  int sel[kMaxTopK];
  float ps[kMaxTopK];
  for (int k = 0; k < K; ++k) {
    int best = -1;
    float bp = 0;
    for (int e = 0; e < E; ++e) {
      bool used = false;
      for (int j = 0; j < k; ++j) used = used || sel[j] == e;
      if (used) continue;
      const float pe = expf(l[e] - mx) / sum;
      if (best < 0 || pe > bp) best = e, bp = pe;
    }
    sel[k] = best;
    ps[k] = bp;
  }
  for (int i = 1; i < K; ++i)  // insertion sort by id
    for (int j = i; j > 0 && sel[j - 1] > sel[j]; --j) {
      const int ti = sel[j];
      sel[j] = sel[j - 1];
      sel[j - 1] = ti;
      const float tp = ps[j];
      ps[j] = ps[j - 1];
      ps[j - 1] = tp;
    }
  float tot = 0;
  for (int k = 0; k < K; ++k) tot += ps[k];
  for (int k = 0; k < K; ++k) {
    ids[t * K + k] = sel[k];
    weights[t * K + k] = normalize ? ps[k] / tot : ps[k];
  }
}

// One block: counting sort of the pairs by expert (pairs of one expert in
// increasing pair order). offsets [E+1], slot_of [pairs], row_pair [pairs].
__global__ void expert_sort_kernel(const int32_t* ids, int64_t pairs, int E, int32_t* offsets,
                                   int32_t* slot_of, int32_t* row_pair) {
  extern __shared__ int32_t cnt[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t c = 0;
    for (int64_t i = 0; i < pairs; ++i) c += ids[i] == e;
    cnt[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t off = 0;
    for (int e = 0; e < E; ++e) {
      const int32_t c = cnt[e];
      cnt[e] = off;
      offsets[e] = off;
      off += c;
    }
    offsets[E] = off;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t pos = cnt[e];
    for (int64_t i = 0; i < pairs; ++i)
      if (ids[i] == e) {
        slot_of[i] = pos;
        row_pair[pos] = static_cast<int32_t>(i);
        ++pos;
      }
  }
}

// out[r, j] = x[row(r)] . w[e][j] for every row r of expert e (blockIdx.y),
// j in [0, nout); one warp per output column. row(r) = row_pair[r] / K when
// by_token, else r.
template <typename TX, typename TW>
__global__ void expert_rows_kernel(const TX* x, int64_t ldx, bool by_token, int K, int64_t kdim,
                                   const TW* w, int64_t nout, const int32_t* offsets,
                                   const int32_t* row_pair, float* out, int64_t ldo) {
  const int e = blockIdx.y;
  const int32_t r0 = offsets[e], r1 = offsets[e + 1];
  if (r0 == r1) return;
  const int lane = threadIdx.x & 31;
  const int64_t j = blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (j >= nout) return;
  const TW* wr = w + (static_cast<int64_t>(e) * nout + j) * kdim;
  for (int32_t r = r0; r < r1; ++r) {
    const int64_t xrow = by_token ? row_pair[r] / K : r;
    const TX* xr = x + xrow * ldx;
    float acc = 0;
    for (int64_t i = lane; i < kdim; i += 32) acc += to_f(xr[i]) * to_f(wr[i]);
    acc = warp_sum(acc);
    if (lane == 0) out[static_cast<int64_t>(r) * ldo + j] = acc;
  }
}

// gu[r, i] = silu(gu[r, i]) * gu[r, I + i] for i < I.
__global__ void moe_act_kernel(float* gu, int64_t rows, int64_t I) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < rows * I;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / I, i = idx % I;
    float* row = gu + r * 2 * I;
    const float g = row[i];
    row[i] = g / (1.0f + expf(-g)) * row[I + i];
  }
}

template <typename T>
__global__ void moe_combine_kernel(T* hidden, int64_t H, int K, const int32_t* slot_of,
                                   const float* weights, const float* ys, const float* sgate,
                                   const float* shared_out) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    float acc = 0;
    for (int k = 0; k < K; ++k)
      acc += weights[t * K + k] * ys[static_cast<int64_t>(slot_of[t * K + k]) * H + j];
    if (shared_out) acc += (1.0f / (1.0f + expf(-sgate[t]))) * shared_out[t * H + j];
    hidden[t * H + j] = from_f<T>(to_f(hidden[t * H + j]) + acc);
  }
}

// y (f32) = rms_norm(x) * (w or 1 + w), one block per row.
template <typename T>
__global__ void rms_norm_to_f32_kernel(const T* x, float* y, const void* w, int wdt, int64_t width,
                                       float eps, bool zero_centred) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * width;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float wi = load_any(w, wdt, i);
    y[r * width + i] = to_f(xr[i]) * inv * (zero_centred ? 1.0f + wi : wi);
  }
}

int grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 8192 ? (b < 1 ? 1 : b) : 8192);
}

}  // namespace

Status launch_causal_conv_silu(cudaStream_t s, const StepMeta& meta, int64_t sequences, float* x,
                               int64_t conv_dim, const void* w, DType w_dt, int64_t kernel,
                               float* conv_state) {
  if (kernel < 1 || kernel > kMaxConv) return unsupported("causal conv: kernel must be 1..8");
  if (!small_ok(w_dt)) return bad_dtype("causal conv weight", w_dt);
  const int64_t n = sequences * conv_dim;
  if (n == 0) return Status::ok();
  const int threads = 256;
  conv_silu_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, s>>>(
      meta, sequences, x, conv_dim, w, dt_code(w_dt), static_cast<int>(kernel), conv_state);
  return check_launch("conv_silu_kernel");
}

int64_t gated_delta_smem_bytes(const GatedDeltaShape& g) {
  return 4 * (int64_t(g.dk) * g.dv + 2 * g.dk + g.dv + 32);
}

Status launch_gated_delta_rule(cudaStream_t s, const StepMeta& meta, int64_t sequences,
                               const GatedDeltaShape& g, const float* x, const float* z,
                               const float* b, const float* a, const void* a_log, DType a_log_dt,
                               const void* dt_bias, DType dt_bias_dt, const void* norm,
                               DType norm_dt, float* delta_state, void* y, DType act) {
  if (!small_ok(a_log_dt) || !small_ok(dt_bias_dt) || !small_ok(norm_dt))
    return unsupported("gated delta: small weights must be f32 / bf16 / f16");
  const int64_t smem = gated_delta_smem_bytes(g);
  if (smem > 200 * 1024) return unsupported("gated delta: dk * dv too large for shared memory");
  const int64_t blocks = sequences * g.hv;
  if (blocks == 0) return Status::ok();
  Status st = Status::ok();
  const bool ok = dispatch_float(act, [&](auto tag) {
    using T = decltype(tag);
    auto kern = gated_delta_kernel<T>;
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    kern<<<static_cast<unsigned>(blocks), 128, static_cast<size_t>(smem), s>>>(
        meta, g, x, z, b, a, a_log, dt_code(a_log_dt), dt_bias, dt_code(dt_bias_dt), norm,
        dt_code(norm_dt), delta_state, static_cast<T*>(y));
    st = check_launch("gated_delta_kernel");
  });
  if (!ok) return bad_dtype("gated delta activation", act);
  return st;
}

Status launch_rms_norm_to_f32(cudaStream_t s, const void* x, DType act, float* y, const void* w,
                              DType w_dt, int64_t rows, int64_t width, float eps,
                              bool zero_centred) {
  if (!small_ok(w_dt)) return bad_dtype("rms_norm_to_f32 weight", w_dt);
  if (rows == 0) return Status::ok();
  Status st = Status::ok();
  const bool ok = dispatch_float(act, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_to_f32_kernel<T><<<static_cast<unsigned>(rows), 256, 0, s>>>(
        static_cast<const T*>(x), y, w, dt_code(w_dt), width, eps, zero_centred);
    st = check_launch("rms_norm_to_f32_kernel");
  });
  if (!ok) return bad_dtype("rms_norm_to_f32 input", act);
  return st;
}

Status launch_moe_route(cudaStream_t s, const float* logits, int64_t tokens, int64_t experts,
                        int64_t top_k, bool normalize, int32_t* ids, float* weights) {
  if (top_k < 1 || top_k > kMaxTopK || top_k > experts)
    return unsupported("moe routing: top_k must be 1..32 and <= experts");
  if (tokens == 0) return Status::ok();
  const int threads = 128;
  route_kernel<<<static_cast<unsigned>((tokens + threads - 1) / threads), threads, 0, s>>>(
      logits, tokens, static_cast<int>(experts), static_cast<int>(top_k), normalize, ids, weights);
  return check_launch("route_kernel");
}

Status launch_moe_sort(cudaStream_t s, const int32_t* ids, int64_t pairs, int64_t experts,
                       int32_t* offsets, int32_t* slot_of, int32_t* row_pair) {
  expert_sort_kernel<<<1, 256, static_cast<size_t>(4 * (experts + 1)), s>>>(
      ids, pairs, static_cast<int>(experts), offsets, slot_of, row_pair);
  return check_launch("expert_sort_kernel");
}

Status launch_moe_expert_rows(cudaStream_t s, const void* x, DType x_dt, int64_t ldx,
                              bool by_token, int64_t top_k, int64_t kdim, const void* w,
                              DType w_dt, int64_t nout, int64_t experts, const int32_t* offsets,
                              const int32_t* row_pair, float* out, int64_t ldo) {
  if (nout == 0 || experts == 0) return Status::ok();
  constexpr int kWarps = 8;
  const dim3 grid(static_cast<unsigned>((nout + kWarps - 1) / kWarps),
                  static_cast<unsigned>(experts));
  Status st = Status::ok();
  bool inner = true;
  const bool ok = dispatch_float(x_dt, [&](auto xt) {
    using TX = decltype(xt);
    inner = dispatch_float(w_dt, [&](auto wt) {
      using TW = decltype(wt);
      expert_rows_kernel<TX, TW><<<grid, kWarps * 32, 0, s>>>(
          static_cast<const TX*>(x), ldx, by_token, static_cast<int>(top_k), kdim,
          static_cast<const TW*>(w), nout, offsets, row_pair, out, ldo);
      st = check_launch("expert_rows_kernel");
    });
  });
  if (!ok) return bad_dtype("moe expert input", x_dt);
  if (!inner) return bad_dtype("moe expert weight", w_dt);
  return st;
}

Status launch_moe_act(cudaStream_t s, float* gu, int64_t rows, int64_t intermediate) {
  if (rows * intermediate == 0) return Status::ok();
  moe_act_kernel<<<grid_for(rows * intermediate, 256), 256, 0, s>>>(gu, rows, intermediate);
  return check_launch("moe_act_kernel");
}

Status launch_moe_combine(cudaStream_t s, void* hidden, DType act, int64_t tokens, int64_t hidden_size,
                          int64_t top_k, const int32_t* slot_of, const float* weights,
                          const float* ys, const float* shared_gate, const float* shared_out) {
  if (tokens == 0) return Status::ok();
  Status st = Status::ok();
  const bool ok = dispatch_float(act, [&](auto tag) {
    using T = decltype(tag);
    moe_combine_kernel<T><<<static_cast<unsigned>(tokens), 256, 0, s>>>(
        static_cast<T*>(hidden), hidden_size, static_cast<int>(top_k), slot_of, weights, ys,
        shared_gate, shared_out);
    st = check_launch("moe_combine_kernel");
  });
  if (!ok) return bad_dtype("moe combine activation", act);
  return st;
}

}  // namespace ferrite::cuda
