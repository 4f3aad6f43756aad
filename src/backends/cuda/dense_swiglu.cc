// dense_swiglu on CUDA: pre-norm, gate/up products and the SiLU product (one
// fused normed GEMV at decode), down product accumulating into the residual.
#include <algorithm>

#include "backends/cuda/block_stages.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/dense_swiglu.h"
#include "runtime/workspace.h"

namespace ferrite::cuda {
namespace {

class DenseSwiglu final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  // The normalised rows, gate, up and, with act-order weights, the gather
  // buffer of the permuted inputs.
  struct Pieces {
    void *n, *g, *u, *perm;
  };
  static Pieces layout(Workspace& ws, const dense_swiglu::Params& p, DType act, int64_t t,
                       bool permuted) {
    const int64_t e = dtype_bytes(act, 1);
    const int64_t h = i64(p.hidden_size), im = i64(p.intermediate_size);
    Pieces s;
    s.n = ws.take_bytes(t * h * e);
    s.g = ws.take_bytes(t * im * e);
    s.u = ws.take_bytes(t * im * e);
    s.perm = permuted ? ws.take_bytes(t * std::max(h, im) * e) : nullptr;
    return s;
  }
  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace([&](Workspace& ws) {
      layout(ws, node.params<dense_swiglu::Params>(), node.activation_dtype, limits.max_tokens,
             any_permuted(node));
    });
  }
  Status encode(const Invocation& inv) const override {
    using namespace dense_swiglu;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    const DType act = b[kHidden].dtype;
    const int64_t t = inv.batch->num_tokens();
    const int64_t h = i64(p.hidden_size), im = i64(p.intermediate_size);
    BackendState& st = state(inv);
    Workspace ws(inv);
    const Pieces sc = layout(ws, p, act, t, any_permuted(*inv.signature));
    FERRITE_RETURN_IF_ERROR(ws.status("cuda.dense_swiglu"));
    FERRITE_ASSIGN_OR_RETURN(const InputPerm down_perm, input_perm_of(b[kDown], h, sc.perm));
    profile_mark(st.stream, "mlp.gate_up", st.capturing);
    // Decode: norm, gate, up and the SiLU product in one pass over both weights.
    FERRITE_RETURN_IF_ERROR(normed_projections(st, b[kHidden].data, act, t, h, b[kNorm],
                                               static_cast<float>(p.eps), p.zero_centred, sc.n,
                                               {{b[kGate], im, sc.g}, {b[kUp], im, sc.u}}, act,
                                               /*swiglu=*/true, sc.perm));
    profile_mark(st.stream, "mlp.down", st.capturing);
    return gemm(st, sc.g, act, t, im, b[kDown].data, b[kDown].dtype, h, b[kHidden].data, act, true,
                nullptr, DType::kF32, down_perm);
  }

 private:
  ProviderDescriptor desc_ = with_input_permutation(with_block_formats(cuda_descriptor(
      "cuda.dense_swiglu", dense_swiglu::contract(),
      "norm, gate/up GEMMs, SiLU product, down GEMM accumulating into the residual")));
};

}  // namespace

std::unique_ptr<Provider> make_dense_swiglu() { return std::make_unique<DenseSwiglu>(); }

}  // namespace ferrite::cuda
