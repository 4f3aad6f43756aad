// Fused decode attention for short contexts: the contract of
// launch_attention_decode_fused (bias, q/k RMS norm and RoPE of the token's
// q heads and new K/V, the K/V write into the paged cache, attention over
// the cached positions), with each KV head's splits one thread-block
// cluster that merges in distributed shared memory.
//
// Why: at batch 1 the fused kernel (attention_decode.cu) took 12-19 us a
// layer on the H200 at 128 positions (ncu: 4 % of issue slots busy, ~2,500
// dependent instructions a warp): a lane holds 4 dims of a K row, so each
// score is a 5-level butterfly, every round reloads K/V after the wait,
// and the splits merge through a global fence, an arrival ticket and a
// last block re-reading the partials. Here
//  - every cached K/V row of the block's positions (up to kPos) is copied
//    into shared memory before the wait for the Q/K/V projection (one bulk
//    copy a row completing on an mbarrier, issued by the two warps that
//    hold no q / K / V row; else a cp.async a 16-byte chunk), so that after
//    it only the token's own rows are read; RoPE's cos / sin are computed
//    once a block into shared memory (the row warps' prologue is then only
//    their loads: on a model whose Q/K/V projection is short it is the
//    critical path);
//  - a thread computes a whole score (one position, one head: a
//    head_dim-long dot product of a K row in shared memory, padded so a
//    warp's rows fall in distinct banks, with q broadcast), with no
//    shuffles; then one softmax per block (warp max / sum, two warps a
//    head), and a thread per (head, dim pair) sums P x V over the
//    positions;
//  - the splits of a (token, KV head, part) are the blocks of one cluster
//    (up to 8): each leaves its (max, sum, unnormalised output) in its
//    shared memory, and after a cluster barrier every block merges a slice
//    of the outputs from all of them, in split order (deterministic).
// Taken when the step's length bound (StepMeta::kv_len_bound) is at most
// 8 x kPos positions and the step has at most 8 tokens (decode batches);
// longer contexts and larger batches keep the fused kernel, whose splits
// scale to 64 and whose blocks loop over rounds.
//
// Numerics follow attention_decode.cu: f32 throughout, q and the new K/V
// rounded to the activation dtype after RoPE, q scaled after rounding; the
// sums run in another order (equal up to f32 rounding).
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/attention_decode.cuh"
#include "backends/cuda/kernels/attention_decode_rows.cuh"
#include "backends/cuda/kernels/bulk_copy.cuh"
#include "backends/cuda/kernels/cuda_types.cuh"

namespace ferrite::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPos = 64;         // positions a block (= a split) at most
constexpr int kMaxCluster = 8;   // splits a (token, KV head, part): a portable cluster
constexpr int kMaxHeads = 4;     // query heads a block (fused_decode_parts)
constexpr int kStampSlots = 13;
constexpr int kCopyWarp0 = kMaxHeads + 2;  // the first copy warp (after q heads, K, V)
static_assert(kThreads - kCopyWarp0 * 32 >= kPos, "a copy thread a page id at page size 1");
static_assert(kCopyWarp0 * 32 >= 128, "the RoPE table's threads (half <= 128) in row warps");  // ClusterTrace: the global start, the clock's start, 11 phases
static_assert(kMaxCluster * kPos == kAttentionClusterMaxPositions, "the header's bound");

// Shared memory of a block: K and V rows [2][kPos][HD + 8] (T; 16 bytes of
// padding a row: row r starts 4 banks after row r - 1), then floats: q
// [kMaxHeads][HD] (roped, rounded, scaled), P [kMaxHeads][kPos], the
// warps' max and sum [2][kWarps], and the block's partial for the cluster:
// max [kMaxHeads], sum [kMaxHeads], output [kMaxHeads][HD]; then
// kStampSlots 64-bit words (BlockStamps), then the bulk copies' mbarrier
// and the token's own cache offset (copy warps).
template <int HD>
constexpr int row_elems() {
  return HD + 8;
}
template <typename T, int HD>
constexpr size_t kv_bytes() {
  return sizeof(T) * 2 * kPos * row_elems<HD>();
}
template <typename T, int HD>
constexpr size_t floats_bytes() {
  return sizeof(float) * (kMaxHeads * HD + kMaxHeads * kPos + 2 * kWarps + 2 * kMaxHeads +
                          kMaxHeads * HD);
}
template <typename T, int HD>
constexpr size_t smem_bytes() {
  return kv_bytes<T, HD>() + floats_bytes<T, HD>() + sizeof(uint64_t) * (kStampSlots + 2);
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

// ClusterTrace's stamps: thread 0 of each block keeps them in shared memory
// (kStampSlots words at the end of the block's), not in registers: the
// kernel's registers, hence its room beside a GEMV block
// (attention_decode_cluster_room), stay the same with or without a trace.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
struct BlockStamps {
  const ClusterTrace& trace;
  uint64_t* slots;  // shared memory
  __device__ __forceinline__ bool on() const { return trace.records && threadIdx.x == 0; }
  __device__ __forceinline__ void begin() {
    if (on()) {
      slots[0] = global_ns();
      slots[1] = clock64();
    }
  }
  __device__ __forceinline__ void mark(int i) {
    if (on()) slots[2 + i] = clock64();
  }
  // The same stamp taken by the thread `who` is true in (not thread 0).
  __device__ __forceinline__ void mark_by(int i, bool who) {
    if (trace.records && who) slots[2 + i] = clock64();
  }
  __device__ __forceinline__ void write() {
    if (!on()) return;
    mark(8);
    ClusterTraceRecord r;
    r.global_end = global_ns();
    r.global_start = slots[0];
#pragma unroll
    for (int i = 0; i < 11; ++i) r.clock[i] = static_cast<uint32_t>(slots[2 + i] - slots[1]);
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.blocks = gridDim.x * gridDim.y * gridDim.z;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r.smid));
    trace.records[atomicAdd(trace.next, 1u) & (trace.capacity - 1)] = r;
  }
};

// Five blocks' registers an SM at head_dim <= 128 (ptxas: 48 a thread):
// a block must fit in the 14,336 registers a one-token GEMV block leaves
// (attention_decode_cluster_room, Tuning::cuda_decode_colocate), which
// ptxas's own choice missed by a few registers for some variants.
template <typename T, int HD, bool kLateStores>
__global__ void __launch_bounds__(kThreads, HD <= 128 ? 5 : 1)
    attention_decode_cluster_kernel(AttentionShape a, StepMeta meta, int32_t page_size, T* q,
                                    const T* k, const T* v, DecodeWeights wts, T* k_cache,
                                    T* v_cache, T* out, DecodeClusterKnobs knobs,
                                    ClusterTrace trace) {
  constexpr int D = HD / 32;          // dims a lane of the q / K / V row warps
  constexpr int RS = row_elems<HD>();  // shared row stride (elements)
  constexpr int CH = HD * static_cast<int>(sizeof(T)) / 16;  // 16-byte chunks a row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* kv_s = reinterpret_cast<T*>(smem_raw);  // [2][kPos][RS]: K rows, then V rows
  float* q_s = reinterpret_cast<float*>(smem_raw + kv_bytes<T, HD>());  // [kMaxHeads][HD]
  float* p_s = q_s + kMaxHeads * HD;       // [kMaxHeads][kPos]
  float* red_m = p_s + kMaxHeads * kPos;   // [kWarps]
  float* red_l = red_m + kWarps;           // [kWarps]
  float* part_m = red_l + kWarps;          // [kMaxHeads]
  float* part_l = part_m + kMaxHeads;      // [kMaxHeads]
  float* part_o = part_l + kMaxHeads;      // [kMaxHeads][HD]

  cg::cluster_group cluster = cg::this_cluster();
  const int64_t t = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;
  const int parts = gridDim.y / a.num_kv_heads;
  const int gsub = (group + parts - 1) / parts;
  const int kvh = blockIdx.y / parts, part = blockIdx.y % parts;
  const int split = blockIdx.z, splits = gridDim.z;
  const int g0 = part * gsub;
  const int ng = min(gsub, group - g0);
  const int h0 = kvh * group + g0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nkv = a.num_kv_heads;
  BlockStamps stamps{trace, reinterpret_cast<uint64_t*>(smem_raw + kv_bytes<T, HD>() +
                                                        floats_bytes<T, HD>())};
  stamps.begin();

  // --- before the wait: step metadata, the cached K/V rows, RoPE's angles -------
  // Staged pages: the sequence's table start straight from the token
  // (StepMeta::token_table when the step has it), a dependent load sooner.
  const int32_t pos = meta.token_pos[t];
  int32_t seq = 0, table = 0;
  bool real;
  if (knobs.staged_pages && meta.token_table) {
    table = meta.token_table[t];
    real = table >= 0;
  } else {
    seq = meta.token_seq[t];
    real = meta.seq_len[seq] > 0;
    if (knobs.staged_pages) table = meta.seq_block_off[seq];
  }
  const int len = real ? pos + 1 : 0;
  // Balanced splits of [0, len); the host keeps len <= splits x kPos.
  const int per = min(kPos, (len + splits - 1) / splits);
  const int p0 = min(len, split * per), p1 = min(len, p0 + per);
  // Warp i < ng: q head h0 + i; warp ng: K; warp ng + 1: V (as the fused
  // kernel's rows: bias, RMS norm for q / k, RoPE through shared memory).
  const int half = a.rope_dim / 2;
  const int row = warp;
  const DecodeRowRole rr = decode_row_role(a, wts, row, ng, h0, kvh, HD);

  const int np = p1 - p0;
  // The page ids of [p0, p1) (staged pages) in P's shared memory, unused
  // until after the wait's first __syncthreads.
  int32_t* page_s = reinterpret_cast<int32_t*>(p_s);
  const int first = p0 / page_size;
  // Element offset of position p's K / V row (this KV head) in the caches.
  auto cache_offset = [&](int p) -> int64_t {
    if (knobs.staged_pages)
      return ((static_cast<int64_t>(page_s[p / page_size - first]) * page_size + p % page_size) *
                  nkv + kvh) * HD;
    return paged_kv_offset(meta, seq, p, page_size, nkv, HD, kvh);
  };
  // The token's own row is written below, not copied.
  const int own = real && pos >= p0 && pos < p1 ? 1 : 0;
  // The bulk copies' mbarrier, after the stamps, then (copy warps) the
  // token's own cache offset.
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem_raw + kv_bytes<T, HD>() +
                                              floats_bytes<T, HD>()) + kStampSlots;
  int64_t* own_off_s = reinterpret_cast<int64_t*>(bar + 1);
  // Copy warps: the two warps past the rows' (kMaxHeads + 2) load the page
  // ids and issue every copy, synchronising only among themselves, so the
  // row warps go from their loads straight to the wait.
  const bool cw = kLateStores && knobs.bulk_copies && knobs.copy_warps;
  const bool copier = !cw || warp >= kCopyWarp0;
  const int ctid = cw ? tid - kCopyWarp0 * 32 : tid;
  const int cthreads = cw ? kThreads - kCopyWarp0 * 32 : kThreads;
  if (knobs.bulk_copies && copier && ctid == 0) {
    // One arrival (this one) announcing the copies' bytes: the phase
    // completes when every row has landed.
    mbar_init(bar, 1);
    mbar_init_fence();
    mbar_expect_tx(bar, static_cast<uint32_t>(np - own) * 2 * HD * sizeof(T));
  }
  if (knobs.staged_pages) {
    // At once, a thread a page: each copy's address is then a shared read,
    // not the two dependent global loads of paged_kv_offset, which every
    // cp.async (a memory clobber) makes the compiler reissue.
    const int pages = np > 0 ? (p1 - 1) / page_size - first + 1 : 0;
    if (copier && ctid < pages) page_s[ctid] = meta.block_tables[table + first + ctid];
  }
  // RoPE table: cos / sin of each frequency once a block (threads < half,
  // all in row warps), in part_o's rows 2-3 (free until P x V), instead of
  // every row lane's own angles: a lane's inv_freq reads are 32 distinct
  // addresses of the parameter bank a warp (serialised), and 4 q rows + K
  // repeat the same sines.
  float* rope_s = part_o + 2 * HD;  // [2][half]
  if (knobs.rope_table && tid < half) {
    const float angle = static_cast<float>(pos) * a.inv_freq[tid];
    rope_s[tid] = cosf(angle);
    rope_s[half + tid] = sinf(angle);
  }
  if (cw) {
    // The page ids and the barrier's init among the copy warps only.
    if (copier) {
      asm volatile("bar.sync 1, %0;" ::"r"(cthreads) : "memory");
      if (ctid == 0) *own_off_s = own ? cache_offset(pos) : 0;
    }
  } else if (knobs.staged_pages || knobs.bulk_copies) {
    __syncthreads();  // the page ids; the barrier's init
  }
  stamps.mark_by(9, copier && ctid == 0);
  if (knobs.bulk_copies) {
    // A thread a row (K and V interleaved): one bulk request each instead
    // of a 16-byte cp.async per chunk.
    if (copier) {
      for (int r = ctid; r < 2 * np; r += cthreads) {
        const int pi = r >> 1, isv = r & 1;
        const int p = p0 + pi;
        if (p != pos)
          bulk_copy_g2s(kv_s + (isv * kPos + pi) * RS,
                        (isv ? v_cache : k_cache) + cache_offset(p), HD * sizeof(T), bar);
      }
    }
  } else {
    for (int i = tid; i < np * 2 * CH; i += kThreads) {
      const int r = i / CH, ch = i - r * CH;
      const int pi = r >> 1, isv = r & 1;
      const int p = p0 + pi;
      if (p == pos) continue;
      cp_async16(kv_s + (isv * kPos + pi) * RS + ch * (16 / sizeof(T)),
                 (isv ? v_cache : k_cache) + cache_offset(p) + ch * (16 / sizeof(T)));
    }
  }
  stamps.mark_by(10, copier && ctid == 0);

  // The rows' bias and norm weights as raw bits (0: none), loaded after
  // the copies are issued and converted after the RoPE table's barrier, so
  // that no instruction before it waits on these loads.
  uint32_t bias_bits[D], norm_bits[D];
#pragma unroll
  for (int e = 0; e < D; ++e) {
    const int d = lane * D + e;
    bias_bits[e] =
        rr.has_row && rr.bias ? load_any_bits(rr.bias, wts.bias_dt, rr.bias_off + d) : 0u;
    norm_bits[e] = rr.has_row && rr.norm ? load_any_bits(rr.norm_w, wts.norm_dt, d) : 0u;
  }
  // The table published among the row warps (named barrier 2).
  if (knobs.rope_table && warp < kCopyWarp0)
    asm volatile("bar.sync 2, %0;" ::"r"(kCopyWarp0 * 32) : "memory");
  float bv[D], nw[D], cs[D], sn[D];
#pragma unroll
  for (int e = 0; e < D; ++e) {
    const int d = lane * D + e;
    bv[e] = any_bits_to_f(bias_bits[e], wts.bias_dt);
    const float wi = any_bits_to_f(norm_bits[e], wts.norm_dt);
    nw[e] = a.zero_centred ? 1.0f + wi : wi;
    cs[e] = 1.0f;
    sn[e] = 0.0f;
    if (rr.has_row && rr.rope && d < 2 * half) {
      const int j = d < half ? d : d - half;
      if (knobs.rope_table) {
        cs[e] = rope_s[j];
        sn[e] = rope_s[half + j];
      } else {
        const float angle = static_cast<float>(pos) * a.inv_freq[j];
        cs[e] = cosf(angle);
        sn[e] = sinf(angle);
      }
    }
  }
  pdl_launch_dependents();
  stamps.mark(0);
  pdl_wait();
  stamps.mark(1);

  // --- the token's q heads and new K / V ----------------------------------------
  // kLateStores: the K / V row's cache slot and values, stored after the
  // first cluster barrier.
  T* late_slot = nullptr;
  T late_vals[D];
  if (rr.has_row) {
    const T* src;
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
    // The row through shared memory for RoPE's pairs (q_s row `row` for q;
    // for K / V the spare q rows past ng, or row 0 of part_o).
    float* scratch = rr.kind == 0 ? q_s + row * HD : part_o + (rr.kind - 1) * HD;
    if (rr.rope) {
#pragma unroll
      for (int e = 0; e < D; ++e) scratch[lane * D + e] = x[e];
      __syncwarp();
      float y[D];
#pragma unroll
      for (int e = 0; e < D; ++e) {
        const int d = lane * D + e;
        if (d < half)
          y[e] = x[e] * cs[e] - scratch[d + half] * sn[e];
        else if (d < 2 * half)
          y[e] = x[e] * cs[e] + scratch[d - half] * sn[e];
        else
          y[e] = x[e];
      }
      __syncwarp();
#pragma unroll
      for (int e = 0; e < D; ++e) x[e] = y[e];
    }
    // (Copy warps: the slot comes from own_off_s after the first cluster
    // barrier; this thread has not synchronised with them yet.)
    T* slot = nullptr;
    if (!cw && rr.kind > 0 && own && part == 0)
      slot = (rr.kind == 1 ? k_cache : v_cache) + cache_offset(pos) + lane * D;
    T* mine = rr.kind > 0 && own ? kv_s + ((rr.kind - 1) * kPos + (pos - p0)) * RS + lane * D
                                   : nullptr;
#pragma unroll
    for (int e = 0; e < D; ++e) {
      const T r = from_f<T>(x[e]);
      if (rr.kind == 0) q_s[row * HD + lane * D + e] = to_f(r) * a.scale;
      if (mine) mine[e] = r;
      if constexpr (kLateStores)
        late_vals[e] = r;
      else if (slot)
        slot[e] = r;
    }
    if constexpr (kLateStores) late_slot = slot;
  }
  stamps.mark(2);
  if (knobs.bulk_copies) {
    // The block's rows (and the barrier's init, with copy warps) published
    // first; then each thread sees the copies land through the barrier.
    __syncthreads();
    mbar_wait(bar, 0);
  } else {
    cp_async_wait_all();
    __syncthreads();
  }
  stamps.mark(3);

  // --- scores: a thread per (head, position), two warps a head -------------------
  const int sh = tid / kPos, sp = tid % kPos;
  float s = -INFINITY;
  if (sh < ng && sp < np) {
    const float* qh = q_s + sh * HD;
    const T* kr = kv_s + sp * RS;
    float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll 4
    for (int c = 0; c < HD; c += 8) {
      const uint4 w = *reinterpret_cast<const uint4*>(kr + c);
      const float4 qa = *reinterpret_cast<const float4*>(qh + c);
      const float4 qb = *reinterpret_cast<const float4*>(qh + c + 4);
      const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
      float kf[8];
      unpack_words<T, 8>(ws, kf);
      acc0 = fmaf(qa.x, kf[0], acc0);
      acc1 = fmaf(qa.y, kf[1], acc1);
      acc0 = fmaf(qa.z, kf[2], acc0);
      acc1 = fmaf(qa.w, kf[3], acc1);
      acc0 = fmaf(qb.x, kf[4], acc0);
      acc1 = fmaf(qb.y, kf[5], acc1);
      acc0 = fmaf(qb.z, kf[6], acc0);
      acc1 = fmaf(qb.w, kf[7], acc1);
    }
    s = acc0 + acc1;
  }
  // The block's softmax of each head over its positions (kPos = 2 warps).
  static_assert(kPos == 64 && kThreads == kMaxHeads * kPos, "two warps a head");
  const float wm = warp_max(s);
  if (lane == 0) red_m[warp] = wm;
  __syncthreads();
  const float m = fmaxf(red_m[2 * sh], red_m[2 * sh + 1]);
  const float e = s == -INFINITY ? 0.0f : expf(s - m);
  p_s[sh * kPos + sp] = e;
  const float wl = warp_sum(e);
  if (lane == 0) red_l[warp] = wl;
  __syncthreads();
  stamps.mark(4);
  if (sp == 0 && sh < ng) {
    part_m[sh] = m;
    part_l[sh] = red_l[2 * sh] + red_l[2 * sh + 1];
  }

  // --- P x V: a thread per (head, dim pair) --------------------------------------
  constexpr int kPairs = HD / 2;
  constexpr int kHeadSlots = kThreads / kPairs;  // heads in flight (1, 2 or 4 a thread)
  const int dp = tid % kPairs;
  for (int g = tid / kPairs; g < ng; g += kHeadSlots) {
    const float* pg = p_s + g * kPos;
    const T* vr = kv_s + kPos * RS + 2 * dp;
    float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
    int pi = 0;
    for (; pi + 1 < np; pi += 2) {
      const uint32_t w0 = *reinterpret_cast<const uint32_t*>(vr + pi * RS);
      const uint32_t w1 = *reinterpret_cast<const uint32_t*>(vr + (pi + 1) * RS);
      const float e0 = pg[pi], e1 = pg[pi + 1];
      a0 = fmaf(e0, bits_to_f(w0 & 0xffffu, T{}), a0);
      a1 = fmaf(e0, bits_to_f(w0 >> 16, T{}), a1);
      b0 = fmaf(e1, bits_to_f(w1 & 0xffffu, T{}), b0);
      b1 = fmaf(e1, bits_to_f(w1 >> 16, T{}), b1);
    }
    if (pi < np) {
      const uint32_t w0 = *reinterpret_cast<const uint32_t*>(vr + pi * RS);
      const float e0 = pg[pi];
      a0 = fmaf(e0, bits_to_f(w0 & 0xffffu, T{}), a0);
      a1 = fmaf(e0, bits_to_f(w0 >> 16, T{}), a1);
    }
    part_o[g * HD + 2 * dp] = a0 + b0;
    part_o[g * HD + 2 * dp + 1] = a1 + b1;
  }

  // --- merge the cluster's splits ---------------------------------------------------
  // The barrier orders every block's shared-memory partial before any read.
  stamps.mark(5);
  cluster.sync();
  stamps.mark(6);
  if constexpr (kLateStores) {
    if (cw && rr.has_row && rr.kind > 0 && own && part == 0)
      late_slot = (rr.kind == 1 ? k_cache : v_cache) + *own_off_s + lane * D;
    if (late_slot) {
#pragma unroll
      for (int e = 0; e < D; ++e) late_slot[e] = late_vals[e];
    }
  }
  for (int i = split * kThreads + tid; i < ng * HD; i += splits * kThreads) {
    const int g = i / HD, d = i % HD;
    // Every rank's (max, sum, output) loaded at once, then merged in rank order.
    float rm[kMaxCluster], rl[kMaxCluster], ro[kMaxCluster];
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      rm[r] = -INFINITY;
      rl[r] = ro[r] = 0.0f;
      if (r < splits) {
        rm[r] = *cluster.map_shared_rank(part_m + g, r);
        rl[r] = *cluster.map_shared_rank(part_l + g, r);
        ro[r] = *cluster.map_shared_rank(part_o + g * HD + d, r);
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) mx = fmaxf(mx, rm[r]);
    float num = 0.0f, den = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int r = 0; r < kMaxCluster; ++r) {
        if (rm[r] == -INFINITY) continue;
        const float f = expf(rm[r] - mx);
        num = fmaf(f, ro[r], num);
        den = fmaf(f, rl[r], den);
      }
    }
    const int h = h0 + g;
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
  }
  stamps.mark(7);
  // No block leaves while another may still read its shared memory. The
  // reads above have returned (their values are stored): with kLateStores
  // the arrival orders nothing else, so it is relaxed (no fence).
  if constexpr (kLateStores) {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n"
                 "barrier.cluster.wait.aligned;" ::: "memory");
  } else {
    cluster.sync();
  }
  stamps.write();
}

template <typename T, int HD, bool kLateStores>
cudaError_t launch_cluster(dim3 grid, int splits, cudaStream_t s, bool pdl,
                           const AttentionShape& a, const DecodeAttentionIo& io,
                           const ClusterAttentionOptions& o) {
  auto kern = attention_decode_cluster_kernel<T, HD, kLateStores>;
  constexpr size_t smem = smem_bytes<T, HD>();
  if constexpr (smem > 48 * 1024) {
    static const cudaError_t opted =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (opted != cudaSuccess) return opted;
  }
  // The carveout preference is the kernel's, not the launch's: set it when
  // it changes (-1: the driver's choice, the default).
  static int carveout = -1;
  const int want = o.max_carveout ? static_cast<int>(cudaSharedmemCarveoutMaxShared) : -1;
  if (want != carveout) {
    const cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, want);
    if (e != cudaSuccess) return e;
    carveout = want;
  }
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = static_cast<unsigned>(splits);
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  return cudaLaunchKernelEx(&cfg, kern, a, io.meta, io.page_size, static_cast<T*>(io.q),
                            static_cast<const T*>(io.k), static_cast<const T*>(io.v),
                            decode_weights(io), static_cast<T*>(io.k_cache),
                            static_cast<T*>(io.v_cache), static_cast<T*>(io.out), o.knobs, o.trace);
}

}  // namespace

int attention_decode_cluster_splits(const AttentionShape& a, DType act, int64_t tokens,
                                    int64_t kv_len_bound) {
  if (!attention_decode_fused_supported(a, act) || tokens < 1 || tokens > 8) return 0;
  const int group = a.num_heads / a.num_kv_heads;
  if ((group + fused_decode_parts(group) - 1) / fused_decode_parts(group) > kMaxHeads) return 0;
  const int64_t splits = (std::max<int64_t>(kv_len_bound, 1) + kPos - 1) / kPos;
  return splits <= kMaxCluster ? static_cast<int>(splits) : 0;
}

size_t attention_decode_cluster_room() {
  return std::max(smem_bytes<__nv_bfloat16, 128>(), smem_bytes<__half, 128>()) + 1024;
}

Status launch_attention_decode_cluster(cudaStream_t s, const AttentionShape& a,
                                       const DecodeAttentionIo& io, int splits, bool pdl,
                                       const ClusterAttentionOptions& options) {
  const int64_t tokens = io.tokens;
  if (tokens == 0) return Status::ok();
  if (splits < 1 || splits > kMaxCluster ||
      attention_decode_cluster_splits(a, io.act, tokens, static_cast<int64_t>(splits) * kPos) !=
          splits)
    return unsupported("cluster decode attention: 1..8 tokens, 1..8 splits of 64 positions");
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t blocks_y = static_cast<int64_t>(a.num_kv_heads) * fused_decode_parts(group);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(blocks_y),
                  static_cast<unsigned>(splits));
  cudaError_t e = cudaSuccess;
  const bool ok = dispatch_float(io.act, [&](auto ta) {
    using T = decltype(ta);
    if constexpr (!std::is_same_v<T, float>) {
      auto go = [&](auto late) {
        constexpr bool L = decltype(late)::value;
        if (a.head_dim == 64)
          e = launch_cluster<T, 64, L>(grid, splits, s, pdl, a, io, options);
        else if (a.head_dim == 128)
          e = launch_cluster<T, 128, L>(grid, splits, s, pdl, a, io, options);
        else
          e = launch_cluster<T, 256, L>(grid, splits, s, pdl, a, io, options);
      };
      if (options.knobs.late_stores)
        go(std::true_type{});
      else
        go(std::false_type{});
    }
  });
  if (!ok) return bad_dtype("cluster decode attention", io.act);
  if (e != cudaSuccess) return cuda_error(e, "cluster decode attention launch");
  return check_launch("attention_decode_cluster");
}

}  // namespace ferrite::cuda
