// GGUF (llama.cpp / ggml model files, versions 2 and 3): a read-only mmap
// reader.
//
// Layout (little-endian):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
//                    u64 offset },
//   padding to `general.alignment` (default 32), tensor data.
// A string is u64 length + bytes (no terminator); an array is u32 element type
// + u64 count + elements. Bools are one byte.
//
// Shapes: GGUF lists dimensions innermost first (ne[0] is contiguous).
// GgufTensor::shape is the row-major Ferrite order, i.e. ne reversed: a matrix
// with ne = {in, out} has shape [out, in].
//
// Validation (every failure is a Status naming the file and, where relevant,
// the key or tensor; no read past the mapping, no allocation sized by an
// unchecked count):
//   - not_found / invalid_argument: as MappedFile::open;
//   - data_loss: short file, bad magic, a count, string or array running past
//     the end of the file, more than kGgufMaxMetadataCount keys or
//     kGgufMaxTensorCount tensors, an unknown value type, a bool byte other than 0/1,
//     a duplicate key or tensor name, `general.alignment` not a power-of-two
//     u32 of at least 8 (the spec: a multiple of 8), more than 4 dimensions, a dimension above INT64_MAX, an innermost
//     dimension (ne[0]) not a multiple of the block size, an offset not aligned,
//     tensor data past the end of the file or overlapping another tensor;
//   - unsupported: version other than 2 or 3, nested arrays, a ggml type
//     Ferrite does not read (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
//     Q5_K, Q6_K, I32, I64).
//
// Ownership and thread safety: as SafetensorsFile. Strings and tensor data
// are views into the mapping and live as long as the GgufFile.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/mapped_file.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace ferrite {

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view gguf_type_name(GgufType t);  // "u32", "string", "array", ...

// ggml tensor type numbers that Ferrite reads.
inline constexpr uint32_t kGgmlTypeF32 = 0;
inline constexpr uint32_t kGgmlTypeF16 = 1;
inline constexpr uint32_t kGgmlTypeQ4_0 = 2;
inline constexpr uint32_t kGgmlTypeQ8_0 = 8;
inline constexpr uint32_t kGgmlTypeQ4_K = 12;
inline constexpr uint32_t kGgmlTypeQ5_K = 13;
inline constexpr uint32_t kGgmlTypeQ6_K = 14;
inline constexpr uint32_t kGgmlTypeI32 = 26;
inline constexpr uint32_t kGgmlTypeI64 = 27;
inline constexpr uint32_t kGgmlTypeBF16 = 30;

// ggml type number -> DType; nullopt for types Ferrite does not read.
std::optional<DType> gguf_dtype_from_ggml_type(uint32_t ggml_type);
// "Q4_0", "IQ2_XXS", ... for messages; "type 77" for unknown numbers.
std::string ggml_type_name(uint32_t ggml_type);

inline constexpr uint32_t kGgufDefaultAlignment = 32;
// Upper bounds on the header's counts (real files: tens of metadata keys, at
// most tens of thousands of tensors); larger counts are treated as corrupt.
inline constexpr uint64_t kGgufMaxMetadataCount = uint64_t{1} << 16;
inline constexpr uint64_t kGgufMaxTensorCount = uint64_t{1} << 20;

// One metadata value. Scalars are decoded; arrays keep a pointer to their
// first element in the mapping (numeric arrays are not copied) and decode on
// access through GgufFile's typed getters. Strings view the mapping.
struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars: integers (all widths) in `i` (or `u` for u64 above INT64_MAX:
  // then `u_only` is true), floats in `f`, bools in `b`, strings in `str`.
  int64_t i = 0;
  uint64_t u = 0;
  bool u_only = false;
  double f = 0;
  bool b = false;
  std::string_view str;
  // Arrays: element type, count, raw elements (numeric/bool arrays), or the
  // decoded string views (string arrays).
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;
  std::vector<std::string_view> strings;
};

struct GgufTensor {
  std::string name;
  DType dtype = DType::kF32;
  uint32_t ggml_type = 0;
  Shape shape;  // row-major: the file's ne reversed
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
  int64_t file_offset = 0;  // absolute

  TensorView view() const { return TensorView{const_cast<uint8_t*>(data), dtype, shape}; }
};

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // Offset of the data region in the file (a multiple of alignment()).
  int64_t data_offset() const { return data_offset_; }

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;  // nullptr when absent

  // Metadata. Getters: not_found when the key is absent, invalid_argument when
  // it has another type. get_int accepts every integer type (u64 must fit in
  // int64); get_float accepts f32, f64 and integers; get_int_array accepts
  // arrays of any integer type, get_float_array of any numeric type.
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;
  std::vector<std::string> keys() const;  // sorted
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string_view> get_string(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;
  Result<std::vector<std::string_view>> get_string_array(std::string_view key) const;

 private:
  Result<const GgufValue*> typed(std::string_view key) const;
  Status type_error(std::string_view key, const GgufValue& v, std::string_view expected) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  int64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace ferrite
