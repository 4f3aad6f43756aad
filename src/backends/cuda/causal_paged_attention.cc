// causal_paged_attention on CUDA: pre-norm, Q/K/V GEMMs, one kernel for
// bias + q/k norm + RoPE + paged K/V write, then attention (tensor-core
// flash prefill for runs of prompt tokens, split-KV decode otherwise), the
// output gate, and the output GEMM accumulating into the residual.
#include <algorithm>
#include <cmath>
#include <span>

#include "backends/cuda/block_stages.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/attention_decode.cuh"
#include "backends/cuda/kernels/attention_prefill.cuh"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/causal_paged_attention.h"
#include "contracts/rope.h"
#include "runtime/workspace.h"

namespace ferrite::cuda {
namespace {

constexpr int64_t kSplitBlocks = 256;  // blocks the decode kernel aims for
constexpr int64_t kMaxSplits = 64;

int splits_for(int64_t tokens, int64_t kv_heads, int64_t max_context) {
  const int64_t blocks = tokens * kv_heads;
  if (blocks >= kSplitBlocks) return 1;
  int64_t s = (kSplitBlocks + blocks - 1) / blocks;
  s = std::min<int64_t>({s, kMaxSplits, std::max<int64_t>(1, max_context / 32)});
  return static_cast<int>(std::max<int64_t>(s, 1));
}

// Splits of the fused decode kernel: a split per `per_split` positions of
// the step's length bound (Tuning::cuda_decode_split_positions, 64: one or
// two rounds of 8 warps x 8 or 4 positions; the first is loaded before the
// kernel waits for Q/K/V), while the grid has fewer than two blocks per SM;
// within the workspace's partial rows. (128 positions per split: Qwen3-0.6B
// b1 1,040 -> 990, 8B 213.8 -> 208.5.)
int fused_splits(int64_t tokens, int64_t kv_heads, int64_t kv_len_bound, int num_sms,
                 int64_t per_split) {
  per_split = std::max<int64_t>(16, per_split);
  const int64_t blocks = tokens * kv_heads;
  int64_t s = std::max<int64_t>(1, kv_len_bound / per_split);
  s = std::min<int64_t>({s, kMaxSplits, std::max<int64_t>(1, (2 * num_sms + blocks - 1) / blocks),
                         std::max<int64_t>(1, (2 * kSplitBlocks + tokens) / tokens)});
  return static_cast<int>(s);
}

class CausalPagedAttention final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status supports(const NodeSignature& node) const override {
    FERRITE_RETURN_IF_ERROR(Provider::supports(node));
    const auto& p = node.params<causal_paged_attention::Params>();
    if (p.head_dim > 256 || p.rope_dim > p.head_dim || p.rope_dim % 2)
      return unsupported("cuda.causal_paged_attention: head_dim <= 256, even rope_dim <= head_dim");
    if (p.num_kv_heads == 0 || p.num_heads % p.num_kv_heads)
      return unsupported("cuda.causal_paged_attention: heads must be a multiple of KV heads");
    return Status::ok();
  }

  // The workspace pieces of a step of `t` tokens: the normalised rows,
  // Q, K, V, the attention output and, with act-order weights, the gather
  // buffer of the permuted inputs (the decode splits' partial rows are
  // taken after them, as the step's split count needs).
  struct Pieces {
    void *n, *q, *k, *v, *attn, *perm;
  };
  static Pieces layout(Workspace& ws, const causal_paged_attention::Params& p, DType act,
                       int64_t t, bool permuted) {
    const int64_t e = dtype_bytes(act, 1);
    const int64_t hd = i64(p.head_dim), nh = i64(p.num_heads), nkv = i64(p.num_kv_heads);
    Pieces s;
    s.n = ws.take_bytes(t * i64(p.hidden_size) * e);
    s.q = ws.take_bytes(t * nh * hd * (p.output_gate ? 2 : 1) * e);
    s.k = ws.take_bytes(t * nkv * hd * e);
    s.v = ws.take_bytes(t * nkv * hd * e);
    s.attn = ws.take_bytes(t * nh * hd * e);
    s.perm = permuted ? ws.take_bytes(t * std::max(i64(p.hidden_size), nh * hd) * e) : nullptr;
    return s;
  }
  // The split partials: [rows, heads, head_dim + 2] f32.
  static float* take_partials(Workspace& ws, const causal_paged_attention::Params& p,
                              int64_t rows) {
    return ws.take<float>(rows * i64(p.num_heads) * (i64(p.head_dim) + 2));
  }

  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    const auto& p = node.params<causal_paged_attention::Params>();
    const int64_t t = limits.max_tokens;
    // The most partial rows either decode kernel takes (tokens x splits).
    const int64_t partial_rows = std::min<int64_t>(t, kSplitBlocks) * kMaxSplits;
    return measure_workspace([&](Workspace& ws) {
      layout(ws, p, node.activation_dtype, t, any_permuted(node));
      take_partials(ws, p, std::min<int64_t>(partial_rows, 2 * kSplitBlocks + t));
    });
  }

  Status encode(const Invocation& inv) const override {
    using namespace causal_paged_attention;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t t = inv.batch->num_tokens();
    const int64_t H = i64(p.hidden_size), nh = i64(p.num_heads), nkv = i64(p.num_kv_heads);
    const int64_t hd = i64(p.head_dim);
    const int64_t q_rows = nh * hd * (p.output_gate ? 2 : 1);
    const int64_t kv_rows = nkv * hd;
    if (b[kKCache].dtype != act || b[kVCache].dtype != act)
      return unsupported("cuda.causal_paged_attention: KV cache dtype must be the activation dtype");
    const int32_t page_size = static_cast<int32_t>(b[kKCache].shape[1]);
    FERRITE_RETURN_IF_ERROR(ensure_prepared(inv));
    BackendState& st = state(inv);

    AttentionShape a;
    a.num_heads = static_cast<int32_t>(nh);
    a.num_kv_heads = static_cast<int32_t>(nkv);
    a.head_dim = static_cast<int32_t>(hd);
    a.rope_dim = static_cast<int32_t>(p.rope_dim);
    a.q_stride = static_cast<int32_t>(p.output_gate ? 2 * hd : hd);
    a.q_row = static_cast<int32_t>(q_rows);
    a.qk_norm = p.qk_norm;
    a.zero_centred = p.zero_centred;
    a.output_gate = p.output_gate;
    a.eps = static_cast<float>(p.eps);
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // supports(): head_dim <= 256, so the rope_dim / 2 frequencies fit.
    rope_inv_freq(p, std::span<float>(a.inv_freq, static_cast<size_t>(p.rope_dim / 2)));

    Workspace ws(inv);
    const Pieces sc = layout(ws, p, act, t, any_permuted(*inv.signature));
    FERRITE_RETURN_IF_ERROR(ws.status("cuda.causal_paged_attention"));
    FERRITE_ASSIGN_OR_RETURN(const InputPerm o_perm, input_perm_of(b[kOProj], H, sc.perm));
    void* q = sc.q;
    void* k = sc.k;
    void* v = sc.v;
    void* attn = sc.attn;

    // The decode kernels, decided before the projections: with the cluster
    // kernel (short contexts, Tuning::cuda_decode_cluster) the GEMVs may
    // leave room for its blocks (Tuning::cuda_decode_colocate).
    const bool fused_decode = st.meta.longest_run == 1 && attention_decode_fused_supported(a, act);
    const int csplits = fused_decode && st.decode_cluster
                            ? attention_decode_cluster_splits(a, act, t, st.meta.kv_len_bound)
                            : 0;
    // Colocation 2: this layer's Q/K/V and output projections leave room
    // for one of its blocks (head_dim up to 128: the room
    // attention_decode_cluster_room() is sized for), at one token, when its
    // Q/K/V weights are long enough to pay for the room (Tuning::
    // cuda_decode_colocate_min_mib; reset on every return).
    struct BesideAttention {
      bool& flag;
      ~BesideAttention() { flag = false; }
    } beside{st.gemv_beside_attention};
    beside.flag = st.decode_colocate >= 2 && t == 1 && csplits > 0 && hd <= 128 &&
                  colocation_pays(q_rows * dtype_bytes(b[kQProj].dtype, H) +
                                      kv_rows * dtype_bytes(b[kKProj].dtype, H) +
                                      kv_rows * dtype_bytes(b[kVProj].dtype, H),
                                  st.decode_colocate_min_mib);
    profile_mark(st.stream, "attention.qkv", st.capturing);
    FERRITE_RETURN_IF_ERROR(normed_projections(
        st, b[kHidden].data, act, t, H, b[kInputNorm], a.eps, p.zero_centred, sc.n,
        {{b[kQProj], q_rows, q}, {b[kKProj], kv_rows, k}, {b[kVProj], kv_rows, v}}, act,
        /*swiglu=*/false, sc.perm));
    const DType norm_dt = b[kQNorm].data ? b[kQNorm].dtype : b[kInputNorm].dtype;
    const DType bias_dt = b[kQBias].data ? b[kQBias].dtype : norm_dt;
    if (fused_decode) {
      // Decode step: norm / RoPE / K/V write and attention in one kernel.
      profile_mark(st.stream, "attention.core", st.capturing);
      const DecodeAttentionIo io{.meta = st.meta,
                                 .page_size = page_size,
                                 .tokens = t,
                                 .q = q,
                                 .k = k,
                                 .v = v,
                                 .act = act,
                                 .q_norm = p.qk_norm ? b[kQNorm].data : nullptr,
                                 .k_norm = p.qk_norm ? b[kKNorm].data : nullptr,
                                 .norm_dt = norm_dt,
                                 .q_bias = b[kQBias].data,
                                 .k_bias = b[kKBias].data,
                                 .v_bias = b[kVBias].data,
                                 .bias_dt = bias_dt,
                                 .k_cache = b[kKCache].data,
                                 .v_cache = b[kVCache].data,
                                 .out = attn};
      // Short contexts: the cluster kernel.
      if (csplits > 0) {
        FERRITE_RETURN_IF_ERROR(
            launch_attention_decode_cluster(st.stream, a, io, csplits, /*pdl=*/true,
                                            {.max_carveout = st.decode_colocate >= 1,
                                             .knobs = st.decode_cluster_knobs,
                                             .trace = st.cluster_trace}));
        profile_mark(st.stream, "attention.o_proj", st.capturing);
        return gemm(st, attn, act, t, nh * hd, b[kOProj].data, b[kOProj].dtype, H,
                    b[kHidden].data, act, true, nullptr, DType::kF32, o_perm);
      }
      if (st.decode_mma_tokens > 0 && t >= st.decode_mma_tokens &&
          attention_decode_mma_supported(a, act)) {
        // Larger steps: the tensor-core kernel (a block per KV head holds
        // its whole group), splits merged by the combine launch.
        const int msplits = fused_splits(t, nkv, st.meta.kv_len_bound, st.num_sms,
                                         st.decode_split_positions);
        float* mpartials = nullptr;
        if (msplits > 1) {
          mpartials = take_partials(ws, p, t * msplits);
          FERRITE_RETURN_IF_ERROR(ws.status("cuda.causal_paged_attention: decode splits"));
        }
        FERRITE_RETURN_IF_ERROR(
            launch_attention_decode_mma(st.stream, a, io, msplits, mpartials, /*pdl=*/false));
        profile_mark(st.stream, "attention.o_proj", st.capturing);
        return gemm(st, attn, act, t, nh * hd, b[kOProj].data, b[kOProj].dtype, H,
                    b[kHidden].data, act, true, nullptr, DType::kF32, o_perm);
      }
      const int splits = fused_splits(t, nkv * fused_decode_parts(static_cast<int>(nh / nkv)),
                                      st.meta.kv_len_bound, st.num_sms,
                                      st.decode_split_positions);
      float* partials = nullptr;
      if (splits > 1) {
        partials = take_partials(ws, p, t * splits);
        FERRITE_RETURN_IF_ERROR(ws.status("cuda.causal_paged_attention: decode splits"));
      }
      FERRITE_RETURN_IF_ERROR(launch_attention_decode_fused(
          st.stream, a, io, splits, partials, st.split_counters, kSplitCounters,
          /*pdl=*/t <= 8, st.decode_reduce_scatter));
      profile_mark(st.stream, "attention.o_proj", st.capturing);
      return gemm(st, attn, act, t, nh * hd, b[kOProj].data, b[kOProj].dtype, H, b[kHidden].data,
                  act, true, nullptr, DType::kF32, o_perm);
    }
    profile_mark(st.stream, "attention.rope_kv", st.capturing);
    FERRITE_RETURN_IF_ERROR(launch_qk_rope_kv(
        st.stream, a, st.meta, page_size, t, q, k, v, act, p.qk_norm ? b[kQNorm].data : nullptr,
        p.qk_norm ? b[kKNorm].data : nullptr, norm_dt, b[kQBias].data, b[kKBias].data,
        b[kVBias].data, bias_dt, b[kKCache].data, b[kVCache].data, st.rope_token_warps));

    profile_mark(st.stream, "attention.core", st.capturing);
    if (st.meta.longest_run >= 16 && attention_prefill_supported(a, act) && !st.capturing) {
      // Query tiles come with the step's metadata (see StepMeta).
      const int32_t* d_seq = st.meta.tile_seq;
      const int32_t* d_row = st.meta.tile_row;
      const int64_t tiles = st.meta.num_tiles;
      FERRITE_RETURN_IF_ERROR(launch_attention_prefill(st.stream, a, st.meta, page_size, d_seq,
                                                       d_row, tiles, t, q, act, b[kKCache].data,
                                                       b[kVCache].data, attn,
                                                       st.prefill_short_tiles));
    } else {
      const int splits =
          splits_for(t, nkv, std::min<int64_t>(i64(p.max_context), st.meta.kv_len_bound));
      float* partials = nullptr;
      if (splits > 1) {
        partials = take_partials(ws, p, t * splits);
        FERRITE_RETURN_IF_ERROR(ws.status("cuda.causal_paged_attention: decode splits"));
      }
      FERRITE_RETURN_IF_ERROR(launch_attention_decode(st.stream, a, st.meta, page_size, t, q,
                                                      act, b[kKCache].data, b[kVCache].data,
                                                      attn, splits, partials));
    }
    profile_mark(st.stream, "attention.o_proj", st.capturing);
    return gemm(st, attn, act, t, nh * hd, b[kOProj].data, b[kOProj].dtype, H, b[kHidden].data,
                act, true, nullptr, DType::kF32, o_perm);
  }

 private:
  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(cuda_descriptor(
      "cuda.causal_paged_attention", causal_paged_attention::contract(),
      "GEMM projections, fused norm/RoPE/KV write, flash prefill, split-KV decode",
      /*paged_kv=*/true)));
};

}  // namespace

std::unique_ptr<Provider> make_causal_paged_attention() {
  return std::make_unique<CausalPagedAttention>();
}

}  // namespace ferrite::cuda
