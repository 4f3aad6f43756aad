#include "formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ferrite {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader decodes little-endian values in place");

namespace {

// Smallest encodings, used to bound untrusted counts by the bytes left.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, 0 dims, type, offset
constexpr uint32_t kMaxDims = 4;                         // GGML_MAX_DIMS
// The spec: "[general.alignment] must be a multiple of 8" (and ggml's own
// reader wants a power of two). Smaller ones would leave f32 data unaligned.
constexpr uint32_t kMinAlignment = 8;

// Bytes of one element of a fixed-size type; 0 for string / array.
uint64_t fixed_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    case GgufType::kF32:
    case GgufType::kF64:
    case GgufType::kBool:
    case GgufType::kString:
    case GgufType::kArray:
      return false;
  }
  return false;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes one fixed-size scalar at p into v (integers, floats, bools).
// Returns false for a bool byte other than 0 / 1.
bool decode_scalar(GgufType t, const uint8_t* p, GgufValue* v) {
  switch (t) {
    case GgufType::kU8:
      v->i = load<uint8_t>(p);
      break;
    case GgufType::kI8:
      v->i = load<int8_t>(p);
      break;
    case GgufType::kU16:
      v->i = load<uint16_t>(p);
      break;
    case GgufType::kI16:
      v->i = load<int16_t>(p);
      break;
    case GgufType::kU32:
      v->i = load<uint32_t>(p);
      break;
    case GgufType::kI32:
      v->i = load<int32_t>(p);
      break;
    case GgufType::kI64:
      v->i = load<int64_t>(p);
      break;
    case GgufType::kU64:
      v->u = load<uint64_t>(p);
      v->u_only = v->u > static_cast<uint64_t>(INT64_MAX);
      v->i = v->u_only ? 0 : static_cast<int64_t>(v->u);
      break;
    case GgufType::kF32:
      v->f = load<float>(p);
      break;
    case GgufType::kF64:
      v->f = load<double>(p);
      break;
    case GgufType::kBool: {
      uint8_t b = load<uint8_t>(p);
      if (b > 1) return false;
      v->b = b != 0;
      break;
    }
    case GgufType::kString:
    case GgufType::kArray:
      break;
  }
  if (is_integer(t) && !v->u_only) v->u = static_cast<uint64_t>(v->i);
  return true;
}

// Bounds-checked reader over the mapping.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (n > left()) {
      return data_loss(path_ + ": " + std::string(what) + " at offset " + std::to_string(pos_) +
                       " needs " + std::to_string(n) + " bytes, only " + std::to_string(left()) +
                       " left (truncated file?)");
    }
    return Status::ok();
  }
  Status u32(uint32_t* out, std::string_view what) {
    FERRITE_RETURN_IF_ERROR(need(4, what));
    *out = load<uint32_t>(here());
    pos_ += 4;
    return Status::ok();
  }
  Status u64(uint64_t* out, std::string_view what) {
    FERRITE_RETURN_IF_ERROR(need(8, what));
    *out = load<uint64_t>(here());
    pos_ += 8;
    return Status::ok();
  }
  Status str(std::string_view* out, std::string_view what) {
    uint64_t n = 0;
    FERRITE_RETURN_IF_ERROR(u64(&n, what));
    FERRITE_RETURN_IF_ERROR(need(n, what));
    *out = std::string_view(reinterpret_cast<const char*>(here()), n);
    pos_ += n;
    return Status::ok();
  }
  void skip(uint64_t n) { pos_ += n; }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

// Reads one value of type `t` (not an array element of an array).
Status read_value(Cursor& c, const std::string& path, const std::string& key, GgufType t,
                  GgufValue* v) {
  const std::string what = "value of '" + key + "'";
  v->type = t;
  if (t == GgufType::kString) return c.str(&v->str, what);
  if (t != GgufType::kArray) {
    uint64_t n = fixed_size(t);
    FERRITE_RETURN_IF_ERROR(c.need(n, what));
    if (!decode_scalar(t, c.here(), v)) {
      return data_loss(path + ": key '" + key + "': bool byte is not 0 or 1");
    }
    c.skip(n);
    return Status::ok();
  }
  uint32_t et = 0;
  FERRITE_RETURN_IF_ERROR(c.u32(&et, what));
  if (!valid_type(et)) {
    return data_loss(path + ": key '" + key + "': unknown array element type " +
                     std::to_string(et));
  }
  v->elem_type = static_cast<GgufType>(et);
  if (v->elem_type == GgufType::kArray) {
    return unsupported(path + ": key '" + key + "': nested arrays are not supported");
  }
  FERRITE_RETURN_IF_ERROR(c.u64(&v->count, what));
  if (v->elem_type == GgufType::kString) {
    // Each string takes at least its 8-byte length: bound before reserving.
    if (v->count > c.left() / 8) {
      return data_loss(path + ": key '" + key + "': array of " + std::to_string(v->count) +
                       " strings runs past the end of the file");
    }
    v->strings.reserve(v->count);
    for (uint64_t i = 0; i < v->count; ++i) {
      std::string_view s;
      FERRITE_RETURN_IF_ERROR(c.str(&s, what));
      v->strings.push_back(s);
    }
    return Status::ok();
  }
  const uint64_t es = fixed_size(v->elem_type);
  if (v->count > c.left() / es) {
    return data_loss(path + ": key '" + key + "': array of " + std::to_string(v->count) + " " +
                     std::string(gguf_type_name(v->elem_type)) + " runs past the end of the file");
  }
  v->elems = c.here();
  if (v->elem_type == GgufType::kBool) {
    for (uint64_t i = 0; i < v->count; ++i) {
      if (v->elems[i] > 1) {
        return data_loss(path + ": key '" + key + "': bool byte is not 0 or 1");
      }
    }
  }
  c.skip(v->count * es);
  return Status::ok();
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "?";
}

std::optional<DType> gguf_dtype_from_ggml_type(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32:
      return DType::kF32;
    case kGgmlTypeF16:
      return DType::kF16;
    case kGgmlTypeBF16:
      return DType::kBF16;
    case kGgmlTypeQ8_0:
      return DType::kQ8_0;
    case kGgmlTypeQ4_0:
      return DType::kQ4_0;
    case kGgmlTypeQ4_K:
      return DType::kQ4_K;
    case kGgmlTypeQ5_K:
      return DType::kQ5_K;
    case kGgmlTypeQ6_K:
      return DType::kQ6_K;
    case kGgmlTypeI32:
      return DType::kI32;
    case kGgmlTypeI64:
      return DType::kI64;
    default:
      return std::nullopt;  // an open set of numbers, not a Ferrite enum
  }
}

std::string ggml_type_name(uint32_t t) {
  static constexpr const char* kNames[] = {
      "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
      "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (t < std::size(kNames)) return kNames[t];
  return "type " + std::to_string(t);
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  FERRITE_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  Cursor c(file.data(), file.size(), path);
  if (file.size() < 24) {
    return data_loss(path + ": file is " + std::to_string(file.size()) +
                     " bytes, shorter than a GGUF header (24)");
  }
  if (std::memcmp(file.data(), "GGUF", 4) != 0) {
    return data_loss(path + ": not a GGUF file (bad magic)");
  }
  c.skip(4);
  GgufFile out;
  uint64_t n_tensors = 0, n_kv = 0;
  FERRITE_RETURN_IF_ERROR(c.u32(&out.version_, "version"));
  if (out.version_ != 2 && out.version_ != 3) {
    return unsupported(path + ": GGUF version " + std::to_string(out.version_) +
                       " (only 2 and 3 are read)");
  }
  FERRITE_RETURN_IF_ERROR(c.u64(&n_tensors, "tensor count"));
  FERRITE_RETURN_IF_ERROR(c.u64(&n_kv, "metadata count"));
  // Absolute caps first (the decoded metadata and tensor tables take ~100
  // bytes per entry however small the file's entries are), then the file size.
  if (n_kv > kGgufMaxMetadataCount) {
    return data_loss(path + ": metadata count " + std::to_string(n_kv) +
                     " exceeds the limit of " + std::to_string(kGgufMaxMetadataCount));
  }
  if (n_tensors > kGgufMaxTensorCount) {
    return data_loss(path + ": tensor count " + std::to_string(n_tensors) +
                     " exceeds the limit of " + std::to_string(kGgufMaxTensorCount));
  }
  if (n_kv > c.left() / kMinKvBytes) {
    return data_loss(path + ": metadata count " + std::to_string(n_kv) + " cannot fit in the file");
  }
  if (n_tensors > c.left() / kMinTensorInfoBytes) {
    return data_loss(path + ": tensor count " + std::to_string(n_tensors) +
                     " cannot fit in the file");
  }

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string_view key_view;
    FERRITE_RETURN_IF_ERROR(c.str(&key_view, "metadata key " + std::to_string(k)));
    std::string key(key_view);
    uint32_t type = 0;
    FERRITE_RETURN_IF_ERROR(c.u32(&type, "type of '" + key + "'"));
    if (!valid_type(type)) {
      return data_loss(path + ": key '" + key + "': unknown value type " + std::to_string(type));
    }
    GgufValue v;
    FERRITE_RETURN_IF_ERROR(read_value(c, path, key, static_cast<GgufType>(type), &v));
    if (!out.metadata_.emplace(key, std::move(v)).second) {
      return data_loss(path + ": duplicate metadata key '" + key + "'");
    }
  }

  if (const GgufValue* a = out.find("general.alignment")) {
    if (a->type != GgufType::kU32 || a->u < kMinAlignment || !std::has_single_bit(a->u)) {
      return data_loss(path + ": general.alignment must be a power-of-two u32 of at least " +
                       std::to_string(kMinAlignment) + ", got " +
                       std::string(gguf_type_name(a->type)) + " " + std::to_string(a->i));
    }
    out.alignment_ = static_cast<uint32_t>(a->u);
  }

  // Bound the tensor count again by what is left after the metadata, before
  // reserving for it.
  if (n_tensors > c.left() / kMinTensorInfoBytes) {
    return data_loss(path + ": tensor count " + std::to_string(n_tensors) +
                     " cannot fit in the " + std::to_string(c.left()) +
                     " bytes after the metadata");
  }
  struct Info {
    uint64_t offset;
    size_t index;
  };
  std::vector<Info> infos;
  infos.reserve(n_tensors);
  out.tensors_.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    std::string_view name_view;
    FERRITE_RETURN_IF_ERROR(c.str(&name_view, "tensor name " + std::to_string(t)));
    GgufTensor tensor;
    tensor.name = std::string(name_view);
    const std::string where = path + ": tensor '" + tensor.name + "'";
    uint32_t n_dims = 0;
    FERRITE_RETURN_IF_ERROR(c.u32(&n_dims, "dimensions of '" + tensor.name + "'"));
    if (n_dims > kMaxDims) {
      return data_loss(where + ": " + std::to_string(n_dims) + " dimensions (at most " +
                       std::to_string(kMaxDims) + ")");
    }
    uint64_t ne[kMaxDims] = {};
    int64_t numel = 1;
    // A zero dimension makes numel 0, but Shape::numel() multiplies in its
    // own (reversed) order: the product of the other dimensions must fit too
    // (fuzz regression tests/fuzz/regressions/gguf/zero_dim_overflow.gguf).
    int64_t nonzero = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      FERRITE_RETURN_IF_ERROR(c.u64(&ne[d], "dimensions of '" + tensor.name + "'"));
      if (ne[d] > static_cast<uint64_t>(INT64_MAX)) {
        return data_loss(where + ": dimension " + std::to_string(ne[d]) + " is out of range");
      }
      overflow = overflow || __builtin_mul_overflow(numel, static_cast<int64_t>(ne[d]), &numel);
      if (ne[d] != 0) {
        overflow =
            overflow || __builtin_mul_overflow(nonzero, static_cast<int64_t>(ne[d]), &nonzero);
      }
    }
    for (uint32_t d = n_dims; d-- > 0;) tensor.shape.push_back(static_cast<int64_t>(ne[d]));
    FERRITE_RETURN_IF_ERROR(c.u32(&tensor.ggml_type, "type of '" + tensor.name + "'"));
    uint64_t offset = 0;
    FERRITE_RETURN_IF_ERROR(c.u64(&offset, "offset of '" + tensor.name + "'"));

    std::optional<DType> dtype = gguf_dtype_from_ggml_type(tensor.ggml_type);
    if (!dtype) {
      return unsupported(where + ": ggml type " + ggml_type_name(tensor.ggml_type) +
                         " is not supported");
    }
    tensor.dtype = *dtype;
    if (overflow) return data_loss(where + ": shape " + tensor.shape.to_string() + " is too large");
    const int64_t block = dtype_block_elems(*dtype);
    const int64_t inner = n_dims > 0 ? static_cast<int64_t>(ne[0]) : 1;
    if (inner % block != 0) {
      return data_loss(where + ": innermost dimension " + std::to_string(inner) +
                       " is not a multiple of the " + ggml_type_name(tensor.ggml_type) +
                       " block size " + std::to_string(block));
    }
    if (__builtin_mul_overflow(numel / block, dtype_block_bytes(*dtype), &tensor.nbytes)) {
      return data_loss(where + ": shape " + tensor.shape.to_string() + " is too large");
    }
    if (offset % out.alignment_ != 0) {
      return data_loss(where + ": offset " + std::to_string(offset) +
                       " is not a multiple of the alignment " + std::to_string(out.alignment_));
    }
    if (!out.by_name_.emplace(tensor.name, out.tensors_.size()).second) {
      return data_loss(where + ": duplicate tensor name");
    }
    infos.push_back({offset, out.tensors_.size()});
    out.tensors_.push_back(std::move(tensor));
  }

  // Data starts at the next multiple of the alignment.
  const uint64_t pad = (out.alignment_ - c.pos() % out.alignment_) % out.alignment_;
  const uint64_t data_offset = c.pos() + pad;
  const uint64_t data_size = data_offset <= file.size() ? file.size() - data_offset : 0;
  if (n_tensors > 0 && data_offset > file.size()) {
    return data_loss(path + ": tensor data would start at " + std::to_string(data_offset) +
                     ", past the end of the file (" + std::to_string(file.size()) + " bytes)");
  }
  out.data_offset_ = static_cast<int64_t>(data_offset);

  std::sort(infos.begin(), infos.end(),
            [](const Info& a, const Info& b) { return a.offset < b.offset; });
  uint64_t prev_end = 0;
  const GgufTensor* prev = nullptr;
  for (const Info& info : infos) {
    GgufTensor& t = out.tensors_[info.index];
    const uint64_t nbytes = static_cast<uint64_t>(t.nbytes);
    if (info.offset > data_size || nbytes > data_size - info.offset) {
      return data_loss(path + ": tensor '" + t.name + "': data [" + std::to_string(info.offset) +
                       ", +" + std::to_string(nbytes) + ") runs past the data region of " +
                       std::to_string(data_size) + " bytes (truncated file?)");
    }
    if (prev != nullptr && info.offset < prev_end) {
      return data_loss(path + ": tensor '" + t.name + "' at offset " + std::to_string(info.offset) +
                       " overlaps tensor '" + prev->name + "' ending at " +
                       std::to_string(prev_end));
    }
    t.file_offset = static_cast<int64_t>(data_offset + info.offset);
    t.data = file.data() + t.file_offset;
    prev_end = info.offset + nbytes;
    prev = &t;
  }
  out.file_ = std::move(file);
  return out;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(metadata_.size());
  for (const auto& [k, v] : metadata_) out.push_back(k);
  return out;
}

Result<const GgufValue*> GgufFile::typed(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return not_found(path() + ": no metadata key '" + std::string(key) + "'");
  return v;
}

Status GgufFile::type_error(std::string_view key, const GgufValue& v,
                            std::string_view expected) const {
  std::string got(gguf_type_name(v.type));
  if (v.type == GgufType::kArray) got += " of " + std::string(gguf_type_name(v.elem_type));
  return invalid_argument(path() + ": metadata key '" + std::string(key) + "' must be " +
                          std::string(expected) + ", got " + got);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  FERRITE_ASSIGN_OR_RETURN(const GgufValue* v, typed(key));
  if (!is_integer(v->type)) return type_error(key, *v, "an integer");
  if (v->u_only)
    return invalid_argument(path() + ": metadata key '" + std::string(key) + "' value " +
                            std::to_string(v->u) + " exceeds int64");
  return v->i;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  FERRITE_ASSIGN_OR_RETURN(const GgufValue* v, typed(key));
  if (v->type == GgufType::kF32 || v->type == GgufType::kF64) return v->f;
  if (is_integer(v->type)) return v->u_only ? static_cast<double>(v->u) : static_cast<double>(v->i);
  return type_error(key, *v, "a number");
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  FERRITE_ASSIGN_OR_RETURN(const GgufValue* v, typed(key));
  if (v->type != GgufType::kBool) return type_error(key, *v, "a bool");
  return v->b;
}

Result<std::string_view> GgufFile::get_string(std::string_view key) const {
  FERRITE_ASSIGN_OR_RETURN(const GgufValue* v, typed(key));
  if (v->type != GgufType::kString) return type_error(key, *v, "a string");
  return v->str;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  FERRITE_ASSIGN_OR_RETURN(const GgufValue* v, typed(key));
  if (v->type != GgufType::kArray || !is_integer(v->elem_type)) {
    return type_error(key, *v, "an array of integers");
  }
  const uint64_t es = fixed_size(v->elem_type);
  std::vector<int64_t> out;
  out.reserve(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    GgufValue e;
    decode_scalar(v->elem_type, v->elems + i * es, &e);
    if (e.u_only) {
      return invalid_argument(path() + ": metadata key '" + std::string(key) + "' element " +
                              std::to_string(i) + " exceeds int64");
    }
    out.push_back(e.i);
  }
  return out;
}

Result<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  FERRITE_ASSIGN_OR_RETURN(const GgufValue* v, typed(key));
  const bool numeric =
      is_integer(v->elem_type) || v->elem_type == GgufType::kF32 || v->elem_type == GgufType::kF64;
  if (v->type != GgufType::kArray || !numeric) return type_error(key, *v, "an array of numbers");
  const uint64_t es = fixed_size(v->elem_type);
  std::vector<double> out;
  out.reserve(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    GgufValue e;
    decode_scalar(v->elem_type, v->elems + i * es, &e);
    if (is_integer(v->elem_type)) {
      out.push_back(e.u_only ? static_cast<double>(e.u) : static_cast<double>(e.i));
    } else {
      out.push_back(e.f);
    }
  }
  return out;
}

Result<std::vector<std::string_view>> GgufFile::get_string_array(std::string_view key) const {
  FERRITE_ASSIGN_OR_RETURN(const GgufValue* v, typed(key));
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return type_error(key, *v, "an array of strings");
  }
  return v->strings;
}

}  // namespace ferrite
