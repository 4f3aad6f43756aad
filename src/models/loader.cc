#include "models/loader.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "base/thread_pool.h"

namespace ferrite {

namespace {

// Fills n elements of `dt` at dst with uniform values in [-scale, scale]
// (or the constant `fill` when scale == 0), deterministic in (seed, index).
void fill_dummy(void* dst, DType dt, int64_t n, float scale, float fill, uint64_t seed) {
  ThreadPool::global().parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(begin + 1));
        for (int64_t i = begin; i < end; ++i) {
          s ^= s << 13;
          s ^= s >> 7;
          s ^= s << 17;
          float v = scale == 0 ? fill
                               : scale * (static_cast<float>(s >> 40) / 8388608.0f - 1.0f);
          switch (dt) {
            case DType::kF32: static_cast<float*>(dst)[i] = v; break;
            case DType::kBF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
            case DType::kF16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
            case DType::kF8E4M3: case DType::kU8: case DType::kU32: case DType::kI32:
            case DType::kI64: case DType::kQ8_0: case DType::kQ4_K: case DType::kQ5_K:
            case DType::kQ6_K:
              FERRITE_CHECK(false) << "dummy weights of " << dtype_name(dt);
          }
        }
      },
      1 << 16);
}

}  // namespace

Result<ModelSource> open_model(const LoadOptions& options) {
  ModelSource src;
  FERRITE_ASSIGN_OR_RETURN(src.config, load_model_config(options.model_dir));
  FERRITE_ASSIGN_OR_RETURN(src.family, find_family(src.config.model_type));
  ProgramOptions po = options.program;
  if (options.dummy_weights) po.weight_dtype = options.dummy_dtype;
  else if (src.config.torch_dtype) po.weight_dtype = *src.config.torch_dtype;
  if (po.max_context > src.config.max_position_embeddings)
    po.max_context = src.config.max_position_embeddings;
  FERRITE_ASSIGN_OR_RETURN(src.program, src.family->build(src.config, po));
  if (options.dummy_weights) return src;

  FERRITE_ASSIGN_OR_RETURN(auto checkpoint, SafetensorsCheckpoint::open(options.model_dir));
  src.checkpoint = std::make_shared<SafetensorsCheckpoint>(std::move(checkpoint));
  std::vector<std::string> problems;
  for (WeightDecl& w : src.program.weights) {
    const SafetensorsTensor* t = src.checkpoint->find(w.name);
    if (!t) {
      problems.push_back(fmt::format("missing tensor '{}' (expected {})", w.name,
                                     w.shape.to_string()));
      continue;
    }
    if (t->shape != w.shape) {
      problems.push_back(fmt::format("tensor '{}' has shape {}, config.json implies {}", w.name,
                                     t->shape.to_string(), w.shape.to_string()));
      continue;
    }
    w.dtype = t->dtype;
  }
  if (!problems.empty()) {
    std::string msg = fmt::format("{} does not match {}/config.json ({} problem{}):",
                                  src.checkpoint->path(), options.model_dir, problems.size(),
                                  problems.size() == 1 ? "" : "s");
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) msg += "\n  - " + problems[i];
    if (shown < problems.size()) msg += fmt::format("\n  ... and {} more", problems.size() - shown);
    return invalid_argument(msg);
  }
  return src;
}

Result<std::unique_ptr<WeightStore>> materialize_weights(const ModelSource& src, Device& device,
                                                         const LoadOptions& options) {
  auto store = std::make_unique<WeightStore>();
  if (!options.dummy_weights) {
    store->keep_alive(src.checkpoint);
    for (const WeightDecl& w : src.program.weights) {
      const SafetensorsTensor* t = src.checkpoint->find(w.name);
      FERRITE_CHECK(t != nullptr) << w.name;
      if (device.host_accessible()) {
        // Zero-copy: the mmap is the weight memory.
        store->add(w.name, TensorView{const_cast<uint8_t*>(t->data), t->dtype, t->shape});
      } else {
        FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, t->nbytes));
        FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), t->data, t->nbytes));
        store->add(w.name, TensorView{buf.data(), t->dtype, t->shape});
        store->own(std::move(buf));
      }
    }
    return store;
  }
  // Dummy weights: 1-D tensors (norms, biases) are ones / small; matrices are
  // uniform with the 1/sqrt(fan_in) scale of default initialisers.
  uint64_t seed = options.seed * 0x2545f4914f6cdd1dull + 1;
  for (const WeightDecl& w : src.program.weights) {
    const int64_t n = w.shape.numel();
    FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, dtype_bytes(w.dtype, n)));
    const bool matrix = w.shape.rank() >= 2;
    const float scale = matrix ? 1.0f / std::sqrt(static_cast<float>(w.shape[w.shape.rank() - 1]))
                               : 0.0f;
    const bool is_bias = w.name.size() > 5 && w.name.compare(w.name.size() - 5, 5, ".bias") == 0;
    const float fill = is_bias ? 0.0f : 1.0f;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    if (device.host_accessible()) {
      fill_dummy(buf.data(), w.dtype, n, scale, fill, seed);
    } else {
      std::vector<uint8_t> host(dtype_bytes(w.dtype, n));
      fill_dummy(host.data(), w.dtype, n, scale, fill, seed);
      FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), host.data(), host.size()));
    }
    store->add(w.name, TensorView{buf.data(), w.dtype, w.shape});
    store->own(std::move(buf));
  }
  return store;
}

}  // namespace ferrite
