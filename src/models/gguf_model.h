// GGUF model files (llama.cpp's format) as Ferrite models: `--model FILE.gguf`.
//
// A GGUF file (or a split set FILE-00001-of-0000N.gguf ...) is turned into the
// same ModelConfig and ModelProgram as the Hugging Face checkpoint it was
// converted from, then every weight of the program is mapped onto the file's
// tensors, undoing what llama.cpp's converter (convert_hf_to_gguf.py) did:
//
//   - names: `blk.N.attn_q.weight` for `model.layers.N.self_attn.q_proj.weight`,
//     and so on per architecture (table in gguf_model.cc);
//   - `llama`: the Q / K rows permuted for ggml's adjacent-pair RoPE are put
//     back in Hugging Face's half-split order;
//   - `qwen3next`, `qwen35`, `qwen35moe`: zero-centred norms were stored as
//     1 + w (stored - 1 is loaded), A_log as -exp(A_log) (log(-ssm_a) is
//     loaded), dt_bias as ssm_dt.bias, conv1d squeezed to [channels, K],
//     in_proj_qkvz split into attn_qkv + attn_gate; `qwen35*`: value heads
//     reordered from grouped (per key head) to tiled order when there are
//     more value than key heads (kept: the gated-delta nodes read them
//     tiled, attribute tiled_value_heads);
//   - MoE experts stacked per layer (ffn_{gate,up,down}_exps), gate and up
//     interleaved into the program's [E, 2, I, H] at load.
//
// Weights stay in their stored type and blocks (F32, F16, BF16, Q8_0, Q4_K,
// ...): a weight used as it is in the file is a zero-copy view of the
// mapping; a re-arranged one (permuted rows, interleaved experts) is a copy of
// whole rows of blocks, never a conversion. Only the small f32 vectors that
// the converter transformed (norms, A_log) are computed.
//
// Everything is checked in open_gguf_model(), before any weight memory is
// allocated: the architecture, each metadata key's type and range, every
// tensor's presence, shape and type (one error lists every problem), and the
// tensor data's bounds (GgufFile::open).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "models/loader.h"

namespace ferrite {

// True when `path` names a regular file ending in ".gguf".
bool is_gguf_path(const std::string& path);

// The tensors of one GGUF model: one file or every shard of a split set
// (names unique across shards). Metadata comes from the first shard.
class GgufModelFile {
 public:
  // `path`: the file, or any shard of a split set (all shards are opened).
  static Result<std::shared_ptr<GgufModelFile>> open(const std::string& path);

  const GgufFile& meta() const { return *shards_.front(); }
  const std::string& path() const { return path_; }
  size_t shard_count() const { return shards_.size(); }
  const GgufTensor* find(std::string_view name) const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<GgufFile>> shards_;
  std::map<std::string, const GgufTensor*, std::less<>> tensors_;
};

// The Hugging Face config.json equivalent of the file's metadata (and of the
// tensors present: tied embeddings, dense and MoE layers, layer types), as
// JSON text; errors name the GGUF key.
Result<std::string> gguf_hf_config_json(const GgufModelFile& file);

// open_model() for a GGUF path (options.model_dir).
Result<ModelSource> open_gguf_model(const LoadOptions& options);

// materialize_weights() for a source from open_gguf_model().
Result<std::unique_ptr<WeightStore>> materialize_gguf_weights(const ModelSource& source,
                                                              Device& device);

}  // namespace ferrite
