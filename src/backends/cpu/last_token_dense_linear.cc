// last_token_dense_linear on CPU: the LM head on each sequence's last row.
#include "contracts/last_token_dense_linear.h"

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/fast_util.h"
#include "runtime/workspace.h"
#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/reference_math.h"

namespace ferrite::cpu {
namespace {

class LastTokenDenseLinearReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_dense_linear;
    const Params& p = inv.signature->params<Params>();
    const int64_t h = static_cast<int64_t>(p.hidden_size);
    const int64_t v = static_cast<int64_t>(p.vocab_size);
    const float* hidden = inv.bindings[kHidden].as<float>();
    float* logits = inv.bindings[kLogits].as<float>();
    for (int32_t s = 0; s < inv.batch->num_sequences(); ++s) {
      const SequenceSlice& seq = inv.batch->sequences[s];
      const int64_t last = seq.token_begin + seq.token_count - 1;
      ref::matvec(hidden + last * h, inv.bindings[kLmHead], h, v, logits + s * v);
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      with_block_formats(cpu_descriptor("cpu.reference.last_token_dense_linear", last_token_dense_linear::contract(),
                     kReferencePriority, "scalar"));
};

class LastTokenDenseLinearFast final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  static float* layout(Workspace& ws, const last_token_dense_linear::Params& p,
                       int64_t sequences) {
    return ws.take<float>(sequences * static_cast<int64_t>(p.hidden_size));
  }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<last_token_dense_linear::Params>(), limits.max_sequences);
    });
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_dense_linear;
    const Params& p = inv.signature->params<Params>();
    const int64_t h = static_cast<int64_t>(p.hidden_size);
    const int64_t s = inv.batch->num_sequences();
    Workspace ws(inv);
    float* rows = layout(ws, p, s);
    FERRITE_RETURN_IF_ERROR(ws.status("cpu.fast.last_token_dense_linear"));
    const float* hidden = inv.bindings[kHidden].as<float>();
    for (int64_t i = 0; i < s; ++i) {
      const SequenceSlice& seq = inv.batch->sequences[i];
      std::copy_n(hidden + (seq.token_begin + seq.token_count - 1) * h, h, rows + i * h);
    }
    const TensorView& w = inv.bindings[kLmHead];
    matmul(rows, s, h, w.data, w.dtype, static_cast<int64_t>(p.vocab_size),
           inv.bindings[kLogits].as<float>(), inv.ctx->pool);
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ =
      with_block_formats(cpu_descriptor("cpu.fast.last_token_dense_linear", last_token_dense_linear::contract(), kFastPriority,
                     "gather last rows + SIMD GEMM"));
};

}  // namespace

std::unique_ptr<Provider> make_last_token_dense_linear_reference() {
  return std::make_unique<LastTokenDenseLinearReference>();
}

std::unique_ptr<Provider> make_last_token_dense_linear_fast() {
  return std::make_unique<LastTokenDenseLinearFast>();
}

}  // namespace ferrite::cpu
