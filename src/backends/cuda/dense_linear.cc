// dense_linear on CUDA: gemm() (GEMV at decode, cuBLASLt bf16 / f16, SIMT f32).
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "contracts/dense_linear.h"
#include "runtime/workspace.h"

namespace ferrite::cuda {
namespace {

class DenseLinear final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  // With an act-order weight: the gather buffer of the permuted input.
  static void* layout(Workspace& ws, const dense_linear::Params& p, DType act, int64_t t,
                      bool permuted) {
    return permuted ? ws.take_bytes(t * i64(p.in_features) * dtype_bytes(act, 1)) : nullptr;
  }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<dense_linear::Params>(), node.activation_dtype, limits.max_tokens,
             any_permuted(node));
    });
  }
  Status encode(const Invocation& inv) const override {
    using namespace dense_linear;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    const int64_t t = inv.batch->num_tokens();
    Workspace ws(inv);
    void* gathered = layout(ws, p, b[kX].dtype, t, any_permuted(*inv.signature));
    FERRITE_RETURN_IF_ERROR(ws.status("cuda.dense_linear"));
    FERRITE_ASSIGN_OR_RETURN(const InputPerm perm,
                             input_perm_of(b[kWeight], i64(p.out_features), gathered));
    return gemm(state(inv), b[kX].data, b[kX].dtype, t, i64(p.in_features), b[kWeight].data,
                b[kWeight].dtype, i64(p.out_features), b[kOut].data, b[kOut].dtype, false,
                b[kBias].data, b[kBias].dtype, perm);
  }

 private:
  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(
      cuda_descriptor("cuda.dense_linear", dense_linear::contract(),
                      "GEMV (decode) / cuBLASLt bf16 / SIMT f32")));
};

}  // namespace

std::unique_ptr<Provider> make_dense_linear() { return std::make_unique<DenseLinear>(); }

}  // namespace ferrite::cuda
