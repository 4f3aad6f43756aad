// Quantized Hugging Face checkpoints (config.json `quantization_config`):
// FP8 (`quant_method: fp8`, e4m3 + weight_scale_inv per 128x128 block, or a
// per-tensor weight_scale), compressed-tensors (FP8 per channel / tensor /
// block; W4A16 pack-quantized int4), GPTQ (4-bit, v1 and v2 zero conventions)
// and AWQ (GEMM layout). docs/hf_quant.md has the whole story.
//
// The formats are properties of the providers, not new ops: each quantized
// module of the checkpoint (`<m>.qweight` + `<m>.qzeros` + `<m>.scales` +
// `<m>.g_idx`, `<m>.weight` in e4m3 + `<m>.weight_scale_inv`, ...) is seen by
// the loader as one virtual tensor `<m>.weight` of shape [out, in] in a
// self-contained block format of tensor/dtype.h (f8_e4m3_b128, u4_g128); the
// loader's slicing (per-expert stacking, row splits) works on its rows as on
// any tensor, and materializing a row repacks it from the checkpoint's
// tensors (4 or 8 bits per weight plus a scale per 128 elements). The one
// act-order checkpoints (GPTQ desc_act, compressed-tensors actorder: a
// permuted g_idx) have their groups scattered over the columns while a
// u4_g128 block needs its 128 columns in one group: a module whose readers'
// providers take an input permutation (Registry::input_permutation_contracts)
// stores its columns sorted by group, with the permutation beside it
// (input_perm(), bound as TensorView::input_perm); the other 4-bit modules
// (all of them for a g_idx whose groups are not whole 128-column blocks) are
// dequantized at load into a 16-bit type when any of them is permuted, the
// one expansion to 16 bits. Modules the checkpoint stores unquantized (LM head,
// embeddings, norms, routers, the ignore / modules_to_not_convert lists)
// are ordinary tensors and stay as stored.
//
// Everything is checked by open() before any weight memory is allocated:
// the method and its parameters (an unsupported variant is `unsupported`
// naming it and what is supported), and every quantized module's tensors
// (presence, dtypes, shapes, g_idx ranges).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/json_config.h"
#include "formats/safetensors.h"

namespace ferrite {

struct HfQuantScheme {
  enum class Kind {
    kFp8,        // e4m3 weights, f32 / bf16 / f16 scales (block, channel or tensor)
    kGptq,       // qweight [in/8, out], qzeros [G, out/8], scales [G, out], g_idx [in]
    kAwq,        // qweight [in, out/8] (AWQ nibble order), qzeros, scales [G, out]
    kPackedInt,  // compressed-tensors pack-quantized: weight_packed [out, in/8], ...
  };
  Kind kind = Kind::kFp8;
  std::string method;       // "fp8", "compressed-tensors", "gptq", "awq"
  std::string description;  // for messages and `ferrite info`: "gptq int4 group 128 sym"
  int64_t group_size = 128;  // int4: elements per scale along the input (-1: per channel)
  bool symmetric = true;     // int4: no zero-point tensor (compressed-tensors)
  bool gptq_v1_zeros = true; // gptq: checkpoint_format "gptq" stores zero - 1
};

// The scheme of config.json's `quantization_config` object; `unsupported`
// for a method or variant Ferrite does not load (the message names it and
// lists what is supported).
Result<HfQuantScheme> parse_hf_quant_config(const JsonConfig& quantization_config);

// The quantized modules of one checkpoint, as virtual [out, in] tensors.
class HfQuantWeights {
 public:
  // Finds and checks every quantized module (one error lists the problems).
  // permutable(virtual tensor name): whether the module may keep an input
  // permutation (its readers take one; null: none may). Act-order modules
  // that may keep 4 bits with their columns sorted by group (input_perm());
  // when any other 4-bit module is act-order, those others expand to
  // expand_dtype (the checkpoint's torch_dtype when it is f16 / bf16, so
  // that they match the activations; nullopt: the scales' type), and when
  // some permuted g_idx has a group that is not whole 128-column blocks,
  // every 4-bit module expands.
  static Result<std::shared_ptr<HfQuantWeights>> open(
      const HfQuantScheme& scheme, const SafetensorsCheckpoint& ckpt,
      std::optional<DType> expand_dtype = std::nullopt,
      const std::function<bool(const std::string&)>& permutable = {});

  const HfQuantScheme& scheme() const { return scheme_; }
  // The virtual tensor `<module>.weight` (data == nullptr), or nullptr.
  const SafetensorsTensor* find(const std::string& name) const;
  // Rows [row_begin, row_begin + rows) of virtual tensor `t` in its format,
  // into dst (rows x dtype_bytes(t.dtype, in) bytes).
  void repack_rows(const SafetensorsTensor& t, int64_t row_begin, int64_t rows,
                   uint8_t* dst) const;
  // The input permutation of virtual tensor `name` (a 4-bit act-order module
  // kept in 4 bits): stored column c is input column (*perm)[c]. Null for a
  // module in natural column order and for any other name.
  const std::vector<int32_t>* input_perm(const std::string& name) const;
  size_t module_count() const { return modules_.size(); }

  struct Module {
    SafetensorsTensor virt;  // name <m>.weight, shape [out, in], format dtype
    const SafetensorsTensor* codes = nullptr;  // weight / qweight / weight_packed
    const SafetensorsTensor* scales = nullptr;
    const SafetensorsTensor* zeros = nullptr;  // qzeros / weight_zero_point (may be null)
    int64_t scale_rows = 1, scale_cols = 1;   // fp8: the scale grid's block (rows, cols)
    int64_t group = 128;                      // int4: elements per group
    // int4 act-order (desc_act): the g_idx of a module whose columns are
    // not in group order; see open().
    const SafetensorsTensor* g_idx = nullptr;
    // Kept in 4 bits: the input columns sorted by group (stable), so that
    // each 128 stored columns are one group. Empty: natural order.
    std::vector<int32_t> perm;
  };

 private:
  HfQuantScheme scheme_;
  std::map<std::string, Module> modules_;  // by virtual tensor name
};

}  // namespace ferrite
