#include "backends/cuda/kernels/quant_mmq.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"

namespace ferrite::cuda {
namespace {

constexpr int kWarps = 4;                // warps a block
constexpr int kRowsPerBlock = 16 * kWarps;
constexpr int kXStride = 256 + 16;       // bytes a token row of staged activations: the
                                         // B fragments' 8 tokens x 4 words hit distinct banks

// Activations to int8, per token and kGroup (256 or 32) elements: a warp a
// 256-block, 8 elements a lane (lanes 4j .. 4j + 3 hold its 32-element
// sub-block j). xq [m, k]; per 256-block sb and token t the scales (scale
// amax / 127; kMmqMaxTokens of them a group, so that a step's scales are
// contiguous for the product's asynchronous copies): kGroup 256: xd [sb, t];
// kGroup 32: xd [sb, j, t]; and for kGroup 256 the sums of each 32 q as
// int16 pairs (|sum| <= 32 * 127), xsum [sb, t] (4 words).
template <typename T, int kGroup>
__global__ void mmq_quantize_kernel(const T* __restrict__ x, int64_t k, int8_t* __restrict__ xq,
                                    float* __restrict__ xd, uint32_t* __restrict__ xsum) {
  static_assert(kGroup == 256 || kGroup == 32, "256- or 32-element groups");
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t sb = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (sb >= k / 256) return;
  const int64_t t = blockIdx.y;
  const T* xr = x + t * k + sb * 256 + lane * 8;
  float v[8];
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    v[e] = to_f(xr[e]);
    amax = fmaxf(amax, fabsf(v[e]));
  }
  if constexpr (kGroup == 256) {
    amax = warp_max(amax);
  } else {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  }
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t packed[2] = {0, 0};
  int sum = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int q = max(-127, min(127, __float2int_rn(v[e] * id)));
    sum += q;
    packed[e / 4] |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (e % 4));
  }
  *reinterpret_cast<uint2*>(xq + t * k + sb * 256 + lane * 8) = make_uint2(packed[0], packed[1]);
  if constexpr (kGroup == 256) {
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    // Lane 8p holds sub-block 2p's sum, lane 8p + 4 sub-block 2p + 1's.
    const int next = __shfl_down_sync(0xffffffffu, sum, 4);
    const int64_t slot = sb * kMmqMaxTokens + t;
    if ((lane & 7) == 0)
      xsum[slot * 4 + lane / 8] =
          (static_cast<uint32_t>(sum) & 0xFFFFu) | (static_cast<uint32_t>(next) << 16);
    if (lane == 0) xd[slot] = amax / 127.0f;
  } else {
    if ((lane & 3) == 0) xd[(sb * 8 + lane / 4) * kMmqMaxTokens + t] = amax / 127.0f;
  }
}

// The activations' group: q8_0 products quantize them per 32 (its block),
// the k-quants per 256 (the conformance bound of 8-bit block activations is
// per weight block).
template <int F>
constexpr int mmq_act_group() {
  return F == qblocks::kFmtQ8_0 ? 32 : 256;
}

__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}
// 16 x 8 x 16: q6_k's scales change every 16 elements.
__device__ __forceinline__ void mma_s8_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
#endif
}

// Four bytes at a 2-byte aligned address (q6_k's 210-byte blocks).
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  return static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16);
}

// A q4_k block's 6-bit scale and min of sub-block j (the reference's
// get_scale_min_k4) from its 12 scale bytes as three words.
__device__ __forceinline__ void q4k_scale_min(const uint32_t (&s)[3], int j, int& sc, int& mn) {
  auto byte = [&](int i) { return static_cast<int>((s[i >> 2] >> (8 * (i & 3))) & 0xFF); };
  if (j < 4) {
    sc = byte(j) & 63;
    mn = byte(j + 4) & 63;
  } else {
    sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
    mn = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

constexpr int kQ4kBytes = 144, kQ6kBytes = 210;
constexpr int kQ80StepBytes = 8 * 34;  // a row's 8 q8_0 blocks of a 256-step

// The bytes of a row's 256-step that a stage holds in shared memory (0: the
// weights are read from global memory): q4_k and q8_0 rows are 16-byte
// aligned (k a multiple of 256, the weights 16-byte aligned), q6_k's 210-byte
// blocks are not.
template <int F>
constexpr int mmq_staged_row_bytes() {
  return F == qblocks::kFmtQ4_K ? kQ4kBytes : (F == qblocks::kFmtQ8_0 ? kQ80StepBytes : 0);
}

// One pipeline stage of a block: a 256-block step's staged activations (all
// formats) and, for q4_k / q8_0, its 64 rows' weight blocks; the kernel
// holds two.
template <int F>
struct MmqStage {
  static constexpr int kRowBytes = mmq_staged_row_bytes<F>();
  static constexpr bool kSums = F == qblocks::kFmtQ4_K;
  uint8_t x[kMmqMaxTokens * kXStride];  // int8, a token a row
  float d[kMmqMaxTokens * 256 / mmq_act_group<F>()];  // scales: [group in the step, token]
  uint32_t sum[kSums ? kMmqMaxTokens * 4 : 4];  // q4_k: int16 pairs of the sums of 32
  uint8_t w[kRowBytes > 0 ? kRowsPerBlock * kRowBytes : 16];
};

// Issues the asynchronous copies of step sb into stage b (one commit group).
// Token rows past m copy whatever the scratch holds there: they only reach
// outputs of tokens past m, which are never stored. Weight rows past n are
// zero-filled from row 0's address.
template <int F>
__device__ __forceinline__ void mmq_issue(MmqStage<F>& b, int64_t sb, int staged, int64_t k,
                                          const int8_t* xq, const float* xd,
                                          const uint32_t* xsum, const uint8_t* w,
                                          int64_t row_bytes, int64_t row0, int64_t n, int tid) {
  constexpr int kThreads = kWarps * 32;
  for (int i = tid; i < staged * 16; i += kThreads) {
    const int t = i >> 4, c = i & 15;
    cp_async16(b.x + t * kXStride + c * 16, xq + t * k + sb * 256 + c * 16, true);
  }
  constexpr int kGroups = 256 / mmq_act_group<F>();  // scale rows a step
  for (int i = tid; i < kGroups * staged / 4; i += kThreads) {
    const int g = i / (staged / 4), c = i % (staged / 4);
    cp_async16(b.d + g * kMmqMaxTokens + 4 * c,
               xd + (sb * kGroups + g) * kMmqMaxTokens + 4 * c, true);
  }
  if constexpr (MmqStage<F>::kSums) {
    for (int i = tid; i < staged; i += kThreads)
      cp_async16(b.sum + 4 * i, xsum + (sb * kMmqMaxTokens + i) * 4, true);
  }
  constexpr int kRowBytes = MmqStage<F>::kRowBytes;
  if constexpr (kRowBytes > 0) {
    constexpr int kChunks = kRowBytes / 16;
    for (int i = tid; i < kRowsPerBlock * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = row0 + r < n;
      cp_async16(b.w + r * kRowBytes + c * 16,
                 w + (valid ? (row0 + r) * row_bytes + sb * kRowBytes + c * 16 : 0), valid);
    }
  }
  cp_async_commit();
}

// The two m16n8k32 products of an 8-token tile with sub-blocks (or q8_0
// blocks) 2c and 2c + 1: their B fragments in one ldmatrix.x4 (b[2h],
// b[2h + 1]), each int32 result handed to epi(h, cc) for its scales.
template <typename Epi>
__device__ __forceinline__ void mma_pair_k32(const uint32_t (&a)[2][4], uint32_t xrow, int t,
                                             int c, Epi&& epi) {
  uint32_t b[4];
  ldmatrix_x4(b, xrow + 8 * t * kXStride + 64 * c);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int cc[4] = {0, 0, 0, 0};
    mma_s8(cc, a[h][0], a[h][1], a[h][2], a[h][3], b[2 * h], b[2 * h + 1]);
    epi(h, cc);
  }
}

// One 256-block of a warp's rows (ra: block bytes pa, rb = ra + 8: pb, in
// the stage's shared memory) against the nt staged 8-token tiles: acc[t][i]
// += the block's contribution to (row ra for i < 2 else rb, token 8 t + 2
// tig + (i & 1)).
//
// q4_k: d * sum_j sc_j (q_j . xq_j) - dmin * sum_j m_j sum(xq_j), the codes
// 0..15 straight from the nibbles (sub-blocks 2c / 2c + 1: the low / high
// nibbles of the same 32 bytes), one m16n8k32 a sub-block and token tile;
// the mins' sums as 4 dp2a (int16 sums x int8 mins).
__device__ __forceinline__ void mmq_step_q4k(const uint8_t* pa, const uint8_t* pb,
                                             const MmqStage<qblocks::kFmtQ4_K>& xs, uint32_t xrow,
                                             int nt, int tig, float (&acc)[8][4]) {
  auto lds32 = [](const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); };
  const uint32_t dda = lds32(pa), ddb = lds32(pb);  // d | dmin << 16
  const uint32_t sa[3] = {lds32(pa + 4), lds32(pa + 8), lds32(pa + 12)};
  const uint32_t sbw[3] = {lds32(pb + 4), lds32(pb + 8), lds32(pb + 12)};
  int scA[8], mnA[8], scB[8], mnB[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    q4k_scale_min(sa, j, scA[j], mnA[j]);
    q4k_scale_min(sbw, j, scB[j], mnB[j]);
  }
  int s1i[8][4];
#pragma unroll
  for (int t = 0; t < 8; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) s1i[t][i] = 0;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int off = 16 + 32 * c + tig * 4;
    const uint32_t qa_lo = lds32(pa + off), qa_hi = lds32(pa + off + 16);
    const uint32_t qb_lo = lds32(pb + off), qb_hi = lds32(pb + off + 16);
    uint32_t a[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      a[h][0] = (qa_lo >> (4 * h)) & 0x0F0F0F0Fu;
      a[h][1] = (qb_lo >> (4 * h)) & 0x0F0F0F0Fu;
      a[h][2] = (qa_hi >> (4 * h)) & 0x0F0F0F0Fu;
      a[h][3] = (qb_hi >> (4 * h)) & 0x0F0F0F0Fu;
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      if (t < nt) {
        mma_pair_k32(a, xrow, t, c, [&](int h, const int (&cc)[4]) {
          const int j = 2 * c + h;
          s1i[t][0] += scA[j] * cc[0];
          s1i[t][1] += scA[j] * cc[1];
          s1i[t][2] += scB[j] * cc[2];
          s1i[t][3] += scB[j] * cc[3];
        });
      }
    }
  }
  auto pack4 = [](const int* v) {
    return static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 8) |
           (static_cast<uint32_t>(v[2]) << 16) | (static_cast<uint32_t>(v[3]) << 24);
  };
  const uint32_t mwA[2] = {pack4(mnA), pack4(mnA + 4)}, mwB[2] = {pack4(mnB), pack4(mnB + 4)};
  const float da = qblocks::half_bits(dda & 0xFFFFu), dmina = qblocks::half_bits(dda >> 16);
  const float db = qblocks::half_bits(ddb & 0xFFFFu), dminb = qblocks::half_bits(ddb >> 16);
  // The block's f32 step: xd * (d * S1 - dmin * sum_j m_j sum(xq_j)).
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    if (t < nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * t + tig * 2 + (i & 1);
        const bool lo = i < 2;
        const uint4 su = *reinterpret_cast<const uint4*>(xs.sum + 4 * tok);
        const uint32_t* mw = lo ? mwA : mwB;
        const int mm = __dp2a_hi(static_cast<int>(su.w), static_cast<int>(mw[1]),
                       __dp2a_lo(static_cast<int>(su.z), static_cast<int>(mw[1]),
                       __dp2a_hi(static_cast<int>(su.y), static_cast<int>(mw[0]),
                       __dp2a_lo(static_cast<int>(su.x), static_cast<int>(mw[0]), 0))));
        const float d = lo ? da : db, dmin = lo ? dmina : dminb;
        acc[t][i] = fmaf(xs.d[tok],
                         fmaf(d, static_cast<float>(s1i[t][i]), -dmin * static_cast<float>(mm)),
                         acc[t][i]);
      }
    }
  }
}

// q6_k weights as a lane reads them (global memory: 210-byte blocks keep
// 2-byte alignment only, too little for cp.async), loaded ahead of the
// stage's barrier.
struct Q6kLane {
  uint32_t ql[2][2][2];  // [half h][k half kh][gl]: 4 low-bit bytes
  uint32_t qh[2][2];     // [h][kh]: 4 high-bit bytes
  uint32_t sc[4];        // the 16 int8 scales
  float d;
};
__device__ __forceinline__ void q6k_load(const uint8_t* p, bool valid, int tig, Q6kLane& q) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int kh = 0; kh < 2; ++kh) {
      const int lo = 16 * kh + tig * 4;
      q.qh[h][kh] = valid ? ld32_a2(p + 128 + 32 * h + lo) : 0u;
#pragma unroll
      for (int gl = 0; gl < 2; ++gl) q.ql[h][kh][gl] = valid ? ld32_a2(p + 64 * h + 32 * gl + lo) : 0u;
    }
#pragma unroll
  for (int i = 0; i < 4; ++i) q.sc[i] = valid ? ld32_a2(p + 192 + 4 * i) : 0u;
  q.d = valid ? qblocks::ld_half(p + 208) : 0.0f;
}

// q6_k: d * sum_s sc_s (q_s - 32) . xq_s over its 16 sub-blocks of 16, the
// codes (4 low bits of ql, 2 high of qh) to signed bytes q - 32, one
// m16n8k16 a sub-block and token tile. Element 128 h + 32 g + l of the
// block: low nibble (g < 2) or high (g >= 2) of ql[64 h + 32 (g & 1) + l],
// bits 2 g of qh[32 h + l], scale s = 8 h + 2 g + l / 16.
__device__ __forceinline__ void mmq_step_q6k(const Q6kLane& A, const Q6kLane& B,
                                             const MmqStage<qblocks::kFmtQ6_K>& xs, uint32_t xrow,
                                             int nt, int tig, float (&acc)[8][4]) {
  int s1i[8][4];
#pragma unroll
  for (int t = 0; t < 8; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) s1i[t][i] = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int gh = 0; gh < 2; ++gh) {
      // The sub-blocks s = 8 h + 2 g + kh of g = gl + 2 gh: their A
      // fragments and scales, e = 2 gl + kh (the 16-byte runs of the
      // activations' 64 bytes 128 h + 64 gh ..).
      uint32_t a0[4], a1[4];
      int scA[4], scB[4];
#pragma unroll
      for (int gl = 0; gl < 2; ++gl) {
#pragma unroll
        for (int kh = 0; kh < 2; ++kh) {
          const int g = gl + 2 * gh, s = 8 * h + 2 * g + kh, e = 2 * gl + kh;
          auto codes = [&](const Q6kLane& q) {
            const uint32_t v = ((q.ql[h][kh][gl] >> (4 * gh)) & 0x0F0F0F0Fu) |
                               (((q.qh[h][kh] >> (2 * g)) & 0x03030303u) << 4);
            return qblocks::sub_codes4(v, 0x20202020u);
          };
          a0[e] = codes(A);
          a1[e] = codes(B);
          scA[e] = static_cast<int8_t>((A.sc[s >> 2] >> (8 * (s & 3))) & 0xFF);
          scB[e] = static_cast<int8_t>((B.sc[s >> 2] >> (8 * (s & 3))) & 0xFF);
        }
      }
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        if (t < nt) {
          uint32_t b[4];
          ldmatrix_x4(b, xrow + 8 * t * kXStride + 128 * h + 64 * gh);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int cc[4] = {0, 0, 0, 0};
            mma_s8_k16(cc, a0[e], a1[e], b[e]);
            s1i[t][0] += scA[e] * cc[0];
            s1i[t][1] += scA[e] * cc[1];
            s1i[t][2] += scB[e] * cc[2];
            s1i[t][3] += scB[e] * cc[3];
          }
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    if (t < nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * t + tig * 2 + (i & 1);
        acc[t][i] = fmaf(xs.d[tok] * (i < 2 ? A.d : B.d), static_cast<float>(s1i[t][i]), acc[t][i]);
      }
    }
  }
}

// q8_0: sum_j d_j xd_j (q_j . xq_j) over its 8 blocks of 32 (f16 d, 32
// int8 codes; the activations' scales xd_j per block too), one m16n8k32 a
// block and token tile, both scales in f32 on the int32 results. The rows'
// 272 bytes sit in shared memory; block j's codes start at 34 j + 2, a word
// boundary for odd j only: even j's words are joined from two aligned ones.
__device__ __forceinline__ uint32_t q80_word(const uint8_t* p, int off) {
  if ((off & 3) == 0) return *reinterpret_cast<const uint32_t*>(p + off);
  const uint32_t lo = *reinterpret_cast<const uint32_t*>(p + off - 2);
  const uint32_t hi = *reinterpret_cast<const uint32_t*>(p + off + 2);
  return __funnelshift_r(lo, hi, 16);
}
__device__ __forceinline__ void mmq_step_q80(const uint8_t* pa, const uint8_t* pb,
                                             const MmqStage<qblocks::kFmtQ8_0>& xs, uint32_t xrow,
                                             int nt, int tig, float (&acc)[8][4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    // Blocks j = 2 c + h.
    uint32_t a[2][4];
    float da[2], db[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * c + h, off = 34 * j + 2 + tig * 4;
      a[h][0] = q80_word(pa, off);
      a[h][2] = q80_word(pa, off + 16);
      a[h][1] = q80_word(pb, off);
      a[h][3] = q80_word(pb, off + 16);
      da[h] = __half2float(*reinterpret_cast<const __half*>(pa + 34 * j));
      db[h] = __half2float(*reinterpret_cast<const __half*>(pb + 34 * j));
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      if (t < nt) {
        mma_pair_k32(a, xrow, t, c, [&](int h, const int (&cc)[4]) {
          // Tokens 8 t + 2 tig and the next: adjacent scales.
          const float2 xd = *reinterpret_cast<const float2*>(
              xs.d + (2 * c + h) * kMmqMaxTokens + 8 * t + 2 * tig);
          acc[t][0] = fmaf(da[h] * xd.x, static_cast<float>(cc[0]), acc[t][0]);
          acc[t][1] = fmaf(da[h] * xd.y, static_cast<float>(cc[1]), acc[t][1]);
          acc[t][2] = fmaf(db[h] * xd.x, static_cast<float>(cc[2]), acc[t][2]);
          acc[t][3] = fmaf(db[h] * xd.y, static_cast<float>(cc[3]), acc[t][3]);
        });
      }
    }
  }
}

// Where a single-split product writes (out [m, n] (+)= sums (+ bias)).
struct MmqOut {
  void* out;
  int out_dt;
  bool accumulate;
  const void* bias;
  int bias_dt;
};

template <int F>
constexpr size_t mmq_smem_bytes() {
  // The second stage's rows stay 16-byte aligned (cp.async, ldmatrix).
  static_assert(sizeof(MmqStage<F>) % 16 == 0, "stages of whole 16-byte units");
  return 2 * sizeof(MmqStage<F>);
}

// partials [split, m, n] (f32): block (row tile, split) over the 256-blocks
// [split * per, min(steps, (split + 1) * per)), two stages in flight: step
// sb + 1's copies are issued before step sb's product. (Adding the splits
// in the row tile's last block instead of mmq_reduce_kernel was measured in
// session 28: its serial rounds of loads made products of 6-16 splits
// slower, e.g. 4,096 x 4,096 at 64 tokens 27.4 -> 36.9 us.)
// Three blocks an SM (up to 168 registers; 4 at 128 registers measured no
// faster in the engine in session 28).
template <int F>
__global__ void __launch_bounds__(kWarps * 32, 3)
    mmq_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n, int64_t k, int m,
               int per, const int8_t* __restrict__ xq, const float* __restrict__ xd,
               const uint32_t* __restrict__ xsum, float* __restrict__ partials, MmqOut o) {
  extern __shared__ __align__(16) uint8_t mmq_smem[];
  auto* stages = reinterpret_cast<MmqStage<F>*>(mmq_smem);
  pdl_launch_dependents();
  pdl_wait();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t steps = k / 256;
  const int64_t s0 = static_cast<int64_t>(blockIdx.y) * per;
  const int64_t s1 = min(steps, s0 + per);
  const int nt = (m + 7) / 8, staged = 8 * nt;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t ra = row0 + warp * 16 + gid;
  const int64_t rb = ra + 8;
  float acc[8][4];
#pragma unroll
  for (int t = 0; t < 8; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = 0.0f;

  mmq_issue<F>(stages[0], s0, staged, k, xq, xd, xsum, w, row_bytes, row0, n, tid);
  constexpr bool kQ6k = F == qblocks::kFmtQ6_K;
  struct Q6kRows {
    Q6kLane a, b;
  };
  struct NoRows {};
  for (int64_t sb = s0; sb < s1; ++sb) {
    MmqStage<F>& cur = stages[(sb - s0) & 1];
    // q6_k: this step's weights from global memory, in flight across the wait.
    std::conditional_t<kQ6k, Q6kRows, NoRows> rows;
    if constexpr (kQ6k) {
      q6k_load(w + min(ra, n - 1) * row_bytes + sb * kQ6kBytes, ra < n, tig, rows.a);
      q6k_load(w + min(rb, n - 1) * row_bytes + sb * kQ6kBytes, rb < n, tig, rows.b);
    }
    if (sb + 1 < s1) {
      mmq_issue<F>(stages[(sb + 1 - s0) & 1], sb + 1, staged, k, xq, xd, xsum, w, row_bytes, row0,
                   n, tid);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    // The lane's row address for ldmatrix: token lane & 7 of a tile, the
    // 16-byte run lane >> 3 of 64 bytes.
    const uint32_t xrow = smem_addr(cur.x) + (lane & 7) * kXStride + 16 * (lane >> 3);
    if constexpr (kQ6k) {
      mmq_step_q6k(rows.a, rows.b, cur, xrow, nt, tig, acc);
    } else {
      constexpr int kRowBytes = MmqStage<F>::kRowBytes;
      const uint8_t* pa = cur.w + (warp * 16 + gid) * kRowBytes;
      if constexpr (F == qblocks::kFmtQ4_K) mmq_step_q4k(pa, pa + 8 * kRowBytes, cur, xrow, nt, tig, acc);
      else mmq_step_q80(pa, pa + 8 * kRowBytes, cur, xrow, nt, tig, acc);
    }
    __syncthreads();  // every warp is done with cur before step sb + 2's copies land in it
  }
  // One split: the outputs themselves; else this split's partial sums.
  const bool direct = gridDim.y == 1;
  float* part = partials + static_cast<int64_t>(blockIdx.y) * m * n;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tok = 8 * t + tig * 2 + (i & 1);
      const int64_t r = i < 2 ? ra : rb;
      if (tok < m && r < n) {
        const int64_t idx = static_cast<int64_t>(tok) * n + r;
        if (direct) {
          float v = acc[t][i];
          if (o.bias) v += load_any(o.bias, o.bias_dt, r);
          if (o.accumulate) v += load_any(o.out, o.out_dt, idx);
          store_any(o.out, o.out_dt, idx, v);
        } else {
          part[idx] = acc[t][i];
        }
      }
    }
  }
}

// out [m, n] = the splits' partial sums in split order (+ bias) (+ out).
__global__ void mmq_reduce_kernel(const float* __restrict__ partials, int splits, int64_t mn,
                                  int64_t n, void* out, int out_dt, bool accumulate,
                                  const void* bias, int bias_dt) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < mn;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += partials[s * mn + i];
    if (bias) v += load_any(bias, bias_dt, i % n);
    if (accumulate) v += load_any(out, out_dt, i);
    store_any(out, out_dt, i, v);
  }
}

// Blocks of mmq_kernel<F> an SM holds at once (registers and shared
// memory); the shared-memory limit raised first (above the 48 KiB default).
template <int F>
int mmq_resident_blocks() {
  static const int blocks = [] {
    constexpr size_t smem = mmq_smem_bytes<F>();
    int b = 0;
    if (cudaFuncSetAttribute(mmq_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mmq_kernel<F>, kWarps * 32, smem) !=
            cudaSuccess)
      b = 0;
    return b;
  }();
  return blocks;
}

}  // namespace

// The tile is latency-bound, so its blocks run in waves of `slots`, each as
// long as a split's steps plus about half a step (the first stage's copies,
// the epilogue); wave_splits takes the split count with the fewest
// wave-steps, the fewest splits among equals (Qwen3-8B at 64 tokens on the
// H200's 396 slots: 12,288 x 4,096 in 2 splits, one wave of 8 steps, where
// ~3 blocks an SM gave 3 splits, 1.45 waves of 6; 4,096 x 12,288 in 6
// splits of 8 steps against 7 of 7, 1.13 waves). Otherwise about 3 blocks
// an SM (the rule before).
int64_t mmq_splits(int64_t tiles, int64_t steps, int64_t slots, int64_t room,
                   bool wave_splits) {
  slots = std::max<int64_t>(slots, 1);
  tiles = std::max<int64_t>(tiles, 1);
  steps = std::max<int64_t>(steps, 1);
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(steps, room));
  auto even = [&](int64_t s) {  // the splits of whole `per` steps
    const int64_t per = (steps + s - 1) / s;
    return (steps + per - 1) / per;
  };
  if (!wave_splits) return even(std::clamp<int64_t>((slots + tiles - 1) / tiles, 1, most));
  int64_t best = 1;
  double best_cost = 0.0;
  for (int64_t s = 1; s <= most; ++s) {
    const int64_t e = even(s), per = (steps + e - 1) / e;
    const double cost = static_cast<double>((tiles * e + slots - 1) / slots) * (per + 0.5);
    if (s == 1 || cost < best_cost) {
      best = e;
      best_cost = cost;
    }
  }
  return best;
}

Status quant_mmq_alloc(QuantMmqScratch* sc) {
  FERRITE_CUDA_RETURN(cudaMalloc(&sc->xq, kMmqMaxTokens * kMmqMaxK));
  FERRITE_CUDA_RETURN(cudaMalloc(&sc->xd, kMmqMaxTokens * (kMmqMaxK / 32) * sizeof(float)));
  FERRITE_CUDA_RETURN(
      cudaMalloc(&sc->xsum, kMmqMaxTokens * (kMmqMaxK / 256) * 4 * sizeof(uint32_t)));
  FERRITE_CUDA_RETURN(cudaMalloc(&sc->partials, kMmqPartialFloats * sizeof(float)));
  // Token rows past a product's m are copied (never used): defined values.
  FERRITE_CUDA_RETURN(cudaMemset(sc->xq, 0, kMmqMaxTokens * kMmqMaxK));
  FERRITE_CUDA_RETURN(cudaMemset(sc->xd, 0, kMmqMaxTokens * (kMmqMaxK / 32) * sizeof(float)));
  FERRITE_CUDA_RETURN(
      cudaMemset(sc->xsum, 0, kMmqMaxTokens * (kMmqMaxK / 256) * 4 * sizeof(uint32_t)));
  return Status::ok();
}

void quant_mmq_free(QuantMmqScratch* sc) {
  if (sc->xq) cudaFree(sc->xq);
  if (sc->xd) cudaFree(sc->xd);
  if (sc->xsum) cudaFree(sc->xsum);
  if (sc->partials) cudaFree(sc->partials);
  *sc = QuantMmqScratch{};
}

bool quant_mmq_supported(DType x_dt, DType w_dt, const void* w, int64_t m, int64_t k, int64_t n,
                         DType out_dt) {
  auto is_float = [](DType d) {
    return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
  };
  // q4_k / q8_0 blocks go to shared memory by 16-byte asynchronous copies;
  // q6_k's are read as 16-bit halves.
  const bool staged = w_dt == DType::kQ4_K || w_dt == DType::kQ8_0;
  const uintptr_t align = staged ? 15 : 1;
  return quant_mmq_format(w_dt) &&
         (reinterpret_cast<uintptr_t>(w) & align) == 0 && k % 256 == 0 &&
         k > 0 && k <= kMmqMaxK && m > 0 && m <= kMmqMaxTokens && n > 0 && is_float(x_dt) &&
         is_float(out_dt);
}

int quant_mmq_act_group(DType w_dt) { return w_dt == DType::kQ8_0 ? 32 : 256; }

Status launch_quant_mmq(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m,
                        int64_t k, const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                        bool accumulate, const void* bias, DType bias_dt,
                        const QuantMmqScratch& sc, const MmqOptions& opt) {
  if (!quant_mmq_supported(x_dt, w_dt, w, m, k, n, out_dt))
    return unsupported("quant mmq: q4_k / q6_k / q8_0 weights, k a multiple of 256 up to 65,536, "
                       "1..64 tokens, float activations and outputs");
  if (!sc.xq || !sc.partials) return internal_error("quant mmq: no scratch");
  // 1. The activations (per 32 for q8_0, else per 256), unless the scratch
  // holds them already.
  if (opt.quantize) {
    const dim3 qgrid(static_cast<unsigned>((k / 256 + 7) / 8), static_cast<unsigned>(m));
    bool ok = dispatch_float(x_dt, [&](auto tag) {
      using T = decltype(tag);
      auto kernel =
          w_dt == DType::kQ8_0 ? mmq_quantize_kernel<T, 32> : mmq_quantize_kernel<T, 256>;
      (void)launch_pdl(kernel, qgrid, 256, 0, s, static_cast<const T*>(x), k, sc.xq, sc.xd,
                       sc.xsum);
    });
    if (!ok) return bad_dtype("quant mmq input", x_dt);
    FERRITE_RETURN_IF_ERROR(check_launch("mmq_quantize"));
  }
  // 2. The product, k split as mmq_splits says.
  const int64_t steps = k / 256;
  const int64_t tiles = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  // A single split writes the outputs directly (any m x n); more need room
  // for their partial sums.
  int64_t splits = 0;
  bool launched = false;
  (void)qblocks::dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    if constexpr (F == qblocks::kFmtQ4_K || F == qblocks::kFmtQ6_K || F == qblocks::kFmtQ8_0) {
      const int resident = mmq_resident_blocks<F>();
      if (resident < 1) return;
      splits = mmq_splits(tiles, steps, static_cast<int64_t>(resident) * num_sms,
                          kMmqPartialFloats / (m * n), opt.wave_splits);
      const int64_t per = (steps + splits - 1) / splits;
      const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
      (void)launch_pdl(mmq_kernel<F>, grid, kWarps * 32, mmq_smem_bytes<F>(), s,
                       static_cast<const uint8_t*>(w), dtype_bytes(w_dt, k), n, k,
                       static_cast<int>(m), static_cast<int>(per), sc.xq, sc.xd, sc.xsum,
                       sc.partials, MmqOut{out, dt_code(out_dt), accumulate, bias, dt_code(bias_dt)});
      launched = true;
    }
  });
  if (!launched)
    return internal_error("quant mmq: no kernel for the format, or no block of it fits an SM");
  FERRITE_RETURN_IF_ERROR(check_launch("mmq_product"));
  if (splits == 1) return Status::ok();
  // 3. The splits' sums.
  const int64_t mn = m * n;
  (void)launch_pdl(mmq_reduce_kernel, grid_for(mn, 256), 256, 0, s, sc.partials,
                   static_cast<int>(splits), mn, n, out, dt_code(out_dt), accumulate, bias,
                   dt_code(bias_dt));
  return check_launch("mmq_reduce");
}

}  // namespace ferrite::cuda
