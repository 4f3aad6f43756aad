// The fused decode GEMV on block weights with its weight rows bulk-copied
// into shared memory (the contract is launch_quant_gemv_fused's, in
// quant_gemv.cuh; this kernel runs it when QuantGemvArgs::stream is set and
// quant_gemv_stream_supported holds).
//
// Why: the register-streaming kernel (quant_gemv.cu) holds its in-flight
// weight bytes in registers: 120-128 of them leave 16 warps an SM, and a
// warp's few items (Q/K of an 8B model: about 8 a warp) drain its short
// pipeline at every start, so the products ran at 0.3-2 TB/s on the H200
// (ncu, docs/perf-log.md). Here the copy engine moves the bytes: each warp
// owns a ring of `slots` items in shared memory, its lane 0 issues one
// bulk copy per row of an item (cp.async.bulk, completing on the slot's
// mbarrier), all of them before the kernel waits for x (weights depend on
// no earlier kernel), and refills a slot as soon as the warp has read it.
// The in-flight bytes are bounded by shared memory (up to ~200 KiB an SM)
// instead of registers, and the lanes only decode and multiply.
//
// Work: one block of W warps per SM (stream_warps); group g (two weight
// rows, or gate and up of one column) goes to warp (g / grid) % W of block
// g % grid, so that a small product still spreads over every SM. An item
// is a run of kItemBlocks blocks of both rows (a multiple of 16 bytes: one
// warp iteration of 32 / kLanes blocks for every format now). Lanes read their block shares from the
// slot with the register kernel's fetch / decode / dot (quant_blocks.cuh),
// so both kernels compute the same sums in the same order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/attention_decode.cuh"
#include "backends/cuda/kernels/bulk_copy.cuh"
#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/occupancy.cuh"
#include "backends/cuda/kernels/quant_gemv.cuh"
#include "backends/cuda/kernels/quant_gemv_common.cuh"

namespace ferrite::cuda {
namespace {

using namespace qblocks;
using namespace gemv;

// Warps an SM: 24 at one token (at most 80 registers; more warps hide the
// shared-memory and dp4a latencies of the decode), 16 with more tokens
// (their accumulators need up to 128 registers); split over
// QuantGemvArgs::stream_blocks blocks an SM (with 2, one block of the next
// kernel can start its copies when one of this kernel's exits).
constexpr int stream_warps(int m) { return m == 1 ? 24 : 16; }
constexpr int kMaxSlots = 16;  // items in flight per warp, at most

// Warp iterations (32 / kLanes blocks each) per copied item: kMul times
// the fewest whose bytes are a multiple of 16 (a bulk copy's granule).
// Every item costs its warp a fixed ~100 instructions besides the decode
// (the barrier wait, lane 0's refill with its row addresses, the ring and
// item bookkeeping), against ~70 a warp iteration of two rows' decode and
// dot products: kMul > 1 (Tuning::cuda_quant_stream_item_steps, one token
// only) spreads them over more weights, in fewer, larger ring slots.
template <typename Fmt, int kMul = 1>
constexpr int item_steps() {
  constexpr int per_iter = 32 / Fmt::kLanes;
  int s = 1;
  while ((per_iter * s * Fmt::kBytes) % 16 != 0) ++s;
  return s * kMul;
}
template <typename Fmt, int kMul = 1>
constexpr int item_blocks() {
  return 32 / Fmt::kLanes * item_steps<Fmt, kMul>();
}
template <typename Fmt, int kMul = 1>
constexpr int item_bytes() {
  return item_blocks<Fmt, kMul>() * Fmt::kBytes;
}

// Shared memory: the staged activations, then the warps' barriers, then
// their rings (bulk copies need 16-byte aligned destinations).
inline size_t staged_bytes(int64_t m, int64_t k, int f, int64_t x_elem) {
  return (smem_bytes(m, k, f, x_elem) + 127) / 128 * 128;
}
__host__ __device__ inline size_t barrier_bytes(int warps, int slots) {
  return (static_cast<size_t>(warps) * slots * sizeof(uint64_t) + 15) / 16 * 16;
}

// A row's bytes of a slot with a tail format: the item's, or the whole row
// where an item is longer than the row (rows are 16-byte multiples).
__host__ __device__ inline int tail_span(int item_bytes, int64_t row_bytes) {
  return row_bytes < item_bytes ? static_cast<int>(row_bytes) : item_bytes;
}

// A format's item constants at an item multiple.
template <int F, int kMul>
struct StreamFmt {
  using Fmt = typename GemvFmt<F>::Dot;
  static constexpr int kPerIter = 32 / Fmt::kLanes;
  static constexpr int kSteps = item_steps<Fmt, kMul>();
  static constexpr int kItemBlocks = item_blocks<Fmt, kMul>();
  static constexpr int kItemBytes = item_bytes<Fmt, kMul>();  // per row
};

// FT >= 0: groups from p.tail_group on are rows of format FT
// (QuantGemvArgs::tail_seg; one token, F staged with sums and FT without,
// whose scales come from xd_plain at `plain` bytes into shared memory). A
// warp's groups increase, so its F items all come before its FT items; a
// ring slot holds an item of either, each row's share of it no longer than
// a row (tail_span: an item longer than a row copies the row).
template <int F, typename TX, typename TO, int M, int kMul, int FT = -1>
__global__ void __launch_bounds__(stream_warps(M) * 32, 1)
    quant_gemv_stream_kernel(const TX* __restrict__ x, int m, int64_t k, FusedParams p,
                             int slots, uint32_t staged, uint32_t plain) {
  using A = StreamFmt<F, kMul>;
  constexpr bool kTail = FT >= 0;
  using B = StreamFmt<kTail ? FT : F, kMul>;
  constexpr bool kFloatX = GemvFmt<F>::kFloatX;
  constexpr bool kSums = staged_sums(F);
  static_assert(!kTail || (M == 1 && kSums && !staged_sums(FT) &&
                           !GemvFmt<kTail ? FT : F>::kFloatX && !split_x(F) && !split_x(FT)),
                "a tail format: one token, F staged with sums, FT without");
  // A row's share of a slot (span) and the slot's bytes: the item's with one
  // format, the larger span's with a tail (tail_span, as the host sizes it).
  const int span_a = kTail ? tail_span(A::kItemBytes, p.row_bytes) : A::kItemBytes;
  const int span_b = kTail ? tail_span(B::kItemBytes, p.row_bytes_tail) : B::kItemBytes;
  const int slot_bytes = kRows * (span_a > span_b ? span_a : span_b);
  const int warps = static_cast<int>(blockDim.x >> 5);
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nb_a = static_cast<int>(k / A::Fmt::kElems);
  const int nb_b = static_cast<int>(k / B::Fmt::kElems);
  const int iters_a = (nb_a + A::kItemBlocks - 1) / A::kItemBlocks;
  const int iters_b = (nb_b + B::kItemBlocks - 1) / B::kItemBlocks;
  const int64_t wg = static_cast<int64_t>(warp) * gridDim.x + blockIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  const int64_t ngroups = wg < p.groups ? (p.groups - 1 - wg) / stride + 1 : 0;
  int64_t na = ngroups;  // the warp's groups of format F
  if constexpr (kTail)
    na = wg < p.tail_group ? min(ngroups, (p.tail_group - 1 - wg) / stride + 1) : 0;
  const int64_t items = na * iters_a + (ngroups - na) * iters_b;
  auto is_tail = [&](int64_t g) { return kTail && g >= p.tail_group; };

  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + staged) + warp * slots;
  unsigned char* ring = smem + staged + barrier_bytes(warps, slots) +
                        static_cast<size_t>(warp) * slots * slot_bytes;

  // The issue cursor (lane 0): item `issued` of the warp is group ig,
  // iteration iit, into slot islot.
  int64_t ig = wg, issued = 0;
  int iit = 0, islot = 0;
  uint64_t policy = 0;
  auto issue = [&]() {
    const bool tail = is_tail(ig);
    const int item = tail ? B::kItemBytes : A::kItemBytes;
    const int span = tail ? span_b : span_a;
    const int64_t row_bytes = tail ? p.row_bytes_tail : p.row_bytes;
    const int64_t off = static_cast<int64_t>(iit) * item;
    const uint32_t len = static_cast<uint32_t>(row_bytes - off < item ? row_bytes - off : item);
    mbar_expect_tx(bars + islot, kRows * len);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* row;
      if constexpr (kTail) {  // no swiglu here: row_ptr is locate's row
        const RowRef rr = locate(p, kRows * ig + r);
        row = tail ? tail_row_ptr(p, rr) : rr.w;
      } else {
        row = row_ptr(p, ig, r);
      }
      bulk_copy_g2s(ring + islot * slot_bytes + r * span, row + off, len, bars + islot, policy);
    }
    ++issued;
    if (++islot == slots) islot = 0;
    if (++iit == (tail ? iters_b : iters_a)) {
      iit = 0;
      ig += stride;
    }
  };
  if (lane == 0 && items > 0) {
    for (int s = 0; s < slots; ++s) mbar_init(bars + s, 1);
    mbar_init_fence();
    policy = l2_evict_first_policy();
    while (issued < items && issued < slots) issue();
  }
  __syncwarp();
  prefetch_norm(p, k);
  pdl_wait();

  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + (static_cast<int64_t>(m) * k + 15) / 16 * 16);
  TX* xf = reinterpret_cast<TX*>(smem);
  float* xd_plain = kTail ? reinterpret_cast<float*>(smem + plain) : nullptr;
  stage_x<TX, M, kFloatX, kSums, split_x(F)>(x, m, k, p, xq, xd, xf, xd_plain);
  __syncthreads();

  int64_t cg = wg;
  int cit = 0, cslot = 0;
  uint32_t phase = 0;
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
  // One item of format S's rows in slot sb against the staged activations
  // (scales xds).
  auto consume = [&](auto fmt, const unsigned char* sb, const float* xds, int span) {
    constexpr int FF = decltype(fmt)::value;
    using S = StreamFmt<FF, kMul>;
    using Fmt = typename S::Fmt;
    const int bl = lane / Fmt::kLanes, part = lane % Fmt::kLanes;
    const int nb = static_cast<int>(k / Fmt::kElems);
#pragma unroll
    for (int st = 0; st < S::kSteps; ++st) {
      const int ib = st * S::kPerIter + bl;  // the lane's block within the item
      const int blk = cit * S::kItemBlocks + ib;
      if (blk < nb) {
        Fmt wv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          wv[r].decode(Fmt::template fetch<true>(sb + r * span + ib * Fmt::kBytes, part), part);
        accumulate_block<FF, TX, M>(wv, blk, m, k, xq, xds, xf, acc);
      }
    }
  };
  for (int64_t i = 0; i < items; ++i) {
    mbar_wait(bars + cslot, phase);
    const uint8_t* sb = ring + cslot * slot_bytes;
    const bool tail = is_tail(cg);
    if constexpr (kTail) {
      if (tail)
        consume(std::integral_constant<int, kTail ? FT : F>{}, sb, xd_plain, span_b);
      else
        consume(std::integral_constant<int, F>{}, sb, xd, span_a);
    } else {
      consume(std::integral_constant<int, F>{}, sb, xd, A::kItemBytes);
    }
    // Every lane has read the slot: refill it with the item `slots` on.
    __syncwarp();
    if (lane == 0 && issued < items) {
      fence_proxy_async_shared();
      issue();
    }
    if (++cslot == slots) {
      cslot = 0;
      phase ^= 1u;
    }
    if (++cit == (tail ? iters_b : iters_a)) {
      store_item<TX, TO, M>(p, cg, m, lane, acc);
      cit = 0;
      cg += stride;
    }
  }
  // (wg and stride recomputed: kept live across the loop they cost registers.)
  if constexpr (!kTail)
    conv_epilogue<TO, M>(p, static_cast<int64_t>(threadIdx.x >> 5) * gridDim.x + blockIdx.x,
                         static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5),
                         threadIdx.x & 31);
}

// Rows of item_bytes<Fmt, mul> for format f (host side).
int item_bytes_of(int f, int mul = 1) {
  int out = 0;
  dispatch_fmt(kFmtDTypes[f], [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    using Fmt = typename GemvFmt<F>::Dot;
    out = mul == 4 ? item_bytes<Fmt, 4>() : mul == 2 ? item_bytes<Fmt, 2>() : item_bytes<Fmt>();
  });
  return out;
}

struct StreamShape {
  int blocks_per_sm, warps, grid, slots, mul;
  size_t smem;
};

// The tail format's scales without sums (xd_plain of stage_x) after the
// staged activations, 128-byte aligned as they are (0 without a tail).
size_t plain_bytes(const QuantGemvArgs& a) {
  return a.tail_seg ? static_cast<size_t>(a.m * (a.k / 32) * 4 + 127) / 128 * 128 : 0;
}

// The launch shape: blocks of stream_warps / blocks_per_sm warps, a grid of
// up to blocks_per_sm a SM, and ring slots a warp as many as fit beside the
// staged activations in the block's share of the SM's shared memory, up to
// kMaxSlots and the most items a warp has (less shared memory lets the next
// kernel's blocks start beside this one's); slots 0: fewer than two fit.
StreamShape stream_shape(const QuantGemvArgs& a, int mul) {
  StreamShape sh{};
  sh.mul = mul;
  const int f = qfmt(a.w_dt);
  sh.blocks_per_sm = a.stream_blocks >= 2 ? 2 : 1;
  sh.warps = stream_warps(a.m == 1 ? 1 : 8) / sh.blocks_per_sm;
  // Room for a cluster attention block (256 threads of at most 48
  // registers) beside this one: 20 warps of at most 80 registers leave
  // 14,336 of an SM's 65,536.
  const bool room = a.stream_attention_room && a.m == 1 && sh.blocks_per_sm == 1;
  if (room) sh.warps = 20;
  const int ft = a.tail_seg ? qfmt(a.tail_dt) : f;
  const size_t staged = staged_bytes(a.m, a.k, f, dtype_bytes(a.x_dt, 1)) + plain_bytes(a);
  // A slot's row: the item's bytes, with a tail the larger span (tail_span).
  const int item = a.tail_seg ? std::max(tail_span(item_bytes_of(f, mul), dtype_bytes(a.w_dt, a.k)),
                                         tail_span(item_bytes_of(ft, mul), dtype_bytes(a.tail_dt, a.k)))
                              : item_bytes_of(f, mul);
  const size_t slot = static_cast<size_t>(kRows) * item + sizeof(uint64_t);  // + its barrier
  // Each block's share of the SM less 1 KiB the runtime reserves a block
  // and 1 KiB for the kernel's static shared memory (stage_x's reductions).
  size_t cap = std::min<size_t>(static_cast<size_t>(max_dynamic_smem()),
                                static_cast<size_t>(smem_per_sm()) / sh.blocks_per_sm) -
               2048;
  if (room) cap = std::min(cap, static_cast<size_t>(smem_per_sm()) - 2048 -
                                    attention_decode_cluster_room());
  if (cap < staged + 2 * sh.warps * slot) return sh;
  const FusedParams p = fused_params(a);
  sh.grid = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(static_cast<int64_t>(num_sms()) * sh.blocks_per_sm, p.groups)));
  const int64_t per_warp = (p.groups + int64_t{sh.grid} * sh.warps - 1) / (int64_t{sh.grid} * sh.warps);
  auto items_a_row = [&](DType dt) {
    const int per = item_bytes_of(qfmt(dt), mul);
    return (dtype_bytes(dt, a.k) + per - 1) / per;
  };
  const int64_t iters =
      std::max(items_a_row(a.w_dt), items_a_row(a.tail_seg ? a.tail_dt : a.w_dt));
  const int64_t fit = static_cast<int64_t>((cap - staged - 16) / (sh.warps * slot));
  const int64_t s = std::min<int64_t>({fit, kMaxSlots, std::max<int64_t>(2, per_warp * iters)});
  sh.slots = s >= 2 ? static_cast<int>(s) : 0;
  sh.smem = staged + barrier_bytes(sh.warps, sh.slots) +
            static_cast<size_t>(sh.warps) * sh.slots * kRows * item;
  return sh;
}

// The shape with the largest item multiple up to QuantGemvArgs::
// stream_item_steps (one token only) that leaves a warp two ring slots.
StreamShape stream_shape(const QuantGemvArgs& a) {
  const int want = a.m == 1 ? a.stream_item_steps : 1;
  for (int mul : {4, 2}) {
    if (mul > want) continue;
    const StreamShape sh = stream_shape(a, mul);
    if (sh.slots > 0) return sh;
  }
  return stream_shape(a, 1);
}

}  // namespace

bool quant_gemv_stream_supported(const QuantGemvArgs& a) {
  if (!quant_gemv_fused_args_ok(a) || !quant_gemv_simt_smem_ok(a)) return false;
  const int f = qfmt(a.w_dt);
  // Bulk copies take 16-byte aligned spans of 16-byte multiples: whole rows
  // of such a size, from 16-byte aligned weights.
  if (dtype_bytes(a.w_dt, a.k) % 16 != 0 || item_bytes_of(f) % 16 != 0) return false;
  if (a.tail_seg != 0 && (!quant_gemv_tail_ok(a) || dtype_bytes(a.tail_dt, a.k) % 16 != 0 ||
                          item_bytes_of(qfmt(a.tail_dt)) % 16 != 0))
    return false;
  for (int i = 0; i < a.count; ++i)
    if (reinterpret_cast<uintptr_t>(a.segs[i].w) % 16 != 0) return false;
  return stream_shape(a).slots > 0;
}

Status launch_quant_gemv_stream(cudaStream_t s, const QuantGemvArgs& a) {
  if (!quant_gemv_stream_supported(a))
    return unsupported("quant gemv (stream): unsupported shape, format, types or alignment");
  FusedParams p = fused_params(a);
  if (p.total == 0) return Status::ok();
  const int f = qfmt(a.w_dt);
  const StreamShape sh = stream_shape(a);
  const uint32_t staged_x = static_cast<uint32_t>(staged_bytes(a.m, a.k, f, dtype_bytes(a.x_dt, 1)));
  const uint32_t staged = staged_x + static_cast<uint32_t>(plain_bytes(a));
  const int mi = static_cast<int>(a.m);
  const bool ok = dispatch_gemv(a, [&](auto fc, auto tx, auto to, auto mc) {
    constexpr int F = decltype(fc)::value;
    using TX = decltype(tx);
    using TO = decltype(to);
    constexpr int M = decltype(mc)::value;
    // One instantiation per item multiple (the kernels' pointer types are
    // equal, so the opt-in below must be keyed by kMul, not by the type).
    auto go = [&](auto mul) {
      constexpr int kMul = decltype(mul)::value;
      // `tail` keys the lambda (and its one-time opt-in) by kernel: both
      // kernels have the same pointer type.
      auto run = [&](auto kern, uint32_t plain, auto tail) {
        (void)tail;
        static const bool opted = cudaFuncSetAttribute(
            kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
            max_dynamic_smem() - 2048) == cudaSuccess;
        (void)opted;
        (void)launch_pdl_weights(kern, sh.grid, sh.warps * 32, sh.smem, s,
                                 static_cast<const TX*>(a.x), mi, a.k, p, sh.slots, staged,
                                 plain);
      };
      // A q6_k tail (quant_gemv_tail_ok: one token, q4_k / q5_k first).
      if constexpr (M == 1 && (F == kFmtQ4_K || F == kFmtQ5_K)) {
        if (a.tail_seg != 0) {
          run(quant_gemv_stream_kernel<F, TX, TO, M, kMul, kFmtQ6_K>, staged_x,
              std::true_type{});
          return;
        }
      }
      run(quant_gemv_stream_kernel<F, TX, TO, M, kMul>, 0u, std::false_type{});
    };
    if constexpr (M == 1) {
      if (sh.mul == 4) return go(std::integral_constant<int, 4>{});
      if (sh.mul == 2) return go(std::integral_constant<int, 2>{});
    }
    go(std::integral_constant<int, 1>{});
  });
  if (!ok) return bad_dtype("quant gemv (stream)", a.w_dt);
  return check_launch("quant_gemv_stream");
}

}  // namespace ferrite::cuda
