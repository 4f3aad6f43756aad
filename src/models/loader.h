// Opening a model: config -> family -> program -> checkpoint headers, with
// every name, shape and dtype checked BEFORE any weight memory is touched;
// then materializing the weights on a device (mmap views on CPU, uploads
// elsewhere, or random dummy weights at any size).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "formats/safetensors.h"
#include "models/family.h"
#include "runtime/device.h"
#include "runtime/weights.h"

namespace ferrite {

struct LoadOptions {
  // A folder with config.json (+ safetensors unless dummy), or a GGUF file
  // (FILE.gguf, or any shard of FILE-0000K-of-0000N.gguf).
  std::string model_dir;
  bool dummy_weights = false;
  DType dummy_dtype = DType::kBF16;  // or a GGUF block format (models/dummy_formats.h)
  bool dummy_k_m_mix = false;        // with q4_k: llama.cpp's Q4_K_M mix (q6_k tensors)
  uint64_t seed = 0;
  // Act-order 4-bit checkpoints (GPTQ desc_act: a permuted g_idx): the
  // contracts whose providers multiply through an input permutation
  // (Registry::input_permutation_contracts). A 4-bit module read only by
  // nodes of these contracts stays in 4 bits with its permutation; the
  // others expand to 16 bits at load when any of them is permuted
  // (models/hf_quant.h). Empty: every act-order checkpoint expands.
  std::set<std::string> act_order_contracts;
  ProgramOptions program;
  // Called by materialize_weights after each weight: (bytes done, total).
  std::function<void(int64_t, int64_t)> progress;
};

struct GgufWeights;     // models/gguf_model.cc
class HfQuantWeights;  // models/hf_quant.h

struct ModelSource {
  ModelConfig config;
  const ModelFamily* family = nullptr;
  ModelProgram program;                               // weight dtypes are the stored ones
  std::shared_ptr<SafetensorsCheckpoint> checkpoint;  // null with dummy weights
  // GGUF files (model_dir names a .gguf file): the tensors and how each
  // weight is made from them; null for safetensors and dummy weights.
  std::shared_ptr<const GgufWeights> gguf;
  // A quantized Hugging Face checkpoint (config.json quantization_config):
  // its quantized modules as virtual tensors in repacked block formats.
  std::shared_ptr<const HfQuantWeights> hf_quant;
};

// Reads config.json, builds the program and checks it against the checkpoint
// headers: one error lists every missing tensor and every shape mismatch.
Result<ModelSource> open_model(const LoadOptions& options);

// Binds the weights on `device`: zero-copy mmap views when the device can
// read host memory, else uploads; dummy weights are generated in place.
// A tensor-parallel program (runtime/tensor_parallel.h, source.program split
// W ways) binds rank `rank`'s cut of every split weight only.
Result<std::unique_ptr<WeightStore>> materialize_weights(const ModelSource& source, Device& device,
                                                         const LoadOptions& options, int rank = 0);

}  // namespace ferrite
