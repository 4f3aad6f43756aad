// libFuzzer target: the safetensors reader (src/formats/safetensors.h).
//
// Input: part 0 is a .safetensors file, opened with SafetensorsFile::open and,
// as the only file of a folder, with SafetensorsCheckpoint::open. When part 1
// (a model.safetensors.index.json) is present, the folder instead holds that
// index plus part 0 and part 2 as the shards model-00001-of-00002.safetensors
// and model-00002-of-00002.safetensors (the names the seed indexes use), and
// the sharded checkpoint is opened.
//
// Oracle: no crash, no sanitizer report, and every tensor an accepted file
// lists lies inside its file with the byte size its dtype and shape give.
#include <cstdint>
#include <filesystem>

#include "formats/safetensors.h"
#include "fuzz_util.h"

using namespace ferrite;
using ferrite::fuzz::scratch;

namespace {

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

void check_tensor(const SafetensorsTensor& t, uint64_t size) {
  FERRITE_FUZZ_CHECK(t.nbytes >= 0);
  FERRITE_FUZZ_CHECK(t.nbytes == dtype_bytes(t.dtype, t.shape.numel()));
  FERRITE_FUZZ_CHECK(t.file_offset >= 8);
  FERRITE_FUZZ_CHECK(static_cast<uint64_t>(t.file_offset) + static_cast<uint64_t>(t.nbytes) <= size);
  FERRITE_FUZZ_CHECK(t.nbytes == 0 || t.data != nullptr);
  // Touch the first and last byte: a pointer outside the mapping faults.
  if (t.nbytes > 0) {
    volatile uint8_t sink = t.data[0] ^ t.data[t.nbytes - 1];
    (void)sink;
  }
}

void check_file(const SafetensorsFile& f) {
  uint64_t size = file_size(f.path());
  int64_t sum = 0;
  for (const auto& t : f.tensors()) {
    check_tensor(t, size);
    FERRITE_FUZZ_CHECK(f.find(t.name) == &t);
    sum += t.nbytes;
  }
  FERRITE_FUZZ_CHECK(sum == f.data_bytes());
}

void check_checkpoint(const SafetensorsCheckpoint& c) {
  for (const auto& f : c.files()) check_file(f);
  int64_t sum = 0;
  for (const auto& name : c.names()) {
    auto t = c.get(name);
    FERRITE_FUZZ_CHECK(t.is_ok());
    FERRITE_FUZZ_CHECK((*t)->name == name);
    sum += (*t)->nbytes;
  }
  FERRITE_FUZZ_CHECK(sum == c.total_bytes());
  FERRITE_FUZZ_CHECK(c.find("\x01 not a tensor") == nullptr);
  (void)c.metadata().size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = ferrite::fuzz::split_parts(data, size, 3);
  // Two folders, each always holding the same file names (rewritten, never
  // removed): single/model.safetensors, sharded/{index, two shards}.
  const auto& dir = scratch();
  if (parts[1].empty()) {
    std::string path = dir.write("single/model.safetensors", parts[0]);
    auto file = SafetensorsFile::open(path);
    if (file.is_ok()) check_file(*file);
    auto ckpt = SafetensorsCheckpoint::open((dir.path() / "single").string());
    FERRITE_FUZZ_CHECK(ckpt.is_ok() == file.is_ok());
    if (ckpt.is_ok()) check_checkpoint(*ckpt);
  } else {
    dir.write("sharded/model.safetensors.index.json", parts[1]);
    dir.write("sharded/model-00001-of-00002.safetensors", parts[0]);
    dir.write("sharded/model-00002-of-00002.safetensors", parts[2]);
    auto ckpt = SafetensorsCheckpoint::open((dir.path() / "sharded").string());
    if (ckpt.is_ok()) check_checkpoint(*ckpt);
  }
  return 0;
}
