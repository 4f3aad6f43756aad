// MappedFile: a read-only memory mapping of a whole file, shared by the
// safetensors and GGUF readers.
//
// Ownership: the object owns the mapping; the bytes stay valid until it is
// destroyed. Moving it keeps the address of the bytes unchanged (the mapping
// itself does not move), so pointers into data() survive a move.
// The file must not be truncated or rewritten while mapped: on Linux, reading a
// page past a truncated end raises SIGBUS. Readers write nothing.
// Thread safety: immutable after open(); const access from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace ferrite {

class MappedFile {
 public:
  // Maps `path` read-only. Errors: not_found (no such file), invalid_argument
  // (a directory or not a regular file, no permission), resource_exhausted
  // (mmap failed for lack of address space). An empty file maps to size 0 and
  // data() == nullptr.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }
  // The path as given to open(), used in error messages.
  const std::string& path() const { return path_; }

 private:
  void reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace ferrite
