// gated_delta_recurrent_attention on CPU.
//
// Reference: token by token in the order the contract states it (norm,
// projections, causal conv with the conv state, per-head delta rule on the
// f32 state, gated norm, output projection, residual), double accumulation.
//
// Fast: the projections of all tokens of all sequences are single GEMMs; the
// conv runs in parallel over channel blocks (each sequence's tokens in
// order); the delta rule runs one (sequence, value head) per work item. Long
// spans (prefill) use the chunked form (chunks of 64 tokens: the WY
// representation of transformers' torch_chunk_gated_delta_rule, as small
// dense products); single tokens and short spans use the recurrent form.
// Every output element is computed by one thread in a fixed order.
#include "contracts/gated_delta_recurrent_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/block_stages.h"
#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/fast_util.h"
#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/vec.h"
#include "backends/cpu/reference_math.h"
#include "runtime/workspace.h"

namespace ferrite::cpu {
namespace {

using gated_delta_recurrent_attention::Params;

inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

class GatedDeltaReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status encode(const Invocation& inv) const override {
    using namespace gated_delta_recurrent_attention;
    const Params& p = inv.signature->params<Params>();
    const int64_t H = static_cast<int64_t>(p.hidden_size);
    const int64_t Hk = static_cast<int64_t>(p.num_k_heads);
    const int64_t Hv = static_cast<int64_t>(p.num_v_heads);
    const int64_t dk = static_cast<int64_t>(p.k_head_dim);
    const int64_t dv = static_cast<int64_t>(p.v_head_dim);
    const int64_t Kc = static_cast<int64_t>(p.conv_kernel);
    const int64_t C = static_cast<int64_t>(p.conv_dim());
    const int64_t VD = Hv * dv;
    const auto& b = inv.bindings;
    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    float* partial = b.size() > kPartialOut && b[kPartialOut].data ? b[kPartialOut].as<float>() : nullptr;
    float* conv_state = b[kConvState].as<float>();
    float* delta_state = b[kDeltaState].as<float>();
    std::vector<float> n(H), x(C), c(C), z(VD), bb(Hv), aa(Hv), y(VD), out(H);
    std::vector<double> q(dk), k(dk), u(dv), o(dv);
    for (const SequenceSlice& seq : inv.batch->sequences) {
      float* cs = conv_state + seq.state_slot * (Kc - 1) * C;
      float* ds = delta_state + seq.state_slot * Hv * dk * dv;
      for (int32_t j = 0; j < seq.token_count; ++j) {
        const int64_t t = seq.token_begin + j;
        ref::rms_norm(hidden + t * H, b[kInputNorm], H, p.eps, p.zero_centred, n.data());
        ref::matvec(n.data(), b[kInProjQkv], H, C, x.data());
        ref::matvec(n.data(), b[kInProjZ], H, VD, z.data());
        ref::matvec(n.data(), b[kInProjB], H, Hv, bb.data());
        ref::matvec(n.data(), b[kInProjA], H, Hv, aa.data());
        // Causal depthwise conv over (state rows, this input), then SiLU.
        for (int64_t ch = 0; ch < C; ++ch) {
          double acc = 0;
          for (int64_t i = 0; i < Kc - 1; ++i)
            acc += static_cast<double>(weight_at(b[kConvWeight], ch * Kc + i)) * cs[i * C + ch];
          acc += static_cast<double>(weight_at(b[kConvWeight], ch * Kc + Kc - 1)) * x[ch];
          c[ch] = ref::silu(static_cast<float>(acc));
        }
        for (int64_t i = 0; i + 1 < Kc - 1; ++i) std::copy_n(cs + (i + 1) * C, C, cs + i * C);
        if (Kc > 1) std::copy_n(x.data(), C, cs + (Kc - 2) * C);
        // The delta rule, per value head.
        for (int64_t h = 0; h < Hv; ++h) {
          const int64_t kh = static_cast<int64_t>(p.key_head_of(h));
          const float* qs = &c[kh * dk];
          const float* ks = &c[Hk * dk + kh * dk];
          const float* vs = &c[2 * Hk * dk + h * dv];
          double qq = 0, kk = 0;
          for (int64_t i = 0; i < dk; ++i) qq += double(qs[i]) * qs[i], kk += double(ks[i]) * ks[i];
          const double qscale = 1.0 / std::sqrt(qq + 1e-6) / std::sqrt(double(dk));
          const double kscale = 1.0 / std::sqrt(kk + 1e-6);
          for (int64_t i = 0; i < dk; ++i) q[i] = qs[i] * qscale, k[i] = ks[i] * kscale;
          const double beta = 1.0 / (1.0 + std::exp(-double(bb[h])));
          const double g = -std::exp(double(weight_at(b[kALog], h))) *
                           softplus(double(aa[h]) + weight_at(b[kDtBias], h));
          const double decay = std::exp(g);
          float* S = ds + h * dk * dv;
          std::fill(u.begin(), u.end(), 0.0);
          for (int64_t i = 0; i < dk; ++i)
            for (int64_t e = 0; e < dv; ++e) {
              S[i * dv + e] = static_cast<float>(S[i * dv + e] * decay);
              u[e] += S[i * dv + e] * k[i];
            }
          std::fill(o.begin(), o.end(), 0.0);
          for (int64_t i = 0; i < dk; ++i)
            for (int64_t e = 0; e < dv; ++e) {
              const double d = beta * (vs[e] - u[e]);
              S[i * dv + e] = static_cast<float>(S[i * dv + e] + k[i] * d);
              o[e] += S[i * dv + e] * q[i];
            }
          // Gated RMSNorm (weight as is, no +1) times silu(z).
          double ss = 0;
          for (int64_t e = 0; e < dv; ++e) ss += o[e] * o[e];
          const double inv_rms = 1.0 / std::sqrt(ss / dv + p.eps);
          for (int64_t e = 0; e < dv; ++e)
            y[h * dv + e] = static_cast<float>(weight_at(b[kNorm], e) * o[e] * inv_rms *
                                               ref::silu(z[h * dv + e]));
        }
        ref::matvec(y.data(), b[kOutProj], VD, H, out.data());
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
  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(cpu_descriptor("cpu.reference.gated_delta_recurrent_attention",
                                            gated_delta_recurrent_attention::contract(), kReferencePriority,
                                            "scalar, recurrent form")));
};

// Spans of at least this many tokens use the chunked form.
constexpr int64_t kChunk = 64;
constexpr int64_t kChunkedMinTokens = 16;

class GatedDeltaFast final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  // The workspace pieces of a step of `tokens` tokens and `sequences`
  // sequences with `parts` delta-rule work ranges. Measured with the step
  // limits for workspace_bytes(), carved with the step's sizes by encode().
  struct Pieces {
    float *n, *x, *z, *bb, *aa, *y, *wconv, *hist, *per_part;
  };
  static Pieces layout(Workspace& ws, const Params& p, int64_t tokens, int64_t parts,
                       int64_t conv_chunks) {
    const int64_t dk = static_cast<int64_t>(p.k_head_dim);
    const int64_t dv = static_cast<int64_t>(p.v_head_dim);
    const int64_t Hv = static_cast<int64_t>(p.num_v_heads);
    const int64_t C = static_cast<int64_t>(p.conv_dim());
    const int64_t Kc = static_cast<int64_t>(p.conv_kernel);
    Pieces s;
    s.n = ws.take<float>(tokens * static_cast<int64_t>(p.hidden_size));
    s.x = ws.take<float>(tokens * C);
    s.z = ws.take<float>(tokens * Hv * dv);
    s.bb = ws.take<float>(tokens * Hv);
    s.aa = ws.take<float>(tokens * Hv);
    s.y = ws.take<float>(tokens * Hv * dv);
    s.wconv = ws.take<float>(C * Kc);          // the conv weight in f32
    s.hist = ws.take<float>(conv_chunks * Kc);  // a conv window per channel chunk
    s.per_part = ws.take<float>(parts * per_item_floats(dk, dv));
    return s;
  }
  // Channel chunks of the conv stage: at most this many, whatever the pool
  // (each gets its own window in the workspace).
  static constexpr int64_t kConvChunks = 64;

  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<Params>(), limits.max_tokens, planned_threads(limits), kConvChunks);
    });
  }

  Status encode(const Invocation& inv) const override {
    using namespace gated_delta_recurrent_attention;
    const Params& p = inv.signature->params<Params>();
    const int64_t H = static_cast<int64_t>(p.hidden_size);
    const int64_t Hk = static_cast<int64_t>(p.num_k_heads);
    const int64_t Hv = static_cast<int64_t>(p.num_v_heads);
    const int64_t dk = static_cast<int64_t>(p.k_head_dim);
    const int64_t dv = static_cast<int64_t>(p.v_head_dim);
    const int64_t Kc = static_cast<int64_t>(p.conv_kernel);
    const int64_t C = static_cast<int64_t>(p.conv_dim());
    const int64_t VD = Hv * dv;
    const int64_t r = Hv / Hk;
    const int64_t T = inv.batch->num_tokens();
    const int64_t S = inv.batch->num_sequences();
    ThreadPool* pool = inv.ctx->pool;
    const auto& b = inv.bindings;
    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    float* partial = b.size() > kPartialOut && b[kPartialOut].data ? b[kPartialOut].as<float>() : nullptr;
    float* conv_state = b[kConvState].as<float>();
    float* delta_state = b[kDeltaState].as<float>();
    const float eps = static_cast<float>(p.eps);

    // One delta-rule scores area per part; the workspace was sized for the
    // planned thread count, so never more parts than that.
    const int64_t parts = std::min<int64_t>(pool ? pool->size() : 1, S * Hv);
    Workspace ws(inv);
    const Pieces sc = layout(ws, p, T, parts, kConvChunks);
    FERRITE_RETURN_IF_ERROR(ws.status("cpu.fast.gated_delta_recurrent_attention"));
    float* x = sc.x;
    float* z = sc.z;
    float* bb = sc.bb;
    float* aa = sc.aa;
    float* y = sc.y;
    float* per_part = sc.per_part;

    normed_projections(hidden, T, H, b[kInputNorm], eps, p.zero_centred, sc.n,
                       {{b[kInProjQkv], C, x}, {b[kInProjZ], VD, z}, {b[kInProjB], Hv, bb},
                        {b[kInProjA], Hv, aa}},
                       pool);

    // Causal conv + SiLU in place over x, per channel chunk; conv state update.
    float* wconv = sc.wconv;
    to_f32_row(b[kConvWeight].data, b[kConvWeight].dtype, wconv, C * Kc);
    auto conv_channels = [&](int64_t c0, int64_t c1, float* hist) {
      for (const SequenceSlice& seq : inv.batch->sequences) {
        float* cs = conv_state + seq.state_slot * (Kc - 1) * C;
        for (int64_t ch = c0; ch < c1; ++ch) {
          const float* w = &wconv[ch * Kc];
          for (int64_t i = 0; i < Kc - 1; ++i) hist[i] = cs[i * C + ch];
          for (int32_t j = 0; j < seq.token_count; ++j) {
            float* xv = x + (seq.token_begin + j) * C + ch;
            hist[Kc - 1] = *xv;
            float acc = 0;
            for (int64_t i = 0; i < Kc; ++i) acc += w[i] * hist[i];
            for (int64_t i = 0; i + 1 < Kc; ++i) hist[i] = hist[i + 1];
            *xv = acc / (1.0f + std::exp(-acc));
          }
          for (int64_t i = 0; i < Kc - 1; ++i) cs[i * C + ch] = hist[i];
        }
      }
    };
    // kConvChunks fixed chunks of channels (each with its window), spread
    // over the pool; a chunk's channels are independent of the others'.
    const int64_t chunks = std::min<int64_t>(kConvChunks, C);
    auto conv = [&](int64_t a, int64_t zz) {
      for (int64_t c = a; c < zz; ++c)
        conv_channels(C * c / chunks, C * (c + 1) / chunks, sc.hist + c * Kc);
    };
    if (pool)
      pool->parallel_for(chunks, conv, 1);
    else
      conv(0, chunks);

    // The delta rule and the gated norm: one (sequence, value head) per item.
    const int64_t items = S * Hv;
    auto head = [&](int64_t part) {
      float* ws = per_part + part * per_item_floats(dk, dv);
      const int64_t i0 = items * part / parts, i1 = items * (part + 1) / parts;
      for (int64_t item = i0; item < i1; ++item) {
        const SequenceSlice& seq = inv.batch->sequences[item / Hv];
        const int64_t h = item % Hv;
        Head hd{p, Hk, Hv, dk, dv, C, VD, r, h};
        hd.A = -std::exp(weight_at(b[kALog], h));
        hd.dt_bias = weight_at(b[kDtBias], h);
        float* state = delta_state + (seq.state_slot * Hv + h) * dk * dv;
        if (seq.token_count >= kChunkedMinTokens)
          run_chunked(hd, seq, x, bb, aa, state, y, ws);
        else
          run_recurrent(hd, seq, x, bb, aa, state, y, ws);
        for (int32_t j = 0; j < seq.token_count; ++j) {
          const int64_t t = seq.token_begin + j;
          float* o = y + t * VD + h * dv;
          rms_norm_row(o, b[kNorm].data, b[kNorm].dtype, dv, eps, false, o);
          const float* zz = z + t * VD + h * dv;
          for (int64_t e = 0; e < dv; ++e) o[e] *= zz[e] / (1.0f + std::exp(-zz[e]));
        }
      }
    };
    if (pool && parts > 1) {
      pool->parallel_for(parts, [&](int64_t a, int64_t zz) {
        for (int64_t part = a; part < zz; ++part) head(part);
      });
    } else {
      for (int64_t part = 0; part < parts; ++part) head(part);
    }
    output_projection(y, T, VD, b[kOutProj], H, hidden, partial, pool);
    return Status::ok();
  }

 private:
  struct Head {
    const Params& p;
    int64_t Hk, Hv, dk, dv, C, VD, r, h;
    float A = 0, dt_bias = 0;
    int64_t kh() const { return static_cast<int64_t>(p.key_head_of(h)); }
    const float* q(const float* x, int64_t t) const { return x + t * C + kh() * dk; }
    const float* k(const float* x, int64_t t) const { return x + t * C + Hk * dk + kh() * dk; }
    const float* v(const float* x, int64_t t) const { return x + t * C + 2 * Hk * dk + h * dv; }
    float g(const float* aa, int64_t t) const {
      const float a = aa[t * Hv + h] + dt_bias;
      const float sp = a > 20.0f ? a : std::log1p(std::exp(a));
      return A * sp;
    }
    float beta(const float* bb, int64_t t) const {
      return 1.0f / (1.0f + std::exp(-bb[t * Hv + h]));
    }
    // Normalised q (with 1/sqrt(dk)) and k of token t.
    void qk(const float* x, int64_t t, float* qo, float* ko) const {
      const float* qs = q(x, t);
      const float* ks = k(x, t);
      const float qn = 1.0f / std::sqrt(dot_f32(qs, qs, dk) + 1e-6f) / std::sqrt(float(dk));
      const float kn = 1.0f / std::sqrt(dot_f32(ks, ks, dk) + 1e-6f);
      for (int64_t i = 0; i < dk; ++i) qo[i] = qs[i] * qn, ko[i] = ks[i] * kn;
    }
  };

  // Scratch floats of one work item (the chunked form's is the larger).
  static int64_t per_item_floats(int64_t dk, int64_t dv) {
    return 2 * dk + 2 * dv + kChunk * (3 * dk + 2 * dv + kChunk + 2) + 64;
  }

  // The recurrent form, token by token; o -> y rows.
  static void run_recurrent(const Head& hd, const SequenceSlice& seq, const float* x,
                            const float* bb, const float* aa, float* S, float* y, float* ws) {
    const int64_t dk = hd.dk, dv = hd.dv;
    float* q = ws;
    float* k = q + dk;
    float* u = k + dk;
    for (int32_t j = 0; j < seq.token_count; ++j) {
      const int64_t t = seq.token_begin + j;
      hd.qk(x, t, q, k);
      const float decay = std::exp(hd.g(aa, t));
      const float beta = hd.beta(bb, t);
      std::fill_n(u, dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        scale_f32(decay, S + i * dv, dv);
        axpy_f32(k[i], S + i * dv, u, dv);
      }
      const float* v = hd.v(x, t);
      for (int64_t e = 0; e < dv; ++e) u[e] = beta * (v[e] - u[e]);  // u := d
      float* o = y + t * hd.VD + hd.h * dv;
      std::fill_n(o, dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        axpy_f32(k[i], u, S + i * dv, dv);
        axpy_f32(q[i], S + i * dv, o, dv);
      }
    }
  }

  // The chunked form over chunks of kChunk tokens (the last one partial):
  // within a chunk, with G the cumulative sum of g and kb = beta k, vb = beta v,
  //   A = -(kb k^T * exp(G_i - G_j)) strictly lower, then forward substitution
  //   (I - A)^-1 applied to vb and to kb * exp(G): W = T vb, Kc = T (kb exp(G));
  //   v' = W - Kc S;  o = (q exp(G)) S + (q k^T * exp(G_i - G_j), lower incl.) v'
  //   S = exp(G_last) S + (k * exp(G_last - G))^T v'.
  static void run_chunked(const Head& hd, const SequenceSlice& seq, const float* x, const float* bb,
                          const float* aa, float* S, float* y, float* ws) {
    const int64_t dk = hd.dk, dv = hd.dv;
    float* Q = ws;                    // [L, dk] normalised, scaled q
    float* K = Q + kChunk * dk;       // [L, dk]
    float* KC = K + kChunk * dk;      // [L, dk]  T (kb exp(G)), then reused
    float* V = KC + kChunk * dk;      // [L, dv]  T vb, then v'
    float* O = V + kChunk * dv;       // [L, dv]
    float* Am = O + kChunk * dv;      // [L, L]
    float* G = Am + kChunk * kChunk;  // [L]
    float* B = G + kChunk;            // [L]
    for (int32_t c0 = 0; c0 < seq.token_count; c0 += kChunk) {
      const int64_t L = std::min<int64_t>(kChunk, seq.token_count - c0);
      float gsum = 0;
      for (int64_t i = 0; i < L; ++i) {
        const int64_t t = seq.token_begin + c0 + i;
        hd.qk(x, t, Q + i * dk, K + i * dk);
        gsum += hd.g(aa, t);
        G[i] = gsum;
        B[i] = hd.beta(bb, t);
      }
      // A[i][j] = -beta_i (k_i . k_j) exp(G_i - G_j), j < i; then
      // T = (I - A)^-1 by forward substitution, applied to the rows of
      // vb and kb exp(G) directly: row_i = rhs_i + sum_{j<i} A[i][j] row_j.
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < i; ++j)
          Am[i * kChunk + j] = -B[i] * dot_f32(K + i * dk, K + j * dk, dk) * std::exp(G[i] - G[j]);
      for (int64_t i = 0; i < L; ++i) {
        const int64_t t = seq.token_begin + c0 + i;
        const float* v = hd.v(x, t);
        float* Vi = V + i * dv;
        float* Ki = KC + i * dk;
        const float eg = std::exp(G[i]);
        for (int64_t e = 0; e < dv; ++e) Vi[e] = B[i] * v[e];
        for (int64_t e = 0; e < dk; ++e) Ki[e] = B[i] * K[i * dk + e] * eg;
        for (int64_t j = 0; j < i; ++j) {
          const float a = Am[i * kChunk + j];
          axpy_f32(a, V + j * dv, Vi, dv);
          axpy_f32(a, KC + j * dk, Ki, dk);
        }
      }
      // v' = W - KC S; o = exp(G_i) q_i S + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) v'_j.
      for (int64_t i = 0; i < L; ++i) {
        float* Vi = V + i * dv;
        float* Oi = O + i * dv;
        std::fill_n(Oi, dv, 0.0f);
        const float eg = std::exp(G[i]);
        for (int64_t e = 0; e < dk; ++e) {
          axpy_f32(-KC[i * dk + e], S + e * dv, Vi, dv);
          axpy_f32(eg * Q[i * dk + e], S + e * dv, Oi, dv);
        }
      }
      for (int64_t i = 0; i < L; ++i) {
        float* Oi = O + i * dv;
        for (int64_t j = 0; j <= i; ++j)
          axpy_f32(dot_f32(Q + i * dk, K + j * dk, dk) * std::exp(G[i] - G[j]), V + j * dv, Oi, dv);
        std::copy_n(Oi, dv, y + (seq.token_begin + c0 + i) * hd.VD + hd.h * dv);
      }
      // S = exp(G_last) S + sum_j exp(G_last - G_j) k_j v'_j^T.
      const float gl = G[L - 1];
      const float el = std::exp(gl);
      for (int64_t e = 0; e < dk; ++e) scale_f32(el, S + e * dv, dv);
      for (int64_t j = 0; j < L; ++j) {
        const float w = std::exp(gl - G[j]);
        for (int64_t e = 0; e < dk; ++e) axpy_f32(w * K[j * dk + e], V + j * dv, S + e * dv, dv);
      }
    }
  }

  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(cpu_descriptor(
      "cpu.fast.gated_delta_recurrent_attention", gated_delta_recurrent_attention::contract(), kFastPriority,
      "GEMM projections, chunked delta rule for prefill, recurrent for decode")));
};

}  // namespace

std::unique_ptr<Provider> make_gated_delta_recurrent_attention_reference() {
  return std::make_unique<GatedDeltaReference>();
}
std::unique_ptr<Provider> make_gated_delta_recurrent_attention_fast() {
  return std::make_unique<GatedDeltaFast>();
}

}  // namespace ferrite::cpu
