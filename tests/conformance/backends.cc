// The backends the conformance suite runs. A new backend adds itself here.
#include "backends/cpu/cpu_providers.h"
#include "base/thread_pool.h"
#include "runtime/communicator.h"
#include "tests/conformance/conformance.h"
#ifdef FERRITE_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace ferrite::conformance {

std::vector<Backend> available_backends() {
  std::vector<Backend> out;
  Backend cpu;
  cpu.name = "cpu";
  cpu.device = make_cpu_device();
  cpu.registry = make_cpu_registry(CpuProviderSet::kBoth);
  cpu.ctx.device = cpu.device.get();
  cpu.ctx.pool = &ThreadPool::global();
  // The tp_* collectives run in a world of one here (tests/parallel runs
  // them across ranks).
  std::shared_ptr<Communicator> comm = std::move(make_cpu_communicators(1).value()[0]);
  cpu.ctx.comm = comm.get();
  cpu.keep_alive = comm;
  out.push_back(std::move(cpu));
#ifdef FERRITE_HAVE_CUDA
  if (cuda_device_present()) {
    auto device = make_cuda_device(0);
    if (device.is_ok()) {
      Backend cuda;
      cuda.name = "cuda";
      cuda.device = std::move(device).value();
      cuda.registry = make_cuda_registry();
      auto state = make_cuda_exec_context(*cuda.device, CudaExecOptions{}, &cuda.ctx);
      if (state.is_ok()) {
        cuda.keep_alive = std::move(state).value();
        out.push_back(std::move(cuda));
      }
    }
  }
#endif
  return out;
}

std::vector<std::string> skipped_backends() {
  std::vector<std::string> out;
#ifdef FERRITE_HAVE_CUDA
  std::string why;
  if (!cuda_device_present(&why)) out.push_back("cuda (" + why + ")");
#endif
  return out;
}

}  // namespace ferrite::conformance
