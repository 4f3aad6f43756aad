// The fused decode expert kernels of quant_moe_decode.cuh. Both take a
// lane's share of each weight block as quant_gemm.cu's quant_moe_q8_kernel
// does (lane / kLanes the block, lane % kLanes the part, blocks in
// increasing order, then a warp sum), so the products are bitwise the
// unfused ones; what changes is what the epilogues do with them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/moe_route_block.cuh"
#include "backends/cuda/kernels/quant_blocks.cuh"
#include "backends/cuda/kernels/quant_moe_decode.cuh"

namespace ferrite::cuda {
namespace {

using namespace qblocks;

// Gate / up: a block takes the 32 outputs i of one 32-block of h for one
// row tile, kWarpOuts adjacent outputs a warp (32 / kWarpOuts warps; warp w:
// outputs 32 blockIdx.x + kWarpOuts w + j, their gate and up rows as
// 2 kWarpOuts streams); the tile's rows M at a time. The SiLU products of a
// chunk meet in shared memory, where warp t quantizes row t's 32 values
// (quantize_q8_lane).
//
// Why kWarpOuts (Tuning::cuda_moe_gate_up_warp_outputs): with one output a
// warp a block is 1,024 threads of 46-64 registers, one block an SM, so
// Qwen3-30B-A3B's b1 grid (24 x 8 tiles = 192 blocks) runs in two waves on
// 132 SMs, each warp with two rows (~2.3 KB) in flight. Four outputs a warp:
// blocks of 256 threads, two or more an SM (one wave), and each warp streams
// eight rows at once. An output's sum is the same either way (the same
// lanes' blocks in the same order, then the warp sum): bitwise equal.
constexpr int kGateUpRows = 4;  // gathered rows per chunk

// The block readers of the MoE decode: a decoded row meets about one token
// (one h row in down + combine; the expert's few tokens in gate / up), so
// u4_g128 takes the zero point off once a lane (U4DotExact: the same bits
// as Q8Dot's subtracted codes, fewer instructions).
template <int F>
struct MoeDotOf {
  using type = Q8Dot<F>;
};
template <>
struct MoeDotOf<kFmtU4G128> {
  using type = U4DotExact;
};
template <int F>
using MoeDot = typename MoeDotOf<F>::type;

// Blocks an SM the launch bounds ask for: one of 1,024 threads (as before),
// two of 512 or of 256 (up to 64 / 128 registers a thread).
constexpr int gate_up_min_blocks(int wo) { return wo == 1 ? 1 : 2; }

// kRoute (MoeRouteInExperts, warp_outputs 4 only): one token, routed by
// every block first.
template <int F, int kWarpOuts, bool kRoute = false>
__global__ void __launch_bounds__(1024 / kWarpOuts, gate_up_min_blocks(kWarpOuts))
    quant_moe_gate_up_kernel(const int8_t* __restrict__ xq, const float* __restrict__ xd,
                             int64_t H, const int32_t* __restrict__ row_pair, int top_k,
                             const uint8_t* __restrict__ w, int64_t row_bytes, int64_t I,
                             const int32_t* __restrict__ tiles,
                             const int32_t* __restrict__ tile_count, int8_t* __restrict__ hq,
                             float* __restrict__ hd, MoeRouteInExperts route, int route_spe) {
  using Fmt = MoeDot<F>;
  constexpr int kPerIter = 32 / Fmt::kLanes, WO = kWarpOuts;
  // Rows a chunk: fewer with more outputs a warp (their sums stay in registers).
  constexpr int M = WO == 1 ? kGateUpRows : kGateUpRows / 2;
  static_assert(32 / WO >= M, "a warp per row of the chunk quantizes it");
  __shared__ float hs[M][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if constexpr (kRoute) {
    // The routing launch's work for one token, by every block (the same
    // bits everywhere): block y takes the y-th expert in id order (its
    // only row, row y); block (0, 0) publishes what down + combine reads.
    __shared__ RouteBlockShared rsh;
    __shared__ int32_t ids_s[kRouteBlockMaxTopK];
    __shared__ float weights_s[kRouteBlockMaxTopK];
    __shared__ int4 tiles_s[kRouteBlockMaxTopK];
    __shared__ int32_t row_pair_s[kRouteBlockMaxTopK], count_s;
    const RouteBlockLane r = route_one_token_block(route.logits, static_cast<int>(route.experts),
                                                   top_k, route.normalize, route_spe, rsh,
                                                   ids_s, weights_s);
    if (r.rank >= 0) {
      tiles_s[r.rank] = make_int4(r.id, r.rank, 1, 0);
      row_pair_s[r.rank] = r.rank;
      if (blockIdx.x == 0 && blockIdx.y == 0) {
        route.ids[r.rank] = r.id;
        route.weights[r.rank] = weights_s[r.rank];
        route.slot_of[r.rank] = r.rank;
      }
    }
    if (threadIdx.x == 0) count_s = top_k;
    __syncthreads();
    row_pair = row_pair_s;
    tiles = reinterpret_cast<const int32_t*>(tiles_s);
    tile_count = &count_s;
  }
  const int tile = blockIdx.y;
  // The shared expert's row of the grid (MoeRouteInExperts::shared_gate):
  // the token (x row 0) into h row top_k, its own gate and up rows.
  const bool shared_row = kRoute && route.shared_gate != nullptr && tile == top_k;
  // The tile's entry is loaded beside the count, not after it (one round
  // trip where there were two in a row): the table has room for max_tiles
  // (the grid's y), so the load is in bounds even for a tile past the count;
  // the routed table in shared memory has kRouteBlockMaxTopK entries.
  const int4 entry =
      reinterpret_cast<const int4*>(tiles)[kRoute ? min(tile, kRouteBlockMaxTopK - 1) : tile];
  if (!shared_row && tile >= *tile_count) return;  // the whole block
  const int e = entry.x, r0 = shared_row ? top_k : entry.y, nr = shared_row ? 1 : entry.z;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * 32 + warp * WO;  // the warp's first output
  const uint8_t* wg =
      shared_row ? static_cast<const uint8_t*>(route.shared_gate) + i0 * row_bytes
                 : w + (static_cast<int64_t>(e) * 2 * I + i0) * row_bytes;
  const uint8_t* wu =
      shared_row ? static_cast<const uint8_t*>(route.shared_up) + i0 * row_bytes : wg + I * row_bytes;
  const int nb = static_cast<int>(H / Fmt::kElems);
  const int bl = lane / Fmt::kLanes, part = lane % Fmt::kLanes;
  const int64_t xs = H / 32;
  for (int c0 = 0; c0 < nr; c0 += M) {
    int64_t xrow[M];
    float ag[M][WO], au[M][WO];
#pragma unroll
    for (int t = 0; t < M; ++t) {
      xrow[t] = c0 + t < nr ? (shared_row ? 0 : row_pair[r0 + c0 + t] / top_k) : -1;
#pragma unroll
      for (int j = 0; j < WO; ++j) ag[t][j] = au[t][j] = 0.0f;
    }
#pragma unroll(WO == 1 ? 2 : 1)
    for (int b = bl; b < nb; b += kPerIter) {
      typename Fmt::Raw rg[WO], ru[WO];
#pragma unroll
      for (int j = 0; j < WO; ++j) {
        const int64_t off = j * row_bytes + static_cast<int64_t>(b) * Fmt::kBytes;
        rg[j] = Fmt::fetch(wg + off, part);
        ru[j] = Fmt::fetch(wu + off, part);
      }
#pragma unroll
      for (int j = 0; j < WO; ++j) {
        Fmt g, u;
        g.decode(rg[j], part);
        u.decode(ru[j], part);
#pragma unroll
        for (int t = 0; t < M; ++t) {
          if (xrow[t] >= 0) {
            const int8_t* xb = xq + xrow[t] * H + static_cast<int64_t>(b) * Fmt::kElems;
            const float* db = xd + xrow[t] * xs + static_cast<int64_t>(b) * (Fmt::kElems / 32);
            ag[t][j] += g.dot(xb, db);
            au[t][j] += u.dot(xb, db);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < M; ++t) {
#pragma unroll
      for (int j = 0; j < WO; ++j) {
        const float gs = warp_sum(ag[t][j]), us = warp_sum(au[t][j]);
        if (lane == 0) hs[t][warp * WO + j] = gs / (1.0f + expf(-gs)) * us;
      }
    }
    __syncthreads();
    if (warp < M && c0 + warp < nr) {
      const int64_t row = r0 + c0 + warp;
      const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + lane;
      quantize_q8_lane(hs[warp][lane], lane, hq + row * I + col, hd + row * (I / 32) + blockIdx.x);
    }
    __syncthreads();
  }
}

// Down + combine: a warp per (token t = blockIdx.y, output j), the token's
// top_k experts KB at a time (their blocks fetched together: one round trip
// per batch instead of one per expert), each product warp-summed and
// weighted into the token's sum in expert order, then the shared expert and
// the residual.
//
// KB and kMinBlocks (Tuning::cuda_moe_down_form): form 0, kDownBatch
// experts at a time with as many registers as that takes (148 a thread on
// q4_k: one block of 8 warps an SM, so the 2,048 output warps of a
// Qwen3-30B-A3B token run in two waves); form 2 the same at two blocks an SM
// (128 registers, no spills); form 1, where a row's blocks take a single
// warp iteration (I <= 4 K-quant blocks: Qwen3-30B-A3B's 768), kDownOneRound
// experts at two blocks an SM: no loop to unroll, and all of a top-8 token's
// experts' blocks in flight at once (one DRAM round trip where the batches
// of 4 make two in a row; some spills). A batch of 8 over rows of several
// warp iterations, unrolled twice, would take up to 174 registers. Every
// form computes each product from the same lanes' blocks in the same order,
// then the same warp sum, added in expert order: the same bits.
constexpr int kDownWarps = 8, kDownBatch = 4, kDownOneRound = 8;

// Whether a row of I elements of format F is one warp iteration of the down
// kernel (its blocks fit the warp's 32 / kLanes block slots): form 1's
// condition, as the kernel's loop over b sees it.
template <int F>
constexpr bool down_row_one_iteration(int64_t I) {
  return I / MoeDot<F>::kElems <= 32 / MoeDot<F>::kLanes;
}

template <int F, typename T, int KB, int kMinBlocks = 1>
__global__ void __launch_bounds__(kDownWarps * 32, kMinBlocks)
    quant_moe_down_combine_kernel(const int8_t* __restrict__ hq, const float* __restrict__ hd,
                                  int64_t I, const uint8_t* __restrict__ w, int64_t row_bytes,
                                  int64_t H, int K, const int32_t* __restrict__ ids,
                                  const int32_t* __restrict__ slot_of,
                                  const float* __restrict__ weights, const float* shared_gate,
                                  const float* shared_out, const uint8_t* shared_down, T* hidden,
                                  bool pdl_trigger) {
  using Fmt = MoeDot<F>;
  constexpr int kPerIter = 32 / Fmt::kLanes;
  constexpr bool kOneRound = KB == kDownOneRound;  // the host: down_row_one_iteration
  // The next layer's first weight stream may take this block's SM once it
  // leaves (this launch itself is not a programmatic dependent: nothing to
  // wait for here).
  if (pdl_trigger) pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kDownWarps + warp;
  const int64_t t = blockIdx.y;
  if (j >= H) return;
  const int nb = static_cast<int>(I / Fmt::kElems);
  const int bl = lane / Fmt::kLanes, part = lane % Fmt::kLanes;
  const int64_t xs = I / 32;
  // The token's routing (K <= 32: lane k holds pair k's expert, h row and
  // weight) and the epilogue's inputs, loaded at once up front: each was a
  // dependent round trip inside the expert loop or after it.
  const int32_t my_id = lane < K ? ids[t * K + lane] : 0;
  const int32_t my_slot = lane < K ? slot_of[t * K + lane] : -1;
  const float my_weight = lane < K ? weights[t * K + lane] : 0.0f;
  float residual = 0.0f, sg = 0.0f, so = 0.0f;
  if (lane == 0) {
    residual = to_f(hidden[t * H + j]);
    if (shared_down) {
      sg = shared_gate[t];
    } else if (shared_out) {
      sg = shared_gate[t];
      so = shared_out[t * H + j];
    }
  }
  // The shared expert's row of down (shared_down: one token, h row K): its
  // first warp iteration's blocks fetched now, beside the routing loads, so
  // that its product after the routed experts starts from registers.
  const uint8_t* srow = shared_down ? shared_down + j * row_bytes : nullptr;
  typename Fmt::Raw sraw{};
  if (srow && bl < nb) sraw = Fmt::fetch(srow + static_cast<int64_t>(bl) * Fmt::kBytes, part);
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += KB) {
    const uint8_t* wr[KB];
    int64_t hrow[KB];
    float ps[KB];
#pragma unroll
    for (int c = 0; c < KB; ++c) {
      const bool ok = k0 + c < K;
      const int32_t id = __shfl_sync(0xffffffffu, my_id, (k0 + c) & 31);
      const int32_t slot = __shfl_sync(0xffffffffu, my_slot, (k0 + c) & 31);
      wr[c] = w + (static_cast<int64_t>(ok ? id : 0) * H + j) * row_bytes;
      hrow[c] = ok ? slot : -1;
      ps[c] = 0.0f;
    }
#pragma unroll(kOneRound ? 1 : 2)
    for (int b = bl; b < nb; b += kPerIter) {
      typename Fmt::Raw raw[KB];
#pragma unroll
      for (int c = 0; c < KB; ++c)
        if (hrow[c] >= 0) raw[c] = Fmt::fetch(wr[c] + static_cast<int64_t>(b) * Fmt::kBytes, part);
#pragma unroll
      for (int c = 0; c < KB; ++c) {
        if (hrow[c] >= 0) {
          Fmt f;
          f.decode(raw[c], part);
          ps[c] += f.dot(hq + hrow[c] * I + static_cast<int64_t>(b) * Fmt::kElems,
                         hd + hrow[c] * xs + static_cast<int64_t>(b) * (Fmt::kElems / 32));
        }
      }
    }
#pragma unroll
    for (int c = 0; c < KB; ++c) {
      const float wk = __shfl_sync(0xffffffffu, my_weight, (k0 + c) & 31);
      if (k0 + c >= K) break;
      const float y = warp_sum(ps[c]);
      acc += wk * y;
    }
  }
  if (srow) {
    // As a routed expert's product: the same lanes' blocks, then the warp sum.
    const int64_t hr = K;
    float ps = 0.0f;
    for (int b = bl; b < nb; b += kPerIter) {
      const typename Fmt::Raw raw =
          b == bl ? sraw : Fmt::fetch(srow + static_cast<int64_t>(b) * Fmt::kBytes, part);
      Fmt f;
      f.decode(raw, part);
      ps += f.dot(hq + hr * I + static_cast<int64_t>(b) * Fmt::kElems,
                  hd + hr * xs + static_cast<int64_t>(b) * (Fmt::kElems / 32));
    }
    so = warp_sum(ps);
  }
  if (lane == 0) {
    if (shared_out || srow) acc += 1.0f / (1.0f + expf(-sg)) * so;
    hidden[t * H + j] = from_f<T>(residual + acc);
  }
}

}  // namespace

namespace {
// Rows of k elements in block format dt that the 8-bit products take: an
// integer format (not e4m3), whole blocks, whole 32-blocks of activations.
bool q8_rows(DType dt, int64_t k) {
  return qfmt(dt) >= 0 && dt != DType::kF8B128 && k > 0 && k % 32 == 0 &&
         k % dtype_block_elems(dt) == 0;
}
}  // namespace

bool quant_moe_decode_supported(DType gate_up_dt, DType down_dt, int64_t hidden,
                                int64_t intermediate) {
  return q8_rows(gate_up_dt, hidden) && q8_rows(down_dt, intermediate);
}

bool quant_moe_shared_in_experts_supported(int64_t tokens, int64_t I, int64_t shared_I,
                                           DType gate_up_dt, DType down_dt, const void* shared_gate,
                                           DType shared_gate_dt, const void* shared_up,
                                           DType shared_up_dt, const void* shared_down,
                                           DType shared_down_dt) {
  auto aligned = [](const void* p) { return p && (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return tokens == 1 && shared_I == I && shared_gate_dt == gate_up_dt &&
         shared_up_dt == gate_up_dt && shared_down_dt == down_dt && aligned(shared_gate) &&
         aligned(shared_up) && aligned(shared_down);
}

bool quant_moe_route_in_experts_supported(int64_t tokens, int64_t experts, int64_t top_k,
                                          int warp_outputs, int64_t max_tiles) {
  return tokens == 1 && top_k >= 1 && top_k <= kRouteBlockMaxTopK && top_k <= experts &&
         experts <= kRouteBlockMaxExperts && warp_outputs == 4 && max_tiles >= top_k;
}

Status launch_quant_moe_gate_up(cudaStream_t s, const int8_t* xq, const float* xd, int64_t H,
                                const int32_t* row_pair, int64_t top_k, const void* gate_up,
                                DType w_dt, int64_t I, const int32_t* tiles,
                                const int32_t* tile_count, int64_t max_tiles, int8_t* hq,
                                float* hd, int warp_outputs, const MoeRouteInExperts& route) {
  if (!q8_rows(w_dt, H) || I <= 0 || I % 32 != 0)
    return unsupported("fused moe gate/up: block weights with rows of whole blocks");
  if (route.logits &&
      (!quant_moe_route_in_experts_supported(1, route.experts, top_k, warp_outputs,
                                             max_tiles) ||
       !route.ids || !route.weights || !route.slot_of))
    return invalid_argument(
        "fused moe gate/up: routing in the launch takes one token, top_k 1..32 <= experts <= "
        "512, a tile a selection, 4 outputs a warp and the ids / weights / slot_of outputs");
  if (warp_outputs != 1 && warp_outputs != 2 && warp_outputs != 4)
    return invalid_argument("fused moe gate/up: outputs a warp must be 1, 2 or 4");
  const bool shared = route.shared_gate != nullptr;
  if (shared && (!route.logits || !route.shared_up))
    return invalid_argument(
        "fused moe gate/up: the shared expert in the launch needs the routing in it and both of "
        "its gate and up");
  if (max_tiles == 0) return Status::ok();
  // The shared expert's row after the top_k selections' rows.
  const int64_t rows = shared ? std::max<int64_t>(max_tiles, top_k + 1) : max_tiles;
  if (rows > 65535) return unsupported("fused moe gate/up: too many row tiles");
  const int64_t row_bytes = dtype_bytes(w_dt, H);
  const dim3 grid(static_cast<unsigned>(I / 32), static_cast<unsigned>(rows));
  const auto* wb = static_cast<const uint8_t*>(gate_up);
  dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    if constexpr (F != kFmtF8B128) {
      auto go = [&](auto wo) {
        constexpr int WO = decltype(wo)::value;
        if constexpr (WO == 4) {
          if (route.logits) {
            const int spe =
                route_block_threads_per_item(1024 / WO, static_cast<int>(route.experts),
                                             static_cast<int>(top_k));
            quant_moe_gate_up_kernel<F, WO, true><<<grid, 1024 / WO, 0, s>>>(
                xq, xd, H, row_pair, static_cast<int>(top_k), wb, row_bytes, I, tiles,
                tile_count, hq, hd, route, spe);
            return;
          }
        }
        quant_moe_gate_up_kernel<F, WO><<<grid, 1024 / WO, 0, s>>>(
            xq, xd, H, row_pair, static_cast<int>(top_k), wb, row_bytes, I, tiles, tile_count,
            hq, hd, route, 1);
      };
      if (warp_outputs == 4)
        go(std::integral_constant<int, 4>{});
      else if (warp_outputs == 2)
        go(std::integral_constant<int, 2>{});
      else
        go(std::integral_constant<int, 1>{});
    }
  });
  return check_launch("quant_moe_gate_up_kernel");
}

Status launch_quant_moe_down_combine(cudaStream_t s, const int8_t* hq, const float* hd,
                                     int64_t I, const void* down, DType w_dt, int64_t H,
                                     int64_t tokens, int64_t top_k, const int32_t* ids,
                                     const int32_t* slot_of, const float* weights,
                                     const float* shared_gate, const float* shared_out,
                                     const void* shared_down, void* hidden, DType act, int form,
                                     bool pdl_trigger) {
  if (!q8_rows(w_dt, I))
    return unsupported("fused moe down: block weights with rows of whole blocks");
  if (shared_down && (tokens != 1 || !shared_gate))
    return invalid_argument(
        "fused moe down: the shared expert's down in the launch takes one token and its gate");
  if (tokens == 0) return Status::ok();
  if (tokens > 65535) return unsupported("fused moe down: too many tokens");
  const int64_t row_bytes = dtype_bytes(w_dt, I);
  const dim3 grid(static_cast<unsigned>((H + kDownWarps - 1) / kDownWarps),
                  static_cast<unsigned>(tokens));
  const auto* wb = static_cast<const uint8_t*>(down);
  bool ok = true;
  dispatch_fmt(w_dt, [&](auto fc) {
    constexpr int F = decltype(fc)::value;
    if constexpr (F != kFmtF8B128) {
      ok = dispatch_float(act, [&](auto tag) {
        using T = decltype(tag);
        auto go = [&](auto kern) {
          kern<<<grid, kDownWarps * 32, 0, s>>>(hq, hd, I, wb, row_bytes, H,
                                                static_cast<int>(top_k), ids, slot_of, weights,
                                                shared_gate, shared_out,
                                                static_cast<const uint8_t*>(shared_down),
                                                static_cast<T*>(hidden), pdl_trigger);
        };
        if (form == 1 && down_row_one_iteration<F>(I))
          go(quant_moe_down_combine_kernel<F, T, kDownOneRound, 2>);
        else if (form >= 1)
          go(quant_moe_down_combine_kernel<F, T, kDownBatch, 2>);
        else
          go(quant_moe_down_combine_kernel<F, T, kDownBatch>);
      });
    }
  });
  if (!ok) return bad_dtype("fused moe down activation", act);
  return check_launch("quant_moe_down_combine_kernel");
}

}  // namespace ferrite::cuda
