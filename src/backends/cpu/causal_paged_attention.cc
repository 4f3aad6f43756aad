// causal_paged_attention on CPU.
//
// Reference: token by token, head by head, in the order the contract states
// it (norm, projections, q/k norms, RoPE, KV write, softmax attention, gate,
// output projection, residual). Per sequence, every K/V of the step is
// written before any query attends, so a token sees exactly the positions
// <= its own.
//
// Fast: the projections of all tokens of all sequences are single GEMMs on
// the stored weights; norms, RoPE and the KV write run per token in
// parallel; attention runs one (token, head) pair per work item with a
// softmax over the token's own causal span, each item computed by one thread
// in a fixed order (so results do not depend on the batch or thread count).
#include "contracts/causal_paged_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "backends/cpu/block_stages.h"
#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/fast_util.h"
#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/vec.h"
#include "backends/cpu/reference_math.h"
#include "contracts/rope.h"
#include "runtime/workspace.h"

namespace ferrite::cpu {
namespace {

class CausalPagedAttentionReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status encode(const Invocation& inv) const override {
    using namespace causal_paged_attention;
    const Params& p = inv.signature->params<Params>();
    const int64_t H = static_cast<int64_t>(p.hidden_size);
    const int64_t nh = static_cast<int64_t>(p.num_heads);
    const int64_t nkv = static_cast<int64_t>(p.num_kv_heads);
    const int64_t hd = static_cast<int64_t>(p.head_dim);
    const int64_t q_rows = nh * hd * (p.output_gate ? 2 : 1);
    const int64_t group = nh / nkv;
    const std::vector<float> inv_freq = rope_inv_freq(p);
    const auto& b = inv.bindings;
    const TensorView& kc = b[kKCache];
    const TensorView& vc = b[kVCache];
    const int64_t page_size = kc.shape[1];
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    float* partial = b.size() > kPartialOut && b[kPartialOut].data ? b[kPartialOut].as<float>() : nullptr;

    std::vector<float> n(H), qfull(q_rows), k(nkv * hd), v(nkv * hd), attn(nh * hd), out(H);
    for (const SequenceSlice& seq : inv.batch->sequences) {
      std::vector<float> q(seq.token_count * nh * hd), gate(seq.token_count * nh * hd);
      // 1. Projections, norms, RoPE, KV write for every token of the step.
      for (int32_t j = 0; j < seq.token_count; ++j) {
        const int64_t t = seq.token_begin + j;
        const int64_t pos = seq.position_start + j;
        ref::rms_norm(hidden + t * H, b[kInputNorm], H, p.eps, p.zero_centred, n.data());
        ref::matvec(n.data(), b[kQProj], H, q_rows, qfull.data(), &b[kQBias]);
        ref::matvec(n.data(), b[kKProj], H, nkv * hd, k.data(), &b[kKBias]);
        ref::matvec(n.data(), b[kVProj], H, nkv * hd, v.data(), &b[kVBias]);
        for (int64_t h = 0; h < nh; ++h) {
          float* qh = &q[(j * nh + h) * hd];
          const float* src = p.output_gate ? &qfull[h * 2 * hd] : &qfull[h * hd];
          for (int64_t d = 0; d < hd; ++d) qh[d] = src[d];
          if (p.output_gate)
            for (int64_t d = 0; d < hd; ++d) gate[(j * nh + h) * hd + d] = src[hd + d];
          if (p.qk_norm) ref::rms_norm(qh, b[kQNorm], hd, p.eps, p.zero_centred, qh);
          apply_rope(qh, pos, inv_freq);
        }
        for (int64_t h = 0; h < nkv; ++h) {
          float* kh = &k[h * hd];
          if (p.qk_norm) ref::rms_norm(kh, b[kKNorm], hd, p.eps, p.zero_centred, kh);
          apply_rope(kh, pos, inv_freq);
        }
        const int64_t page = seq.block_table[pos / page_size];
        const int64_t base = (page * page_size + pos % page_size) * nkv * hd;
        for (int64_t i = 0; i < nkv * hd; ++i) {
          store_from_f32(kc.data, kc.dtype, base + i, k[i]);
          store_from_f32(vc.data, vc.dtype, base + i, v[i]);
        }
      }
      // 2. Attention over cached positions <= own, gate, output, residual.
      for (int32_t j = 0; j < seq.token_count; ++j) {
        const int64_t t = seq.token_begin + j;
        const int64_t last = seq.position_start + j;
        for (int64_t h = 0; h < nh; ++h) {
          const float* qh = &q[(j * nh + h) * hd];
          const int64_t kvh = h / group;
          std::vector<double> scores(last + 1);
          double mx = -INFINITY;
          for (int64_t pos = 0; pos <= last; ++pos) {
            const int64_t page = seq.block_table[pos / page_size];
            const int64_t base = ((page * page_size + pos % page_size) * nkv + kvh) * hd;
            double s = 0;
            for (int64_t d = 0; d < hd; ++d)
              s += qh[d] * static_cast<double>(weight_at(kc, base + d));
            scores[pos] = s * scale;
            mx = std::max(mx, scores[pos]);
          }
          double sum = 0;
          for (double& s : scores) sum += (s = std::exp(s - mx));
          float* oh = &attn[h * hd];
          for (int64_t d = 0; d < hd; ++d) {
            double acc = 0;
            for (int64_t pos = 0; pos <= last; ++pos) {
              const int64_t page = seq.block_table[pos / page_size];
              const int64_t base = ((page * page_size + pos % page_size) * nkv + kvh) * hd;
              acc += scores[pos] * weight_at(vc, base + d);
            }
            oh[d] = static_cast<float>(acc / sum);
            if (p.output_gate) oh[d] *= ref::sigmoid(gate[(j * nh + h) * hd + d]);
          }
        }
        ref::matvec(attn.data(), b[kOProj], nh * hd, H, out.data());
        for (int64_t i = 0; i < H; ++i)
          if (partial)
            partial[t * H + i] = out[i];
          else
            hidden[t * H + i] += out[i];
      }
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      with_input_permutation(with_block_formats(cpu_descriptor("cpu.reference.causal_paged_attention", causal_paged_attention::contract(),
                     kReferencePriority, "scalar, paged KV", /*paged_kv=*/true)));
};

class CausalPagedAttentionFast final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  // The workspace pieces of a step of `tokens` tokens with up to `parts`
  // attention work ranges of `part_floats` each (the scores row, or the
  // tiled kernel's scratch, of the step's longest causal span). Measured
  // with the step limits for workspace_bytes(), carved with the step's
  // sizes by encode().
  // An attention tile (kernels/attention.h) of the tiled path.
  struct TileItem {
    int32_t seq, kvh, first;  // first query: token offset * group + head in group
    int32_t span;             // the last position the tile attends
  };
  struct Pieces {
    float *inv_freq, *n, *q, *k, *v, *attn, *per_part;
    int32_t* token_seq;
    TileItem* tiles;  // at most one per (token, head): a tile has >= 1 query
  };
  static Pieces layout(Workspace& ws, const causal_paged_attention::Params& p, int64_t tokens,
                       int64_t parts, int64_t part_floats) {
    const int64_t hd = static_cast<int64_t>(p.head_dim);
    const int64_t q_rows = static_cast<int64_t>(p.num_heads) * hd * (p.output_gate ? 2 : 1);
    const int64_t kv_rows = static_cast<int64_t>(p.num_kv_heads) * hd;
    Pieces s;
    s.inv_freq = ws.take<float>(static_cast<int64_t>(p.rope_dim / 2));
    s.n = ws.take<float>(tokens * static_cast<int64_t>(p.hidden_size));
    s.q = ws.take<float>(tokens * q_rows);
    s.k = ws.take<float>(tokens * kv_rows);
    s.v = ws.take<float>(tokens * kv_rows);
    s.attn = ws.take<float>(tokens * static_cast<int64_t>(p.num_heads) * hd);
    s.token_seq = ws.take<int32_t>(tokens);
    s.tiles = ws.take<TileItem>(tokens * static_cast<int64_t>(p.num_heads));
    s.per_part = ws.take<float>(parts * part_floats);
    return s;
  }

  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    const auto& p = node.params<causal_paged_attention::Params>();
    const int64_t part_floats =
        std::max(limits.max_context + static_cast<int64_t>(p.head_dim),
                 attention_tile_scratch_floats(limits.max_context));
    return measure_workspace([&](Workspace& ws) {
      layout(ws, p, limits.max_tokens, planned_threads(limits), part_floats);
    });
  }

  Status encode(const Invocation& inv) const override {
    using namespace causal_paged_attention;
    const Params& p = inv.signature->params<Params>();
    const int64_t H = static_cast<int64_t>(p.hidden_size);
    const int64_t nh = static_cast<int64_t>(p.num_heads);
    const int64_t nkv = static_cast<int64_t>(p.num_kv_heads);
    const int64_t hd = static_cast<int64_t>(p.head_dim);
    const int64_t q_rows = nh * hd * (p.output_gate ? 2 : 1);
    const int64_t q_stride = p.output_gate ? 2 * hd : hd;  // per head in the q rows
    const int64_t kv_rows = nkv * hd;
    const int64_t group = nh / nkv;
    const int64_t tokens = inv.batch->num_tokens();
    const float eps = static_cast<float>(p.eps);
    ThreadPool* pool = inv.ctx->pool;
    const auto& b = inv.bindings;
    const TensorView& kc = b[kKCache];
    const TensorView& vc = b[kVCache];
    const int64_t page_size = kc.shape[1];
    const int64_t kv_row_bytes = dtype_bytes(kc.dtype, kv_rows);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    int64_t max_context = 0;
    for (const SequenceSlice& seq : inv.batch->sequences)
      max_context = std::max<int64_t>(max_context, seq.position_start + seq.token_count);
    // One scores row per part; the workspace was sized for the planned
    // thread count, so never use more parts than it holds (a first pass
    // without the rows measures what is left for them).
    const bool tiled = attention_tile_supports(kc.dtype, hd) && kc.dtype == vc.dtype;
    const int64_t part_floats =
        tiled ? attention_tile_scratch_floats(max_context) : max_context + hd;
    Workspace probe(inv);
    layout(probe, p, tokens, 0, part_floats);
    const int64_t parts = std::min<int64_t>(
        {pool ? pool->size() : 1, tokens * nh, probe.remaining<float>() / part_floats});
    if (parts < 1) return internal_error("attention workspace smaller than one scores row");
    Workspace ws(inv);
    const Pieces sc = layout(ws, p, tokens, parts, part_floats);
    FERRITE_RETURN_IF_ERROR(ws.status("cpu.fast.causal_paged_attention"));
    float* n = sc.n;
    float* q = sc.q;
    float* k = sc.k;
    float* v = sc.v;
    float* attn = sc.attn;
    float* per_part = sc.per_part;
    int32_t* token_seq = sc.token_seq;
    // The inverse frequencies of these attributes, in the workspace.
    const std::span<const float> inv_freq(sc.inv_freq, static_cast<size_t>(p.rope_dim / 2));
    rope_inv_freq(p, std::span<float>(sc.inv_freq, inv_freq.size()));

    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    float* partial = b.size() > kPartialOut && b[kPartialOut].data ? b[kPartialOut].as<float>() : nullptr;
    normed_projections(hidden, tokens, H, b[kInputNorm], eps, p.zero_centred, n,
                       {{b[kQProj], q_rows, q}, {b[kKProj], kv_rows, k}, {b[kVProj], kv_rows, v}},
                       pool);
    if (p.attention_bias) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < q_rows; ++i) q[t * q_rows + i] += weight_at(b[kQBias], i);
        for (int64_t i = 0; i < kv_rows; ++i) {
          k[t * kv_rows + i] += weight_at(b[kKBias], i);
          v[t * kv_rows + i] += weight_at(b[kVBias], i);
        }
      }
    }

    // Token -> (sequence, position) for the per-token stages.
    for (int32_t s = 0; s < inv.batch->num_sequences(); ++s) {
      const SequenceSlice& seq = inv.batch->sequences[s];
      for (int32_t j = 0; j < seq.token_count; ++j) token_seq[seq.token_begin + j] = s;
    }
    auto position_of = [&](int64_t t) {
      const SequenceSlice& seq = inv.batch->sequences[token_seq[t]];
      return static_cast<int64_t>(seq.position_start) + (t - seq.token_begin);
    };
    auto kv_row = [&](const TensorView& cache, const SequenceSlice& seq, int64_t pos) {
      const int64_t page = seq.block_table[pos / page_size];
      return static_cast<char*>(cache.data) + (page * page_size + pos % page_size) * kv_row_bytes;
    };

    // q/k norms, RoPE, KV write: independent per token.
    auto per_token = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t pos = position_of(t);
        for (int64_t h = 0; h < nh; ++h) {
          float* qh = q + t * q_rows + h * q_stride;
          if (p.qk_norm)
            rms_norm_row(qh, b[kQNorm].data, b[kQNorm].dtype, hd, eps, p.zero_centred, qh);
          apply_rope(qh, pos, inv_freq);
        }
        for (int64_t h = 0; h < nkv; ++h) {
          float* kh = k + t * kv_rows + h * hd;
          if (p.qk_norm)
            rms_norm_row(kh, b[kKNorm].data, b[kKNorm].dtype, hd, eps, p.zero_centred, kh);
          apply_rope(kh, pos, inv_freq);
        }
        const SequenceSlice& seq = inv.batch->sequences[token_seq[t]];
        store_row(k + t * kv_rows, kc.dtype, kv_rows, kv_row(kc, seq, pos));
        store_row(v + t * kv_rows, vc.dtype, kv_rows, kv_row(vc, seq, pos));
      }
    };
    if (pool)
      pool->parallel_for(tokens, per_token, 4);
    else
      per_token(0, tokens);

    if (tiled) {
      // Attention tiles (kernels/attention.h): up to kAttentionTileQueries
      // queries of one KV head, the group's heads at consecutive tokens of
      // one sequence; every query's result is the per-(token, head) loop's,
      // bit for bit. Items longest span first, claimed dynamically.
      TileItem* work = sc.tiles;
      int64_t work_size = 0;
      for (int32_t s = 0; s < inv.batch->num_sequences(); ++s) {
        const SequenceSlice& seq = inv.batch->sequences[s];
        const int32_t nq = seq.token_count * static_cast<int32_t>(group);
        for (int32_t h = 0; h < nkv; ++h)
          for (int32_t f0 = 0; f0 < nq; f0 += kAttentionTileQueries) {
            const int32_t lastq = std::min(nq, f0 + kAttentionTileQueries) - 1;
            work[work_size++] = {s, h, f0,
                                 seq.position_start + lastq / static_cast<int32_t>(group)};
          }
      }
      // Longest span first, ties in the order made (sequence, KV head, first
      // query): the order a stable sort by span gives, without its buffer.
      std::sort(work, work + work_size, [](const TileItem& a, const TileItem& b) {
        if (a.span != b.span) return a.span > b.span;
        if (a.seq != b.seq) return a.seq < b.seq;
        if (a.kvh != b.kvh) return a.kvh < b.kvh;
        return a.first < b.first;
      });
      std::atomic<int64_t> next{0};
      auto run_part = [&](int64_t part) {
        float* scores = per_part + part * part_floats;
        for (int64_t i = next.fetch_add(1); i < work_size; i = next.fetch_add(1)) {
          const TileItem& it = work[i];
          const SequenceSlice& seq = inv.batch->sequences[it.seq];
          const int32_t nq_seq = seq.token_count * static_cast<int32_t>(group);
          const int nq = std::min<int32_t>(kAttentionTileQueries, nq_seq - it.first);
          const float* qp[kAttentionTileQueries];
          float* op[kAttentionTileQueries];
          int64_t last[kAttentionTileQueries];
          for (int j = 0; j < nq; ++j) {
            const int64_t t = seq.token_begin + (it.first + j) / group;
            const int64_t h = it.kvh * group + (it.first + j) % group;
            qp[j] = q + t * q_rows + h * q_stride;
            op[j] = attn + t * nh * hd + h * hd;
            last[j] = seq.position_start + (it.first + j) / group;
          }
          const int64_t head_off = dtype_bytes(kc.dtype, it.kvh * hd);
          const PagedRows kr{static_cast<const char*>(kc.data), seq.block_table.data(), page_size,
                             kv_row_bytes, head_off};
          const PagedRows vr{static_cast<const char*>(vc.data), seq.block_table.data(), page_size,
                             kv_row_bytes, head_off};
          attention_tile(nq, qp, last, op, kr, vr, kc.dtype, hd, scale, scores);
          if (p.output_gate)
            for (int j = 0; j < nq; ++j)
              for (int64_t d = 0; d < hd; ++d) op[j][d] *= ref::sigmoid(qp[j][hd + d]);
        }
      };
      if (pool && parts > 1) {
        pool->parallel_for(parts, [&](int64_t a, int64_t z) {
          for (int64_t part = a; part < z; ++part) run_part(part);
        });
      } else {
        run_part(0);
      }
    }

    // Attention: one (token, head) per item; items split in `parts` ranges.
    const int64_t items = tokens * nh;
    auto attend = [&](int64_t part) {
      float* scores = per_part + part * (max_context + hd);
      float* acc = scores + max_context;
      const int64_t i0 = items * part / parts, i1 = items * (part + 1) / parts;
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t t = item / nh, h = item % nh;
        const SequenceSlice& seq = inv.batch->sequences[token_seq[t]];
        const int64_t last = position_of(t);
        const int64_t kvh = h / group;
        const float* qh = q + t * q_rows + h * q_stride;
        for (int64_t pos = 0; pos <= last; ++pos)
          scores[pos] = scale * dot_row(qh, kv_row(kc, seq, pos) + dtype_bytes(kc.dtype, kvh * hd),
                                        kc.dtype, hd);
        const float m = max_f32(scores, last + 1);
        const float sum = exp_sub_sum_inplace(scores, last + 1, m);
        std::fill_n(acc, hd, 0.0f);
        for (int64_t pos = 0; pos <= last; ++pos)
          axpy_row(scores[pos], kv_row(vc, seq, pos) + dtype_bytes(vc.dtype, kvh * hd), vc.dtype,
                   acc, hd);
        float* out = attn + t * nh * hd + h * hd;
        const float inv_sum = 1.0f / sum;
        for (int64_t d = 0; d < hd; ++d) out[d] = acc[d] * inv_sum;
        if (p.output_gate)
          for (int64_t d = 0; d < hd; ++d) out[d] *= ref::sigmoid(qh[hd + d]);
      }
    };
    if (tiled) {
    } else if (pool && parts > 1) {
      pool->parallel_for(parts, [&](int64_t a, int64_t z) {
        for (int64_t part = a; part < z; ++part) attend(part);
      });
    } else {
      for (int64_t part = 0; part < parts; ++part) attend(part);
    }
    output_projection(attn, tokens, nh * hd, b[kOProj], H, hidden, partial, pool);
    return Status::ok();
  }

 private:
  static void store_row(const float* src, DType dt, int64_t n, void* dst) {
    switch (dt) {
      case DType::kF32:
        std::copy_n(src, n, static_cast<float*>(dst));
        return;
      case DType::kBF16:
        f32_to_bf16_row(src, static_cast<uint16_t*>(dst), n);
        return;
      case DType::kF16:
        f32_to_f16_row(src, static_cast<uint16_t*>(dst), n);
        return;
      case DType::kF8E4M3:
      case DType::kU8:
      case DType::kU32:
      case DType::kI32:
      case DType::kI64:
      case DType::kQ8_0:
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ6_K:
      case DType::kQ4_0:
      case DType::kF8B128:
      case DType::kU4G128:
        break;
    }
    FERRITE_CHECK(false) << "KV cache dtype " << dtype_name(dt);
  }

  ProviderDescriptor desc_ =
      with_input_permutation(with_block_formats(cpu_descriptor("cpu.fast.causal_paged_attention", causal_paged_attention::contract(), kFastPriority,
                     "GEMM projections, per-head SIMD attention, paged KV",
                     /*paged_kv=*/true)));
};

}  // namespace

std::unique_ptr<Provider> make_causal_paged_attention_reference() {
  return std::make_unique<CausalPagedAttentionReference>();
}

std::unique_ptr<Provider> make_causal_paged_attention_fast() {
  return std::make_unique<CausalPagedAttentionFast>();
}

}  // namespace ferrite::cpu
