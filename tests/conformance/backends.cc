// The backends the conformance suite runs. A new backend adds itself here.
#include "backends/cpu/cpu_providers.h"
#include "base/thread_pool.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

std::vector<Backend> available_backends() {
  std::vector<Backend> out;
  Backend cpu;
  cpu.name = "cpu";
  cpu.device = make_cpu_device();
  cpu.registry = make_cpu_registry(CpuProviderSet::kBoth);
  cpu.ctx.device = cpu.device.get();
  cpu.ctx.pool = &ThreadPool::global();
  out.push_back(std::move(cpu));
  return out;
}

std::vector<std::string> skipped_backends() { return {}; }

}  // namespace ferrite::conformance
