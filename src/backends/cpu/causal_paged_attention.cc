// causal_paged_attention on CPU.
//
// Reference: token by token, head by head, in the order the contract states
// it (norm, projections, q/k norms, RoPE, KV write, softmax attention, gate,
// output projection, residual). Per sequence, every K/V of the step is
// written before any query attends, so a token sees exactly the positions
// <= its own.
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/reference_math.h"
#include "contracts/causal_paged_attention.h"
#include "contracts/rope.h"

namespace ferrite::cpu {
namespace {

inline void store_f32(void* data, DType dt, int64_t i, float v) {
  switch (dt) {
    case DType::kF32: static_cast<float*>(data)[i] = v; return;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); return;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); return;
    case DType::kF8E4M3: case DType::kU8: case DType::kU32: case DType::kI32: case DType::kI64:
    case DType::kQ8_0: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      break;
  }
  FERRITE_CHECK(false) << "KV cache dtype " << dtype_name(dt);
}

class CausalPagedAttentionReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status encode(const Invocation& inv) const override {
    using namespace causal_paged_attention;
    const Params p = Params::from(inv.signature->attrs);
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
          store_f32(kc.data, kc.dtype, base + i, k[i]);
          store_f32(vc.data, vc.dtype, base + i, v[i]);
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
            for (int64_t d = 0; d < hd; ++d) s += qh[d] * static_cast<double>(weight_at(kc, base + d));
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
        for (int64_t i = 0; i < H; ++i) hidden[t * H + i] += out[i];
      }
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ = cpu_descriptor("cpu.reference.causal_paged_attention",
                                            "causal_paged_attention", kReferencePriority,
                                            "scalar, paged KV", /*paged_kv=*/true);
};

}  // namespace

std::unique_ptr<Provider> make_causal_paged_attention_reference() {
  return std::make_unique<CausalPagedAttentionReference>();
}

}  // namespace ferrite::cpu
