// Block formats for dummy weights (`--dummy-weights --dummy-dtype q4_k`):
// benchmarks of GGUF-quantized models at real sizes without files.
#pragma once

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

}  // namespace ferrite
