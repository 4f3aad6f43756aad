// The tensor-parallel collectives on CPU (tp_all_reduce_sum, tp_all_gather):
// calls of the rank's Communicator (ExecContext::comm, the in-process CPU
// group: ranks are threads). Shared by the reference and fast sets.
#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/cpu_util.h"
#include "contracts/tp_all_gather.h"
#include "contracts/tp_all_reduce_sum.h"
#include "runtime/communicator.h"

namespace ferrite::cpu {
namespace {

Status check_world(const ExecContext* ctx, uint64_t world, const char* what) {
  if (!ctx || !ctx->comm)
    return internal_error(std::string(what) + ": the plan is tensor-parallel but no communicator "
                                              "is bound");
  if (static_cast<uint64_t>(ctx->comm->world_size()) != world)
    return internal_error(std::string(what) + ": the communicator's world size differs from the "
                                              "plan's");
  return Status::ok();
}

Status check_attrs(const NodeSignature& node, const ProviderDescriptor& d) {
  if (node.attrs.u("world_size") < 1 || node.attrs.u("width") < 1)
    return unsupported(d.name + ": world_size and width must be positive");
  return Status::ok();
}

class AllReduceSum final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status supports(const NodeSignature& node) const override {
    FERRITE_RETURN_IF_ERROR(Provider::supports(node));
    return check_attrs(node, desc_);
  }
  Status encode(const Invocation& inv) const override {
    const auto& p = inv.signature->params<tp_all_reduce_sum::Params>();
    FERRITE_RETURN_IF_ERROR(check_world(inv.ctx, p.world_size, "tp_all_reduce_sum"));
    const TensorView& x = inv.bindings[tp_all_reduce_sum::kX];
    return inv.ctx->comm->all_reduce_sum(x.data, x.numel(), x.dtype, inv.ctx->stream);
  }

 private:
  ProviderDescriptor desc_ = cpu_descriptor("cpu.reference.tp_all_reduce_sum", tp_all_reduce_sum::contract(),
                                            kReferencePriority,
                                            "in-process communicator, rank-order sum");
};

class AllGather final : public Provider {
 public:
  const ProviderDescriptor& descriptor() const override { return desc_; }
  Status supports(const NodeSignature& node) const override {
    FERRITE_RETURN_IF_ERROR(Provider::supports(node));
    FERRITE_RETURN_IF_ERROR(check_attrs(node, desc_));
    const auto& p = node.params<tp_all_gather::Params>();
    if (p.out_width != p.width * p.world_size)
      return unsupported(desc_.name + ": out_width must be world_size * width");
    return Status::ok();
  }
  Status encode(const Invocation& inv) const override {
    const auto& p = inv.signature->params<tp_all_gather::Params>();
    FERRITE_RETURN_IF_ERROR(check_world(inv.ctx, p.world_size, "tp_all_gather"));
    const TensorView& x = inv.bindings[tp_all_gather::kX];
    const TensorView& out = inv.bindings[tp_all_gather::kOut];
    if (x.dtype != out.dtype) return internal_error("tp_all_gather: x and out differ in dtype");
    return inv.ctx->comm->all_gather(x.data, out.data, x.shape[0],
                                     static_cast<int64_t>(p.width), x.dtype, inv.ctx->stream);
  }

 private:
  ProviderDescriptor desc_ = cpu_descriptor("cpu.reference.tp_all_gather", tp_all_gather::contract(),
                                            kReferencePriority, "in-process communicator");
};

}  // namespace

std::unique_ptr<Provider> make_tp_all_reduce_sum() { return std::make_unique<AllReduceSum>(); }
std::unique_ptr<Provider> make_tp_all_gather() { return std::make_unique<AllGather>(); }

}  // namespace ferrite::cpu
