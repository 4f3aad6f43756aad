// Safetensors: read-only mmap reader, multi-file (sharded) checkpoints, and a
// writer.
//
// File layout (https://github.com/huggingface/safetensors):
//   [u64 little-endian N][N bytes of JSON header][data region]
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data region) and may hold "__metadata__", a
// string -> string map.
//
// Validation (every failure is a Status naming the file and the tensor, never
// a crash or an allocation driven by untrusted sizes):
//   - not_found: the file or folder does not exist;
//   - data_loss: file shorter than 8 bytes, header length > 100 MB or past the
//     end of the file, header not JSON / not an object / nested deeper than 64,
//     a malformed entry, a tensor named twice, a negative or non-integer
//     dimension, a byte size (shape x dtype) different from the data_offsets
//     span, offsets that overlap, leave gaps or do not cover the data region
//     exactly;
//   - unsupported: a dtype Ferrite has no DType for (F64, I8, F8_E5M2, ...) or
//     a rank above Shape::kMaxRank.
//
// Dtype names: F32, F16, BF16, F8_E4M3, U8, BOOL (read as kU8), U32, I32, I64.
//
// Alignment: a tensor's bytes start at file offset 8 + N + begin, and the
// mapping is page aligned. write_safetensors (like the reference library) pads
// N to a multiple of 8, but the format allows any N and nothing aligns `begin`
// to the element size: `data` may be misaligned even for its element type.
// Such files are valid and open; readers must not load elements through typed
// pointers (load_as_f32 uses memcpy; the model loader copies misaligned
// tensors into aligned memory and views aligned ones in place).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/mapped_file.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace ferrite {

// Upper bound on the JSON header length; larger values are treated as corrupt.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull * 1024 * 1024;

// "F32" -> kF32, "BOOL" -> kU8, ...; nullopt for names Ferrite does not support.
std::optional<DType> safetensors_dtype_from_name(std::string_view name);
// kF32 -> "F32"; nullopt for dtypes safetensors cannot hold (GGUF block types).
std::optional<std::string_view> safetensors_dtype_name(DType dtype);

// One tensor of a mapped file. `data` points into the mapping owned by the
// SafetensorsFile (or SafetensorsCheckpoint) it came from and is valid while
// that object lives; it is read-only memory.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;       // == dtype_bytes(dtype, shape.numel())
  int64_t file_offset = 0;  // absolute offset of the first byte in the file

  // A view for kernels and materializers. The memory is read-only: writing
  // through the view faults.
  TensorView view() const { return TensorView{const_cast<uint8_t*>(data), dtype, shape}; }
};

// One mapped .safetensors file. Move-only; moving keeps tensor pointers valid.
// Thread safety: immutable after open(); const methods may run concurrently.
class SafetensorsFile {
 public:
  // Maps and validates `path` (see the header comment for the error codes).
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Tensors in data-offset order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const SafetensorsTensor* find(std::string_view name) const;
  // The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Size of the data region (sum of the tensor byte sizes).
  int64_t data_bytes() const { return data_bytes_; }

 private:
  MappedFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::map<std::string, std::string> metadata_;
  int64_t data_bytes_ = 0;
};

// The weights of a model: one .safetensors file, or a folder holding either
// `model.safetensors` or `model.safetensors.index.json` plus its shards.
// All shard mappings live as long as this object. Move-only; moving keeps
// tensor pointers valid. Thread safety: as SafetensorsFile.
class SafetensorsCheckpoint {
 public:
  static constexpr std::string_view kSingleFileName = "model.safetensors";
  static constexpr std::string_view kIndexFileName = "model.safetensors.index.json";

  // `path` is a .safetensors file or a folder. In a folder, model.safetensors
  // wins over the index when both exist (as in transformers). With an index:
  // every shard named in "weight_map" is opened, every listed tensor must be in
  // the shard the index names (data_loss otherwise), a name may not appear in
  // two shards (data_loss), shard names may not be absolute or contain "..".
  // Tensors present in a shard but missing from the weight_map are kept.
  // Errors: not_found (nothing to open, or a listed shard is missing),
  // invalid_argument / data_loss (a malformed index), any SafetensorsFile error.
  static Result<SafetensorsCheckpoint> open(const std::string& path);

  // nullptr when absent.
  const SafetensorsTensor* find(std::string_view name) const;
  // not_found naming the checkpoint and the tensor when absent.
  Result<const SafetensorsTensor*> get(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return by_name_.size(); }
  // Sum of the byte sizes of all tensors.
  int64_t total_bytes() const { return total_bytes_; }
  // The mapped files (one, or the shards in sorted file-name order).
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // "__metadata__" of a single file, or the index's "metadata" object with
  // every value rendered as a string (numbers unquoted).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  struct Location {
    size_t file = 0;
    size_t tensor = 0;
  };

  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Location, std::less<>> by_name_;
  std::map<std::string, std::string> metadata_;
  int64_t total_bytes_ = 0;
};

// A tensor to write. `data` must hold exactly dtype_bytes(dtype, shape.numel())
// bytes; it is only read during write_safetensors().
struct SafetensorsWriteTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::span<const uint8_t> data;
};

// Writes a .safetensors file the reference library can read: tensors laid out
// in sorted-name order, header padded with spaces to a multiple of 8 bytes,
// "__metadata__" present only when `metadata` is non-empty. The file is written
// to `path + ".tmp"` and renamed, so a reader never sees a half-written file.
// Errors: invalid_argument (duplicate or empty name, "__metadata__" used as a
// tensor name, byte size mismatch), unsupported (a dtype safetensors cannot
// hold), invalid_argument with errno text (I/O failure).
Status write_safetensors(const std::string& path, std::span<const SafetensorsWriteTensor> tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Writes a checkpoint folder as transformers' save_pretrained does: one
// `model.safetensors` when the tensors total at most `max_shard_bytes`, else
// `model-0000i-of-0000N.safetensors` shards plus `model.safetensors.index.json`
// ({"metadata": {"total_size": bytes}, "weight_map": {name: shard}}). Tensors
// go in sorted-name order; a shard is closed when the next tensor would exceed
// the limit (a tensor larger than the limit gets a shard of its own). `dir` is
// created when missing; `metadata` goes into every file's "__metadata__".
// Errors: as write_safetensors, and invalid_argument for max_shard_bytes <= 0
// or a folder that cannot be created.
Status write_safetensors_checkpoint(const std::string& dir,
                                    std::span<const SafetensorsWriteTensor> tensors,
                                    int64_t max_shard_bytes,
                                    const std::map<std::string, std::string>& metadata = {});

}  // namespace ferrite
