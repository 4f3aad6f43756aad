// last_token_dense_linear on CUDA: gather each sequence's last row, then the
// LM head product (GEMV / cuBLASLt) to f32 logits.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/last_token_dense_linear.h"
#include "runtime/workspace.h"

namespace ferrite::cuda {
namespace {

class LastTokenDenseLinear final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  static void* layout(Workspace& ws, const last_token_dense_linear::Params& p, DType act,
                      int64_t sequences) {
    return ws.take_bytes(sequences * i64(p.hidden_size) * dtype_bytes(act, 1));
  }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<last_token_dense_linear::Params>(), node.activation_dtype,
             limits.max_sequences);
    });
  }
  Status encode(const Invocation& inv) const override {
    using namespace last_token_dense_linear;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t s = inv.batch->num_sequences();
    const int64_t h = i64(p.hidden_size);
    FERRITE_RETURN_IF_ERROR(ensure_prepared(inv));
    BackendState& st = state(inv);
    Workspace ws(inv);
    void* rows = layout(ws, p, act, s);
    FERRITE_RETURN_IF_ERROR(ws.status("cuda.last_token_dense_linear"));
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
