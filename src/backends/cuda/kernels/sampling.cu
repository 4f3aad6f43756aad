// Sampler-stage kernels: penalised row copies, the masked argmax and the
// device sampler of last_token_sample (top-k / top-p / min-p / temperature).
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/sampling.cuh"

namespace ferrite::cuda {
namespace {

__global__ void copy_rows_kernel(const float* src, float* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// One thread per (row, id) entry; entries are unique per row.
__global__ void penalty_kernel(const float* logits, float* dst, int64_t vocab, const int32_t* row,
                               const int32_t* id, const int32_t* rep, const int32_t* count,
                               int64_t entries, const float* rep_penalty, const float* presence,
                               const float* frequency) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= entries) return;
  const int64_t r = row[e];
  const int64_t i = r * vocab + id[e];
  float l = logits[i];
  const float pen = rep_penalty[r];
  if (rep[e] && pen != 1.0f) l = l > 0 ? l / pen : l * pen;
  if (count[e] > 0) l -= presence[r] + frequency[r] * static_cast<float>(count[e]);
  dst[i] = l;
}

// Better: larger value, or equal value and lower id.
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
  if (bi < 0) return true;
  if (v > bv) return true;
  return v == bv && i < bi;
}

// Bit i % 32 of bits[i / 32] (bits: one row of an allowed-id bitmap, or null).
__device__ __forceinline__ bool bit_allowed(const uint32_t* bits, int64_t i) {
  return !bits || (__ldg(bits + (i >> 5)) >> (i & 31)) & 1u;
}

__global__ void __launch_bounds__(1024) argmax_kernel(const float* logits, int64_t vocab,
                                                       const uint8_t* mask,
                                                       const uint32_t* allowed,
                                                       uint32_t* tokens) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const float* row = logits + blockIdx.x * vocab;
  const uint32_t* bits = allowed ? allowed + blockIdx.x * ((vocab + 31) / 32) : nullptr;
  float bv = -INFINITY;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if ((mask && !mask[i]) || !bit_allowed(bits, i)) continue;
    const float v = row[i];
    if (bi < 0 || v > bv) {  // ascending i per thread: first max wins ties
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float best_v = -INFINITY;
    int64_t best_i = -1;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w)
      if (si[w] >= 0 && better(sv[w], si[w], best_v, best_i)) {
        best_v = sv[w];
        best_i = si[w];
      }
    tokens[blockIdx.x] = static_cast<uint32_t>(best_i < 0 ? 0 : best_i);
  }
}


// --- Device sampler (last_token_sample) --------------------------------------
//
// One block per row. The CPU reference (backends/cpu/sampling.cc) orders the
// valid ids by (penalised logit descending, id ascending), keeps the first
// top_k, normalises exp(l/T - max/T) over them in double, cuts the order at
// the first prefix whose probability mass reaches top_p and at the first
// probability below min_p * p[0], and returns the first id whose cumulative
// mass exceeds u * kept mass. Every filter keeps a prefix of that order, so
// the device works on 64-bit keys that sort exactly like it:
//   key = order_bits(logit) << 32 | (0xffffffff - id)   (descending = order)
// and finds prefix boundaries with a 16-way search over the key range (each
// pass: count and mass of the elements per sub-range, block reduced), then,
// once the sub-range holding the boundary has at most kListCap elements,
// gathers and sorts them in shared memory and walks them in order.
// When the kept set after top_k has at most kListCap elements, the whole
// reference algorithm runs on the sorted list with the reference's own
// summation order. Sums over larger sets are reduced in another order: the
// result may differ from the reference only when u * kept mass (or top_p,
// or a min_p threshold) lies within rounding of a cumulative boundary.
namespace sampler {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 16;
constexpr int kListCap = 1024;  // power of two (bitonic sort)

using u64 = unsigned long long;

// Monotone map of a float to an unsigned integer; -0 maps like +0 (they
// compare equal in the reference, so they tie and order by id).
__device__ __forceinline__ uint32_t order_bits(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b << 1) == 0) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_order_bits(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ u64 make_key(float logit, uint32_t id) {
  return (u64(order_bits(logit)) << 32) | u64(0xffffffffu - id);
}
__device__ __forceinline__ uint32_t key_id(u64 k) { return 0xffffffffu - uint32_t(k & 0xffffffffull); }
__device__ __forceinline__ float key_logit(u64 k) { return from_order_bits(uint32_t(k >> 32)); }

struct Shared {
  double hist_mass[kBins][kThreads];  // per-thread sub-range sums
  int hist_count[kBins][kThreads];
  u64 list[kListCap];
  double val[kListCap];
  double bin_mass[kBins];
  int bin_count[kBins];
  alignas(16) unsigned char scratch[kWarps * 8];
  int list_n;
  // Broadcast from thread 0.
  u64 b_lo, b_hi, b_key;
  double b_above, b_acc, b_total;
  int b_state, b_found;
  uint32_t b_token;
};

struct Row {
  const float* logits;
  const uint8_t* mask;
  const uint32_t* bits;  // the row's allowed-id bitmap, or null
  int vocab;
};

template <typename F>
__device__ __forceinline__ void for_each_key(const Row& r, F&& f) {
  for (int i = threadIdx.x; i < r.vocab; i += kThreads) {
    if ((r.mask && !r.mask[i]) || !bit_allowed(r.bits, i)) continue;
    f(make_key(r.logits[i], static_cast<uint32_t>(i)));
  }
}

// Every thread gets the reduction (combined in a fixed order).
template <typename T, typename Op>
__device__ T block_reduce(Shared& sh, T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  T* s = reinterpret_cast<T*>(sh.scratch);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = s[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, s[w]);
  return r;
}
struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MinOp {
  __device__ u64 operator()(u64 a, u64 b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ u64 operator()(u64 a, u64 b) const { return a > b ? a : b; }
};

// The reference's weight exp(l/T - mx): float quotient, double difference.
struct Weights {
  float temperature;
  double mx;
  double z;  // normaliser (probabilities = weight / z)
  __device__ double weight(u64 k) const {
    return exp(static_cast<double>(__fdiv_rn(key_logit(k), temperature)) - mx);
  }
  __device__ double prob(u64 k) const { return __ddiv_rn(weight(k), z); }
};

// Sorts list[0, n) descending (keys are unique); pads to a power of two with 0.
__device__ void sort_list(Shared& sh, int n) {
  int size = 32;
  while (size < n) size <<= 1;
  for (int i = n + threadIdx.x; i < size; i += kThreads) sh.list[i] = 0;
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int p = i ^ j;
        if (p > i) {
          const u64 a = sh.list[i], b = sh.list[p];
          const bool descending = (i & k) == 0;
          if (descending ? a < b : a > b) {
            sh.list[i] = b;
            sh.list[p] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// Gathers the valid keys in [lo, hi] (at most kListCap of them) into
// list[0, n), sorted descending; returns n.
__device__ int gather_sorted(Shared& sh, const Row& row, u64 lo, u64 hi) {
  if (threadIdx.x == 0) sh.list_n = 0;
  __syncthreads();
  for_each_key(row, [&](u64 k) {
    if (k < lo || k > hi) return;
    const int at = atomicAdd(&sh.list_n, 1);
    if (at < kListCap) sh.list[at] = k;
  });
  __syncthreads();
  const int n = min(sh.list_n, kListCap);
  __syncthreads();
  sort_list(sh, n);
  return n;
}

struct Found {
  bool found;
  u64 key;
  double acc;    // cumulative value through `key`
  double total;  // value of every element in [lo, hi]
};

// Walks the valid elements with keys in [lo, hi] in descending key order,
// accumulating value (1 per element, or its probability when `mass`), and
// returns the first element at which the sum reaches `thr` (sum >= thr, or
// sum > thr when `strict`). Not found: the whole range's sum stays below.
__device__ Found search(Shared& sh, const Row& row, const Weights& w, u64 lo, u64 hi, bool mass,
                        double thr, bool strict) {
  const int tid = threadIdx.x;
  double above = 0;  // value of the range's elements above the current hi
  double total = 0;
  bool first = true;
  for (;;) {
    const u64 span = hi - lo;
    const int shift = span < kBins ? 0 : 64 - __clzll(static_cast<long long>(span)) - 4;
    for (int b = 0; b < kBins; ++b) {
      sh.hist_mass[b][tid] = 0;
      sh.hist_count[b][tid] = 0;
    }
    u64 rmin = ~0ull, rmax = 0;  // the range's extreme keys: the next range is tight
    for_each_key(row, [&](u64 k) {
      if (k < lo || k > hi) return;
      rmin = k < rmin ? k : rmin;
      rmax = k > rmax ? k : rmax;
      const int b = static_cast<int>((k - lo) >> shift);
      sh.hist_count[b][tid] += 1;
      if (mass) sh.hist_mass[b][tid] += w.prob(k);
    });
    rmin = block_reduce(sh, rmin, MinOp{});
    rmax = block_reduce(sh, rmax, MaxOp{});  // (synchronises the histogram too)
    for (int b = tid >> 5; b < kBins; b += kWarps) {
      double m = 0;
      int c = 0;
      for (int t = tid & 31; t < kThreads; t += 32) {
        m += sh.hist_mass[b][t];
        c += sh.hist_count[b][t];
      }
      for (int o = 16; o > 0; o >>= 1) {
        m += __shfl_xor_sync(0xffffffffu, m, o);
        c += __shfl_xor_sync(0xffffffffu, c, o);
      }
      if ((tid & 31) == 0) {
        sh.bin_mass[b] = m;
        sh.bin_count[b] = c;
      }
    }
    __syncthreads();
    if (tid == 0) {
      auto value = [&](int b) { return mass ? sh.bin_mass[b] : static_cast<double>(sh.bin_count[b]); };
      if (first) {
        double t = 0;
        for (int b = kBins - 1; b >= 0; --b) t += value(b);
        sh.b_total = t;
      }
      double acc = above;
      int chosen = -1;
      for (int b = kBins - 1; b >= 0; --b) {
        if (sh.bin_count[b] == 0) continue;
        const double next = acc + value(b);
        if (strict ? next > thr : next >= thr) {
          chosen = b;
          break;
        }
        acc = next;
      }
      int state;  // 0: not found, 1: narrowed, 2: gather
      if (chosen < 0 && first) {
        state = 0;
      } else {
        if (chosen < 0) {  // rounding: the finer sums fell short; take the last element
          for (int b = 0; b < kBins; ++b)
            if (sh.bin_count[b] > 0) {
              chosen = b;
              break;
            }
          acc = above;
          for (int b = kBins - 1; b > chosen; --b) acc += value(b);
        }
        const u64 nlo = lo + (static_cast<u64>(chosen) << shift);
        const u64 wm1 = (1ull << shift) - 1;
        const u64 nhi = hi - nlo > wm1 ? nlo + wm1 : hi;
        sh.b_lo = nlo > rmin ? nlo : rmin;
        sh.b_hi = nhi < rmax ? nhi : rmax;
        sh.b_above = acc;
        state = sh.bin_count[chosen] <= kListCap ? 2 : 1;
      }
      sh.b_state = state;
    }
    __syncthreads();
    const int state = sh.b_state;
    total = sh.b_total;
    if (state == 0) return Found{false, 0, total, total};
    lo = sh.b_lo;
    hi = sh.b_hi;
    above = sh.b_above;
    first = false;
    __syncthreads();
    if (state == 2) break;
  }
  const int n = gather_sorted(sh, row, lo, hi);
  for (int i = tid; i < n; i += kThreads) sh.val[i] = mass ? w.prob(sh.list[i]) : 1.0;
  __syncthreads();
  if (tid == 0) {
    double acc = above;
    int at = n - 1;
    double acc_at = 0;
    for (int i = 0; i < n; ++i) {
      acc += sh.val[i];
      if (strict ? acc > thr : acc >= thr) {
        at = i;
        break;
      }
    }
    acc_at = acc;
    sh.b_key = sh.list[at < 0 ? 0 : at];
    sh.b_acc = acc_at;
  }
  __syncthreads();
  Found f{true, sh.b_key, sh.b_acc, total};
  __syncthreads();
  return f;
}

// The reference algorithm on the kept set (after top_k), sorted in list[0, n).
__device__ uint32_t sample_sorted_list(Shared& sh, int n, const SampleRowParams& p,
                                       const Weights& w) {
  for (int i = threadIdx.x; i < n; i += kThreads) sh.val[i] = w.weight(sh.list[i]);
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += sh.val[i];
    sh.b_acc = sum;
  }
  __syncthreads();
  const double sum = sh.b_acc;
  for (int i = threadIdx.x; i < n; i += kThreads) sh.val[i] = __ddiv_rn(sh.val[i], sum);
  __syncthreads();
  if (threadIdx.x == 0) {
    int keep = n;
    if (p.top_p < 1.0f) {
      double acc = 0;
      for (int i = 0; i < n; ++i) {
        acc += sh.val[i];
        if (acc >= static_cast<double>(p.top_p)) {
          keep = i + 1;
          break;
        }
      }
    }
    if (p.min_p > 0.0f) {
      const double threshold = static_cast<double>(p.min_p) * sh.val[0];
      int k = 1;
      while (k < keep && sh.val[k] >= threshold) ++k;
      keep = k;
    }
    double total = 0;
    for (int i = 0; i < keep; ++i) total += sh.val[i];
    const double target = p.u * total;
    double acc = 0;
    int pick = keep - 1;
    for (int i = 0; i < keep; ++i) {
      acc += sh.val[i];
      if (target < acc) {
        pick = i;
        break;
      }
    }
    sh.b_token = key_id(sh.list[pick]);
  }
  __syncthreads();
  return sh.b_token;
}

__device__ uint32_t sample_row(Shared& sh, const Row& row, const SampleRowParams& p) {
  // Pass 1: the first and last keys of the order, and the number of valid ids.
  u64 kmax = 0, kmin = ~0ull, count = 0;
  for_each_key(row, [&](u64 k) {
    kmax = k > kmax ? k : kmax;
    kmin = k < kmin ? k : kmin;
    ++count;
  });
  kmax = block_reduce(sh, kmax, MaxOp{});
  kmin = block_reduce(sh, kmin, MinOp{});
  count = block_reduce(sh, count, SumOp{});
  if (count == 0) return 0;
  if (!(p.temperature > 0.0f)) return key_id(kmax);  // greedy: the masked argmax

  Weights w{p.temperature, static_cast<double>(__fdiv_rn(key_logit(kmax), p.temperature)), 1.0};
  // top_k: the k-th key bounds the kept set from below.
  u64 bound = kmin;
  u64 kept = count;
  if (p.top_k > 0 && static_cast<u64>(p.top_k) < count) {
    bound = search(sh, row, w, kmin, kmax, false, static_cast<double>(p.top_k), false).key;
    kept = static_cast<u64>(p.top_k);
  }
  if (kept <= static_cast<u64>(kListCap)) {
    const int n = gather_sorted(sh, row, bound, kmax);
    return sample_sorted_list(sh, n, p, w);
  }

  // Large kept set: normaliser, then min_p and top_p bounds, then the draw.
  double z = 0;
  for_each_key(row, [&](u64 k) {
    if (k >= bound) z += w.weight(k);
  });
  w.z = block_reduce(sh, z, SumOp{});
  if (p.min_p > 0.0f) {
    // p[k] >= min_p * p[0] (p[0] = 1 / z) holds on a prefix of the order.
    const double threshold = static_cast<double>(p.min_p) * __ddiv_rn(1.0, w.z);
    u64 last = kmax;
    for_each_key(row, [&](u64 k) {
      if (k >= bound && k < last && w.prob(k) >= threshold) last = k;
    });
    bound = block_reduce(sh, last, MinOp{});
  }
  double total;
  if (p.top_p < 1.0f) {
    const Found f = search(sh, row, w, bound, kmax, true, static_cast<double>(p.top_p), false);
    if (f.found) bound = f.key;
    total = f.acc;  // through the cut, or the whole range when not reached
  } else {
    double t = 0;
    for_each_key(row, [&](u64 k) {
      if (k >= bound) t += w.prob(k);
    });
    total = block_reduce(sh, t, SumOp{});
  }
  const Found pick = search(sh, row, w, bound, kmax, true, p.u * total, true);
  return key_id(pick.found ? pick.key : bound);
}

__global__ void __launch_bounds__(kThreads, 1) sample_kernel(const float* logits,
                                                           int vocab, const uint8_t* mask,
                                                           const uint32_t* allowed,
                                                           const SampleRowParams* params,
                                                           uint32_t* tokens) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  const int64_t r = blockIdx.x;
  const SampleRowParams p = params[r];
  const Row row{logits + r * vocab, mask,
                allowed ? allowed + r * ((static_cast<int64_t>(vocab) + 31) / 32) : nullptr, vocab};
  const uint32_t token = sample_row(sh, row, p);
  if (threadIdx.x == 0) tokens[r] = token;
}

}  // namespace sampler

// --- Logprob outputs (both sampler contracts) --------------------------------
// One block per row of the raw logits: lse = max + (float) log(sum of
// exp((double) (l - max))) as the CPU reference computes it (the sum in
// another order), the chosen id's l - lse, then top_n rounds of a block
// maximum over the keys below the last one found (keys order like the
// reference: value descending, id ascending).
namespace lp {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

struct FMax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op>
__device__ T reduce(T v, T* scratch, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);
  return r;
}

__global__ void __launch_bounds__(kThreads) logprobs_kernel(const float* raw, int vocab,
                                                            const uint32_t* tokens, float* logprobs,
                                                            uint32_t* top_ids, float* top_logprobs,
                                                            int top_n) {
  __shared__ __align__(8) unsigned char scratch[kWarps * 8];
  const int64_t r = blockIdx.x;
  const float* row = raw + r * vocab;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) mx = fmaxf(mx, row[i]);
  mx = reduce(mx, reinterpret_cast<float*>(scratch), FMax{});
  double sum = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += exp(static_cast<double>(row[i] - mx));
  sum = reduce(sum, reinterpret_cast<double*>(scratch), sampler::SumOp{});
  const float lse = mx + static_cast<float>(log(sum));
  if (logprobs && threadIdx.x == 0) logprobs[r] = row[tokens[r]] - lse;
  using u64 = unsigned long long;
  u64 below = ~0ull;
  for (int j = 0; j < top_n && j < vocab; ++j) {
    u64 best = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const u64 k = sampler::make_key(row[i], static_cast<uint32_t>(i));
      if (k < below && k > best) best = k;
    }
    best = reduce(best, reinterpret_cast<u64*>(scratch), sampler::MaxOp{});
    const uint32_t id = sampler::key_id(best);
    if (threadIdx.x == 0) {
      if (top_ids) top_ids[r * top_n + j] = id;
      if (top_logprobs) top_logprobs[r * top_n + j] = row[id] - lse;
    }
    below = best;
  }
}

}  // namespace lp

}  // namespace

Status launch_apply_penalties(cudaStream_t s, const float* logits, float* dst, int64_t rows,
                              int64_t vocab, const int32_t* entry_row, const int32_t* entry_id,
                              const int32_t* entry_rep, const int32_t* entry_count,
                              int64_t entries, const float* rep_penalty, const float* presence,
                              const float* frequency) {
  const int64_t n = rows * vocab;
  if (n == 0) return Status::ok();
  int64_t blocks = (n + 255) / 256;
  copy_rows_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(logits, dst, n);
  if (entries > 0)
    penalty_kernel<<<static_cast<unsigned>((entries + 255) / 256), 256, 0, s>>>(
        logits, dst, vocab, entry_row, entry_id, entry_rep, entry_count, entries, rep_penalty,
        presence, frequency);
  return check_launch("apply_penalties");
}

Status launch_masked_argmax(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                            const uint8_t* mask, const uint32_t* allowed, uint32_t* tokens) {
  if (rows == 0) return Status::ok();
  argmax_kernel<<<static_cast<unsigned>(rows), 1024, 0, s>>>(logits, vocab, mask, allowed, tokens);
  return check_launch("masked_argmax");
}


Status launch_sample(cudaStream_t s, const float* logits, int64_t rows, int64_t vocab,
                     const uint8_t* mask, const uint32_t* allowed, const SampleRowParams* params,
                     uint32_t* tokens) {
  if (rows == 0) return Status::ok();
  if (vocab <= 0 || vocab >= 0x7fffffff) return invalid_argument("sample: vocabulary size out of range");
  constexpr int bytes = static_cast<int>(sizeof(sampler::Shared));
  static const cudaError_t configured = cudaFuncSetAttribute(
      sampler::sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  FERRITE_CUDA_RETURN(configured);
  sampler::sample_kernel<<<static_cast<unsigned>(rows), sampler::kThreads, bytes, s>>>(
      logits, static_cast<int>(vocab), mask, allowed, params, tokens);
  return check_launch("sample");
}

Status launch_logprobs(cudaStream_t s, const float* raw_logits, int64_t rows, int64_t vocab,
                       const uint32_t* tokens, float* logprobs, uint32_t* top_ids,
                       float* top_logprobs, int64_t top_n) {
  if (rows == 0) return Status::ok();
  if (vocab <= 0 || vocab >= 0x7fffffff) return invalid_argument("logprobs: vocabulary size out of range");
  lp::logprobs_kernel<<<static_cast<unsigned>(rows), lp::kThreads, 0, s>>>(
      raw_logits, static_cast<int>(vocab), tokens, logprobs, top_ids, top_logprobs,
      static_cast<int>(top_n));
  return check_launch("logprobs");
}

}  // namespace ferrite::cuda
