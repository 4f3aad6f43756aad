// routed_swiglu_moe / routed_shared_swiglu_moe on CUDA: pre-norm, router
// product to f32 logits, device softmax + top-k, device stable sort of the
// (token, k) pairs by expert into per-expert row tiles, grouped tensor-core
// gate/up (fused SiLU product) and down GEMMs over the tile table (no host
// loop over experts; SIMT products for f32), per-token combine in increasing
// expert id, then the shared expert (sigmoid gate), then the residual.
// Decode-sized steps (Tuning::cuda_moe_fused_tokens) fuse the stages into
// fewer launches with the same results: norm + router, routing + sort, and
// for block-format experts on 8-bit activations gate/up + SiLU + 8-bit h,
// then down + combine (kernels/quant_moe_decode.cuh), the shared expert
// first; the norm + router launch also computes the shared expert's gate.
// Never synchronises or allocates: graph-capturable.
#include <algorithm>

#include "backends/cuda/block_stages.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/moe.cuh"
#include "backends/cuda/kernels/quant_gemm.cuh"
#include "backends/cuda/kernels/quant_moe_decode.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"
#include "runtime/workspace.h"

namespace ferrite::cuda {
namespace {

class RoutedMoe final : public Provider {
 public:
  explicit RoutedMoe(bool shared)
      : shared_(shared),
        desc_(with_block_formats(cuda_descriptor(shared ? "cuda.routed_shared_swiglu_moe" : "cuda.routed_swiglu_moe",
                              shared ? routed_shared_swiglu_moe::contract() : routed_swiglu_moe::contract(),
                              "router product in f32, device top-k and stable sort by expert into "
                              "row tiles, grouped tensor-core expert GEMMs (bf16 / f16; SIMT for "
                              "f32, GGUF blocks), per-token combine in expert order"))) {}
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status supports(const NodeSignature& node) const override {
    FERRITE_RETURN_IF_ERROR(Provider::supports(node));
    const auto& p = node.params<routed_swiglu_moe::Params>();
    if (p.top_k < 1 || p.top_k > static_cast<uint64_t>(kMaxTopK) || p.top_k > p.num_experts)
      return unsupported("cuda routed MoE: top_k must be 1..32 and <= num_experts");
    if (p.num_experts > static_cast<uint64_t>(kMoeMaxExperts))
      return unsupported("cuda routed MoE: at most 4096 experts");
    return Status::ok();
  }

  // The workspace pieces of a step of `t` tokens (measured with the step
  // limits for workspace_bytes(), carved with the step's by encode()). The
  // tile table is sized for the smaller row tile (the larger bound), the
  // expert intermediates for the f32 path.
  struct Pieces {
    void* n;
    float *n32, *logits, *weights, *ys;
    int32_t *ids, *slot_of, *row_pair, *offsets, *tiles, *tile_count, *counts;
    void* mid;  // h [tk, I] of act, or gu [tk, 2I] f32, or 8-bit h (fused decode)
    int8_t* xq;  // the fused decode's 8-bit tokens [min(t, 32), H] and scales
    float* xd;
    float *sgate, *sout;
    void *sg, *su;
  };
  Pieces layout(Workspace& ws, const routed_swiglu_moe::Params& p, DType act, int64_t t) const {
    const int64_t e = dtype_bytes(act, 1);
    const int64_t H = i64(p.hidden_size), E = i64(p.num_experts), I = i64(p.intermediate_size);
    const int64_t tk = t * i64(p.top_k);
    Pieces s{};
    s.n = ws.take_bytes(t * H * e);
    s.n32 = ws.take<float>(t * H);
    s.logits = ws.take<float>(t * E);
    s.ids = ws.take<int32_t>(tk);
    s.weights = ws.take<float>(tk);
    s.slot_of = ws.take<int32_t>(tk);
    s.row_pair = ws.take<int32_t>(tk);
    s.offsets = ws.take<int32_t>(E + 1);
    s.tiles = static_cast<int32_t*>(ws.take_bytes(moe_max_tiles(tk, E, 16) * 16));
    s.tile_count = ws.take<int32_t>(1);
    s.counts = ws.take<int32_t>(std::max<int64_t>(moe_sort_count_ints(tk, E), 1));
    s.mid = ws.take_bytes(tk * 2 * I * 4);
    s.ys = ws.take<float>(tk * H);
    const int64_t tf = std::min<int64_t>(t, kMoeFusedMaxRows);
    s.xq = static_cast<int8_t*>(ws.take_bytes(tf * H));
    s.xd = ws.take<float>(tf * H / 32 + 1);
    if (shared_) {
      const int64_t Is = i64(p.shared_intermediate_size);
      s.sgate = ws.take<float>(t);
      s.sg = ws.take_bytes(t * Is * e);
      s.su = ws.take_bytes(t * Is * e);
      s.sout = ws.take<float>(t * H);
    }
    return s;
  }

  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<routed_swiglu_moe::Params>(), node.activation_dtype,
             limits.max_tokens);
    });
  }

  Status encode(const Invocation& inv) const override {
    using namespace routed_swiglu_moe;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t t = inv.batch->num_tokens();
    const int64_t H = i64(p.hidden_size), E = i64(p.num_experts), K = i64(p.top_k);
    const int64_t I = i64(p.intermediate_size);
    const int64_t tk = t * K;
    if (t == 0) return Status::ok();
    BackendState& st = state(inv);
    // bf16 / f16 with matching expert weights: tensor-core expert GEMMs on
    // the normalised rows rounded to the activation type (the dense path's
    // rounding points); otherwise the SIMT products on f32 rows.
    bool tc = moe_mma_supported(act, b[kGateUp].dtype, b[kDown].dtype, H, I);
    // Block-format experts in a large eager step (prefill; Tuning::
    // cuda_moe_dequant): every expert dequantized to act into st.dequant
    // (one pass over the blocks, about 2 bytes written per weight), then the
    // grouped tensor-core GEMMs of bf16 experts. A step that cannot have the
    // buffer (capturing, no memory) keeps the per-row block products.
    const void* gate_up_w = b[kGateUp].data;
    const void* down_w = b[kDown].data;
    // (The intended threshold, 512 tokens: below about that the per-row
    // block products read less than dequantizing every expert writes.)
    if (!tc && st.moe_dequant > 0 && !st.capturing && t >= st.moe_dequant &&
        dtype_is_quantized(b[kGateUp].dtype) && dtype_is_quantized(b[kDown].dtype) &&
        moe_mma_supported(act, act, act, H, I)) {
      const int64_t e = dtype_bytes(act, 1);
      const int64_t gu_bytes = E * 2 * I * H * e, down_bytes = E * H * I * e;
      FERRITE_ASSIGN_OR_RETURN(bool room, ensure_dequant_capacity(st, gu_bytes + down_bytes));
      if (room) {
        profile_mark(st.stream, "moe.dequant", st.capturing);
        auto* buf = static_cast<char*>(st.dequant);
        FERRITE_RETURN_IF_ERROR(launch_quant_dequant_rows(st.stream, b[kGateUp].data,
                                                          b[kGateUp].dtype, H, 0, E * 2 * I, buf,
                                                          act));
        FERRITE_RETURN_IF_ERROR(launch_quant_dequant_rows(st.stream, b[kDown].data,
                                                          b[kDown].dtype, I, 0, E * H,
                                                          buf + gu_bytes, act));
        gate_up_w = buf;
        down_w = buf + gu_bytes;
        tc = true;
      }
    }
    // FP8 experts otherwise (Tuning::cuda_moe_mma_fp8), and 4-bit experts in
    // steps of at least Tuning::cuda_moe_mma_u4 tokens (fewer: the fused
    // dp4a decode launches): the same grouped tensor-core GEMMs reading the
    // blocks, converted to act in shared memory stage by stage (bitwise the
    // dequantized path), at any step size that takes 16-row tiles, captured
    // decode steps included.
    DType experts_dt = act;
    const DType gu_dt = b[kGateUp].dtype;
    const int row_tile = moe_row_tile(tk, E);
    const bool blocks_wanted = gu_dt == DType::kF8B128 ? st.moe_mma_fp8
                               : gu_dt == DType::kU4G128
                                   ? st.moe_mma_u4 > 0 && t >= st.moe_mma_u4
                                   : false;
    if (!tc && blocks_wanted &&
        moe_mma_blocks_supported(act, gu_dt, b[kDown].dtype, H, I, row_tile)) {
      experts_dt = gu_dt;
      tc = true;
    }
    const int64_t max_tiles = moe_max_tiles(tk, E, row_tile);

    Workspace ws(inv);
    const Pieces sc = layout(ws, p, act, t);
    FERRITE_RETURN_IF_ERROR(ws.status(desc_.name));
    void* n = sc.n;
    float* n32 = sc.n32;
    float* logits = sc.logits;
    int32_t* ids = sc.ids;
    float* weights = sc.weights;
    int32_t* slot_of = sc.slot_of;
    int32_t* row_pair = sc.row_pair;
    int32_t* offsets = sc.offsets;
    int32_t* tiles = sc.tiles;
    int32_t* tile_count = sc.tile_count;
    int32_t* counts = sc.counts;
    void* mid = sc.mid;
    float* ys = sc.ys;

    // Decode-sized steps: fewer launches (the results are the same).
    const bool fuse = t <= st.moe_fused_tokens && t <= kMoeFusedMaxRows;
    const bool fuse_router = fuse && !dtype_is_quantized(b[kRouter].dtype) &&
                             moe_norm_router_supported(H, b[kRouter].data, b[kRouter].dtype);
    const bool fuse_route = fuse && tk <= kMoeSortSmallPairs;
    // ... and the shared expert gate as one more output of the norm + router
    // launch (a one-output router of the same weight type).
    bool gate_in_router = false;
    if (shared_) {
      const TensorView& g = b[routed_shared_swiglu_moe::kSharedExpertGate];
      gate_in_router = fuse_router && g.dtype == b[kRouter].dtype &&
                       (reinterpret_cast<uintptr_t>(g.data) & 15) == 0;
    }
    // Block-format experts on 8-bit activations: x quantized by the norm +
    // router launch, h (8-bit) in the expert intermediates' room.
    // (Their own workspace piece, not st.q8_x: the shared expert's products
    // may quantize into that between the norm and the experts.)
    const bool fuse_experts = fuse_router && !tc && st.quant_dot &&
                              quant_moe_decode_supported(b[kGateUp].dtype, b[kDown].dtype, H, I);

    // f32 logits [t, e] of the normalised rows (n32) against weights w [e, H]
    // of any format: the router's and the shared expert gate's (one output):
    // blocks on the dequantized rows, never 8-bit activations, so that no
    // rounding can flip a routing decision (GGUF files keep the router f32;
    // the conformance suite quantizes it); float weights through the router
    // GEMV up to kMoeRouterMaxRows rows (the general GEMM's SIMT fallback
    // took 120 us for the one-output gate at one token), gemm() beyond.
    auto logits_of = [&](const void* w, DType w_dt, int64_t e, float* out) -> Status {
      if (dtype_is_quantized(w_dt))
        return launch_quant_gemm(st.stream, n32, DType::kF32, t, H, w, w_dt, e, out, DType::kF32,
                                 false, nullptr, DType::kF32);
      if (t <= kMoeRouterMaxRows) return launch_moe_router(st.stream, n32, t, H, w, w_dt, e, out);
      return gemm(st, n32, DType::kF32, t, H, w, w_dt, e, out, DType::kF32, false);
    };

    profile_mark(st.stream, "moe.router", st.capturing);
    // The router reads the normalised rows in f32 (as the reference: no
    // rounding that could flip a routing decision); the tensor-core experts
    // and the shared expert read them rounded to the activation type.
    void* n_act = (tc || shared_) ? n : nullptr;
    // The shared expert's gate logit [t] (f32).
    float* sgate = shared_ ? sc.sgate : nullptr;
    // Routing + sort in the norm + router launch itself (Tuning::
    // cuda_moe_route_in_router): one launch fewer.
    const bool route_in_router = fuse_router && fuse_route && st.moe_route_in_router &&
                                 st.moe_route_counter &&
                                 moe_norm_router_route_supported(t, H, E, K);
    // The fused decode experts read the tile table, not the offsets: the
    // one-warp routing (up to 32 pairs, in either launch) skips them.
    int32_t* route_offsets = fuse_experts && tk <= 32 ? nullptr : offsets;
    if (fuse_router) {
      MoeRouteSortArgs route;
      route.top_k = K;
      route.normalize = p.normalize_topk;
      route.row_tile = row_tile;
      route.ids = ids;
      route.weights = weights;
      route.offsets = route_offsets;
      route.slot_of = slot_of;
      route.row_pair = row_pair;
      route.tiles = tiles;
      route.tile_count = tile_count;
      route.counter = st.moe_route_counter;
      FERRITE_RETURN_IF_ERROR(launch_moe_norm_router(
          st.stream, b[kHidden].data, act, n32, n_act, b[kNorm].data, b[kNorm].dtype, t, H,
          static_cast<float>(p.eps), p.zero_centred, fuse_experts ? sc.xq : nullptr,
          fuse_experts ? sc.xd : nullptr, b[kRouter].data, b[kRouter].dtype, E, logits,
          gate_in_router ? b[routed_shared_swiglu_moe::kSharedExpertGate].data : nullptr,
          gate_in_router ? sgate : nullptr, route_in_router ? &route : nullptr,
          st.pdl_trigger_small));
    } else {
      FERRITE_RETURN_IF_ERROR(launch_moe_norm(st.stream, b[kHidden].data, act, n32, n_act,
                                              b[kNorm].data, b[kNorm].dtype, t, H,
                                              static_cast<float>(p.eps), p.zero_centred));
      FERRITE_RETURN_IF_ERROR(logits_of(b[kRouter].data, b[kRouter].dtype, E, logits));
    }
    // Routing inside the fused gate / up launch (Tuning::
    // cuda_moe_route_in_experts): one launch fewer between the router and
    // the experts at one token.
    const bool route_in_experts =
        fuse_experts && fuse_route && !route_in_router && st.moe_route_in_experts &&
        quant_moe_route_in_experts_supported(
            t, E, K, static_cast<int>(st.moe_gate_up_warp_outputs), max_tiles);
    if (route_in_router || route_in_experts) {
      // done by the router's or the experts' launch
    } else if (fuse_route) {
      FERRITE_RETURN_IF_ERROR(launch_moe_route_sort(st.stream, logits, t, E, K, p.normalize_topk,
                                                    ids, weights, row_tile, route_offsets, slot_of,
                                                    row_pair, tiles, tile_count,
                                                    st.moe_route_block));
    } else {
      FERRITE_RETURN_IF_ERROR(
          launch_moe_route(st.stream, logits, t, E, K, p.normalize_topk, ids, weights));
      FERRITE_RETURN_IF_ERROR(launch_moe_sort(st.stream, ids, tk, E, row_tile, offsets, slot_of,
                                              row_pair, tiles, tile_count, counts));
    }

    // The shared expert: its gate logit sgate [t] and output sout [t, H] f32.
    float* sout = shared_ ? sc.sout : nullptr;
    auto shared_expert = [&]() -> Status {
      using namespace routed_shared_swiglu_moe;
      const int64_t Is = i64(p.shared_intermediate_size);
      void* sg = sc.sg;
      void* su = sc.su;
      profile_mark(st.stream, "moe.shared", st.capturing);
      if (!gate_in_router)
        FERRITE_RETURN_IF_ERROR(
            logits_of(b[kSharedExpertGate].data, b[kSharedExpertGate].dtype, 1, sgate));
      // silu(gate) * up into sg (one fused launch at decode on block weights).
      FERRITE_RETURN_IF_ERROR(projections(st, n, act, t, H,
                                          {{b[kSharedGate], Is, sg}, {b[kSharedUp], Is, su}},
                                          act, /*swiglu=*/true));
      return gemm(st, sg, act, t, Is, b[kSharedDown].data, b[kSharedDown].dtype, H, sout,
                  DType::kF32, false);
    };

    if (fuse_experts) {
      // The shared expert inside the fused launches (Tuning::
      // cuda_moe_shared_in_experts): at one token its gate / up takes the
      // gate / up grid's row after the selections (blocks that otherwise
      // only route and leave) and its down product joins down + combine,
      // two weight-streaming launches fewer a layer. Its gate logit still
      // comes from the router's launch (or its own product).
      bool shared_in = false;
      if (shared_ && route_in_experts && st.moe_shared_in_experts) {
        using namespace routed_shared_swiglu_moe;
        shared_in = quant_moe_shared_in_experts_supported(
            t, I, i64(p.shared_intermediate_size), b[kGateUp].dtype, b[kDown].dtype,
            b[kSharedGate].data, b[kSharedGate].dtype, b[kSharedUp].data, b[kSharedUp].dtype,
            b[kSharedDown].data, b[kSharedDown].dtype);
      }
      if (shared_in && !gate_in_router) {
        using namespace routed_shared_swiglu_moe;
        FERRITE_RETURN_IF_ERROR(
            logits_of(b[kSharedExpertGate].data, b[kSharedExpertGate].dtype, 1, sgate));
      }
      // The shared expert first: down + combine adds it with the residual.
      if (shared_ && !shared_in) FERRITE_RETURN_IF_ERROR(shared_expert());
      profile_mark(st.stream, "moe.experts", st.capturing);
      // 8-bit h: the tk routed rows, then the shared expert's row (shared_in;
      // mid has room for 8 I bytes a routed row).
      auto* hq = static_cast<int8_t*>(mid);
      auto* hd = reinterpret_cast<float*>(hq + (tk + (shared_in ? 1 : 0)) * I);
      MoeRouteInExperts route;
      if (route_in_experts)
        route = {.logits = logits,
                 .experts = E,
                 .normalize = p.normalize_topk,
                 .ids = ids,
                 .weights = weights,
                 .slot_of = slot_of};
      const void* shared_down = nullptr;
      if (shared_in) {
        using namespace routed_shared_swiglu_moe;
        route.shared_gate = b[kSharedGate].data;
        route.shared_up = b[kSharedUp].data;
        shared_down = b[kSharedDown].data;
      }
      FERRITE_RETURN_IF_ERROR(launch_quant_moe_gate_up(
          st.stream, sc.xq, sc.xd, H, row_pair, K, gate_up_w, b[kGateUp].dtype, I, tiles,
          tile_count, max_tiles, hq, hd, static_cast<int>(st.moe_gate_up_warp_outputs), route));
      return launch_quant_moe_down_combine(st.stream, hq, hd, I, down_w, b[kDown].dtype, H, t, K,
                                           ids, slot_of, weights, sgate, sout, shared_down,
                                           b[kHidden].data, act,
                                           static_cast<int>(st.moe_down_form),
                                           st.moe_down_pdl_trigger);
    }

    profile_mark(st.stream, "moe.experts", st.capturing);
    // gate_up [E, 2, I, H] is [E, 2I, H]: rows [0, I) gate, [I, 2I) up.
    if (tc) {
      FERRITE_RETURN_IF_ERROR(launch_moe_expert_mma(st.stream, true, n, H, row_pair, K,
                                                    gate_up_w, H, I, act, row_tile, tiles,
                                                    tile_count, max_tiles, mid, I, experts_dt, E));
      FERRITE_RETURN_IF_ERROR(launch_moe_expert_mma(st.stream, false, mid, I, row_pair, K,
                                                    down_w, I, H, act, row_tile, tiles,
                                                    tile_count, max_tiles, ys, H, experts_dt, E));
    } else {
      // f32 rows; expert weights in a float type (SIMT products) or in GGUF
      // blocks (kernels/quant_gemm.cuh: 8-bit activation blocks and integer
      // dots under Tuning::cuda_quant_dot, else f32 on the dequantized blocks).
      auto* gu = static_cast<float*>(mid);
      auto experts = [&](const float* x, int64_t ldx, int64_t rows, int64_t kdim, bool by_token,
                         int idx, int64_t nout, float* out, int64_t ldo) -> Status {
        if (!dtype_is_quantized(b[idx].dtype))
          return launch_moe_expert_rows(st.stream, x, DType::kF32, ldx, by_token, K, kdim,
                                        b[idx].data, b[idx].dtype, nout, E, offsets, row_pair, out,
                                        ldo);
        bool q8 = false;
        if (st.quant_dot) {
          FERRITE_ASSIGN_OR_RETURN(q8, ensure_q8_capacity(st, rows * kdim));
        }
        return launch_quant_moe_experts(st.stream, x, ldx, rows, kdim, by_token, K, row_pair,
                                        b[idx].data, b[idx].dtype, nout, tiles, tile_count,
                                        max_tiles, out, ldo, q8 ? st.q8_x : nullptr,
                                        q8 ? st.q8_d : nullptr);
      };
      FERRITE_RETURN_IF_ERROR(experts(n32, H, t, H, true, kGateUp, 2 * I, gu, 2 * I));
      FERRITE_RETURN_IF_ERROR(launch_moe_act(st.stream, gu, tk, I));
      FERRITE_RETURN_IF_ERROR(experts(gu, 2 * I, tk, I, false, kDown, H, ys, H));
    }
    if (shared_) FERRITE_RETURN_IF_ERROR(shared_expert());
    profile_mark(st.stream, "moe.combine", st.capturing);
    return launch_moe_combine(st.stream, b[kHidden].data, act, t, H, K, slot_of, weights, ys,
                              sgate, sout);
  }

 private:
  bool shared_;
  ProviderDescriptor desc_;
};

}  // namespace

std::unique_ptr<Provider> make_routed_swiglu_moe() { return std::make_unique<RoutedMoe>(false); }
std::unique_ptr<Provider> make_routed_shared_swiglu_moe() {
  return std::make_unique<RoutedMoe>(true);
}

}  // namespace ferrite::cuda
