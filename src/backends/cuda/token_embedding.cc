// token_embedding on CUDA: a row gather, converted to the activation dtype.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/quant_gemm.cuh"
#include "backends/cuda/profiler.h"
#include "contracts/token_embedding.h"

namespace ferrite::cuda {
namespace {

class TokenEmbedding final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace token_embedding;
    const Params& p = inv.signature->params<Params>();
    const auto& b = inv.bindings;
    profile_mark(stream_of(inv), "embedding", state(inv).capturing);
    if (dtype_is_quantized(b[kTable].dtype))
      return launch_quant_embedding(stream_of(inv), b[kIds].as<uint32_t>(),
                                    inv.batch->num_tokens(), b[kTable].data, b[kTable].dtype,
                                    i64(p.vocab_size), i64(p.hidden_size), b[kOut].data,
                                    b[kOut].dtype);
    return launch_embedding(stream_of(inv), b[kIds].as<uint32_t>(), inv.batch->num_tokens(),
                            b[kTable].data, b[kTable].dtype, i64(p.vocab_size),
                            i64(p.hidden_size), b[kOut].data, b[kOut].dtype);
  }

 private:
  ProviderDescriptor desc_ = with_block_formats(cuda_descriptor("cuda.token_embedding", token_embedding::contract(),
                                             "row gather, converted to the activation dtype"));
};

}  // namespace

std::unique_ptr<Provider> make_token_embedding() { return std::make_unique<TokenEmbedding>(); }

}  // namespace ferrite::cuda
