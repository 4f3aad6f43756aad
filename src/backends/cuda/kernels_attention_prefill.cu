// Tensor-core flash attention for prompt tokens over the paged KV cache
// (bf16 / f16, head_dim 64 or 128). One block per (64-query tile of one
// sequence, query head); 4 warps own 16 query rows each. Per 64-key tile:
// S = Q K^T (WMMA, f32), causal online softmax in f32 (P rounded to the
// activation type), O = alpha O + P V (WMMA, O kept in accumulator
// fragments). Key tiles stop at the tile's last query position (causal skip).
#include <mma.h>

#include "backends/cuda/cuda_types.cuh"
#include "backends/cuda/kernels.h"

namespace ferrite::cuda {
namespace {

using namespace nvcuda;

constexpr int kBq = kPrefillTileQ, kBk = 64;

template <int HD, typename T>
constexpr size_t prefill_smem() {
  return sizeof(T) * (3 * kBq * (HD + 8)) + sizeof(float) * kBq * (kBk + 4) +
         sizeof(T) * kBq * (kBk + 8) + sizeof(float) * kBq * (HD + 4) + sizeof(float) * 3 * kBq;
}

template <typename T, int HD>
__global__ void __launch_bounds__(128) prefill_kernel(AttentionShape a, StepMeta meta,
                                                      int32_t page_size, const int32_t* tile_seq,
                                                      const int32_t* tile_row, int64_t tokens,
                                                      const T* __restrict__ q,
                                                      const T* __restrict__ k_cache,
                                                      const T* __restrict__ v_cache, T* out) {
  constexpr int LDT = HD + 8, LDS = kBk + 4, LDP = kBk + 8, LDO = HD + 4;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kBq * LDT;
  T* vs = ks + kBk * LDT;
  float* ss = reinterpret_cast<float*>(vs + kBk * LDT);
  T* ps = reinterpret_cast<T*>(ss + kBq * LDS);
  float* os = reinterpret_cast<float*>(ps + kBq * LDP);
  float* ms = os + kBq * LDO;
  float* ls = ms + kBq;
  float* al = ls + kBq;

  // Heaviest (latest) query tiles first: causal work grows with the tile.
  const int tile = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y;
  const int group = a.num_heads / a.num_kv_heads;
  const int kvh = h / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t seq = tile_seq[tile];
  const int64_t r0 = tile_row[tile];
  const bool row_ok = threadIdx.x < kBq && r0 + threadIdx.x < tokens &&
                      meta.token_seq[r0 + threadIdx.x] == seq;
  const int nvalid = __syncthreads_count(row_ok);
  const int32_t qpos0 = meta.token_pos[r0];
  const int32_t qmax = qpos0 + nvalid - 1;
  const int32_t* table = meta.block_tables + meta.seq_block_off[seq];

  // Q tile, O, running max / sum.
  constexpr int kVec = 8;  // 16-byte vectors of 8 elements
  for (int idx = threadIdx.x; idx < kBq * HD / kVec; idx += blockDim.x) {
    const int i = idx / (HD / kVec), c = (idx % (HD / kVec)) * kVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (i < nvalid)
      v = *reinterpret_cast<const uint4*>(q + (r0 + i) * a.q_row +
                                          static_cast<int64_t>(h) * a.q_stride + c);
    *reinterpret_cast<uint4*>(qs + i * LDT + c) = v;
  }
  for (int i = threadIdx.x; i < kBq; i += blockDim.x) {
    ms[i] = -INFINITY;
    ls[i] = 0.0f;
  }
  // O stays in accumulator fragments across key tiles. The row of each
  // fragment element is read off a fragment loaded from a matrix whose
  // entries are their row numbers (no assumption on the fragment layout).
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_acc[HD / 16];
  int rowmap[8];
  {
    float* probe = ss + warp * 16 * LDS;
    for (int idx = lane; idx < 256; idx += 32) probe[(idx / 16) * LDS + idx % 16] = idx / 16;
    __syncwarp();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> rows;
    wmma::load_matrix_sync(rows, probe, LDS, wmma::mem_row_major);
    static_assert(sizeof(rows.x) / sizeof(rows.x[0]) == 8, "accumulator fragment of 8 floats");
#pragma unroll
    for (int i = 0; i < 8; ++i) rowmap[i] = static_cast<int>(rows.x[i]);
    __syncwarp();
  }
#pragma unroll
  for (int dn = 0; dn < HD / 16; ++dn) wmma::fill_fragment(o_acc[dn], 0.0f);

  const int kv_tiles = nvalid > 0 ? qmax / kBk + 1 : 0;
  for (int kt = 0; kt < kv_tiles; ++kt) {
    const int kv0 = kt * kBk;
    __syncthreads();  // the previous tile's K / V are no longer read
    for (int idx = threadIdx.x; idx < kBk * HD / kVec; idx += blockDim.x) {
      const int j = idx / (HD / kVec), c = (idx % (HD / kVec)) * kVec;
      const int pos = kv0 + j;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
      if (pos <= qmax) {
        const int64_t base =
            ((static_cast<int64_t>(table[pos / page_size]) * page_size + pos % page_size) *
                 a.num_kv_heads + kvh) * HD + c;
        kv = *reinterpret_cast<const uint4*>(k_cache + base);
        vv = *reinterpret_cast<const uint4*>(v_cache + base);
      }
      *reinterpret_cast<uint4*>(ks + j * LDT + c) = kv;
      *reinterpret_cast<uint4*>(vs + j * LDT + c) = vv;
    }
    __syncthreads();
    // S = Q K^T for this warp's 16 rows.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kBk / 16];
#pragma unroll
      for (int n = 0; n < kBk / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, qs + warp * 16 * LDT + kk * 16, LDT);
#pragma unroll
        for (int n = 0; n < kBk / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fb, ks + n * 16 * LDT + kk * 16, LDT);
          wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kBk / 16; ++n)
        wmma::store_matrix_sync(ss + warp * 16 * LDS + n * 16, acc[n], LDS, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax of the warp's rows (two columns per lane).
    for (int rr = 0; rr < 16; ++rr) {
      const int i = warp * 16 + rr;
      const int32_t qpos = i < nvalid ? qpos0 + i : -1;
      float s0 = ss[i * LDS + lane] * a.scale, s1 = ss[i * LDS + lane + 32] * a.scale;
      if (kv0 + lane > qpos) s0 = -INFINITY;
      if (kv0 + lane + 32 > qpos) s1 = -INFINITY;
      const float mx = warp_max(fmaxf(s0, s1));
      const float m_old = ms[i];
      const float m_new = fmaxf(m_old, mx);
      const float p0 = s0 == -INFINITY ? 0.0f : expf(s0 - m_new);
      const float p1 = s1 == -INFINITY ? 0.0f : expf(s1 - m_new);
      const float sum = warp_sum(p0 + p1);
      ps[i * LDP + lane] = from_f<T>(p0);
      ps[i * LDP + lane + 32] = from_f<T>(p1);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        al[i] = alpha;
        ls[i] = ls[i] * alpha + sum;
        ms[i] = m_new;
      }
    }
    __syncwarp();
    // O = O * alpha (per row) + P V.
    float alpha[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) alpha[i] = al[warp * 16 + rowmap[i]];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fp[kBk / 16];
#pragma unroll
    for (int kb = 0; kb < kBk / 16; ++kb)
      wmma::load_matrix_sync(fp[kb], ps + warp * 16 * LDP + kb * 16, LDP);
#pragma unroll
    for (int dn = 0; dn < HD / 16; ++dn) {
#pragma unroll
      for (int i = 0; i < 8; ++i) o_acc[dn].x[i] *= alpha[i];
#pragma unroll
      for (int kb = 0; kb < kBk / 16; ++kb) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fb, vs + kb * 16 * LDT + dn * 16, LDT);
        wmma::mma_sync(o_acc[dn], fp[kb], fb, o_acc[dn]);
      }
    }
  }
#pragma unroll
  for (int dn = 0; dn < HD / 16; ++dn)
    wmma::store_matrix_sync(os + warp * 16 * LDO + dn * 16, o_acc[dn], LDO, wmma::mem_row_major);
  __syncthreads();
  for (int idx = threadIdx.x; idx < kBq * HD; idx += blockDim.x) {
    const int i = idx / HD, d = idx % HD;
    if (i >= nvalid) continue;
    float val = ls[i] > 0.0f ? os[i * LDO + d] / ls[i] : 0.0f;
    if (a.output_gate) {
      const float gate = to_f(q[(r0 + i) * a.q_row + static_cast<int64_t>(h) * a.q_stride + HD + d]);
      val *= 1.0f / (1.0f + expf(-gate));
    }
    out[((r0 + i) * a.num_heads + h) * HD + d] = from_f<T>(val);
  }
}

template <typename T, int HD>
Status launch(cudaStream_t s, const AttentionShape& a, const StepMeta& meta, int32_t page_size,
              const int32_t* tile_seq, const int32_t* tile_row, int64_t tiles, int64_t tokens,
              const void* q, const void* k_cache, const void* v_cache, void* out) {
  constexpr size_t smem = prefill_smem<HD, T>();
  auto kern = prefill_kernel<T, HD>;
  FERRITE_CUDA_RETURN(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
  kern<<<dim3(static_cast<unsigned>(tiles), a.num_heads), 128, smem, s>>>(
      a, meta, page_size, tile_seq, tile_row, tokens, static_cast<const T*>(q),
      static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), static_cast<T*>(out));
  return check_launch("attention_prefill");
}

}  // namespace

bool attention_prefill_supported(const AttentionShape& a, DType act) {
  return (act == DType::kBF16 || act == DType::kF16) && (a.head_dim == 64 || a.head_dim == 128);
}

Status launch_attention_prefill(cudaStream_t s, const AttentionShape& a, const StepMeta& meta,
                                int32_t page_size, const int32_t* tile_seq,
                                const int32_t* tile_row, int64_t tiles, int64_t tokens,
                                const void* q, DType act, const void* k_cache,
                                const void* v_cache, void* out) {
  if (tiles == 0) return Status::ok();
  if (!attention_prefill_supported(a, act)) return unsupported("attention prefill: shape / dtype");
  if (act == DType::kBF16) {
    if (a.head_dim == 64)
      return launch<__nv_bfloat16, 64>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
    return launch<__nv_bfloat16, 128>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
  }
  if (a.head_dim == 64)
    return launch<__half, 64>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
  return launch<__half, 128>(s, a, meta, page_size, tile_seq, tile_row, tiles, tokens, q, k_cache, v_cache, out);
}

}  // namespace ferrite::cuda
