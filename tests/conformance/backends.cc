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
    // "cuda" with the default tuning but for the MoE knob below (products
    // of 9 .. 64 tokens on block weights through the bf16 tile, on u4_g128
    // through the 4-bit tile, the 70-token cases through dequantize +
    // cuBLASLt); "cuda_alt": the block-weight
    // providers again, with products of up to 256 tokens on the bf16 tile
    // (Tuning::cuda_quant_tile_tokens: the 70-token cases in two tiles of 64
    // and a partial one; u4_g128 weights on the Marlin-class 4-bit tile,
    // Tuning::cuda_u4_tile_tokens, in one tile of 128, its wgmma form), MoE steps on one launch per stage (Tuning::
    // cuda_moe_fused_tokens 0), the path of the default's larger steps, the
    // decode GEMV streaming rows through registers (Tuning::
    // cuda_quant_stream_tokens 0; "cuda" bulk-copies them), and the fused
    // decode attention's reduce-scatter score sums (Tuning::
    // cuda_decode_reduce_scatter; "cuda" takes the cluster kernel at short
    // contexts, Tuning::cuda_decode_cluster) and the prompt steps' norm / RoPE / K-V
    // write a warp per token (Tuning::cuda_rope_token_warps) and the
    // head_dim-128 flash prefill on 32-key tiles (Tuning::
    // cuda_prefill_short_tiles; its attention provider is tested again).
    // "cuda" also runs the decode steps that the cluster kernel leaves (the
    // `_decode` cases: 600 positions) on the tensor-core decode
    // attention (Tuning::cuda_decode_mma_tokens) and the int8 tile's shared
    // activation quantization (Tuning::cuda_quant_mmq_share_act).
    for (const char* name : {"cuda", "cuda_alt"}) {
      auto device = make_cuda_device(0);
      if (!device.is_ok()) continue;
      Backend cuda;
      cuda.name = name;
      cuda.device = std::move(device).value();
      cuda.registry = make_cuda_registry();
      CudaExecOptions options;
      // MoE steps of up to 32 tokens on the fused decode launches (the
      // default takes 8): the cases of 9 and 10 tokens run them too.
      options.moe_fused_tokens = 32;
      options.decode_cluster = true;  // short decode steps on the cluster kernel
      options.moe_route_in_router = true;  // routing + sort in the norm + router launch
      options.quant_mmq_tokens = 64;       // q4_k / q6_k / q8_0 products of 2-64 tokens: int8 tile
      options.quant_mmq_min_tokens = 2;    // (one token: the fused GEMV)
      options.quant_mmq_share_act = true;  // Q / K / V and gate / up quantize their input once
      options.decode_mma_tokens = 1;  // decode steps the cluster kernel leaves: tensor-core attention
      if (cuda.name == "cuda_alt") {
        options.quant_tile_tokens = 256;
        options.u4_tile_tokens = 256;  // u4_g128 products on the 4-bit tile instead,
        options.u4_tile_wgmma = true;  // its warpgroup-MMA form
        options.moe_fused_tokens = 0;
        options.quant_stream_tokens = 0;  // the register-streaming decode GEMV
        options.decode_reduce_scatter = true;
        options.decode_cluster = false;  // short decode steps on the fused kernel
        options.moe_route_in_router = false;
        options.quant_mmq_tokens = 0;
        options.quant_mmq_share_act = false;
        options.decode_mma_tokens = 0;  // every decode step on the fused kernel
        options.rope_token_warps = true;
        options.prefill_short_tiles = true;
        cuda.block_weight_providers_only = true;
        cuda.also_providers = {"cuda.causal_paged_attention"};
      }
      auto state = make_cuda_exec_context(*cuda.device, options, &cuda.ctx);
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
