#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cstring>

#include "test_util.h"

namespace ferrite {
namespace {

using testing_util::TempDir;
using testing_util::write_bytes;

// Builds GGUF files byte by byte, so tests can also write invalid ones.
class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t alignment = 32) : alignment_(alignment) {}

  // Raw appenders for the metadata section.
  GgufBuilder& kv_raw(std::string_view key, GgufType type, const std::string& payload) {
    put_str(kv_, key);
    put<uint32_t>(kv_, static_cast<uint32_t>(type));
    kv_ += payload;
    ++n_kv_;
    return *this;
  }
  template <typename T>
  GgufBuilder& kv(std::string_view key, GgufType type, T value) {
    std::string p;
    put<T>(p, value);
    return kv_raw(key, type, p);
  }
  GgufBuilder& kv_string(std::string_view key, std::string_view value) {
    std::string p;
    put_str(p, value);
    return kv_raw(key, GgufType::kString, p);
  }
  template <typename T>
  GgufBuilder& kv_array(std::string_view key, GgufType elem, const std::vector<T>& values) {
    std::string p;
    put<uint32_t>(p, static_cast<uint32_t>(elem));
    put<uint64_t>(p, values.size());
    for (const T& v : values) put<T>(p, v);
    return kv_raw(key, GgufType::kArray, p);
  }
  GgufBuilder& kv_string_array(std::string_view key, const std::vector<std::string>& values) {
    std::string p;
    put<uint32_t>(p, static_cast<uint32_t>(GgufType::kString));
    put<uint64_t>(p, values.size());
    for (const auto& v : values) put_str(p, v);
    return kv_raw(key, GgufType::kArray, p);
  }

  // A tensor with dims in GGUF order (ne[0] first) and explicit data bytes,
  // placed at the next aligned offset unless `offset` is given.
  GgufBuilder& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t ggml_type,
                      const std::string& bytes, int64_t offset = -1) {
    uint64_t off = offset >= 0 ? static_cast<uint64_t>(offset) : data_.size();
    put_str(info_, name);
    put<uint32_t>(info_, static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(info_, d);
    put<uint32_t>(info_, ggml_type);
    put<uint64_t>(info_, off);
    if (offset < 0) {
      data_ += bytes;
      data_.append((alignment_ - data_.size() % alignment_) % alignment_, '\0');
    }
    ++n_tensors_;
    return *this;
  }
  GgufBuilder& version(uint32_t v) {
    version_ = v;
    return *this;
  }
  GgufBuilder& counts(uint64_t n_tensors, uint64_t n_kv) {
    forced_tensors_ = n_tensors;
    forced_kv_ = n_kv;
    return *this;
  }

  std::string bytes() const {
    std::string out = "GGUF";
    put<uint32_t>(out, version_);
    put<uint64_t>(out, forced_tensors_ ? *forced_tensors_ : n_tensors_);
    put<uint64_t>(out, forced_kv_ ? *forced_kv_ : n_kv_);
    out += kv_;
    out += info_;
    out.append((alignment_ - out.size() % alignment_) % alignment_, '\0');
    out += data_;
    return out;
  }

 private:
  template <typename T>
  static void put(std::string& s, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
  }
  static void put_str(std::string& s, std::string_view v) {
    put<uint64_t>(s, v.size());
    s += v;
  }

  uint32_t alignment_;
  uint32_t version_ = 3;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  std::optional<uint64_t> forced_tensors_, forced_kv_;
  std::string kv_, info_, data_;
};

std::string f32_bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

::testing::AssertionResult has_error(const Status& s, StatusCode code,
                                     std::initializer_list<std::string_view> parts) {
  if (s.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << status_code_name(code) << ", got " << s.to_string();
  }
  for (std::string_view p : parts) {
    if (s.message().find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << p << "' not in: " << s.message();
    }
  }
  return ::testing::AssertionSuccess();
}

class GgufTest : public ::testing::Test {
 protected:
  Result<GgufFile> open(const std::string& bytes) {
    write_bytes(path_, bytes);
    return GgufFile::open(path_);
  }
  Status open_status(const std::string& bytes) {
    auto f = open(bytes);
    return f.is_ok() ? Status::ok() : f.status();
  }
  TempDir dir_;
  std::string path_ = dir_.file("m.gguf");
};

TEST_F(GgufTest, MetadataOfAllTypes) {
  GgufBuilder b;
  b.kv<uint8_t>("u8", GgufType::kU8, 200)
      .kv<int8_t>("i8", GgufType::kI8, -100)
      .kv<uint16_t>("u16", GgufType::kU16, 60000)
      .kv<int16_t>("i16", GgufType::kI16, -30000)
      .kv<uint32_t>("u32", GgufType::kU32, 4000000000u)
      .kv<int32_t>("i32", GgufType::kI32, -2000000000)
      .kv<float>("f32", GgufType::kF32, 0.5f)
      .kv<uint8_t>("yes", GgufType::kBool, 1)
      .kv_string("general.architecture", "qwen3")
      .kv<uint64_t>("u64", GgufType::kU64, uint64_t{1} << 40)
      .kv<uint64_t>("u64_huge", GgufType::kU64, ~uint64_t{0})
      .kv<int64_t>("i64", GgufType::kI64, -(int64_t{1} << 50))
      .kv<double>("f64", GgufType::kF64, 1e-6)
      .kv_array<int32_t>("ids", GgufType::kI32, {1, -2, 3})
      .kv_array<float>("scores", GgufType::kF32, {0.25f, -1.f})
      .kv_array<uint8_t>("flags", GgufType::kBool, {1, 0})
      .kv_string_array("tokenizer.ggml.tokens", {"a", "", "hello world"});
  auto f = open(b.bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->get_int("u8").value(), 200);
  EXPECT_EQ(f->get_int("i8").value(), -100);
  EXPECT_EQ(f->get_int("u16").value(), 60000);
  EXPECT_EQ(f->get_int("i16").value(), -30000);
  EXPECT_EQ(f->get_int("u32").value(), 4000000000);
  EXPECT_EQ(f->get_int("i32").value(), -2000000000);
  EXPECT_EQ(f->get_int("u64").value(), int64_t{1} << 40);
  EXPECT_EQ(f->get_int("i64").value(), -(int64_t{1} << 50));
  EXPECT_EQ(f->get_int("u64_huge").status().code(), StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(f->get_float("u64_huge").value(), 18446744073709551615.0);
  EXPECT_FLOAT_EQ(f->get_float("f32").value(), 0.5f);
  EXPECT_DOUBLE_EQ(f->get_float("f64").value(), 1e-6);
  EXPECT_DOUBLE_EQ(f->get_float("u16").value(), 60000.0);
  EXPECT_TRUE(f->get_bool("yes").value());
  EXPECT_EQ(f->get_string("general.architecture").value(), "qwen3");
  EXPECT_EQ(f->get_int_array("ids").value(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->get_float_array("scores").value(), (std::vector<double>{0.25, -1.0}));
  EXPECT_EQ(f->get_float_array("ids").value(), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").value(),
            (std::vector<std::string_view>{"a", "", "hello world"}));
  EXPECT_EQ(f->find("flags")->count, 2u);
  EXPECT_EQ(f->keys().size(), 17u);
  EXPECT_TRUE(f->tensors().empty());

  EXPECT_TRUE(has_error(f->get_int("absent").status(), StatusCode::kNotFound, {"'absent'"}));
  EXPECT_TRUE(has_error(f->get_int("general.architecture").status(), StatusCode::kInvalidArgument,
                        {path_, "'general.architecture'", "an integer", "got string"}));
  EXPECT_TRUE(has_error(f->get_string_array("ids").status(), StatusCode::kInvalidArgument,
                        {"got array of i32"}));
  EXPECT_EQ(f->get_bool("u8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_string("ids").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_int_array("scores").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.tokens").status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(GgufTest, TensorsOfSupportedTypes) {
  std::string w = f32_bytes({1, 2, 3, 4, 5, 6});
  std::string h(8 * 2, '\x3c');
  std::string q8(2 * 34, '\x11');    // 64 elements
  std::string q4k(2 * 144, '\x22');  // 2 x 256 elements
  std::string q5k(176, '\x33');
  std::string q6k(210, '\x44');
  std::string i32(4 * 3, '\x01');
  GgufBuilder b(64);
  b.kv<uint32_t>("general.alignment", GgufType::kU32, 64)
      .tensor("w", {3, 2}, kGgmlTypeF32, w)  // ne = {3, 2} -> shape [2, 3]
      .tensor("h", {8}, kGgmlTypeF16, h)
      .tensor("bf", {4, 2}, kGgmlTypeBF16, h)
      .tensor("q8", {32, 2}, kGgmlTypeQ8_0, q8)
      .tensor("q4k", {256, 2}, kGgmlTypeQ4_K, q4k)
      .tensor("q5k", {256}, kGgmlTypeQ5_K, q5k)
      .tensor("q6k", {256, 1, 1, 1}, kGgmlTypeQ6_K, q6k)
      .tensor("ids", {3}, kGgmlTypeI32, i32);
  auto f = open(b.bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0);
  ASSERT_EQ(f->tensors().size(), 8u);
  EXPECT_EQ(f->tensors()[0].name, "w");  // file order
  const GgufTensor* t = f->find_tensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->shape, (Shape{2, 3}));
  EXPECT_EQ(t->nbytes, 24);
  EXPECT_EQ(t->file_offset % 64, 0);
  EXPECT_FLOAT_EQ(t->view().as<const float>()[4], 5.f);
  EXPECT_EQ(f->find_tensor("bf")->dtype, DType::kBF16);
  EXPECT_EQ(f->find_tensor("bf")->shape, (Shape{2, 4}));
  const GgufTensor* q = f->find_tensor("q4k");
  EXPECT_EQ(q->dtype, DType::kQ4_K);
  EXPECT_EQ(q->shape, (Shape{2, 256}));
  EXPECT_EQ(q->nbytes, 288);
  EXPECT_EQ(std::memcmp(q->data, q4k.data(), q4k.size()), 0);
  EXPECT_EQ(f->find_tensor("q8")->nbytes, 68);
  EXPECT_EQ(f->find_tensor("q8")->dtype, DType::kQ8_0);
  EXPECT_EQ(f->find_tensor("q5k")->dtype, DType::kQ5_K);
  EXPECT_EQ(f->find_tensor("q6k")->shape, (Shape{1, 1, 1, 256}));
  EXPECT_EQ(f->find_tensor("q6k")->data[209], '\x44');
  EXPECT_EQ(f->find_tensor("ids")->dtype, DType::kI32);
  EXPECT_EQ(f->find_tensor("missing"), nullptr);
}

TEST_F(GgufTest, Version2IsRead) {
  auto f = open(GgufBuilder().version(2).kv_string("a", "b").bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 2u);
}

TEST_F(GgufTest, MissingFile) {
  EXPECT_TRUE(has_error(GgufFile::open(dir_.file("none.gguf")).status(), StatusCode::kNotFound,
                        {"none.gguf"}));
}

TEST_F(GgufTest, HeaderErrors) {
  EXPECT_TRUE(has_error(open_status("GGUF"), StatusCode::kDataLoss, {path_, "shorter"}));
  std::string bad = GgufBuilder().bytes();
  bad[0] = 'X';
  EXPECT_TRUE(has_error(open_status(bad), StatusCode::kDataLoss, {"bad magic"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder().version(1).bytes()), StatusCode::kUnsupported,
                        {"version 1"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder().counts(0, ~uint64_t{0}).bytes()),
                        StatusCode::kDataLoss, {"metadata count"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder().counts(uint64_t{1} << 60, 0).bytes()),
                        StatusCode::kDataLoss, {"tensor count"}));
  // Claims one KV more than present; what follows is not a KV.
  std::string one_kv = GgufBuilder().kv_string("a", "b").counts(0, 2).bytes();
  one_kv.resize(24 + 8 + 1 + 4 + 8 + 1);  // drop the alignment padding
  EXPECT_TRUE(has_error(open_status(one_kv + std::string(40, '\xff')), StatusCode::kDataLoss,
                        {"metadata key 1", "truncated"}));
}

TEST_F(GgufTest, MetadataErrors) {
  // String length past the end.
  std::string huge_len(8, '\xff');
  EXPECT_TRUE(has_error(open_status(GgufBuilder().kv_raw("s", GgufType::kString, huge_len).bytes()),
                        StatusCode::kDataLoss, {"value of 's'", "truncated"}));
  EXPECT_TRUE(
      has_error(open_status(GgufBuilder().kv_raw("t", static_cast<GgufType>(13), "x").bytes()),
                StatusCode::kDataLoss, {"'t'", "unknown value type 13"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder().kv<uint8_t>("b", GgufType::kBool, 7).bytes()),
                        StatusCode::kDataLoss, {"'b'", "bool"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder().kv_string("k", "1").kv_string("k", "2").bytes()),
                        StatusCode::kDataLoss, {"duplicate metadata key 'k'"}));
  // Array counts larger than the file.
  std::string arr;
  uint32_t et = static_cast<uint32_t>(GgufType::kU32);
  uint64_t n = uint64_t{1} << 61;
  arr.append(reinterpret_cast<const char*>(&et), 4).append(reinterpret_cast<const char*>(&n), 8);
  EXPECT_TRUE(has_error(open_status(GgufBuilder().kv_raw("a", GgufType::kArray, arr).bytes()),
                        StatusCode::kDataLoss, {"'a'", "runs past"}));
  et = static_cast<uint32_t>(GgufType::kString);
  std::string sarr;
  sarr.append(reinterpret_cast<const char*>(&et), 4).append(reinterpret_cast<const char*>(&n), 8);
  EXPECT_TRUE(has_error(open_status(GgufBuilder().kv_raw("s", GgufType::kArray, sarr).bytes()),
                        StatusCode::kDataLoss, {"'s'", "strings"}));
  et = static_cast<uint32_t>(GgufType::kArray);
  std::string nested;
  nested.append(reinterpret_cast<const char*>(&et), 4).append(8, '\0');
  EXPECT_TRUE(has_error(open_status(GgufBuilder().kv_raw("n", GgufType::kArray, nested).bytes()),
                        StatusCode::kUnsupported, {"'n'", "nested"}));
  EXPECT_TRUE(
      has_error(open_status(GgufBuilder().kv_array<uint8_t>("f", GgufType::kBool, {0, 2}).bytes()),
                StatusCode::kDataLoss, {"'f'", "bool"}));
}

TEST_F(GgufTest, AlignmentErrors) {
  EXPECT_TRUE(has_error(
      open_status(GgufBuilder().kv<uint32_t>("general.alignment", GgufType::kU32, 48).bytes()),
      StatusCode::kDataLoss, {"general.alignment", "48"}));
  EXPECT_TRUE(has_error(
      open_status(GgufBuilder().kv<uint32_t>("general.alignment", GgufType::kU32, 0).bytes()),
      StatusCode::kDataLoss, {"general.alignment"}));
  EXPECT_TRUE(has_error(
      open_status(GgufBuilder().kv<uint64_t>("general.alignment", GgufType::kU64, 32).bytes()),
      StatusCode::kDataLoss, {"general.alignment", "u64"}));
}

TEST_F(GgufTest, TensorErrors) {
  const std::string w = f32_bytes({1, 2, 3, 4});
  EXPECT_TRUE(has_error(open_status(GgufBuilder().tensor("q", {32}, 6 /*Q5_0*/, w).bytes()),
                        StatusCode::kUnsupported, {path_, "'q'", "Q5_0"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder().tensor("x", {4}, 999, w).bytes()),
                        StatusCode::kUnsupported, {"'x'", "type 999"}));
  EXPECT_TRUE(
      has_error(open_status(GgufBuilder().tensor("d", {1, 1, 1, 1, 4}, kGgmlTypeF32, w).bytes()),
                StatusCode::kDataLoss, {"'d'", "5 dimensions"}));
  EXPECT_TRUE(
      has_error(open_status(GgufBuilder().tensor("big", {~uint64_t{0}}, kGgmlTypeF32, w).bytes()),
                StatusCode::kDataLoss, {"'big'", "out of range"}));
  EXPECT_TRUE(has_error(
      open_status(GgufBuilder()
                      .tensor("ovf", {uint64_t{1} << 40, uint64_t{1} << 40}, kGgmlTypeF32, w)
                      .bytes()),
      StatusCode::kDataLoss, {"'ovf'", "too large"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder().tensor("q8", {40}, kGgmlTypeQ8_0, w).bytes()),
                        StatusCode::kDataLoss, {"'q8'", "multiple of", "32"}));
  EXPECT_TRUE(
      has_error(open_status(GgufBuilder().tensor("u", {4}, kGgmlTypeF32, w, /*offset=*/8).bytes()),
                StatusCode::kDataLoss, {"'u'", "offset 8", "alignment 32"}));
  EXPECT_TRUE(has_error(open_status(GgufBuilder()
                                        .tensor("w", {4}, kGgmlTypeF32, w)
                                        .tensor("w", {4}, kGgmlTypeF32, w)
                                        .bytes()),
                        StatusCode::kDataLoss, {"'w'", "duplicate"}));
  EXPECT_TRUE(has_error(
      open_status(GgufBuilder().tensor("far", {4}, kGgmlTypeF32, w, /*offset=*/4096).bytes()),
      StatusCode::kDataLoss, {"'far'", "runs past"}));
  // Two tensors claiming the same bytes.
  EXPECT_TRUE(has_error(open_status(GgufBuilder()
                                        .tensor("a", {8}, kGgmlTypeF32, w + w)
                                        .tensor("b", {4}, kGgmlTypeF32, w, /*offset=*/0)
                                        .bytes()),
                        StatusCode::kDataLoss, {"overlaps"}));
}

// Every truncation of a valid file fails cleanly.
TEST_F(GgufTest, EveryTruncationFails) {
  std::string bytes = GgufBuilder()
                          .kv_string("general.architecture", "llama")
                          .kv_array<int32_t>("ids", GgufType::kI32, {1, 2})
                          .kv_string_array("toks", {"x", "yz"})
                          .tensor("w", {4}, kGgmlTypeF32, f32_bytes({1, 2, 3, 4}))
                          .bytes();
  ASSERT_TRUE(open_status(bytes).is_ok());
  // The trailing alignment padding after the last tensor is optional.
  const size_t min_valid = bytes.size() - (32 - 16);
  for (size_t n = 0; n < min_valid; ++n) {
    Status s = open_status(bytes.substr(0, n));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << n << ": " << s.to_string();
  }
}

}  // namespace
}  // namespace ferrite
