#include "formats/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/json_util.h"

namespace ferrite {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kMaxJsonDepth = 64;

// A short rendering of a JSON value for error messages.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Reads a non-negative integer that fits int64.
bool read_nonneg(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = i;
    return true;
  }
  return false;
}

struct Entry {
  SafetensorsTensor tensor;
  int64_t begin = 0;
  int64_t end = 0;
};

// Parses one tensor entry of the header (no range checks against the file yet).
Status parse_entry(const std::string& path, const std::string& name, const json& info, Entry* out) {
  auto fail = [&](const std::string& what) {
    return data_loss(path + ": tensor '" + name + "': " + what);
  };
  if (!info.is_object()) return fail("entry is not an object: " + brief(info));
  auto dt = info.find("dtype");
  if (dt == info.end() || !dt->is_string()) return fail("missing or non-string 'dtype'");
  const std::string& dtype_name = dt->get_ref<const std::string&>();
  std::optional<DType> dtype = safetensors_dtype_from_name(dtype_name);
  if (!dtype) {
    return unsupported(path + ": tensor '" + name + "': unsupported dtype '" + dtype_name + "'");
  }
  auto sh = info.find("shape");
  if (sh == info.end() || !sh->is_array()) return fail("missing or non-array 'shape'");
  if (sh->size() > static_cast<size_t>(Shape::kMaxRank)) {
    return unsupported(path + ": tensor '" + name + "': rank " + std::to_string(sh->size()) +
                       " exceeds the maximum of " + std::to_string(Shape::kMaxRank));
  }
  Shape shape;
  int64_t numel = 1;
  // With a zero dimension numel is 0 whatever the others are, but readers
  // multiply sub-products (row widths, per-row strides): the product of the
  // non-zero dimensions must fit as well.
  int64_t nonzero = 1;
  bool overflow = false;
  for (const json& d : *sh) {
    int64_t dim = 0;
    if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0) {
      return fail("negative dimension " + brief(d) + " in shape " + brief(*sh));
    }
    if (!read_nonneg(d, &dim))
      return fail("invalid dimension " + brief(d) + " in shape " + brief(*sh));
    shape.push_back(dim);
    overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
    if (dim != 0) overflow = overflow || __builtin_mul_overflow(nonzero, dim, &nonzero);
  }
  int64_t nbytes = 0;
  if (overflow || __builtin_mul_overflow(numel, dtype_block_bytes(*dtype), &nbytes)) {
    return fail("shape " + brief(*sh) + " is too large");
  }
  auto off = info.find("data_offsets");
  if (off == info.end() || !off->is_array() || off->size() != 2) {
    return fail("missing 'data_offsets' or not a [begin, end] pair");
  }
  int64_t begin = 0, end = 0;
  if (!read_nonneg((*off)[0], &begin) || !read_nonneg((*off)[1], &end) || end < begin) {
    return fail("invalid data_offsets " + brief(*off));
  }
  if (end - begin != nbytes) {
    return fail("data_offsets " + brief(*off) + " span " + std::to_string(end - begin) +
                " bytes but shape " + shape.to_string() + " of " + dtype_name + " needs " +
                std::to_string(nbytes));
  }
  out->tensor.name = name;
  out->tensor.dtype = *dtype;
  out->tensor.shape = shape;
  out->tensor.nbytes = nbytes;
  out->begin = begin;
  out->end = end;
  return Status::ok();
}

Result<json> parse_json_bytes(const std::string& path, std::string_view text, const char* what) {
  if (formats_internal::json_depth_exceeds(text, kMaxJsonDepth)) {
    return data_loss(path + ": " + what + " nests deeper than " + std::to_string(kMaxJsonDepth));
  }
  // nlohmann keeps the last of duplicate keys; a header naming a tensor twice
  // is corrupt, so duplicates at the top level are detected while parsing.
  std::set<std::string> top_keys;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
        !top_keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  try {
    json doc = json::parse(text.begin(), text.end(), on_event);
    if (!duplicate.empty()) {
      return data_loss(path + ": " + what + " names '" + duplicate + "' twice");
    }
    return doc;
  } catch (const json::exception& e) {
    return data_loss(path + ": " + what + " is not valid JSON: " + e.what());
  }
}

bool is_safe_relative(const std::string& name) {
  if (name.empty()) return false;
  fs::path p(name);
  if (p.is_absolute()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

std::optional<DType> safetensors_dtype_from_name(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "U8") return DType::kU8;
  if (name == "BOOL") return DType::kU8;
  if (name == "U32") return DType::kU32;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  return std::nullopt;
}

std::optional<std::string_view> safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kU8:
      return "U8";
    case DType::kU32:
      return "U32";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ4_0:
    case DType::kF8B128:
    case DType::kU4G128:
      return std::nullopt;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// SafetensorsFile

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  FERRITE_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  const uint64_t size = file.size();
  if (size < 8) {
    return data_loss(path + ": file is " + std::to_string(size) +
                     " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file.data()[i];
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return data_loss(path + ": header length " + std::to_string(header_len) +
                     " exceeds the limit of " + std::to_string(kSafetensorsMaxHeaderBytes) +
                     " bytes (corrupt file?)");
  }
  if (header_len > size - 8) {
    return data_loss(path + ": header length " + std::to_string(header_len) +
                     " runs past the end of the file (" + std::to_string(size) +
                     " bytes; truncated?)");
  }
  std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, header_len);
  FERRITE_ASSIGN_OR_RETURN(json header, parse_json_bytes(path, text, "header"));
  if (!header.is_object()) {
    return data_loss(path + ": header is not a JSON object: " + brief(header));
  }

  SafetensorsFile out;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return data_loss(path + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return data_loss(path + ": __metadata__ value of '" + m.key() +
                           "' is not a string: " + brief(*m));
        }
        out.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    Entry e;
    FERRITE_RETURN_IF_ERROR(parse_entry(path, it.key(), *it, &e));
    entries.push_back(std::move(e));
  }

  // The data region must be covered exactly: sorted by offset, each tensor
  // starts where the previous one ended, the last ends at the end of the file.
  const int64_t data_start = static_cast<int64_t>(8 + header_len);
  const int64_t data_size = static_cast<int64_t>(size) - data_start;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t expected = 0;
  const std::string* prev = nullptr;
  for (Entry& e : entries) {
    const std::string& name = e.tensor.name;
    if (e.end > data_size) {
      return data_loss(path + ": tensor '" + name + "': data_offsets [" + std::to_string(e.begin) +
                       ", " + std::to_string(e.end) + "] run past the data region of " +
                       std::to_string(data_size) + " bytes (truncated file?)");
    }
    if (e.begin < expected) {
      return data_loss(path + ": tensor '" + name + "' at offset " + std::to_string(e.begin) +
                       " overlaps tensor '" + *prev + "' ending at " + std::to_string(expected));
    }
    if (e.begin > expected) {
      return data_loss(path + ": gap of " + std::to_string(e.begin - expected) +
                       " bytes before tensor '" + name + "' at offset " + std::to_string(e.begin) +
                       " (data region not covered exactly)");
    }
    expected = e.end;
    prev = &name;
  }
  if (expected != data_size) {
    return data_loss(path + ": tensors cover " + std::to_string(expected) +
                     " bytes but the data region holds " + std::to_string(data_size) +
                     " (trailing bytes)");
  }

  out.tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    e.tensor.data = file.data() + data_start + e.begin;
    e.tensor.file_offset = data_start + e.begin;
    out.by_name_.emplace(e.tensor.name, out.tensors_.size());
    out.tensors_.push_back(std::move(e.tensor));
  }
  out.data_bytes_ = data_size;
  out.file_ = std::move(file);  // the mapping address does not change
  return out;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------
// SafetensorsCheckpoint

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return not_found(path + ": no such file or directory");

  SafetensorsCheckpoint out;
  out.path_ = path;
  auto add_file = [&](SafetensorsFile file) -> Status {
    size_t fi = out.files_.size();
    for (size_t ti = 0; ti < file.tensors().size(); ++ti) {
      const SafetensorsTensor& t = file.tensors()[ti];
      auto [it, inserted] = out.by_name_.emplace(t.name, Location{fi, ti});
      if (!inserted) {
        return data_loss(path + ": tensor '" + t.name + "' appears in both " +
                         out.files_[it->second.file].path() + " and " + file.path());
      }
      out.total_bytes_ += t.nbytes;
    }
    out.files_.push_back(std::move(file));
    return Status::ok();
  };

  if (!fs::is_directory(st)) {
    FERRITE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
    out.metadata_ = file.metadata();
    FERRITE_RETURN_IF_ERROR(add_file(std::move(file)));
    return out;
  }

  const fs::path dir(path);
  const fs::path single = dir / std::string(kSingleFileName);
  const fs::path index = dir / std::string(kIndexFileName);
  if (fs::exists(single, ec)) {
    FERRITE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(single.string()));
    out.metadata_ = file.metadata();
    FERRITE_RETURN_IF_ERROR(add_file(std::move(file)));
    return out;
  }
  if (!fs::exists(index, ec)) {
    return not_found(path + ": neither " + std::string(kSingleFileName) + " nor " +
                     std::string(kIndexFileName) + " found in the folder");
  }

  const std::string index_path = index.string();
  FERRITE_ASSIGN_OR_RETURN(MappedFile index_file, MappedFile::open(index_path));
  if (index_file.size() > kSafetensorsMaxHeaderBytes) {
    return data_loss(index_path + ": index is larger than " +
                     std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
  }
  FERRITE_ASSIGN_OR_RETURN(json doc, parse_json_bytes(index_path, index_file.bytes(), "index"));
  if (!doc.is_object()) return data_loss(index_path + ": index is not a JSON object");
  auto wm = doc.find("weight_map");
  if (wm == doc.end() || !wm->is_object()) {
    return data_loss(index_path + ": missing or non-object 'weight_map'");
  }
  if (auto md = doc.find("metadata"); md != doc.end() && md->is_object()) {
    for (auto m = md->begin(); m != md->end(); ++m) {
      out.metadata_[m.key()] = m->is_string() ? m->get<std::string>() : brief(*m);
    }
  }
  // Shard name -> tensors the index puts there.
  std::map<std::string, std::vector<std::string>> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) {
      return data_loss(index_path + ": weight_map entry '" + it.key() +
                       "' is not a file name: " + brief(*it));
    }
    const std::string& shard = it->get_ref<const std::string&>();
    if (!is_safe_relative(shard)) {
      return data_loss(index_path + ": weight_map entry '" + it.key() + "' names shard '" + shard +
                       "' outside the model folder");
    }
    shards[shard].push_back(it.key());
  }
  for (const auto& [shard, names] : shards) {
    const std::string shard_path = (dir / shard).string();
    if (!fs::exists(shard_path, ec)) {
      return not_found(index_path + ": shard '" + shard + "' listed for tensor '" + names[0] +
                       "' does not exist");
    }
    FERRITE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(shard_path));
    for (const std::string& name : names) {
      if (file.find(name) == nullptr) {
        return data_loss(index_path + ": tensor '" + name + "' is listed in shard '" + shard +
                         "' but the shard does not contain it");
      }
    }
    FERRITE_RETURN_IF_ERROR(add_file(std::move(file)));
  }
  return out;
}

const SafetensorsTensor* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  return &files_[it->second.file].tensors()[it->second.tensor];
}

Result<const SafetensorsTensor*> SafetensorsCheckpoint::get(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) return not_found(path_ + ": no tensor named '" + std::string(name) + "'");
  return t;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, loc] : by_name_) out.push_back(name);
  return out;
}

// ---------------------------------------------------------------------------
// Writer

Status write_safetensors(const std::string& path, std::span<const SafetensorsWriteTensor> tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsWriteTensor*> order;
  order.reserve(tensors.size());
  for (const SafetensorsWriteTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->name < b->name; });

  // ordered_json keeps "__metadata__" first, as the reference library writes it.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = std::move(md);
  }
  int64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const SafetensorsWriteTensor& t = *order[i];
    const std::string where = path + ": tensor '" + t.name + "'";
    if (t.name.empty()) return invalid_argument(path + ": empty tensor name");
    if (t.name == "__metadata__") return invalid_argument(where + ": reserved name");
    if (i > 0 && order[i - 1]->name == t.name) return invalid_argument(where + ": duplicate name");
    std::optional<std::string_view> dt = safetensors_dtype_name(t.dtype);
    if (!dt) {
      return unsupported(where + ": dtype " + std::string(dtype_name(t.dtype)) +
                         " cannot be stored in safetensors");
    }
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int d = 0; d < t.shape.rank(); ++d) {
      if (t.shape[d] < 0) return invalid_argument(where + ": negative dimension");
      shape.push_back(t.shape[d]);
    }
    const int64_t nbytes = dtype_bytes(t.dtype, t.shape.numel());
    if (static_cast<int64_t>(t.data.size()) != nbytes) {
      return invalid_argument(where + ": " + std::to_string(t.data.size()) +
                              " bytes given, shape " + t.shape.to_string() + " needs " +
                              std::to_string(nbytes));
    }
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = std::string(*dt);
    info["shape"] = std::move(shape);
    info["data_offsets"] = {offset, offset + nbytes};
    header[t.name] = std::move(info);
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return invalid_argument(tmp + ": cannot open for writing: " + std::strerror(errno));
    uint8_t len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto* t : order) {
      if (t->data.empty()) continue;
      f.write(reinterpret_cast<const char*>(t->data.data()),
              static_cast<std::streamsize>(t->data.size()));
    }
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return invalid_argument(tmp + ": write failed: " + std::strerror(errno));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return invalid_argument(path + ": rename from " + tmp + " failed: " + ec.message());
  }
  return Status::ok();
}

Status write_safetensors_checkpoint(const std::string& dir,
                                    std::span<const SafetensorsWriteTensor> tensors,
                                    int64_t max_shard_bytes,
                                    const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes <= 0) {
    return invalid_argument(dir + ": max_shard_bytes must be positive, got " +
                            std::to_string(max_shard_bytes));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument(dir + ": cannot create folder: " + ec.message());

  std::vector<const SafetensorsWriteTensor*> order;
  for (const SafetensorsWriteTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->name < b->name; });
  // Duplicates could land in different shards, where write_safetensors would
  // not see them.
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i]->name == order[i - 1]->name) {
      return invalid_argument(dir + ": tensor '" + order[i]->name + "': duplicate name");
    }
  }
  int64_t total = 0;
  std::vector<std::vector<SafetensorsWriteTensor>> shards(1);
  int64_t shard_bytes = 0;
  for (const auto* t : order) {
    const int64_t n = static_cast<int64_t>(t->data.size());
    if (!shards.back().empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(*t);
    shard_bytes += n;
    total += n;
  }
  const fs::path folder(dir);
  if (shards.size() == 1) {
    return write_safetensors(
        (folder / std::string(SafetensorsCheckpoint::kSingleFileName)).string(), shards[0],
        metadata);
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    FERRITE_RETURN_IF_ERROR(write_safetensors((folder / name).string(), shards[i], metadata));
    for (const auto& t : shards[i]) weight_map[t.name] = name;
  }
  nlohmann::ordered_json index = nlohmann::ordered_json::object();
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = std::move(weight_map);
  const std::string index_path =
      (folder / std::string(SafetensorsCheckpoint::kIndexFileName)).string();
  std::ofstream f(index_path, std::ios::trunc);
  f << index.dump(2) << "\n";
  f.flush();
  if (!f) return invalid_argument(index_path + ": write failed: " + std::strerror(errno));
  return Status::ok();
}

}  // namespace ferrite
