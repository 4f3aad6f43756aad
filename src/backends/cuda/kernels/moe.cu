// Kernels of routed_swiglu_moe / routed_shared_swiglu_moe:
//  - the pre-norm (f32 rows for the router, optionally the same rows rounded
//    to the activation type for the experts), a decode router product (f32
//    x, warp per expert), softmax + top-k routing (a warp per token);
//  - the device-side sort of the (token, k) pairs by expert (stable: pairs
//    of one expert in increasing order) and the row-tile table: every
//    expert's rows are cut into tiles of `row_tile` rows, so a tile belongs
//    to one expert; grids are sized on the host by an upper bound and blocks
//    past the device-side tile count exit at once (graph-safe);
//  - the grouped expert GEMM on tensor cores (mma.sync m16n8k16, bf16 / f16,
//    f32 accumulation, ldmatrix, cp.async multi-stage pipeline): gate/up
//    fused with silu(g) * u written in the activation type, down written as
//    f32 rows for the combine;
//  - the SIMT expert products and f32 SiLU product (f32 activations, odd
//    shapes);
//  - the per-token combine (experts in increasing id, then the shared
//    expert, then the residual).
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/moe.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/moe_blocks.h"
#include "backends/cuda/kernels/moe_route_block.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"
#include "backends/cuda/kernels/warp_topk.h"

#include <algorithm>
#include <climits>

namespace ferrite::cuda {
namespace {

// --- norm and router --------------------------------------------------------------

// The inverse RMS of a row, by a whole block: each thread sums the squares
// of the elements it strides over, then the warps' sums are added in warp
// order. Shared by moe_norm_kernel and the fused norm + router, which must
// normalise bitwise alike. red: 32 floats; every thread gets the result.
// 16-bit rows of whole 16-byte vectors: a thread strides over vectors of 8,
// four loads in flight together (the element loop waited on a round trip
// every few elements: the router launch took 9.3 us a layer at one token
// on the H200, ncu, at 13 % issue).
template <typename T>
__device__ float block_inv_rms(const T* xr, int64_t width, float eps, float* red) {
  float ss = 0;
  bool done = false;
  if constexpr (sizeof(T) == 2) {
    if (width % 8 == 0 && (reinterpret_cast<uintptr_t>(xr) & 15) == 0) {
      const uint4* xv = reinterpret_cast<const uint4*>(xr);
      const int64_t n8 = width / 8;
      for (int64_t i0 = threadIdx.x; i0 < n8; i0 += 4 * int64_t(blockDim.x)) {
        uint4 u[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int64_t i = i0 + c * int64_t(blockDim.x);
          if (i < n8) u[c] = xv[i];
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (i0 + c * int64_t(blockDim.x) < n8) {
            float f[8];
            unpack_words<T, 8>(&u[c].x, f);
#pragma unroll
            for (int e = 0; e < 8; ++e) ss += f[e] * f[e];
          }
        }
      }
      done = true;
    }
  }
  if (!done) {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      const float v = to_f(xr[i]);
      ss += v * v;
    }
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float tot = 0;
  for (int i = 0; i < static_cast<int>((blockDim.x + 31) >> 5); ++i) tot += red[i];
  __syncthreads();  // red may be reused
  return rsqrtf(tot / static_cast<float>(width) + eps);
}

// y32 (f32) = rms_norm(x) * (w or 1 + w), one block per row; y (optional)
// the same values rounded to T (the experts' input, as the dense path).
template <typename T>
__global__ void moe_norm_kernel(const T* x, float* y32, T* y, const void* w, int wdt,
                                int64_t width, float eps, bool zero_centred) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * width;
  const float inv = block_inv_rms(xr, width, eps, red);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float wi = load_any(w, wdt, i);
    const float v = to_f(xr[i]) * inv * (zero_centred ? 1.0f + wi : wi);
    y32[r * width + i] = v;
    if (y) y[r * width + i] = from_f<T>(v);
  }
}

// logits[r, e] = x[r] . w[e] where moe_router_kernel does not apply (hidden
// not a multiple of 8 or above 8,192): a warp per (expert, group of
// kMoeRouterGemvRows rows), x (f32) read through L1 / L2, lanes striding
// the hidden dimension; the expert row read kRouterBatch loads a lane ahead
// of the products (with the unroll alone a warp of 2,048 f32 weights waited
// on 16 round trips). grid.y covers the row groups.
constexpr int kRouterBatch = 16;
template <typename TW>
__global__ void router_gemv_kernel(const float* __restrict__ x, int64_t rows_total, int64_t H,
                                   const TW* __restrict__ w, int64_t E, float* logits) {
  const int lane = threadIdx.x & 31;
  const int64_t e = blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (e >= E) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kMoeRouterGemvRows;
  const int64_t left = rows_total - r0;
  const int rows = static_cast<int>(left < kMoeRouterGemvRows ? left : kMoeRouterGemvRows);
  x += r0 * H;
  logits += r0 * E;
  const TW* we = w + e * H;
  float acc[kMoeRouterGemvRows];
#pragma unroll
  for (int r = 0; r < kMoeRouterGemvRows; ++r) acc[r] = 0;
  for (int64_t i0 = lane; i0 < H; i0 += 32 * kRouterBatch) {
    float wv[kRouterBatch];
#pragma unroll
    for (int u = 0; u < kRouterBatch; ++u) {
      const int64_t i = i0 + 32 * u;
      wv[u] = i < H ? to_f(we[i]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kRouterBatch; ++u) {
      const int64_t i = i0 + 32 * u;
      if (i >= H) break;
#pragma unroll
      for (int r = 0; r < kMoeRouterGemvRows; ++r)
        if (r < rows) acc[r] = fmaf(x[r * H + i], wv[u], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kMoeRouterGemvRows; ++r) {
    if (r >= rows) break;
    const float v = warp_sum(acc[r]);
    if (lane == 0) logits[r * E + e] = v;
  }
}

// The router product for up to kMoeRouterMaxRows rows, and with kNorm the
// norm fused in front of it (launch_moe_norm_router). A block of 256 threads
// takes kRouterExperts experts and a chunk of up to kRouterChunkRows rows
// (as many as kRouterSmemFloats floats hold); grid (experts, row chunks).
//  1. kNorm: the chunk's inverse RMS, with moe_norm_kernel's summation;
//  2. the chunk's inputs staged in shared memory as f32 (kNorm: x * inv * w,
//     moe_norm_kernel's values; else the f32 rows as they are); with kNorm
//     the blocks of the first expert column also write y32 / y and the
//     8-bit blocks of 32 (quantize_q8_kernel's numerics);
//  3. kRouterWarpsPerExpert warps per expert, each lane 8 consecutive
//     weights at a time (16-byte loads, all of a lane's loads in flight at
//     once: the warp per expert of router_gemv_kernel waited on 4-16 round
//     trips), warp sums, then the warps' partial sums added in a fixed order.
// Fused or not, the same summation: the logits are bitwise equal.
constexpr int kRouterExperts = 2, kRouterWarpsPerExpert = 4, kRouterChunkRows = 8;
constexpr int kRouterSmemFloats = 8192;  // 32 KiB of staged inputs
constexpr int kRouterPreload = 4;        // weight groups a lane loads before the norm

// 8 small weights (load_any's type codes: 0 f32, 1 bf16, 2 f16) from
// element i on, 16-byte aligned.
__device__ __forceinline__ void load_any8(const void* p, int dt, int64_t i, float (&f)[8]) {
  if (dt == 1)
    load8(static_cast<const __nv_bfloat16*>(p) + i, f);
  else if (dt == 2)
    load8(static_cast<const __half*>(p) + i, f);
  else
    load8(static_cast<const float*>(p) + i, f);
}


__device__ void route_sort_warp(const float* logits, int tokens, int E, int K, bool normalize,
                                int32_t* ids, float* weights, int bm, int32_t* offsets,
                                int32_t* slot_of, int32_t* row_pair, int4* tiles,
                                int32_t* tile_count, float* sorted_p, int32_t* sid);

// extra_w / extra_out: one more output row (expert index E of this kernel,
// written to extra_out[row]; launch_moe_norm_router). rs.counter (null: the
// router alone): the last
// block to finish routes and sorts every row (launch_moe_norm_router's
// `route`); the launch may then be a programmatic dependent, so nothing an
// earlier kernel writes is touched before pdl_wait().
template <typename T, typename TW, bool kNorm>
__global__ void __launch_bounds__(256)
    moe_router_kernel(const T* __restrict__ x, int rows_total, int64_t H, int chunk_rows,
                      const void* nw, int nwdt, float eps, bool zc, float* y32, T* y,
                      int8_t* xq, float* xd, const TW* __restrict__ w, int64_t E,
                      float* __restrict__ logits, const TW* __restrict__ extra_w,
                      float* __restrict__ extra_out, MoeRouteSortArgs rs, bool pdl_trigger) {
  // Tuning::cuda_pdl_trigger_small: the next launch, a weight-streaming GEMV
  // (the shared expert's gate / up), may start copying its weights at once
  // (it waits for this grid before reading its outputs).
  if (pdl_trigger) pdl_launch_dependents();
  extern __shared__ float xs[];  // [chunk_rows, H]
  __shared__ float red[32];
  __shared__ float part[8][kRouterChunkRows];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // The lane's first kRouterPreload weight groups, loaded before the norm
  // (weights depend on no earlier kernel): their round trip overlaps the
  // inputs' load and the inverse RMS instead of following the staging
  // barrier (at one token the whole lane's share for hidden <= 4,096).
  const int el = warp / kRouterWarpsPerExpert, q = warp % kRouterWarpsPerExpert;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kRouterExperts + el;
  const int64_t outs = E + (extra_w ? 1 : 0);
  const TW* we = e < E ? w + e * H : extra_w;
  const int64_t groups = H / 8;
  const int64_t g0 = q * 32 + lane;
  constexpr int64_t kGroupStride = 32 * kRouterWarpsPerExpert;
  float wpre[kRouterPreload][8];
#pragma unroll
  for (int i = 0; i < kRouterPreload; ++i) {
    const int64_t g = g0 + i * kGroupStride;
    if (e < outs && g < groups) load8(we + 8 * g, wpre[i]);
  }
  // With the norm, the thread's first 8 norm weights too (every row's
  // staging reads them): loaded after the inverse RMS's block reduction,
  // they were one more round trip on the chain before the products.
  float nwpre[8];
  const bool nw_vec = kNorm && sizeof(T) == 2 && (reinterpret_cast<uintptr_t>(nw) & 15) == 0;
  if (nw_vec && tid < H / 8) load_any8(nw, nwdt, 8 * static_cast<int64_t>(tid), nwpre);
  pdl_wait();  // x, and every output, belong to earlier kernels
  const int row0 = blockIdx.y * chunk_rows;
  const int nrows = min(chunk_rows, rows_total - row0);
  x += static_cast<int64_t>(row0) * H;
  for (int r = 0; r < nrows; ++r) {
    const T* xr = x + r * H;
    float inv = 1.0f;
    if constexpr (kNorm) inv = block_inv_rms(xr, H, eps, red);
    bool staged = false;
    if constexpr (kNorm && sizeof(T) == 2) {
      // 8 elements a thread and load (H % 8 == 0 here): the same values.
      if ((reinterpret_cast<uintptr_t>(xr) & 15) == 0 && nw_vec) {
        for (int64_t i8 = tid; i8 < H / 8; i8 += 256) {
          const uint4 u = *reinterpret_cast<const uint4*>(xr + 8 * i8);
          float f[8], wv[8];
          unpack_words<T, 8>(&u.x, f);
          if (i8 == tid) {
#pragma unroll
            for (int j = 0; j < 8; ++j) wv[j] = nwpre[j];
          } else {
            load_any8(nw, nwdt, 8 * i8, wv);
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) f[j] = f[j] * inv * (zc ? 1.0f + wv[j] : wv[j]);
          float4* d = reinterpret_cast<float4*>(xs + r * H + 8 * i8);
          d[0] = make_float4(f[0], f[1], f[2], f[3]);
          d[1] = make_float4(f[4], f[5], f[6], f[7]);
        }
        staged = true;
      }
    }
    if (!staged) {
      for (int64_t i = tid; i < H; i += 256) {
        float v = to_f(xr[i]);
        if constexpr (kNorm) {
          const float wi = load_any(nw, nwdt, i);
          v = v * inv * (zc ? 1.0f + wi : wi);
        }
        xs[r * H + i] = v;
      }
    }
  }
  __syncthreads();
  if constexpr (kNorm) {
    if (blockIdx.x == 0) {
      const int64_t off = static_cast<int64_t>(row0) * H;
      if (xq) {  // H % 32 == 0: a warp per block of 32
        for (int64_t g = warp; g < nrows * (H / 32); g += 8) {
          const int64_t idx = g * 32 + lane;
          const float v = xs[idx];
          y32[off + idx] = v;
          if (y) y[off + idx] = from_f<T>(v);
          qblocks::quantize_q8_lane(v, lane, xq + off + idx, xd + off / 32 + g);
        }
      } else {
        for (int64_t idx = tid; idx < nrows * H; idx += 256) {
          y32[off + idx] = xs[idx];
          if (y) y[off + idx] = from_f<T>(xs[idx]);
        }
      }
    }
  }
  float acc[kRouterChunkRows];
#pragma unroll
  for (int r = 0; r < kRouterChunkRows; ++r) acc[r] = 0.0f;
  // Group g's products into the rows' sums (groups in increasing order).
  auto products = [&](int64_t g, const float (&wv)[8]) {
#pragma unroll
    for (int r = 0; r < kRouterChunkRows; ++r) {
      if (r < nrows) {
        const float4 a = *reinterpret_cast<const float4*>(xs + r * H + 8 * g);
        const float4 b = *reinterpret_cast<const float4*>(xs + r * H + 8 * g + 4);
        const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(xv[j], wv[j], acc[r]);
      }
    }
  };
  if (e < outs) {
#pragma unroll
    for (int i = 0; i < kRouterPreload; ++i) {
      const int64_t g = g0 + i * kGroupStride;
      if (g < groups) products(g, wpre[i]);
    }
#pragma unroll 2
    for (int64_t g = g0 + kRouterPreload * kGroupStride; g < groups; g += kGroupStride) {
      float wv[8];
      load8(we + 8 * g, wv);
      products(g, wv);
    }
  }
#pragma unroll
  for (int r = 0; r < kRouterChunkRows; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) part[warp][r] = v;
  }
  __syncthreads();
  if (tid < kRouterExperts * nrows) {
    const int le = tid / nrows, r = tid % nrows;
    const int64_t ee = static_cast<int64_t>(blockIdx.x) * kRouterExperts + le;
    if (ee < outs) {
      float tot = 0.0f;
      for (int k = 0; k < kRouterWarpsPerExpert; ++k)
        tot += part[le * kRouterWarpsPerExpert + k][r];
      if (ee < E)
        logits[static_cast<int64_t>(row0 + r) * E + ee] = tot;
      else
        extra_out[row0 + r] = tot;
    }
  }
  if (kNorm && rs.counter) {
    // The last block to arrive routes: every block's logits are visible to
    // it (each writer's fence before the arrival, its own fence after).
    __shared__ bool last;
    __shared__ float sorted_p[32];
    __shared__ int32_t sid[32];
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      const int32_t blocks = static_cast<int32_t>(gridDim.x * gridDim.y);
      last = atomicAdd(rs.counter, 1) == blocks - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // The logits to shared memory (the staged inputs are no longer read),
    // through L2: other blocks wrote them during this launch.
    const int64_t n = static_cast<int64_t>(rows_total) * E;
    for (int64_t i = tid; i < n; i += 256) xs[i] = __ldcg(logits + i);
    __syncthreads();
    if (warp == 0)
      route_sort_warp(xs, rows_total, static_cast<int>(E), static_cast<int>(rs.top_k),
                      rs.normalize, rs.ids, rs.weights, rs.row_tile, rs.offsets, rs.slot_of,
                      rs.row_pair, reinterpret_cast<int4*>(rs.tiles), rs.tile_count, sorted_p,
                      sid);
    if (tid == 0) *rs.counter = 0;  // for the next launch (stream-ordered)
  }
}

// Rows per block chunk of moe_router_kernel for a hidden size (0: it does
// not apply: hidden not a multiple of 8, or above kRouterSmemFloats).
inline int router_chunk_rows(int64_t H) {
  if (H <= 0 || H % 8 != 0 || H > kRouterSmemFloats) return 0;
  return static_cast<int>(std::min<int64_t>(kRouterChunkRows, kRouterSmemFloats / H));
}

// A warp per token: softmax (f32), top-k by probability (ties: lower id),
// ids in increasing order, optional renormalisation (summed in increasing
// id, as the reference). Lane k holds the k-th selection. sorted_p: 32
// floats of the warp's own; ids_s (optional, shared memory): the ids again.
//
// Up to 256 experts the logits are loaded once (all of a lane's loads in
// flight together), the probabilities stay in registers and the selections
// come from warp_topk (two warp reductions a selection); more experts are
// re-read and recomputed each round and selected by a butterfly over (p, id)
// (the same selections).
__device__ void route_token(const float* l, int E, int K, bool normalize, int32_t* ids,
                            float* weights, float* sorted_p, int32_t* ids_s = nullptr) {
  const int lane = threadIdx.x & 31;
  constexpr int kCached = 8;
  const bool cached = E <= 32 * kCached;
  float lc[kCached];
  float mx = -INFINITY;
  float sum = 0;
  if (cached) {
#pragma unroll
    for (int j = 0; j < kCached; ++j) lc[j] = lane + 32 * j < E ? l[lane + 32 * j] : 0.0f;
#pragma unroll
    for (int j = 0; j < kCached; ++j)
      if (lane + 32 * j < E) mx = fmaxf(mx, lc[j]);
    mx = warp_max(mx);
#pragma unroll
    for (int j = 0; j < kCached; ++j)
      if (lane + 32 * j < E) sum += expf(lc[j] - mx);
  } else {
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
  }
  sum = warp_sum(sum);
  auto prob_of = [&](float logit) {
    const float pe = expf(logit - mx) / sum;
    return pe >= 0.0f ? pe : 0.0f;  // NaN logits: never an invalid id
  };
  int my_id = INT_MAX;
  float my_p = 0;
  if (cached) {
    float pc[kCached];
#pragma unroll
    for (int j = 0; j < kCached; ++j) pc[j] = lane + 32 * j < E ? prob_of(lc[j]) : 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    auto rmax = [](uint32_t v) { return __reduce_max_sync(0xffffffffu, v); };
    auto rmin = [](uint32_t v) { return __reduce_min_sync(0xffffffffu, v); };
#else
    auto rmax = [](uint32_t v) {
      for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
      return v;
    };
    auto rmin = [](uint32_t v) {
      for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
      return v;
    };
#endif
    warp::warp_topk<kCached>(pc, lane, E, K, my_id, my_p, rmax, rmin);
  } else {
    float prev_p = INFINITY;
    int prev_id = -1;
    for (int k = 0; k < K; ++k) {
      // The best (p, lower id) strictly after the previous selection.
      float bp = -1.0f;
      int bi = INT_MAX;
      for (int e = lane; e < E; e += 32) {
        const float pe = prob_of(l[e]);
        const bool after = pe < prev_p || (pe == prev_p && e > prev_id);
        if (after && (pe > bp || (pe == bp && e < bi))) bp = pe, bi = e;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float op = __shfl_xor_sync(0xffffffffu, bp, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (op > bp || (op == bp && oi < bi)) bp = op, bi = oi;
      }
      if (lane == k) my_id = bi, my_p = bp;
      prev_p = bp;
      prev_id = bi;
    }
  }
  route_write_selected(my_id, my_p, K, normalize, ids, weights, sorted_p, ids_s);
}

constexpr int kRouteWarps = 8;
__global__ void route_kernel(const float* logits, int64_t tokens, int E, int K, bool normalize,
                             int32_t* ids, float* weights) {
  __shared__ float sorted_p[kRouteWarps][32];
  const int wid = threadIdx.x >> 5;
  const int64_t t = blockIdx.x * int64_t(kRouteWarps) + wid;
  if (t >= tokens) return;
  route_token(logits + t * E, E, K, normalize, ids + t * K, weights + t * K, sorted_p[wid]);
}

// --- sort by expert and the tile table ------------------------------------------------

// Exclusive scan of two ints over a block of blockDim.x (a multiple of 32,
// <= 1024) threads; totals to every thread. sm: 64 ints.
__device__ void block_scan2(int32_t& a, int32_t& b, int32_t* sm, int32_t& tot_a, int32_t& tot_b) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int32_t ia = a, ib = b;
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t ua = __shfl_up_sync(0xffffffffu, ia, o);
    const int32_t ub = __shfl_up_sync(0xffffffffu, ib, o);
    if (lane >= o) ia += ua, ib += ub;
  }
  if (lane == 31) sm[wid] = ia, sm[32 + wid] = ib;
  __syncthreads();
  int32_t ba = 0, bb = 0;
  tot_a = 0;
  tot_b = 0;
  for (int w = 0; w < nw; ++w) {
    if (w == wid) ba = tot_a, bb = tot_b;
    tot_a += sm[w];
    tot_b += sm[32 + w];
  }
  __syncthreads();
  a = ba + ia - a;
  b = bb + ib - b;
}

// From per-expert counts (shared memory): offsets (global and off_s, E+1),
// the tile table and its count. Thread i owns experts [i*per, (i+1)*per).
__device__ void plan_block(const int32_t* cnt, int E, int bm, int32_t* off_s, int32_t* offsets,
                           int4* tiles, int32_t* tile_count, int32_t* scan_sm) {
  const int per = (E + blockDim.x - 1) / blockDim.x;
  const int e0 = min(E, static_cast<int>(threadIdx.x) * per), e1 = min(E, e0 + per);
  int32_t rows = 0, ntiles = 0;
  for (int e = e0; e < e1; ++e) {
    rows += cnt[e];
    ntiles += (cnt[e] + bm - 1) / bm;
  }
  int32_t tot_rows, tot_tiles;
  block_scan2(rows, ntiles, scan_sm, tot_rows, tot_tiles);
  for (int e = e0; e < e1; ++e) {
    const int32_t c = cnt[e];
    off_s[e] = rows;
    offsets[e] = rows;
    for (int32_t j = 0; j * bm < c; ++j)
      tiles[ntiles + j] = make_int4(e, rows + j * bm, min(bm, c - j * bm), 0);
    rows += c;
    ntiles += (c + bm - 1) / bm;
  }
  if (threadIdx.x == 0) {
    off_s[E] = tot_rows;
    offsets[E] = tot_rows;
    *tile_count = tot_tiles;
  }
}

// Stable placement of expert e's pairs among pairs [p0, p1) by a warp:
// `n` of them, the first going to row `base`.
__device__ __forceinline__ void scatter_expert(const int32_t* ids, int32_t p0, int32_t p1, int e,
                                               int32_t base, int32_t n, int32_t* slot_of,
                                               int32_t* row_pair) {
  const int lane = threadIdx.x & 31;
  const unsigned lt = (1u << lane) - 1u;
  int32_t found = 0;
  for (int32_t i0 = p0; i0 < p1 && found < n; i0 += 32) {
    const int32_t i = i0 + lane;
    const bool hit = i < p1 && ids[i] == e;
    const unsigned m = __ballot_sync(0xffffffffu, hit);
    if (hit) {
      const int32_t pos = base + found + __popc(m & lt);
      slot_of[i] = pos;
      row_pair[pos] = i;
    }
    found += __popc(m);
  }
}

// Few pairs (decode): everything in one block of 1024 threads.
// Shared memory: cnt [E], off [E+1], scan 64.
__device__ void sort_small_block(const int32_t* ids, int32_t pairs, int E, int bm,
                                 int32_t* offsets, int32_t* slot_of, int32_t* row_pair,
                                 int4* tiles, int32_t* tile_count, int32_t* sm) {
  int32_t* cnt = sm;
  int32_t* off = sm + E;
  int32_t* scan = off + E + 1;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int32_t i = threadIdx.x; i < pairs; i += blockDim.x) atomicAdd(&cnt[ids[i]], 1);
  __syncthreads();
  plan_block(cnt, E, bm, off, offsets, tiles, tile_count, scan);
  __syncthreads();
  for (int e = threadIdx.x >> 5; e < E; e += blockDim.x >> 5)
    if (cnt[e] > 0) scatter_expert(ids, 0, pairs, e, off[e], cnt[e], slot_of, row_pair);
}

__global__ void __launch_bounds__(1024) moe_sort_small_kernel(const int32_t* ids, int32_t pairs,
                                                              int E, int bm, int32_t* offsets,
                                                              int32_t* slot_of,
                                                              int32_t* row_pair, int4* tiles,
                                                              int32_t* tile_count) {
  extern __shared__ int32_t sm[];
  sort_small_block(ids, pairs, E, bm, offsets, slot_of, row_pair, tiles, tile_count, sm);
}

// Routing and the one-block sort in one launch (tokens <= 32, pairs <=
// kMoeSortSmallPairs): the block's warps route the tokens (warp w tokens w,
// w + 16), then the block sorts. The same results as route_kernel +
// moe_sort_small_kernel, one launch fewer. 512 threads: at 1,024 the 64
// registers a thread left routing's cached probabilities spilling.
constexpr int kRouteSortThreads = 512;
__global__ void __launch_bounds__(kRouteSortThreads)
    moe_route_sort_kernel(const float* logits, int tokens, int E, int K, bool normalize,
                          int32_t* ids, float* weights, int bm, int32_t* offsets,
                          int32_t* slot_of, int32_t* row_pair, int4* tiles,
                          int32_t* tile_count) {
  extern __shared__ int32_t sm[];
  __shared__ float sorted_p[kRouteSortThreads / 32][32];
  const int wid = threadIdx.x >> 5;
  for (int t = wid; t < tokens; t += kRouteSortThreads / 32) {
    route_token(logits + static_cast<int64_t>(t) * E, E, K, normalize, ids + t * K,
                weights + t * K, sorted_p[wid]);
    __syncwarp();  // sorted_p is read before the warp's next token writes it
  }
  __syncthreads();  // the block's global writes (ids) are visible to the block
  sort_small_block(ids, tokens * K, E, bm, offsets, slot_of, row_pair, tiles, tile_count, sm);
}

// Routing and the sort by one warp for at most 32 pairs (decode): the
// tokens routed in turn, then lane p holds pair p's expert and its place
// (experts ascending, pairs of an expert in order) comes from comparisons
// over the warp; offsets, pair <-> row and the tile table as
// sort_small_block makes them, without its block-wide scans and barriers.
// One warp (lane = threadIdx.x % 32); sorted_p / sid: 32 floats / ints of
// shared memory of the warp's own. logits may be in shared memory; offsets
// may be null.
__device__ void route_sort_warp(const float* logits, int tokens, int E, int K, bool normalize,
                                int32_t* ids, float* weights, int bm, int32_t* offsets,
                                int32_t* slot_of, int32_t* row_pair, int4* tiles,
                                int32_t* tile_count, float* sorted_p, int32_t* sid) {
  const int lane = threadIdx.x & 31;
  for (int t = 0; t < tokens; ++t) {
    // The ids into sid as well: read back from shared memory below, not
    // from the global writes (a round trip).
    route_token(logits + static_cast<int64_t>(t) * E, E, K, normalize, ids + t * K,
                weights + t * K, sorted_p, sid + t * K);
    __syncwarp();
  }
  const int P = tokens * K;
  const int my = lane < P ? sid[lane] : INT_MAX;
  __syncwarp();
  sid[lane] = my;
  __syncwarp();
  int before = 0, same_before = 0, cnt = 0;
  for (int q = 0; q < P; ++q) {
    const int o = sid[q];
    before += o < my;
    same_before += o == my && q < lane;
    cnt += o == my;
  }
  const bool valid = lane < P;
  const bool first = valid && same_before == 0;
  if (valid) {
    slot_of[lane] = before + same_before;
    row_pair[before + same_before] = lane;
  }
  // offsets null: the caller's kernels read the tile table alone (the fused
  // decode experts), and these E / 32 + 1 rounds of P reads are skipped.
  for (int e0 = 0; offsets && e0 <= E; e0 += 32) {
    const int e = e0 + lane;
    int c = 0;
    for (int q = 0; q < P; ++q) c += sid[q] < e;
    if (e <= E) offsets[e] = c;
  }
  // Tiles: each expert's first lane writes its tiles after those of the
  // experts below it.
  const int my_tiles = first ? (cnt + bm - 1) / bm : 0;
  int base = 0, total = 0;
  for (int q = 0; q < P; ++q) {
    const int tq = __shfl_sync(0xffffffffu, my_tiles, q);
    base += sid[q] < my ? tq : 0;
    total += tq;
  }
  if (first)
    for (int j = 0; j < my_tiles; ++j)
      tiles[base + j] = make_int4(my, before + j * bm, min(bm, cnt - j * bm), 0);
  if (lane == 0) *tile_count = total;
}

__global__ void __launch_bounds__(32)
    moe_route_sort_warp_kernel(const float* logits, int tokens, int E, int K, bool normalize,
                               int32_t* ids, float* weights, int bm, int32_t* offsets,
                               int32_t* slot_of, int32_t* row_pair, int4* tiles,
                               int32_t* tile_count) {
  __shared__ float sorted_p[32];
  __shared__ int32_t sid[32];
  route_sort_warp(logits, tokens, E, K, normalize, ids, weights, bm, offsets, slot_of, row_pair,
                  tiles, tile_count, sorted_p, sid);
}

// One token's routing and sort by a block (Tuning::cuda_moe_route_block):
// the outputs of moe_route_sort_warp_kernel, bit for bit, on a shorter
// chain (moe_route_block.cuh); with one token the sort is the identity
// (pair k -> row k, one tile a pair).
constexpr int kRouteOneThreads = 512;

__global__ void __launch_bounds__(kRouteOneThreads)
    moe_route_one_kernel(const float* logits, int E, int K, bool normalize, int spe,
                         int32_t* ids, float* weights, int bm, int32_t* offsets,
                         int32_t* slot_of, int32_t* row_pair, int4* tiles,
                         int32_t* tile_count) {
  __shared__ RouteBlockShared sh;
  const RouteBlockLane r =
      route_one_token_block(logits, E, K, normalize, spe, sh, ids, weights);
  if (r.rank >= 0) {
    // One token: pair k (k-th id) is row k and its expert's only tile.
    slot_of[r.rank] = r.rank;
    row_pair[r.rank] = r.rank;
    tiles[r.rank] = make_int4(r.id, r.rank, min(bm, 1), 0);
  }
  if (threadIdx.x == 0) *tile_count = K;
  if (offsets) {
    for (int x = threadIdx.x; x <= E; x += kRouteOneThreads) {
      int c = 0;
      for (int j = 0; j < K; ++j) c += sh.sel_id[j] < x;
      offsets[x] = c;
    }
  }
}

// Many pairs: per-chunk counts, one planning block, then a warp per
// (chunk, expert) places the chunk's pairs of that expert.
__global__ void moe_count_kernel(const int32_t* ids, int32_t pairs, int E, int32_t* counts) {
  extern __shared__ int32_t hist[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int32_t p0 = blockIdx.x * kMoeSortChunk, p1 = min(pairs, p0 + kMoeSortChunk);
  for (int32_t i = p0 + threadIdx.x; i < p1; i += blockDim.x) atomicAdd(&hist[ids[i]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    counts[static_cast<int64_t>(blockIdx.x) * E + e] = hist[e];
}

// counts [chunks, E] become the first row of each (chunk, expert).
__global__ void __launch_bounds__(1024) moe_plan_kernel(int32_t* counts, int chunks, int E, int bm,
                                                        int32_t* offsets, int4* tiles,
                                                        int32_t* tile_count) {
  extern __shared__ int32_t sm[];
  int32_t* cnt = sm;
  int32_t* off = sm + E;
  int32_t* scan = off + E + 1;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t run = 0;
    for (int c = 0; c < chunks; ++c) {
      const int32_t v = counts[static_cast<int64_t>(c) * E + e];
      counts[static_cast<int64_t>(c) * E + e] = run;
      run += v;
    }
    cnt[e] = run;
  }
  __syncthreads();
  plan_block(cnt, E, bm, off, offsets, tiles, tile_count, scan);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int c = 0; c < chunks; ++c) counts[static_cast<int64_t>(c) * E + e] += off[e];
}

constexpr int kScatterWarps = 8;
__global__ void moe_scatter_kernel(const int32_t* ids, int32_t pairs, int E, int chunks,
                                   const int32_t* counts, const int32_t* offsets,
                                   int32_t* slot_of, int32_t* row_pair) {
  const int e = blockIdx.y * kScatterWarps + (threadIdx.x >> 5);
  const int c = blockIdx.x;
  if (e >= E) return;
  const int32_t base = counts[static_cast<int64_t>(c) * E + e];
  const int32_t end = c + 1 < chunks ? counts[static_cast<int64_t>(c + 1) * E + e] : offsets[e + 1];
  if (end == base) return;
  const int32_t p0 = c * kMoeSortChunk, p1 = min(pairs, p0 + kMoeSortChunk);
  scatter_expert(ids, p0, p1, e, base, end - base, slot_of, row_pair);
}

// --- grouped expert GEMM on tensor cores -----------------------------------------------

__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

// Block tile BM (rows of one expert) x BN (output columns) x BK, warps
// WARPS_M x WARPS_N over the output tile and WARPS_K over the k16 steps of
// a stage (their partial sums added in a fixed order at the end).
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int WARPS_K_, int STAGES_>
struct MmaCfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, WARPS_K = WARPS_K_;
  static constexpr int WMN = WARPS_M * WARPS_N;
  static constexpr int THREADS = 32 * WMN * WARPS_K;
  static constexpr int LDS = BK + 8;  // padded smem row (elements): ldmatrix conflict-free
  static constexpr int TM = BM / WARPS_M, TN = BN / WARPS_N;
  static constexpr int MT = TM / 16, NT = TN / 8;
  static constexpr int KSTEPS = BK / 16 / WARPS_K;
  static constexpr int CPR = BK / 8;  // 16-byte chunks per smem row
  static constexpr int A_CHUNKS = BM * CPR / THREADS, B_CHUNKS = BN * CPR / THREADS;
  static constexpr int STAGE_ELEMS = (BM + BN) * LDS;
  static constexpr int SMEM = STAGES * STAGE_ELEMS * 2;
  static constexpr int ACC = MT * NT * 4;
  static_assert(TM % 16 == 0 && TN % 16 == 0 && (TN / 2) % 8 == 0, "warp tile");
  static_assert(BK % (16 * WARPS_K) == 0, "k split");
  static_assert(BM * CPR % THREADS == 0 && BN * CPR % THREADS == 0, "chunks");
  static_assert((WARPS_K - 1) * WMN * ACC * 32 * 4 <= SMEM, "k reduction buffer");
  // Block-format expert weights (moe_mma_kernel's kQ, BK 128: one 128-element
  // block of each weight row a stage): per stage the activation tile and the
  // rows' raw blocks (the 16-byte pieces covering each block), then one tile
  // of weight rows converted to the activation type.
  static constexpr int smem_blocks(int raw_row) {
    return (STAGES * BM * LDS + BN * LDS) * 2 + STAGES * BN * raw_row;
  }
};
// The block formats the grouped expert GEMM converts (kQ): moe_blocks.h.
static_assert(int{moeblocks::kF8} == int{qblocks::kFmtF8B128} &&
                  int{moeblocks::kU4} == int{qblocks::kFmtU4G128},
              "format codes");
template <int Q>
using MoeBlocks = moeblocks::Blocks<Q>;
// Many rows per expert (prefill): 64 x 128 tiles, 4 warps of 32 x 64.
using CfgLarge = MmaCfg<64, 128, 32, 2, 2, 1, 4>;
// Few rows per expert (decode): 16 x 32 tiles streaming the weights with
// deep stages, 4 warps splitting each stage's k.
using CfgSmall = MmaCfg<16, 32, 128, 1, 1, 4, 4>;

// One block per (output column tile, row tile). Row tile `tile` = (expert,
// first gathered row, valid rows); blocks past *tile_count exit at once.
// Gated (gate/up): A row r = x[row_pair[first + r] / top_k] (normalised
// tokens, row stride ldx), B = the expert's [2 * nout, kdim] gate|up rows,
// arranged in shared memory so that every warp holds the gate and up
// columns of the same outputs; out (T) [rows, ldo] = silu(g) * u with g and
// u rounded to T first (the dense path's rounding points).
// Down: A row r = x[first + r], B = the expert's [nout, kdim] rows; out
// (f32) [rows, ldo].
//
// kQ (a qblocks format code, 0: weights of T): the expert weights are
// f8_e4m3_b128 or u4_g128 blocks (w_bytes of them, from a 16-byte aligned w;
// C::BK 128, kdim a multiple of 128). Each stage copies the pieces of every
// weight row's block into shared memory; before the stage's products the
// block's threads convert them into one tile of weight rows in the
// activation type, each value T(dequant8's f32): bitwise what dequantizing
// the experts for this kernel stores (launch_quant_dequant_rows), without
// the pass over every expert.
template <typename T, class C, bool kGated, int kQ = 0>
__global__ void __launch_bounds__(C::THREADS)
    moe_mma_kernel(const T* __restrict__ x, int64_t ldx, const int32_t* __restrict__ row_pair,
                   int top_k, const void* __restrict__ w_any, int64_t kdim, int64_t nout,
                   const int4* __restrict__ tiles, const int32_t* __restrict__ tile_count,
                   void* __restrict__ out, int64_t ldo, int64_t w_bytes) {
  constexpr bool kBlocks = kQ != 0;
  static_assert(!kBlocks || C::BK == 128, "a block-format stage is one block of each weight row");
  using Blk = MoeBlocks<kQ == 0 ? qblocks::kFmtF8B128 : kQ>;
  constexpr int kRawRow = Blk::kRawRow, kRawChunks = kRawRow / 16, kQBytes = Blk::kBytes;
  const T* w = static_cast<const T*>(w_any);
  if (static_cast<int32_t>(blockIdx.y) >= *tile_count) return;
  const int4 tile = tiles[blockIdx.y];
  const int expert = tile.x, first = tile.y, valid = tile.z;
  extern __shared__ __align__(16) unsigned char moe_smem[];
  T* smem = reinterpret_cast<T*>(moe_smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp / C::WMN, wmn = warp % C::WMN;
  const int wm = wmn / C::WARPS_N, wn = wmn % C::WARPS_N;

  // Source rows of this thread's 16-byte chunks (null: zero-filled).
  const T* a_src[C::A_CHUNKS];
#pragma unroll
  for (int j = 0; j < C::A_CHUNKS; ++j) {
    const int c = tid + j * C::THREADS, r = c / C::CPR, col = (c % C::CPR) * 8;
    const T* p = nullptr;
    if (r < valid) {
      const int64_t row = kGated ? row_pair[first + r] / top_k : static_cast<int64_t>(first + r);
      p = x + row * ldx + col;
    }
    a_src[j] = p;
  }
  // The expert's weight row of shared-memory B row r (ok: a real output).
  auto weight_row = [&](int r, int64_t* grow, bool* ok) {
    if (kGated) {
      // smem row r: warp column group r / TN; its first TN/2 rows gate, the
      // next TN/2 up, of the same outputs.
      constexpr int kHalf = C::TN / 2;
      const int g = r / C::TN, jj = r % C::TN;
      const int64_t i = static_cast<int64_t>(blockIdx.x) * (C::BN / 2) + g * kHalf + jj % kHalf;
      *ok = i < nout;
      *grow = (jj / kHalf) * nout + i;
    } else {
      *grow = static_cast<int64_t>(blockIdx.x) * C::BN + r;
      *ok = *grow < nout;
    }
  };
  const int64_t wrows = static_cast<int64_t>(expert) * (kGated ? 2 * nout : nout);
  const T* wexp = w + wrows * kdim;
  const T* b_src[C::B_CHUNKS];
  if constexpr (!kBlocks) {
#pragma unroll
    for (int j = 0; j < C::B_CHUNKS; ++j) {
      const int c = tid + j * C::THREADS, r = c / C::CPR, col = (c % C::CPR) * 8;
      int64_t grow;
      bool ok;
      weight_row(r, &grow, &ok);
      b_src[j] = ok ? wexp + grow * kdim + col : nullptr;
    }
  }
  // kQ: the row's block of stage kt starts at byte wrow_at(grow) + kQBytes kt.
  const auto* wb = static_cast<const uint8_t*>(w_any);
  const int64_t q_row_bytes = kdim / 128 * kQBytes;
  auto wrow_at = [&](int64_t grow) { return (wrows + grow) * q_row_bytes; };
  T* sb_q = smem + C::STAGES * C::BM * C::LDS;  // the converted weight rows
  uint8_t* raw_q = reinterpret_cast<uint8_t*>(sb_q + C::BN * C::LDS);

  // A stage: its activation tile, then (not kBlocks) its weight tile.
  constexpr int kStageElems = kBlocks ? C::BM * C::LDS : C::STAGE_ELEMS;
  auto load_stage = [&](int slot, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * C::BK;
    T* sa = smem + slot * kStageElems;
    T* sb = sa + C::BM * C::LDS;
#pragma unroll
    for (int j = 0; j < C::A_CHUNKS; ++j) {
      const int c = tid + j * C::THREADS, r = c / C::CPR, col = (c % C::CPR) * 8;
      const bool ok = a_src[j] != nullptr && k0 + col < kdim;
      cp_async16(sa + r * C::LDS + col, ok ? a_src[j] + k0 : x, ok);
    }
    if constexpr (kBlocks) {
      // The 16-byte pieces covering each row's block (a piece that runs
      // past the weights' end is cut there and zero-filled).
      uint8_t* rs = raw_q + slot * C::BN * kRawRow;
      for (int c = tid; c < C::BN * kRawChunks; c += C::THREADS) {
        const int r = c / kRawChunks, q = c % kRawChunks;
        int64_t grow;
        bool ok;
        weight_row(r, &grow, &ok);
        const int64_t at = moeblocks::piece_start(wrow_at(grow) + int64_t{kt} * kQBytes) + 16 * q;
        const int64_t left = ok ? w_bytes - at : 0;
        const int n = left <= 0 ? 0 : left >= 16 ? 16 : static_cast<int>(left);
        cp_async16_bytes(rs + r * kRawRow + 16 * q, n > 0 ? wb + at : wb, n);
      }
    } else {
#pragma unroll
      for (int j = 0; j < C::B_CHUNKS; ++j) {
        const int c = tid + j * C::THREADS, r = c / C::CPR, col = (c % C::CPR) * 8;
        const bool ok = b_src[j] != nullptr && k0 + col < kdim;
        cp_async16(sb + r * C::LDS + col, ok ? b_src[j] + k0 : w, ok);
      }
    }
  };
  // kQ: stage kt's raw blocks into the weight tile sb_q (f8: T(f32(code) *
  // d); u4: T(d * (q - z))); a thread converts 32 elements of one row.
  auto convert_blocks = [&](int slot, int kt) {
    const uint8_t* rs = raw_q + slot * C::BN * kRawRow;
    for (int u = tid; u < C::BN * 4; u += C::THREADS) {
      const int r = u >> 2, part = u & 3;
      int64_t grow;
      bool ok;
      weight_row(r, &grow, &ok);
      const int o = moeblocks::piece_offset(wrow_at(grow) + int64_t{kt} * kQBytes);
      float v[32];
      moeblocks::values32<kQ == 0 ? qblocks::kFmtF8B128 : kQ>(rs + r * kRawRow + o, part, v);
      uint32_t packed[16];
#pragma unroll
      for (int p2 = 0; p2 < 16; ++p2) {
        T two[2];
        two[0] = from_f<T>(v[2 * p2]);
        two[1] = from_f<T>(v[2 * p2 + 1]);
        packed[p2] = *reinterpret_cast<const uint32_t*>(two);
      }
      uint4* dst = reinterpret_cast<uint4*>(sb_q + r * C::LDS + 32 * part);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        dst[i] = make_uint4(packed[4 * i], packed[4 * i + 1], packed[4 * i + 2], packed[4 * i + 3]);
    }
  };

  float acc[C::MT][C::NT][4];
#pragma unroll
  for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mt][nt][q] = 0.0f;

  const int ktiles = static_cast<int>((kdim + C::BK - 1) / C::BK);
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    {
      const int nk = kt + C::STAGES - 1;
      if (nk < ktiles) load_stage(nk % C::STAGES, nk);
      cp_async_commit();
    }
    const T* sa = smem + (kt % C::STAGES) * kStageElems;
    const T* sb = sa + C::BM * C::LDS;
    if constexpr (kBlocks) {
      // Every warp is past the previous stage's products (the barrier
      // above): the weight tile can be overwritten.
      convert_blocks(kt % C::STAGES, kt);
      __syncthreads();
      sb = sb_q;
    }
#pragma unroll
    for (int ks = 0; ks < C::KSTEPS; ++ks) {
      const int kk = (ks * C::WARPS_K + wk) * 16;
      uint32_t af[C::MT][4];
      uint32_t bf[C::NT][2];
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
        ldmatrix_x4(af[mt], smem_addr(sa + (wm * C::TM + mt * 16 + (lane & 15)) * C::LDS + kk +
                                       (lane >> 4) * 8));
#pragma unroll
      for (int np = 0; np < C::NT / 2; ++np) {
        uint32_t r4[4];
        ldmatrix_x4(r4, smem_addr(sb + (wn * C::TN + np * 16 + (lane & 7) + ((lane >> 4) << 3)) *
                                           C::LDS +
                                       kk + ((lane >> 3) & 1) * 8));
        bf[2 * np][0] = r4[0];
        bf[2 * np][1] = r4[1];
        bf[2 * np + 1][0] = r4[2];
        bf[2 * np + 1][1] = r4[3];
      }
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt) mma16816<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  if constexpr (C::WARPS_K > 1) {
    // Partial sums of warps wk > 0 through shared memory, added in order.
    float* red = reinterpret_cast<float*>(moe_smem);
    if (wk > 0) {
      float* dst = red + ((wk - 1) * C::WMN + wmn) * C::ACC * 32;
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
          for (int q = 0; q < 4; ++q) dst[((mt * C::NT + nt) * 4 + q) * 32 + lane] = acc[mt][nt][q];
    }
    __syncthreads();
    if (wk > 0) return;
    for (int k2 = 1; k2 < C::WARPS_K; ++k2) {
      const float* src = red + ((k2 - 1) * C::WMN + wmn) * C::ACC * 32;
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[mt][nt][q] += src[((mt * C::NT + nt) * 4 + q) * 32 + lane];
    }
  }

  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < C::MT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * C::TM + mt * 16 + g + half * 8;
      if (r >= valid) continue;
      const int64_t orow = static_cast<int64_t>(first + r) * ldo;
      if constexpr (kGated) {
        T* h = static_cast<T*>(out) + orow;
#pragma unroll
        for (int nt = 0; nt < C::NT / 2; ++nt) {
          const int64_t i = static_cast<int64_t>(blockIdx.x) * (C::BN / 2) + wn * (C::TN / 2) +
                            nt * 8 + 2 * tq;
          if (i >= nout) continue;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float gt = to_f(from_f<T>(acc[mt][nt][half * 2 + c]));
            const float up = to_f(from_f<T>(acc[mt][nt + C::NT / 2][half * 2 + c]));
            v[c] = gt / (1.0f + expf(-gt)) * up;
          }
          store2(h + i, v[0], v[1]);
        }
      } else {
        float* y = static_cast<float*>(out) + orow;
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt) {
          const int64_t col = static_cast<int64_t>(blockIdx.x) * C::BN + wn * C::TN + nt * 8 + 2 * tq;
          if (col >= nout) continue;
          *reinterpret_cast<float2*>(y + col) =
              make_float2(acc[mt][nt][half * 2], acc[mt][nt][half * 2 + 1]);
        }
      }
    }
  }
}

template <typename T, class C, bool kGated, int kQ = 0>
void launch_mma(cudaStream_t s, const void* x, int64_t ldx, const int32_t* row_pair,
                  int64_t top_k, const void* w, int64_t kdim, int64_t nout,
                  const int32_t* tiles, const int32_t* tile_count, int64_t max_tiles, void* out,
                  int64_t ldo, int64_t w_bytes = 0) {
  const int64_t cols = kGated ? C::BN / 2 : C::BN;
  const dim3 grid(static_cast<unsigned>((nout + cols - 1) / cols), static_cast<unsigned>(max_tiles));
  auto k = moe_mma_kernel<T, C, kGated, kQ>;
  constexpr int smem = kQ == 0 ? C::SMEM : C::smem_blocks(MoeBlocks<kQ == 0 ? qblocks::kFmtF8B128 : kQ>::kRawRow);
  (void)cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  k<<<grid, C::THREADS, smem, s>>>(static_cast<const T*>(x), ldx, row_pair,
                                   static_cast<int>(top_k), w, kdim, nout,
                                   reinterpret_cast<const int4*>(tiles), tile_count, out, ldo,
                                   w_bytes);
}

// --- SIMT expert products (f32 activations, odd shapes) -------------------------------

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

// --- combine ----------------------------------------------------------------------------

template <typename T>
__global__ void moe_combine_kernel(T* hidden, int64_t H, int K, const int32_t* slot_of,
                                   const float* weights, const float* ys, const float* sgate,
                                   const float* shared_out) {
  __shared__ int64_t row[kMaxTopK];
  __shared__ float wt[kMaxTopK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < K) {
    row[threadIdx.x] = static_cast<int64_t>(slot_of[t * K + threadIdx.x]) * H;
    wt[threadIdx.x] = weights[t * K + threadIdx.x];
  }
  __syncthreads();
  const float sg = shared_out ? 1.0f / (1.0f + expf(-sgate[t])) : 0.0f;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    float acc = 0;
    for (int k = 0; k < K; ++k) acc += wt[k] * ys[row[k] + j];
    if (shared_out) acc += sg * shared_out[t * H + j];
    hidden[t * H + j] = from_f<T>(to_f(hidden[t * H + j]) + acc);
  }
}

}  // namespace

// --- launchers ---------------------------------------------------------------------------

Status launch_moe_norm(cudaStream_t s, const void* x, DType act, float* y32, void* y,
                       const void* w, DType w_dt, int64_t rows, int64_t width, float eps,
                       bool zero_centred) {
  if (!small_ok(w_dt)) return bad_dtype("moe norm weight", w_dt);
  if (rows == 0) return Status::ok();
  const bool ok = dispatch_float(act, [&](auto tag) {
    using T = decltype(tag);
    moe_norm_kernel<T><<<static_cast<unsigned>(rows), 256, 0, s>>>(
        static_cast<const T*>(x), y32, static_cast<T*>(y), w, dt_code(w_dt), width, eps,
        zero_centred);
  });
  if (!ok) return bad_dtype("moe norm input", act);
  return check_launch("moe_norm_kernel");
}

namespace {
bool router_aligned(const void* w, DType w_dt, int64_t H) {
  return router_chunk_rows(H) > 0 && (reinterpret_cast<uintptr_t>(w) & 15) == 0 &&
         (w_dt == DType::kF32 || w_dt == DType::kBF16 || w_dt == DType::kF16);
}
}  // namespace

Status launch_moe_router(cudaStream_t s, const float* x, int64_t rows, int64_t hidden,
                         const void* w, DType w_dt, int64_t experts, float* logits) {
  if (rows > kMoeRouterMaxRows) return unsupported("moe router GEMV: too many rows");
  if (rows == 0 || experts == 0) return Status::ok();
  if (router_aligned(w, w_dt, hidden)) {
    const int rc = router_chunk_rows(hidden);
    const dim3 grid(static_cast<unsigned>((experts + kRouterExperts - 1) / kRouterExperts),
                    static_cast<unsigned>((rows + rc - 1) / rc));
    const size_t smem = static_cast<size_t>(rc) * hidden * 4;
    const bool ok = dispatch_float(w_dt, [&](auto tag) {
      using TW = decltype(tag);
      moe_router_kernel<float, TW, false><<<grid, 256, smem, s>>>(
          x, static_cast<int>(rows), hidden, rc, nullptr, 0, 0.0f, false, nullptr, nullptr,
          nullptr, nullptr, static_cast<const TW*>(w), experts, logits, nullptr, nullptr,
          MoeRouteSortArgs{}, false);
    });
    if (!ok) return bad_dtype("moe router weight", w_dt);
    return check_launch("moe_router_kernel");
  }
  constexpr int kWarps = 8;
  const dim3 grid(static_cast<unsigned>((experts + kWarps - 1) / kWarps),
                  static_cast<unsigned>((rows + kMoeRouterGemvRows - 1) / kMoeRouterGemvRows));
  const bool ok = dispatch_float(w_dt, [&](auto tag) {
    using TW = decltype(tag);
    router_gemv_kernel<TW><<<grid, kWarps * 32, 0, s>>>(x, rows, hidden,
                                                        static_cast<const TW*>(w), experts, logits);
  });
  if (!ok) return bad_dtype("moe router weight", w_dt);
  return check_launch("router_gemv_kernel");
}

bool moe_norm_router_supported(int64_t hidden, const void* router_w, DType router_dt) {
  return router_aligned(router_w, router_dt, hidden);
}

bool moe_norm_router_route_supported(int64_t rows, int64_t hidden, int64_t experts,
                                     int64_t top_k) {
  const int rc = router_chunk_rows(hidden);
  return rc > 0 && rows >= 1 && rows <= kMoeFusedMaxRows && top_k >= 1 && top_k <= kMaxTopK &&
         top_k <= experts && experts <= kMoeMaxExperts && rows * top_k <= 32 &&
         rows * experts <= static_cast<int64_t>(rc) * hidden;
}

Status launch_moe_norm_router(cudaStream_t s, const void* x, DType act, float* y32, void* y,
                              const void* norm_w, DType norm_dt, int64_t rows, int64_t hidden,
                              float eps, bool zero_centred, int8_t* xq, float* xd,
                              const void* router_w, DType router_dt, int64_t experts,
                              float* logits, const void* extra_w, float* extra_out,
                              const MoeRouteSortArgs* route, bool pdl_trigger) {
  if (!small_ok(norm_dt)) return bad_dtype("moe norm weight", norm_dt);
  if (rows < 1 || rows > kMoeFusedMaxRows) return unsupported("moe norm + router: 1..32 rows");
  if (xq && hidden % 32 != 0) return unsupported("moe norm + router: 8-bit rows need hidden % 32");
  if (!router_aligned(router_w, router_dt, hidden))
    return unsupported("moe norm + router: hidden a multiple of 8 up to 8192, aligned rows");
  if (experts == 0) return Status::ok();
  if ((extra_w == nullptr) != (extra_out == nullptr) ||
      (extra_w && (reinterpret_cast<uintptr_t>(extra_w) & 15)))
    return unsupported("moe norm + router: the extra row needs its output and 16-byte alignment");
  MoeRouteSortArgs rs;  // counter null: the router alone
  if (route) {
    if (!moe_norm_router_route_supported(rows, hidden, experts, route->top_k))
      return unsupported("moe norm + router + route: rows * top_k <= 32 and the logits in its "
                         "staged inputs' room");
    // offsets may be null (the one-warp routing leaves them unwritten).
    if (!route->counter || !route->ids || !route->weights || !route->slot_of ||
        !route->row_pair || !route->tiles || !route->tile_count)
      return internal_error("moe norm + router + route: an output is missing");
    rs = *route;
  }
  const int rc = router_chunk_rows(hidden);
  const int64_t outs = experts + (extra_w ? 1 : 0);
  const dim3 grid(static_cast<unsigned>((outs + kRouterExperts - 1) / kRouterExperts),
                  static_cast<unsigned>((rows + rc - 1) / rc));
  const size_t smem = static_cast<size_t>(rc) * hidden * 4;
  bool inner = true;
  cudaError_t err = cudaSuccess;
  const bool ok = dispatch_float(act, [&](auto at) {
    using T = decltype(at);
    inner = dispatch_float(router_dt, [&](auto wt) {
      using TW = decltype(wt);
      err = launch_maybe_pdl(route != nullptr, moe_router_kernel<T, TW, true>, grid, dim3(256),
                             smem, s, static_cast<const T*>(x), static_cast<int>(rows), hidden,
                             rc, norm_w, dt_code(norm_dt), eps, zero_centred, y32,
                             static_cast<T*>(y), xq, xd, static_cast<const TW*>(router_w),
                             experts, logits, static_cast<const TW*>(extra_w), extra_out, rs,
                             pdl_trigger);
    });
  });
  if (!ok) return bad_dtype("moe norm input", act);
  if (!inner) return bad_dtype("moe router weight", router_dt);
  if (err != cudaSuccess)
    return cuda_error(err, "moe_router_kernel (norm)");
  return check_launch("moe_router_kernel (norm)");
}

Status launch_moe_route(cudaStream_t s, const float* logits, int64_t tokens, int64_t experts,
                        int64_t top_k, bool normalize, int32_t* ids, float* weights) {
  if (top_k < 1 || top_k > kMaxTopK || top_k > experts)
    return unsupported("moe routing: top_k must be 1..32 and <= experts");
  if (tokens == 0) return Status::ok();
  route_kernel<<<static_cast<unsigned>((tokens + kRouteWarps - 1) / kRouteWarps),
                 kRouteWarps * 32, 0, s>>>(logits, tokens, static_cast<int>(experts),
                                           static_cast<int>(top_k), normalize, ids, weights);
  return check_launch("route_kernel");
}

Status launch_moe_route_sort(cudaStream_t s, const float* logits, int64_t tokens,
                             int64_t experts, int64_t top_k, bool normalize, int32_t* ids,
                             float* weights, int row_tile, int32_t* offsets, int32_t* slot_of,
                             int32_t* row_pair, int32_t* tiles, int32_t* tile_count,
                             bool block_route) {
  if (top_k < 1 || top_k > kMaxTopK || top_k > experts)
    return unsupported("moe routing: top_k must be 1..32 and <= experts");
  if (experts < 1 || experts > kMoeMaxExperts) return unsupported("moe sort: 1..4096 experts");
  if (block_route && tokens == 1 && experts <= kRouteBlockMaxExperts) {
    if (row_tile < 1) return invalid_argument("moe route + sort: row_tile must be positive");
    const int spe = route_block_threads_per_item(kRouteOneThreads, static_cast<int>(experts),
                                                 static_cast<int>(top_k));
    moe_route_one_kernel<<<1, kRouteOneThreads, 0, s>>>(
        logits, static_cast<int>(experts), static_cast<int>(top_k), normalize, spe, ids, weights,
        row_tile, offsets, slot_of, row_pair, reinterpret_cast<int4*>(tiles), tile_count);
    return check_launch("moe_route_one_kernel");
  }
  if (tokens < 1 || tokens > 32 || tokens * top_k > kMoeSortSmallPairs)
    return unsupported("moe route + sort: 1..32 tokens and at most 256 pairs");
  const int E = static_cast<int>(experts);
  if (!offsets && tokens * top_k > 32)
    return invalid_argument("moe route + sort: offsets may be left out only up to 32 pairs");
  if (tokens * top_k <= 32) {
    moe_route_sort_warp_kernel<<<1, 32, 0, s>>>(
        logits, static_cast<int>(tokens), E, static_cast<int>(top_k), normalize, ids, weights,
        row_tile, offsets, slot_of, row_pair, reinterpret_cast<int4*>(tiles), tile_count);
    return check_launch("moe_route_sort_warp_kernel");
  }
  const size_t plan_smem = static_cast<size_t>(4 * (2 * E + 1 + 64));
  moe_route_sort_kernel<<<1, kRouteSortThreads, plan_smem, s>>>(
      logits, static_cast<int>(tokens), E, static_cast<int>(top_k), normalize, ids, weights,
      row_tile, offsets, slot_of, row_pair, reinterpret_cast<int4*>(tiles), tile_count);
  return check_launch("moe_route_sort_kernel");
}

int64_t moe_sort_count_ints(int64_t pairs, int64_t experts) {
  return pairs <= kMoeSortSmallPairs ? 0 : (pairs + kMoeSortChunk - 1) / kMoeSortChunk * experts;
}

int moe_row_tile(int64_t pairs, int64_t experts) {
  const int64_t active = std::min(pairs, experts);
  return active > 0 && pairs >= 32 * active ? 64 : 16;
}

int64_t moe_max_tiles(int64_t pairs, int64_t experts, int row_tile) {
  return (pairs + row_tile - 1) / row_tile + std::min(pairs, experts);
}

Status launch_moe_sort(cudaStream_t s, const int32_t* ids, int64_t pairs, int64_t experts,
                       int row_tile, int32_t* offsets, int32_t* slot_of, int32_t* row_pair,
                       int32_t* tiles, int32_t* tile_count, int32_t* counts) {
  if (experts < 1 || experts > kMoeMaxExperts) return unsupported("moe sort: 1..4096 experts");
  if (pairs > INT32_MAX / 2) return unsupported("moe sort: too many pairs");
  const int E = static_cast<int>(experts);
  const int32_t P = static_cast<int32_t>(pairs);
  auto* t4 = reinterpret_cast<int4*>(tiles);
  const size_t plan_smem = static_cast<size_t>(4 * (2 * E + 1 + 64));
  if (pairs <= kMoeSortSmallPairs) {
    moe_sort_small_kernel<<<1, 1024, plan_smem, s>>>(ids, P, E, row_tile, offsets, slot_of,
                                                     row_pair, t4, tile_count);
    return check_launch("moe_sort_small_kernel");
  }
  const int chunks = static_cast<int>((pairs + kMoeSortChunk - 1) / kMoeSortChunk);
  moe_count_kernel<<<chunks, 256, static_cast<size_t>(4 * E), s>>>(ids, P, E, counts);
  FERRITE_RETURN_IF_ERROR(check_launch("moe_count_kernel"));
  moe_plan_kernel<<<1, 1024, plan_smem, s>>>(counts, chunks, E, row_tile, offsets, t4,
                                             tile_count);
  FERRITE_RETURN_IF_ERROR(check_launch("moe_plan_kernel"));
  const dim3 grid(static_cast<unsigned>(chunks),
                  static_cast<unsigned>((E + kScatterWarps - 1) / kScatterWarps));
  moe_scatter_kernel<<<grid, kScatterWarps * 32, 0, s>>>(ids, P, E, chunks, counts, offsets,
                                                         slot_of, row_pair);
  return check_launch("moe_scatter_kernel");
}

bool moe_mma_supported(DType act, DType gate_up_dt, DType down_dt, int64_t hidden,
                       int64_t intermediate) {
  return (act == DType::kBF16 || act == DType::kF16) && gate_up_dt == act && down_dt == act &&
         hidden % 8 == 0 && intermediate % 8 == 0 && hidden > 0 && intermediate > 0;
}

bool moe_mma_blocks_supported(DType act, DType gate_up_dt, DType down_dt, int64_t hidden,
                              int64_t intermediate, int row_tile) {
  const bool fmt = (gate_up_dt == DType::kF8B128 || gate_up_dt == DType::kU4G128) &&
                   down_dt == gate_up_dt;
  return (act == DType::kBF16 || act == DType::kF16) && fmt && hidden % 128 == 0 &&
         intermediate % 128 == 0 && hidden > 0 && intermediate > 0 && row_tile == 16;
}

Status launch_moe_expert_mma(cudaStream_t s, bool gated, const void* x, int64_t ldx,
                             const int32_t* row_pair, int64_t top_k, const void* w, int64_t kdim,
                             int64_t nout, DType act, int row_tile, const int32_t* tiles,
                             const int32_t* tile_count, int64_t max_tiles, void* out,
                             int64_t ldo, DType w_dt, int64_t experts) {
  if (nout == 0 || max_tiles == 0) return Status::ok();
  if (max_tiles > 65535) return unsupported("moe expert GEMM: too many row tiles");
  if (kdim % 8 != 0 || ldx % 8 != 0 || (reinterpret_cast<uintptr_t>(x) & 15) ||
      (reinterpret_cast<uintptr_t>(w) & 15))
    return unsupported("moe expert GEMM: rows must be 16-byte aligned");
  if (row_tile != 16 && row_tile != 64) return unsupported("moe expert GEMM: row tile 16 or 64");
  const bool f8 = w_dt == DType::kF8B128, u4 = w_dt == DType::kU4G128;
  if (!f8 && !u4 && w_dt != act) return bad_dtype("moe expert GEMM (weights)", w_dt);
  if ((f8 || u4) && (row_tile != 16 || kdim % 128 != 0))
    return unsupported("moe expert GEMM: block experts take 16-row tiles and k of whole blocks");
  const int64_t w_bytes = (f8 || u4) ? experts * (gated ? 2 * nout : nout) * dtype_bytes(w_dt, kdim) : 0;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    constexpr int kF8 = qblocks::kFmtF8B128, kU4 = qblocks::kFmtU4G128;
    if (f8 && gated)
      launch_mma<T, CfgSmall, true, kF8>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles,
                                         tile_count, max_tiles, out, ldo, w_bytes);
    else if (f8)
      launch_mma<T, CfgSmall, false, kF8>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles,
                                          tile_count, max_tiles, out, ldo, w_bytes);
    else if (u4 && gated)
      launch_mma<T, CfgSmall, true, kU4>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles,
                                         tile_count, max_tiles, out, ldo, w_bytes);
    else if (u4)
      launch_mma<T, CfgSmall, false, kU4>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles,
                                          tile_count, max_tiles, out, ldo, w_bytes);
    else if (row_tile == 64 && gated)
      launch_mma<T, CfgLarge, true>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles, tile_count,
                                    max_tiles, out, ldo);
    else if (row_tile == 64)
      launch_mma<T, CfgLarge, false>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles, tile_count,
                                     max_tiles, out, ldo);
    else if (gated)
      launch_mma<T, CfgSmall, true>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles, tile_count,
                                    max_tiles, out, ldo);
    else
      launch_mma<T, CfgSmall, false>(s, x, ldx, row_pair, top_k, w, kdim, nout, tiles, tile_count,
                                     max_tiles, out, ldo);
  };
  if (act == DType::kBF16)
    run(__nv_bfloat16{});
  else if (act == DType::kF16)
    run(__half{});
  else
    return bad_dtype("moe expert GEMM", act);
  return check_launch(gated ? "moe_mma_kernel (gate/up)" : "moe_mma_kernel (down)");
}

Status launch_moe_expert_rows(cudaStream_t s, const void* x, DType x_dt, int64_t ldx,
                              bool by_token, int64_t top_k, int64_t kdim, const void* w,
                              DType w_dt, int64_t nout, int64_t experts, const int32_t* offsets,
                              const int32_t* row_pair, float* out, int64_t ldo) {
  if (nout == 0 || experts == 0) return Status::ok();
  constexpr int kWarps = 8;
  const dim3 grid(static_cast<unsigned>((nout + kWarps - 1) / kWarps),
                  static_cast<unsigned>(experts));
  bool inner = true;
  const bool ok = dispatch_float(x_dt, [&](auto xt) {
    using TX = decltype(xt);
    inner = dispatch_float(w_dt, [&](auto wt) {
      using TW = decltype(wt);
      expert_rows_kernel<TX, TW><<<grid, kWarps * 32, 0, s>>>(
          static_cast<const TX*>(x), ldx, by_token, static_cast<int>(top_k), kdim,
          static_cast<const TW*>(w), nout, offsets, row_pair, out, ldo);
    });
  });
  if (!ok) return bad_dtype("moe expert input", x_dt);
  if (!inner) return bad_dtype("moe expert weight", w_dt);
  return check_launch("expert_rows_kernel");
}

Status launch_moe_act(cudaStream_t s, float* gu, int64_t rows, int64_t intermediate) {
  if (rows * intermediate == 0) return Status::ok();
  moe_act_kernel<<<grid_for(rows * intermediate, 256), 256, 0, s>>>(gu, rows, intermediate);
  return check_launch("moe_act_kernel");
}

Status launch_moe_combine(cudaStream_t s, void* hidden, DType act, int64_t tokens,
                          int64_t hidden_size, int64_t top_k, const int32_t* slot_of,
                          const float* weights, const float* ys, const float* shared_gate,
                          const float* shared_out) {
  if (tokens == 0) return Status::ok();
  if (top_k < 1 || top_k > kMaxTopK) return unsupported("moe combine: top_k must be 1..32");
  const bool ok = dispatch_float(act, [&](auto tag) {
    using T = decltype(tag);
    moe_combine_kernel<T><<<static_cast<unsigned>(tokens), 256, 0, s>>>(
        static_cast<T*>(hidden), hidden_size, static_cast<int>(top_k), slot_of, weights, ys,
        shared_gate, shared_out);
  });
  if (!ok) return bad_dtype("moe combine activation", act);
  return check_launch("moe_combine_kernel");
}

}  // namespace ferrite::cuda
