// Deterministic mutations of valid files: every variant must open or fail
// with a Status, never crash, hang or read outside the mapping (run this under
// ASan/UBSan to make "never read outside" checkable).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "test_util.h"

namespace ferrite {
namespace {

using testing_util::read_bytes;
using testing_util::TempDir;
using testing_util::write_bytes;

std::string valid_safetensors(const TempDir& dir) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {1, 2, 3};
  std::vector<SafetensorsWriteTensor> in = {
      {"layer.a",
       DType::kF32,
       Shape{2, 3},
       {reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4}},
      {"layer.b",
       DType::kBF16,
       Shape{3},
       {reinterpret_cast<const uint8_t*>(b.data()), b.size() * 2}}};
  const std::string p = dir.file("valid.safetensors");
  EXPECT_TRUE(write_safetensors(p, in, {{"format", "pt"}}).is_ok());
  return read_bytes(p);
}

// A GGUF with metadata of several kinds and two tensors, built by hand.
std::string valid_gguf() {
  std::string s = "GGUF";
  auto u32 = [&](uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](std::string_view v) {
    u64(v.size());
    s += v;
  };
  u32(3);
  u64(2);  // tensors
  u64(3);  // kv
  str("general.architecture");
  u32(8);
  str("qwen3");
  str("general.alignment");
  u32(4);
  u32(32);
  str("tokenizer.ggml.tokens");
  u32(9);
  u32(8);
  u64(2);
  str("ab");
  str("c");
  str("w");
  u32(2);
  u64(2);
  u64(2);
  u32(0);
  u64(0);
  str("h");
  u32(1);
  u64(4);
  u32(1);
  u64(32);
  s.append((32 - s.size() % 32) % 32, '\0');
  s.append(16, '\x01');
  s.append(16, '\0');
  s.append(8, '\x02');
  return s;
}

template <typename OpenFn>
void mutate_and_open(const std::string& good, const std::string& path, OpenFn open_fn) {
  std::mt19937 rng(1234);
  int ok = 0, failed = 0;
  // Single byte flips at every position of the first 256 bytes ...
  for (size_t i = 0; i < std::min<size_t>(good.size(), 256); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x7f}, uint8_t{'9'}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(v);
      write_bytes(path, bad);
      (open_fn(path) ? ok : failed)++;
    }
  }
  // ... and random multi-byte corruption anywhere.
  for (int iter = 0; iter < 500; ++iter) {
    std::string bad = good;
    int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) bad.resize(rng() % bad.size());
    write_bytes(path, bad);
    (open_fn(path) ? ok : failed)++;
  }
  EXPECT_GT(failed, 0);  // the mutations did reach the validation
}

TEST(FormatMutation, SafetensorsNeverCrashes) {
  TempDir dir;
  std::string good = valid_safetensors(dir);
  mutate_and_open(good, dir.file("m.safetensors"), [](const std::string& p) {
    auto f = SafetensorsFile::open(p);
    if (!f.is_ok()) {
      EXPECT_NE(f.status().message().find(p), std::string::npos) << f.status().message();
      return false;
    }
    // Touch every byte the reader vouches for.
    uint64_t sum = 0;
    for (const auto& t : f->tensors())
      for (int64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    return sum != ~uint64_t{0};
  });
}

TEST(FormatMutation, GgufNeverCrashes) {
  TempDir dir;
  std::string good = valid_gguf();
  write_bytes(dir.file("good.gguf"), good);
  auto g = GgufFile::open(dir.file("good.gguf"));
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ASSERT_EQ(g->tensors().size(), 2u);
  EXPECT_EQ(g->find_tensor("h")->file_offset, g->data_offset() + 32);
  mutate_and_open(good, dir.file("m.gguf"), [](const std::string& p) {
    auto f = GgufFile::open(p);
    if (!f.is_ok()) {
      EXPECT_NE(f.status().message().find(p), std::string::npos) << f.status().message();
      return false;
    }
    uint64_t sum = 0;
    for (const auto& t : f->tensors())
      for (int64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    for (const auto& k : f->keys()) {
      const GgufValue* v = f->find(k);
      for (auto s : v->strings) sum += s.size() ? static_cast<uint8_t>(s.back()) : 0;
      (void)f->get_int_array(k);
      (void)f->get_float_array(k);
    }
    return sum != ~uint64_t{0};
  });
}

}  // namespace
}  // namespace ferrite
