// Model families: each turns a ModelConfig into a ModelProgram written
// against contracts. One file per architecture (llama.cc, qwen3.cc, ...),
// built from the shared blocks of decoder_blocks.h / hybrid_blocks.h;
// family.cc's table lists them (one line each).
#pragma once

#include <string>
#include <vector>

#include "models/model_config.h"
#include "runtime/program.h"

namespace ferrite {

struct ProgramOptions {
  DType weight_dtype = DType::kBF16;  // declared dtype; the loader replaces it by the stored one
  DType kv_dtype = DType::kF32;       // KV cache element type
  int64_t max_context = 4096;         // positions per sequence (<= max_position_embeddings)
  // max_context may exceed max_position_embeddings (--allow-long-max-model-len);
  // otherwise it is cut to it.
  bool allow_long_context = false;
};

struct ModelFamily {
  std::string name;                      // "llama"
  std::vector<std::string> model_types;  // config.json model_type values it reads
  Result<ModelProgram> (*build)(const ModelConfig&, const ProgramOptions&);
};

const std::vector<ModelFamily>& model_families();
// unsupported naming the known architectures when none matches.
Result<const ModelFamily*> find_family(const std::string& model_type);

}  // namespace ferrite
