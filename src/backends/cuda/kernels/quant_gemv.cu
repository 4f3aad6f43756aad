#include "backends/cuda/kernels/quant_gemv.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/occupancy.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"
#include "backends/cuda/kernels/quant_gemv_common.cuh"

namespace ferrite::cuda {
namespace {

using namespace qblocks;
using namespace gemv;

constexpr int kWarps = 8, kThreads = kWarps * 32;

// Blocks of one lane's rows in flight: at one token about 64 registers of
// raw bytes per lane (Q8Dot<F>::kRawRegs each), at least two so that a load
// is always outstanding while the previous block is multiplied; with more
// tokens two, so that two blocks of 256 threads fit an SM (measured on the
// H200, Qwen3-8B Q4_K_M: depth 4 at batch 2-8 took 148-162 registers, one
// block per SM, and ran 20-25 % slower than the unfused GEMV).
// With more tokens, the 4-lane K-quants (q4_k / q5_k: 12 / 20 raw and 16
// decoded registers a lane and row) keep one block in flight: two spilled
// (ptxas, 128 registers at two blocks an SM; this kernel is their fallback,
// the bulk-copy one takes them where shared memory allows); so does q6_k's
// 4-lane share at one token (19 raw registers a row: two in flight spilled).
template <typename Fmt, int M>
constexpr int depth() {
  if (Fmt::kElems == 256 && Fmt::kLanes == 4 && (M > 1 || std::is_same_v<Fmt, Q8Dot6K<4>>))
    return 1;
  constexpr int d = M > 1 ? 2 : 64 / (kRows * Fmt::kRawRegs);
  return d < 2 ? 2 : d > 4 ? 4 : d;
}

template <int F, typename TX, typename TO, int M>
__global__ void __launch_bounds__(kThreads, 2)
    quant_gemv_fused_kernel(const TX* __restrict__ x, int m, int64_t k, FusedParams p) {
  using Fmt = typename GemvFmt<F>::Dot;
  using Raw = typename Fmt::Raw;
  constexpr bool kFloatX = GemvFmt<F>::kFloatX;
  constexpr bool kSums = staged_sums(F);
  constexpr int kPerIter = 32 / Fmt::kLanes;  // blocks of a row per warp iteration
  constexpr int D = depth<Fmt, M>();
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int bl = lane / Fmt::kLanes, part = lane % Fmt::kLanes;
  const int nb = static_cast<int>(k / Fmt::kElems);
  const int iters = (nb + kPerIter - 1) / kPerIter;
  const int64_t wg = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t items = (wg < p.groups ? (p.groups - 1 - wg) / stride + 1 : 0) * iters;

  // The warp's items are (group, iteration) pairs, groups wg, wg + stride,
  // ...; the fetch cursor runs D items ahead of the products, across group
  // boundaries, so the loads never drain between two groups.
  int64_t fg = wg;
  int fit = 0;
  const uint8_t* fw[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) fw[r] = row_ptr(p, fg < p.groups ? fg : 0, r);
  auto fetch = [&](Raw (&dst)[kRows]) {
    int blk = fit * kPerIter + bl;
    blk = blk < nb ? blk : nb - 1;  // lanes past the row's end load its last block, unused
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      dst[r] = Fmt::fetch(fw[r] + static_cast<int64_t>(blk) * Fmt::kBytes, part);
    if (++fit == iters) {
      fit = 0;
      fg += stride;
      if (fg < p.groups) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) fw[r] = row_ptr(p, fg, r);
      }
    }
  };
  // Weights depend on no earlier kernel: the first D items load before the
  // wait for the previous kernel's x.
  Raw raw[D][kRows];
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (d < items) fetch(raw[d]);
  pdl_wait();

  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + (static_cast<int64_t>(m) * k + 15) / 16 * 16);
  TX* xf = reinterpret_cast<TX*>(smem);
  stage_x<TX, M, kFloatX, kSums, split_x(F)>(x, m, k, p, xq, xd, xf);
  __syncthreads();

  int64_t cg = wg;
  int cit = 0;
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
  for (int64_t f0 = 0; f0 < items; f0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (f0 + d < items) {  // uniform over the warp
        const int blk = cit * kPerIter + bl;
        if (blk < nb) {
          Fmt wv[kRows];
#pragma unroll
          for (int r = 0; r < kRows; ++r) wv[r].decode(raw[d][r], part);
          accumulate_block<F, TX, M>(wv, blk, m, k, xq, xd, xf, acc);
        }
        if (f0 + d + D < items) fetch(raw[d]);
        if (++cit == iters) {
          store_item<TX, TO, M>(p, cg, m, lane, acc);
          cit = 0;
          cg += stride;
        }
      }
    }
  }
  // (wg and stride recomputed: kept live across the loop they cost registers.)
  conv_epilogue<TO, M>(p, static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5),
                       static_cast<int64_t>(gridDim.x) * kWarps, threadIdx.x & 31);
}

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

bool quant_gemv_fused_args_ok(const QuantGemvArgs& a) {
  const int f = qfmt(a.w_dt);
  if (f < 0 || a.m < 1 || a.m > 8 || a.k < 32 || a.k % 32 != 0 ||
      a.k % dtype_block_elems(a.w_dt) != 0 || !small_ok(a.x_dt) || !a.x || !aligned(a.x, 16))
    return false;
  if (a.out_dt != DType::kF32 && a.out_dt != a.x_dt) return false;
  if (a.count < 1 || a.count > 4 || !a.segs) return false;
  if (a.swiglu && (a.count != 2 || a.out_dt != a.x_dt || a.segs[0].rows != a.segs[1].rows))
    return false;
  if ((a.accumulate || a.bias) && a.count != 1) return false;
  if (a.conv.w && (a.m != 1 || a.tail_seg != 0 || a.out_dt != DType::kF32 || a.swiglu ||
                   a.accumulate || a.bias ||
                   a.conv.kernel != kConvEpilogueTaps || !small_ok(a.conv.w_dt) ||
                   !a.conv.token_seq || !a.conv.seq_state_slot || !a.conv.state))
    return false;
  if (a.bias && !small_ok(a.bias_dt)) return false;
  if (a.norm && (!small_ok(a.norm_dt) || !aligned(a.norm, 16))) return false;
  // q4_k / q5_k blocks are read with 16-byte loads, u4_g128 / f8 with
  // 4-byte ones, the others (34, 18 and 210 bytes: 2-byte alignment) as the
  // aligned words around them.
  const uintptr_t wa = (f == kFmtQ4_K || f == kFmtQ5_K)            ? 16
                       : (f == kFmtU4G128 || f == kFmtF8B128) ? 4
                                                              : 2;
  if (dtype_bytes(a.w_dt, a.k) % static_cast<int64_t>(wa) != 0) return false;
  for (int i = 0; i < a.count; ++i)
    if (!a.segs[i].w || !a.segs[i].out || !aligned(a.segs[i].w, wa)) return false;
  return true;
}

bool quant_gemv_simt_smem_ok(const QuantGemvArgs& a) {
  return smem_bytes(a.m, a.k, qfmt(a.w_dt), dtype_bytes(a.x_dt, 1)) <= kMaxSmem;
}

bool quant_gemv_tail_ok(const QuantGemvArgs& a) {
  if (a.tail_seg == 0) return true;
  const int f = qfmt(a.w_dt);
  if (a.tail_seg < 0 || a.tail_seg >= a.count || a.m != 1 || a.swiglu || a.bias ||
      a.accumulate || a.input_perm || (f != kFmtQ4_K && f != kFmtQ5_K) ||
      a.tail_dt != DType::kQ6_K || a.k % dtype_block_elems(a.tail_dt) != 0)
    return false;
  // Whole groups on both sides (no group straddles the formats, none is
  // half past the end).
  int64_t before = 0, total = 0;
  for (int i = 0; i < a.count; ++i) (i < a.tail_seg ? before : total) += a.segs[i].rows;
  return before % gemv::kRows == 0 && total % gemv::kRows == 0;
}

bool quant_gemv_fused_supported(const QuantGemvArgs& a) {
  if (!quant_gemv_fused_args_ok(a)) return false;
  // A tail format: the bulk-copy kernel only.
  if (a.tail_seg != 0) return quant_gemv_tail_ok(a) && a.stream && quant_gemv_stream_supported(a);
  // The tensor-core kernel plans its own shared memory (e4m3 activations
  // stage in half the bytes of the CUDA-core kernels' rows); it does not
  // gather act-order activations.
  if (a.input_perm) return quant_gemv_simt_smem_ok(a) && aligned(a.input_perm, 16);
  return quant_gemv_simt_smem_ok(a) || (a.mma && quant_gemv_mma_supported(a));
}

// The tensor-core kernel takes these arguments (it does not gather act-order
// activations, nor run the conv epilogue).
static bool takes_mma(const QuantGemvArgs& a) {
  return a.tail_seg == 0 && a.mma && !a.input_perm && quant_gemv_mma_supported(a);
}

bool quant_gemv_conv_ok(const QuantGemvArgs& a) {
  return a.conv.w && quant_gemv_fused_supported(a) && !takes_mma(a);
}

Status launch_quant_gemv_fused(cudaStream_t s, const QuantGemvArgs& a) {
  if (!quant_gemv_fused_supported(a))
    return unsupported("quant gemv (fused): unsupported shape, format, types or alignment");
  if (a.conv.w && takes_mma(a))
    return internal_error("quant gemv (fused): the tensor-core kernel has no conv epilogue");
  if (a.tail_seg != 0) return launch_quant_gemv_stream(s, a);
  if (takes_mma(a)) return launch_quant_gemv_mma(s, a);
  if (a.stream && quant_gemv_stream_supported(a)) return launch_quant_gemv_stream(s, a);
  const FusedParams p = fused_params(a);
  if (p.total == 0) return Status::ok();
  const size_t smem = smem_bytes(a.m, a.k, qfmt(a.w_dt), dtype_bytes(a.x_dt, 1));
  const int blocks = static_cast<int>((p.groups + kWarps - 1) / kWarps);
  const int mi = static_cast<int>(a.m);
  const bool ok = dispatch_gemv(a, [&](auto fc, auto tx, auto to, auto mc) {
    constexpr int F = decltype(fc)::value;
    using TX = decltype(tx);
    using TO = decltype(to);
    constexpr int M = decltype(mc)::value;
    auto kern = quant_gemv_fused_kernel<F, TX, TO, M>;
    // Above 48 KiB of shared memory a kernel must opt in, once.
    static const bool opted = cudaFuncSetAttribute(
        kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(kMaxSmem)) == cudaSuccess;
    (void)opted;
    (void)launch_pdl_weights(kern, resident_grid(kern, blocks, smem, kThreads), kThreads, smem,
                             s, static_cast<const TX*>(a.x), mi, a.k, p);
  });
  if (!ok) return bad_dtype("quant gemv (fused)", a.w_dt);
  return check_launch("quant_gemv_fused");
}

}  // namespace ferrite::cuda
