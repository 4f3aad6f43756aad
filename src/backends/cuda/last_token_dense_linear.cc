// last_token_dense_linear on CUDA: gather each sequence's last row, then the
// LM head product (GEMV / cuBLASLt) to f32 logits.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/last_token_dense_linear.h"

namespace ferrite::cuda {
namespace {

class LastTokenDenseLinear final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    using namespace last_token_dense_linear;
    const Params p = Params::from(node.attrs);
    return Carver::round(limits.max_sequences * i64(p.hidden_size) *
                         dtype_bytes(node.activation_dtype, 1));
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_dense_linear;
    const Params p = Params::from(inv.signature->attrs);
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t s = inv.batch->num_sequences();
    const int64_t h = i64(p.hidden_size);
    FERRITE_RETURN_IF_ERROR(ensure_prepared(inv));
    BackendState& st = state(inv);
    Carver ws(inv);
    void* rows = ws.take(s * h * dtype_bytes(act, 1));
    if (!rows) return internal_error("last_token_dense_linear: workspace too small");
    profile_mark(st.stream, "lm_head", st.capturing);
    FERRITE_RETURN_IF_ERROR(
        launch_gather_rows(st.stream, b[kHidden].data, st.meta.seq_last_row, rows, act, s, h));
    return gemm(st, rows, act, s, h, b[kLmHead].data, b[kLmHead].dtype, i64(p.vocab_size),
                b[kLogits].data, DType::kF32, false);
  }

 private:
  ProviderDescriptor desc_ = with_block_formats(cuda_descriptor("cuda.last_token_dense_linear",
                                             last_token_dense_linear::contract(),
                                             "gather last rows, GEMV / cuBLASLt to f32 logits"));
};

}  // namespace

std::unique_ptr<Provider> make_last_token_dense_linear() {
  return std::make_unique<LastTokenDenseLinear>();
}

}  // namespace ferrite::cuda
