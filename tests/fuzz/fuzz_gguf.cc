// libFuzzer target: the GGUF reader (src/formats/gguf.h): header, metadata
// key/values and tensor infos.
//
// Input: the whole file. Every metadata key is read back through every typed
// getter (each either succeeds or returns a Status), and every tensor of an
// accepted file must lie inside the file, past the data offset, with the byte
// size of its ggml type and shape.
#include <cstdint>
#include <filesystem>

#include "formats/gguf.h"
#include "fuzz_util.h"

using namespace ferrite;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = ferrite::fuzz::scratch();
  std::string path =
      dir.write("model.gguf", std::string_view(reinterpret_cast<const char*>(data), size));
  auto file = GgufFile::open(path);
  if (!file.is_ok()) return 0;
  const GgufFile& g = *file;
  FERRITE_FUZZ_CHECK(g.version() == 2 || g.version() == 3);
  FERRITE_FUZZ_CHECK(g.alignment() > 0 && (g.alignment() & (g.alignment() - 1)) == 0);
  FERRITE_FUZZ_CHECK(g.data_offset() >= 0 && g.data_offset() % g.alignment() == 0);
  size_t checksum = 0;
  for (const auto& key : g.keys()) {
    const GgufValue* v = g.find(key);
    FERRITE_FUZZ_CHECK(v != nullptr);
    if (auto r = g.get_int(key); r.is_ok()) checksum += static_cast<size_t>(*r);
    if (auto r = g.get_float(key); r.is_ok()) checksum += static_cast<size_t>(*r == *r);
    if (auto r = g.get_bool(key); r.is_ok()) checksum += *r;
    if (auto r = g.get_string(key); r.is_ok()) {
      for (char c : *r) checksum += static_cast<uint8_t>(c);
    }
    if (auto r = g.get_int_array(key); r.is_ok()) {
      FERRITE_FUZZ_CHECK(r->size() == v->count);
      for (int64_t x : *r) checksum += static_cast<size_t>(x);
    }
    if (auto r = g.get_float_array(key); r.is_ok()) {
      FERRITE_FUZZ_CHECK(r->size() == v->count);
      checksum += r->size();
    }
    if (auto r = g.get_string_array(key); r.is_ok()) {
      FERRITE_FUZZ_CHECK(r->size() == v->count);
      for (auto s : *r) {
        for (char c : s) checksum += static_cast<uint8_t>(c);
      }
    }
  }
  FERRITE_FUZZ_CHECK(!g.has("\x01 no such key"));
  for (const auto& t : g.tensors()) {
    FERRITE_FUZZ_CHECK(g.find_tensor(t.name) == &t);
    FERRITE_FUZZ_CHECK(t.nbytes >= 0);
    FERRITE_FUZZ_CHECK(t.nbytes == dtype_bytes(t.dtype, t.shape.numel()));
    FERRITE_FUZZ_CHECK(t.file_offset >= g.data_offset());
    FERRITE_FUZZ_CHECK(static_cast<uint64_t>(t.file_offset) + static_cast<uint64_t>(t.nbytes) <=
                       size);
    if (t.nbytes > 0) checksum += t.data[0] ^ t.data[t.nbytes - 1];
  }
  volatile size_t sink = checksum;
  (void)sink;
  return 0;
}
