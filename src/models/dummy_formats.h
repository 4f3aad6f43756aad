// Block formats for dummy weights (`--dummy-weights --dummy-dtype q4_k`):
// benchmarks of GGUF-quantized models at real sizes without files.
#pragma once

#include <optional>
#include <string_view>

#include "runtime/program.h"

namespace ferrite {

// Puts every matrix of `program` whose rows are whole blocks of `format` (a
// GGUF block format) in that format; vectors (norms, biases) and ragged
// matrices (e.g. a conv kernel of 4 taps) stay f32, as GGUF files keep
// them. With `k_m_mix` (llama.cpp's Q4_K_M recipe, format q4_k): the LM head
// (or the tied embedding), and attention V / MLP down projections of the
// first and last eighths of the layers and every third layer between, in
// q6_k.
void assign_dummy_block_formats(ModelProgram* program, DType format, bool k_m_mix);

// `--quantization fp8 | gptq-int4 | awq-int4` with dummy weights: the format a
// quantized Hugging Face checkpoint is repacked into (models/hf_quant.h).
// nullopt for another name.
std::optional<DType> hf_quantization_format(std::string_view name);
// Puts the matrices a quantized Hugging Face checkpoint stores quantized in
// `format` (f8_e4m3_b128 or u4_g128): every projection, MLP and expert
// matrix whose rows are whole 128-element blocks; the embeddings, the LM
// head, the MoE routers and shared-expert gates and the gated-delta
// in_proj_a / in_proj_b / in_proj_ba stay as declared (bf16), as the
// official FP8 / GPTQ releases keep them.
void assign_dummy_hf_quant_formats(ModelProgram* program, DType format);

}  // namespace ferrite
