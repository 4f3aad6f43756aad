#include "models/dummy_formats.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace ferrite {

namespace {

// Layer index of a checkpoint name ("model.layers.12.mlp..."), or -1.
int layer_of(const std::string& name) {
  const size_t p = name.find("layers.");
  if (p == std::string::npos) return -1;
  return std::atoi(name.c_str() + p + 7);
}

// llama.cpp's use_more_bits(i, n) of its Q4_K_M / Q5_K_M recipes.
bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

}  // namespace

void assign_dummy_block_formats(ModelProgram* program, DType format, bool k_m_mix) {
  std::string head;
  for (const ProgramNode& n : program->nodes)
    if (n.contract_id == "last_token_dense_linear" && n.bindings.size() > 1)
      head = n.bindings[1].name;
  int layers = 0;
  for (const WeightDecl& w : program->weights) layers = std::max(layers, layer_of(w.name) + 1);
  for (WeightDecl& w : program->weights) {
    if (w.shape.rank() < 2) continue;
    // llama-quantize keeps MoE routers (ffn_gate_inp, ffn_gate_inp_shexp) in F32.
    if (w.name.find("mlp.gate.weight") != std::string::npos ||
        w.name.find("shared_expert_gate") != std::string::npos)
      continue;
    const int64_t row = w.shape[w.shape.rank() - 1];
    DType t = format;
    if (k_m_mix) {
      const int layer = layer_of(w.name);
      const bool v_or_down =
          w.name.find("v_proj") != std::string::npos || w.name.find("down") != std::string::npos;
      if (w.name == head || (v_or_down && layer >= 0 && more_bits(layer, layers))) t = DType::kQ6_K;
    }
    if (row % dtype_block_elems(t) == 0) w.dtype = t;
  }
}

std::optional<DType> hf_quantization_format(std::string_view name) {
  if (name == "fp8") return DType::kF8B128;
  if (name == "gptq-int4" || name == "awq-int4") return DType::kU4G128;
  return std::nullopt;
}

void assign_dummy_hf_quant_formats(ModelProgram* program, DType format) {
  std::string head;
  for (const ProgramNode& n : program->nodes)
    if (n.contract_id == "last_token_dense_linear" && n.bindings.size() > 1)
      head = n.bindings[1].name;
  auto kept = [&](const std::string& name) {
    for (const char* s : {"embed_tokens", "lm_head", "mlp.gate.weight", "shared_expert_gate",
                          "in_proj_a.", "in_proj_b.", "in_proj_ba."})
      if (name.find(s) != std::string::npos) return true;
    return name == head;
  };
  for (WeightDecl& w : program->weights) {
    if (w.shape.rank() < 2 || kept(w.name)) continue;
    if (w.shape[w.shape.rank() - 1] % dtype_block_elems(format) == 0) w.dtype = format;
  }
}

}  // namespace ferrite
