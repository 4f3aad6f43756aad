// token_embedding on CPU: a row gather converted to f32. The same code serves
// as reference and fast provider (it is a memory copy; nothing to speed up).
#include "contracts/token_embedding.h"

#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/cpu_util.h"

namespace ferrite::cpu {
namespace {

class TokenEmbeddingReference final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status encode(const Invocation& inv) const override {
    using namespace token_embedding;
    const Params& p = inv.signature->params<Params>();
    const uint32_t* ids = inv.bindings[kIds].as<uint32_t>();
    const TensorView& table = inv.bindings[kTable];
    float* out = inv.bindings[kOut].as<float>();
    const int64_t h = static_cast<int64_t>(p.hidden_size);
    for (int32_t t = 0; t < inv.batch->num_tokens(); ++t) {
      if (ids[t] >= p.vocab_size) return invalid_argument("token id out of range");
      weight_row(table, ids[t], h, out + t * h);
    }
    return Status::ok();
  }

 private:
  ProviderDescriptor desc_ = with_block_formats(cpu_descriptor("cpu.reference.token_embedding", token_embedding::contract(),
                                            kReferencePriority, "row gather"));
};

}  // namespace

std::unique_ptr<Provider> make_token_embedding_reference() {
  return std::make_unique<TokenEmbeddingReference>();
}

}  // namespace ferrite::cpu
