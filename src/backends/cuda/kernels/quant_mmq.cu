#include "backends/cuda/kernels/quant_mmq.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"
#include "backends/cuda/kernels/quant_mmq_formats.h"

namespace ferrite::cuda {
namespace {

using namespace mmq;

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // weight rows per block, 16 a warp
// Bytes a token takes in shared memory per step: 256 codes + 16, so that
// the 8 tokens x 4 lanes of a B fragment read 32 different banks.
constexpr int kXStride = kStepElems + 16;
// Token tiles are padded to this in the scratch (zero rows and scales).
constexpr int64_t kTokenPad = 64;

// A step's raw bytes of one row in shared memory: the 16-byte pieces that
// cover them (a row starts where its predecessor ends: at any even offset
// of a piece for q8_0 / q4_0 / q6_k rows, at 0 or 8 for u4_g128), an odd
// number of pieces, so that the 8 rows x 4 lanes of an A fragment read
// different banks.
template <int F>
constexpr int raw_stride() {
  constexpr int pieces = (step_bytes<F>(kStepElems) + 15 + 15) / 16;
  return 16 * (pieces % 2 ? pieces : pieces + 1);
}

template <int F, int kTile>
constexpr int stage_bytes() {
  return kRows * raw_stride<F>() + kTile * kXStride + kChunks * kTile * 8;
}

// x [m, k] -> xq [ldt, k] int8 and xds [k / 32, ldt] (d, d * sum q) per
// 32-block, q = round(x * 127 / amax), d = amax / 127; tokens m .. ldt - 1
// zero. One warp per block of 32, lane i quantizes element i.
template <typename TX>
__global__ void __launch_bounds__(256)
    quantize_mmq_kernel(const TX* __restrict__ x, int64_t m, int64_t k, int64_t ldt,
                        int8_t* __restrict__ xq, float2* __restrict__ xds) {
  const int64_t nb = k / 32;
  const int64_t gi = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (gi >= ldt * nb) return;
  const int64_t t = gi / nb, b = gi - t * nb;
  const float v = t < m ? to_f(x[t * k + b * 32 + lane]) : 0.0f;
  const float amax = warp_max(fabsf(v));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  const int q = __float2int_rn(v * id);
  xq[t * k + b * 32 + lane] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    const float d = amax / 127.0f;
    xds[b * ldt + t] = make_float2(d, d * static_cast<float>(sum));
  }
}

// Rows [64 blockIdx.x, + 64) x tokens [kTile blockIdx.y, + kTile) (kTile 16,
// 32 or 64).
template <int F, int kTile>
__global__ void __launch_bounds__(kWarps * 32)
    quant_mmq_kernel(const int8_t* __restrict__ xq, const float2* __restrict__ xds, int64_t ldt,
                     int64_t m, int64_t k, const uint8_t* __restrict__ w, int64_t row_bytes,
                     int64_t n, void* __restrict__ out, int out_dt, bool accumulate,
                     const void* bias, int bias_dt) {
  using Fm = Format<F>;
  constexpr int kNF = kTile / 8;  // n8 fragments (token groups of 8)
  constexpr int kRS = raw_stride<F>();
  constexpr int kStage = stage_bytes<F, kTile>();
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int steps = static_cast<int>((k + kStepElems - 1) / kStepElems);

  // Step s's blocks of the 64 rows, its tokens' codes and their scales into
  // stage st (cp.async; rows past n are left as they are: never stored).
  auto load = [&](int s, int st) {
    uint8_t* base = smem + st * kStage;
    const int64_t k0 = static_cast<int64_t>(s) * kStepElems;
    const int elems = static_cast<int>(k - k0 < kStepElems ? k - k0 : kStepElems);
    const int64_t off0 = k0 / Fm::kBlockElems * Fm::kBlockBytes;
    const int64_t len = elems / Fm::kBlockElems * Fm::kBlockBytes;
    // Row r's step: bytes [r row_bytes + off0, + len) of w (16-byte aligned),
    // as the pieces from the one holding its first byte to the one holding
    // its last (no read past that piece: never past the tensor's last one).
    for (int i = tid; i < kRows * (kRS / 16); i += kWarps * 32) {
      const int r = i / (kRS / 16), c = i - r * (kRS / 16);
      if (n0 + r >= n) continue;
      const int64_t first = (n0 + r) * row_bytes + off0;
      const int64_t a0 = first & ~int64_t{15};
      if (a0 + 16 * c < first + len) cp_async16(base + r * kRS + 16 * c, w + a0 + 16 * c, true);
    }
    uint8_t* xs = base + kRows * kRS;
    const int xp = elems / 16;
    for (int i = tid; i < kTile * xp; i += kWarps * 32) {
      const int t = i / xp, c = i - t * xp;
      cp_async16(xs + t * kXStride + 16 * c, xq + (t0 + t) * k + k0 + 16 * c, true);
    }
    auto* ds = reinterpret_cast<float2*>(xs + kTile * kXStride);
    const int chunks = elems / 32;
    for (int i = tid; i < chunks * (kTile / 2); i += kWarps * 32) {
      const int c = i / (kTile / 2), p = i - c * (kTile / 2);
      cp_async16(ds + c * kTile + 2 * p, xds + (k0 / 32 + c) * ldt + t0 + 2 * p, true);
    }
  };

  float acc[kNF][4];
#pragma unroll
  for (int j = 0; j < kNF; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;

  const int ra_row = warp * 16 + g;  // this lane's rows: ra_row and ra_row + 8
  load(0, 0);
  cp_async_commit();
  for (int s = 0; s < steps; ++s) {
    if (s + 1 < steps) load(s + 1, (s + 1) & 1);
    cp_async_commit();  // one group an iteration (maybe empty): wait<1> is step s
    cp_async_wait<1>();
    __syncthreads();
    const uint8_t* base = smem + (s & 1) * kStage;
    const int64_t k0 = static_cast<int64_t>(s) * kStepElems;
    const int chunks = static_cast<int>(k - k0 < kStepElems ? k - k0 : kStepElems) / 32;
    // Where each of this lane's rows starts in its first piece.
    const int64_t off0 = k0 / Fm::kBlockElems * Fm::kBlockBytes;
    const int shift_a = static_cast<int>(((n0 + ra_row) * row_bytes + off0) & 15);
    const int shift_b = static_cast<int>(((n0 + ra_row + 8) * row_bytes + off0) & 15);
    const uint8_t* ra = base + ra_row * kRS + shift_a;
    const uint8_t* rb = base + (ra_row + 8) * kRS + shift_b;
    const uint8_t* xs = base + kRows * kRS;
    const auto* ds = reinterpret_cast<const float2*>(xs + kTile * kXStride);
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc) {
      if (kc >= chunks) continue;  // the last step of k not a multiple of 256
      // A fragment: rows g / g + 8 of the warp's 16, codes 4 tq.. / 16 + 4 tq..
      uint32_t a[4];
      Fm::codes(ra, kc, tq, &a[0], &a[2]);
      Fm::codes(rb, kc, tq, &a[1], &a[3]);
      float da, ma, db, mb;  // q6_k: (d_lo, d_hi) of each row
      Fm::scale(ra, kc, &da, &ma);
      Fm::scale(rb, kc, &db, &mb);
#pragma unroll
      for (int j = 0; j < kNF; ++j) {
        // B fragment: token 8 j + g, codes 4 tq.. and 16 + 4 tq.. of chunk kc.
        const uint8_t* xt = xs + (8 * j + g) * kXStride + 32 * kc + 4 * tq;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xt);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(xt + 16);
        // The scales of the accumulator's tokens 8 j + 2 tq and + 1: (d, d
        // sum) of each.
        const float4 sx = *reinterpret_cast<const float4*>(ds + kc * kTile + 8 * j + 2 * tq);
        if constexpr (Fm::kScalePer16) {
          int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
          mma_s8_16816(lo, a[0], a[1], b0);
          mma_s8_16816(hi, a[2], a[3], b1);
          acc[j][0] = fmaf(sx.x, fmaf(da, static_cast<float>(lo[0]), ma * static_cast<float>(hi[0])), acc[j][0]);
          acc[j][1] = fmaf(sx.z, fmaf(da, static_cast<float>(lo[1]), ma * static_cast<float>(hi[1])), acc[j][1]);
          acc[j][2] = fmaf(sx.x, fmaf(db, static_cast<float>(lo[2]), mb * static_cast<float>(hi[2])), acc[j][2]);
          acc[j][3] = fmaf(sx.z, fmaf(db, static_cast<float>(lo[3]), mb * static_cast<float>(hi[3])), acc[j][3]);
        } else {
          int c[4] = {0, 0, 0, 0};
          mma_s8_16832(c, a, b0, b1);
          acc[j][0] = fmaf(da * sx.x, static_cast<float>(c[0]), acc[j][0]);
          acc[j][1] = fmaf(da * sx.z, static_cast<float>(c[1]), acc[j][1]);
          acc[j][2] = fmaf(db * sx.x, static_cast<float>(c[2]), acc[j][2]);
          acc[j][3] = fmaf(db * sx.z, static_cast<float>(c[3]), acc[j][3]);
          if constexpr (Fm::kHasMin) {
            acc[j][0] = fmaf(-ma, sx.y, acc[j][0]);
            acc[j][1] = fmaf(-ma, sx.w, acc[j][1]);
            acc[j][2] = fmaf(-mb, sx.y, acc[j][2]);
            acc[j][3] = fmaf(-mb, sx.w, acc[j][3]);
          }
        }
      }
    }
    __syncthreads();  // stage s & 1 is loaded again at step s + 2
  }

  // Accumulator i of fragment j: row ra_row (+ 8 for i >= 2), token 8 j +
  // 2 tq + (i & 1).
#pragma unroll
  for (int j = 0; j < kNF; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = n0 + ra_row + (i >= 2 ? 8 : 0);
      const int64_t t = t0 + 8 * j + 2 * tq + (i & 1);
      if (row < n && t < m) {
        const float v = acc[j][i] + (bias ? load_any(bias, bias_dt, row) : 0.0f);
        store_any(out, out_dt, t * n + row, v, accumulate);
      }
    }
  }
}

int64_t token_pad(int64_t m) { return (m + kTokenPad - 1) / kTokenPad * kTokenPad; }

// The formats the tile reads: the block formats of quant_blocks.cuh (whose
// codes quant_mmq_formats.h shares) but e4m3, whose codes are not integers.
bool mmq_format(DType t) { return qblocks::qfmt(t) >= 0 && t != DType::kF8B128; }

}  // namespace

Status quant_mmq_init() {
  // Every instantiation's shared memory is above 48 KiB, which a kernel must
  // opt in to, once: here, at backend start, never inside a graph capture.
  cudaError_t first = cudaSuccess;
  for (DType t : qblocks::kFmtDTypes) {
    if (!mmq_format(t)) continue;
    qblocks::dispatch_fmt(t, [&](auto fc) {
      constexpr int F = decltype(fc)::value;
      if constexpr (F != qblocks::kFmtF8B128) {
        auto opt_in = [&](auto tile) {
          constexpr int kTile = decltype(tile)::value;
          const cudaError_t e = cudaFuncSetAttribute(quant_mmq_kernel<F, kTile>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     2 * stage_bytes<F, kTile>());
          if (first == cudaSuccess) first = e;
        };
        opt_in(std::integral_constant<int, 16>{});
        opt_in(std::integral_constant<int, 32>{});
        opt_in(std::integral_constant<int, 64>{});
      }
    });
  }
  return first == cudaSuccess ? Status::ok() : cuda_error(first, "quant mmq: shared memory opt-in");
}

bool quant_mmq_supported(DType x_dt, DType w_dt, const void* w, int64_t k, DType out_dt) {
  if (!mmq_format(w_dt)) return false;
  if (!small_ok(x_dt) || !small_ok(out_dt)) return false;
  if (k <= 0 || k % dtype_block_elems(w_dt) != 0) return false;
  return reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

int64_t quant_mmq_scratch_bytes(int64_t m, int64_t k) {
  const int64_t ldt = token_pad(m);
  return ldt * k + (k / 32) * ldt * static_cast<int64_t>(sizeof(float2));
}

Status launch_quant_mmq(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                        const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                        bool accumulate, const void* bias, DType bias_dt, void* scratch,
                        int64_t scratch_bytes) {
  if (m == 0 || n == 0) return Status::ok();
  if (!quant_mmq_supported(x_dt, w_dt, w, k, out_dt))
    return unsupported("quant mmq: unsupported format, types or alignment");
  if (bias && !small_ok(bias_dt)) return bad_dtype("quant mmq bias", bias_dt);
  if (quant_mmq_scratch_bytes(m, k) > scratch_bytes || reinterpret_cast<uintptr_t>(scratch) % 16)
    return invalid_argument("quant mmq: the scratch is too small or misaligned");
  const int64_t ldt = token_pad(m);
  auto* xq = static_cast<int8_t*>(scratch);
  auto* xds = reinterpret_cast<float2*>(xq + ldt * k);
  const int64_t groups = ldt * (k / 32);
  const bool xok = dispatch_float(x_dt, [&](auto tx) {
    using TX = decltype(tx);
    quantize_mmq_kernel<TX><<<static_cast<unsigned>((groups + 7) / 8), 256, 0, s>>>(
        static_cast<const TX*>(x), m, k, ldt, xq, xds);
  });
  if (!xok) return bad_dtype("quant mmq activations", x_dt);
  const int64_t row_bytes = dtype_bytes(w_dt, k);
  const auto* wb = static_cast<const uint8_t*>(w);
  qblocks::dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    if constexpr (F != qblocks::kFmtF8B128) {
      auto go = [&](auto tile) {
        constexpr int kTile = decltype(tile)::value;
        const dim3 grid(static_cast<unsigned>((n + kRows - 1) / kRows),
                        static_cast<unsigned>((m + kTile - 1) / kTile));
        quant_mmq_kernel<F, kTile><<<grid, kWarps * 32, 2 * stage_bytes<F, kTile>(), s>>>(
            xq, xds, ldt, m, k, wb, row_bytes, n, out, dt_code(out_dt), accumulate, bias,
            dt_code(bias_dt));
      };
      // The smallest token tile that holds m (padding tokens cost mma and
      // epilogue work), 64 beyond.
      if (m <= 16)
        go(std::integral_constant<int, 16>{});
      else if (m <= 32)
        go(std::integral_constant<int, 32>{});
      else
        go(std::integral_constant<int, 64>{});
    }
  });
  return check_launch("quant_mmq");
}

}  // namespace ferrite::cuda
