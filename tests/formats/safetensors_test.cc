#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace ferrite {
namespace {

using testing_util::le64;
using testing_util::read_bytes;
using testing_util::TempDir;
using testing_util::write_bytes;

template <typename T>
std::span<const uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// A file made of an explicit header text and data region.
std::string raw_file(std::string_view header, std::string_view data) {
  return le64(header.size()) + std::string(header) + std::string(data);
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

TEST(SafetensorsDtype, Names) {
  EXPECT_EQ(safetensors_dtype_from_name("BF16"), DType::kBF16);
  EXPECT_EQ(safetensors_dtype_from_name("BOOL"), DType::kU8);
  EXPECT_EQ(safetensors_dtype_from_name("F8_E4M3"), DType::kF8E4M3);
  EXPECT_FALSE(safetensors_dtype_from_name("F64").has_value());
  EXPECT_FALSE(safetensors_dtype_from_name("bf16").has_value());
  EXPECT_EQ(safetensors_dtype_name(DType::kI64), "I64");
  EXPECT_FALSE(safetensors_dtype_name(DType::kQ4_K).has_value());
}

TEST(SafetensorsRoundTrip, SeveralDtypes) {
  TempDir dir;
  std::vector<float> f32 = {1.5f, -2.f, 3.25f, 0.f, 7.f, -8.5f};
  std::vector<uint16_t> bf16, f16;
  for (float x : f32) {
    bf16.push_back(f32_to_bf16(x));
    f16.push_back(f32_to_f16(x));
  }
  std::vector<uint8_t> f8 = {0x38, 0x40, 0xb8};
  std::vector<int32_t> i32 = {1, -2, 2147483647};
  std::vector<int64_t> i64 = {int64_t{1} << 40, -5};
  std::vector<uint8_t> u8 = {0, 1, 255, 7, 9};
  std::vector<uint32_t> u32 = {4000000000u};
  std::vector<float> scalar = {42.f};
  std::vector<SafetensorsWriteTensor> in = {
      {"model.layers.0.w", DType::kF32, Shape{2, 3}, as_bytes(f32)},
      {"b.bf16", DType::kBF16, Shape{3, 2}, as_bytes(bf16)},
      {"a.f16", DType::kF16, Shape{6}, as_bytes(f16)},
      {"fp8", DType::kF8E4M3, Shape{3}, as_bytes(f8)},
      {"ids", DType::kI32, Shape{3}, as_bytes(i32)},
      {"big", DType::kI64, Shape{1, 2}, as_bytes(i64)},
      {"mask", DType::kU8, Shape{5}, as_bytes(u8)},
      {"u", DType::kU32, Shape{1}, as_bytes(u32)},
      {"scalar", DType::kF32, Shape{}, as_bytes(scalar)},
      {"empty", DType::kF32, Shape{0, 4}, {}},
  };
  const std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(write_safetensors(path, in, {{"format", "pt"}}).is_ok());

  // Header conventions of the reference library.
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("{\"__metadata__\""), 0u);
  auto parsed = nlohmann::json::parse(header);
  EXPECT_EQ(parsed["fp8"]["dtype"], "F8_E4M3");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ASSERT_EQ(file->tensors().size(), in.size());
  // Data is laid out in sorted-name order.
  for (size_t i = 1; i < file->tensors().size(); ++i) {
    EXPECT_LT(file->tensors()[i - 1].name, file->tensors()[i].name);
  }
  int64_t total = 0;
  for (const auto& w : in) {
    const SafetensorsTensor* t = file->find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name;
    ASSERT_EQ(t->nbytes, static_cast<int64_t>(w.data.size())) << w.name;
    if (t->nbytes > 0) {
      EXPECT_EQ(std::memcmp(t->data, w.data.data(), t->nbytes), 0) << w.name;
      EXPECT_EQ(std::memcmp(bytes.data() + t->file_offset, w.data.data(), w.data.size()), 0);
    }
    total += t->nbytes;
  }
  EXPECT_EQ(file->data_bytes(), total);
  EXPECT_EQ(file->find("missing"), nullptr);
  const SafetensorsTensor* w = file->find("model.layers.0.w");
  EXPECT_FLOAT_EQ(w->view().as<const float>()[5], -8.5f);
  EXPECT_FLOAT_EQ(bf16_to_f32(file->find("b.bf16")->view().as<const uint16_t>()[2]), 3.25f);
  EXPECT_EQ(file->find("scalar")->shape.rank(), 0);
}

TEST(SafetensorsRoundTrip, NoMetadataAndEmptyFile) {
  TempDir dir;
  const std::string path = dir.file("e.safetensors");
  ASSERT_TRUE(write_safetensors(path, {}).is_ok());
  std::string bytes = read_bytes(path);
  EXPECT_EQ(bytes.substr(8), "{}      ");
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_TRUE(file->metadata().empty());
}

TEST(SafetensorsWriter, RejectsBadInput) {
  TempDir dir;
  std::vector<float> four(4);
  std::vector<SafetensorsWriteTensor> dup = {{"x", DType::kF32, Shape{4}, as_bytes(four)},
                                             {"x", DType::kF32, Shape{4}, as_bytes(four)}};
  EXPECT_TRUE(has_error(write_safetensors(dir.file("a"), dup), StatusCode::kInvalidArgument,
                        {"'x'", "duplicate"}));
  std::vector<SafetensorsWriteTensor> size = {{"y", DType::kF32, Shape{5}, as_bytes(four)}};
  EXPECT_TRUE(has_error(write_safetensors(dir.file("b"), size), StatusCode::kInvalidArgument,
                        {"'y'", "16 bytes", "20"}));
  std::vector<uint8_t> q(144);
  std::vector<SafetensorsWriteTensor> quant = {{"q", DType::kQ4_K, Shape{256}, as_bytes(q)}};
  EXPECT_TRUE(has_error(write_safetensors(dir.file("c"), quant), StatusCode::kUnsupported,
                        {"'q'", "q4_k"}));
  std::vector<SafetensorsWriteTensor> reserved = {
      {"__metadata__", DType::kF32, Shape{4}, as_bytes(four)}};
  EXPECT_EQ(write_safetensors(dir.file("d"), reserved).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a")));
  EXPECT_EQ(write_safetensors(dir.file("no/such/dir/x"), {}).code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Corrupt files

class SafetensorsCorrupt : public ::testing::Test {
 protected:
  Status open_raw(std::string_view bytes) {
    write_bytes(path_, bytes);
    auto f = SafetensorsFile::open(path_);
    return f.is_ok() ? Status::ok() : f.status();
  }
  Status open_header(std::string_view header, std::string_view data) {
    return open_raw(raw_file(header, data));
  }
  TempDir dir_;
  std::string path_ = dir_.file("bad.safetensors");
};

TEST_F(SafetensorsCorrupt, MissingFile) {
  auto f = SafetensorsFile::open(dir_.file("nope.safetensors"));
  EXPECT_TRUE(has_error(f.status(), StatusCode::kNotFound, {"nope.safetensors"}));
}

TEST_F(SafetensorsCorrupt, DirectoryIsNotAFile) {
  auto f = SafetensorsFile::open(dir_.path().string());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsCorrupt, ShorterThanEightBytes) {
  EXPECT_TRUE(has_error(open_raw(""), StatusCode::kDataLoss, {path_, "0 bytes"}));
  EXPECT_TRUE(has_error(open_raw(std::string(7, '\0')), StatusCode::kDataLoss, {"7 bytes"}));
}

TEST_F(SafetensorsCorrupt, HeaderLengthAbsurd) {
  EXPECT_TRUE(has_error(open_raw(le64(uint64_t{1} << 62) + "{}"), StatusCode::kDataLoss,
                        {path_, "exceeds the limit"}));
  EXPECT_TRUE(
      has_error(open_raw(le64(~uint64_t{0}) + "{}"), StatusCode::kDataLoss, {"exceeds the limit"}));
}

TEST_F(SafetensorsCorrupt, HeaderLengthPastEnd) {
  EXPECT_TRUE(
      has_error(open_raw(le64(100) + "{}"), StatusCode::kDataLoss, {path_, "past the end"}));
  // Only the length, nothing else.
  EXPECT_TRUE(has_error(open_raw(le64(1)), StatusCode::kDataLoss, {"past the end"}));
}

TEST_F(SafetensorsCorrupt, HeaderNotJson) {
  EXPECT_TRUE(
      has_error(open_header("{not json", ""), StatusCode::kDataLoss, {path_, "not valid JSON"}));
  EXPECT_TRUE(has_error(open_header("", ""), StatusCode::kDataLoss, {"not valid JSON"}));
  EXPECT_TRUE(has_error(open_header("[1, 2]", ""), StatusCode::kDataLoss, {"not a JSON object"}));
  EXPECT_TRUE(has_error(open_header("\"s\"", ""), StatusCode::kDataLoss, {"not a JSON object"}));
}

TEST_F(SafetensorsCorrupt, DeepNestingIsRejectedWithoutRecursion) {
  std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_TRUE(has_error(open_header(deep, ""), StatusCode::kDataLoss, {"nests deeper"}));
}

TEST_F(SafetensorsCorrupt, UnknownDtype) {
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, 0)),
      StatusCode::kUnsupported, {path_, "'w'", "'F64'"}));
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,8]}})", std::string(8, 0)),
      StatusCode::kDataLoss, {"'w'", "dtype"}));
}

TEST_F(SafetensorsCorrupt, BoolReadsAsU8) {
  ASSERT_TRUE(open_header(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                          std::string("\1\0\1", 3))
                  .is_ok());
  auto f = SafetensorsFile::open(path_);
  EXPECT_EQ(f->find("m")->dtype, DType::kU8);
}

TEST_F(SafetensorsCorrupt, BadShapes) {
  EXPECT_TRUE(has_error(open_header(R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})",
                                    std::string(8, 0)),
                        StatusCode::kDataLoss, {"'w'", "negative dimension -1"}));
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", std::string(8, 0)),
      StatusCode::kDataLoss, {"'w'", "invalid dimension 2.5"}));
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", std::string(8, 0)),
      StatusCode::kDataLoss, {"'w'", "shape"}));
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})", "x"),
      StatusCode::kUnsupported, {"'w'", "rank 7"}));
  // numel overflows int64: must not wrap around into a "matching" size.
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})",
                  ""),
      StatusCode::kDataLoss, {"'w'", "too large"}));
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})",
                  ""),
      StatusCode::kDataLoss, {"'w'"}));
}

TEST_F(SafetensorsCorrupt, SizeNotEqualToSpan) {
  EXPECT_TRUE(has_error(open_header(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
                                    std::string(12, 0)),
                        StatusCode::kDataLoss, {path_, "'w'", "span 12 bytes", "needs 16"}));
}

TEST_F(SafetensorsCorrupt, MalformedOffsets) {
  EXPECT_TRUE(
      has_error(open_header(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}})", "ab"),
                StatusCode::kDataLoss, {"'w'", "invalid data_offsets"}));
  EXPECT_TRUE(
      has_error(open_header(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[-2,0]}})", "ab"),
                StatusCode::kDataLoss, {"'w'", "invalid data_offsets"}));
  EXPECT_TRUE(has_error(open_header(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", "ab"),
                        StatusCode::kDataLoss, {"'w'", "data_offsets"}));
  EXPECT_TRUE(has_error(open_header(R"({"w":{"dtype":"U8","shape":[2]}})", "ab"),
                        StatusCode::kDataLoss, {"'w'", "data_offsets"}));
  EXPECT_TRUE(has_error(open_header(R"({"w":[1,2]})", ""), StatusCode::kDataLoss,
                        {"'w'", "not an object"}));
}

TEST_F(SafetensorsCorrupt, OffsetsPastEnd) {
  // The header is honest but the file was truncated.
  EXPECT_TRUE(has_error(
      open_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(10, 0)),
      StatusCode::kDataLoss, {path_, "'w'", "run past the data region of 10 bytes"}));
  EXPECT_TRUE(has_error(
      open_header(
          R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[9223372036854775800,9223372036854775804]}})",
          ""),
      StatusCode::kDataLoss, {"'w'", "run past"}));
}

TEST_F(SafetensorsCorrupt, OverlappingOffsets) {
  EXPECT_TRUE(has_error(open_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
                                        "b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                                    "abcdef"),
                        StatusCode::kDataLoss, {"'b'", "overlaps tensor 'a'"}));
  // Two tensors sharing the same bytes.
  EXPECT_TRUE(has_error(open_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
                                        "b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                                    "abcd"),
                        StatusCode::kDataLoss, {"overlaps"}));
}

TEST_F(SafetensorsCorrupt, DuplicateTensorName) {
  EXPECT_TRUE(has_error(open_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},
                                        "a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                                    "abcd"),
                        StatusCode::kDataLoss, {path_, "'a' twice"}));
}

TEST_F(SafetensorsCorrupt, GapsAndTrailingBytes) {
  EXPECT_TRUE(has_error(open_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},
                                        "b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                                    "abcdef"),
                        StatusCode::kDataLoss, {"gap of 2 bytes", "'b'"}));
  EXPECT_TRUE(
      has_error(open_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", "abcd"),
                StatusCode::kDataLoss, {"gap", "'a'"}));
  EXPECT_TRUE(
      has_error(open_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcd"),
                StatusCode::kDataLoss, {"cover 2 bytes", "holds 4"}));
  // Data region but no tensors at all.
  EXPECT_TRUE(has_error(open_header("{}", "xx"), StatusCode::kDataLoss, {"trailing"}));
}

TEST_F(SafetensorsCorrupt, BadMetadata) {
  EXPECT_TRUE(has_error(open_header(R"({"__metadata__":{"format":1}})", ""), StatusCode::kDataLoss,
                        {"__metadata__", "'format'"}));
  EXPECT_TRUE(has_error(open_header(R"({"__metadata__":"x"})", ""), StatusCode::kDataLoss,
                        {"__metadata__"}));
}

TEST_F(SafetensorsCorrupt, UnpaddedHeaderIsAccepted) {
  // Alignment padding is a convention, not a requirement.
  ASSERT_TRUE(
      open_header(R"({"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", "abc").is_ok());
}

// Every truncation of a valid file fails cleanly (never crashes or succeeds).
TEST_F(SafetensorsCorrupt, EveryTruncationFails) {
  std::vector<float> a = {1, 2, 3}, b = {4, 5};
  std::vector<SafetensorsWriteTensor> in = {{"a", DType::kF32, Shape{3}, as_bytes(a)},
                                            {"b", DType::kF32, Shape{2}, as_bytes(b)}};
  const std::string good = dir_.file("good.safetensors");
  ASSERT_TRUE(write_safetensors(good, in).is_ok());
  std::string bytes = read_bytes(good);
  for (size_t n = 0; n < bytes.size(); ++n) {
    Status s = open_raw(std::string_view(bytes).substr(0, n));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << n << ": " << s.to_string();
  }
  EXPECT_TRUE(open_raw(bytes).is_ok());
}

// ---------------------------------------------------------------------------
// Checkpoints (single file, folder, sharded folder)

std::vector<float> iota(int n, float start) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

class SafetensorsCheckpointTest : public ::testing::Test {
 protected:
  void write_shard(const std::string& name, const std::vector<std::string>& tensors) {
    std::vector<std::vector<float>> data;
    std::vector<SafetensorsWriteTensor> in;
    data.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      data.push_back(iota(4, static_cast<float>(tensors[i].size() * 10)));
      in.push_back({tensors[i], DType::kF32, Shape{2, 2}, as_bytes(data.back())});
    }
    ASSERT_TRUE(write_safetensors(dir_.file(name), in).is_ok());
  }
  void write_index(const nlohmann::json& weight_map) {
    nlohmann::json index = {{"metadata", {{"total_size", 64}}}, {"weight_map", weight_map}};
    write_bytes(dir_.file("model.safetensors.index.json"), index.dump(2));
  }
  void write_two_shards() {
    write_shard("model-00001-of-00002.safetensors", {"embed", "layer.0.w"});
    write_shard("model-00002-of-00002.safetensors", {"layer.1.w", "lm_head"});
  }
  nlohmann::json good_map() const {
    return {{"embed", "model-00001-of-00002.safetensors"},
            {"layer.0.w", "model-00001-of-00002.safetensors"},
            {"layer.1.w", "model-00002-of-00002.safetensors"},
            {"lm_head", "model-00002-of-00002.safetensors"}};
  }
  Status open_dir() {
    auto c = SafetensorsCheckpoint::open(dir_.path().string());
    return c.is_ok() ? Status::ok() : c.status();
  }
  TempDir dir_;
};

TEST_F(SafetensorsCheckpointTest, DirectFile) {
  write_shard("weights.safetensors", {"x", "y"});
  auto c = SafetensorsCheckpoint::open(dir_.file("weights.safetensors"));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(c->total_bytes(), 32);
  EXPECT_EQ(c->files().size(), 1u);
}

TEST_F(SafetensorsCheckpointTest, SingleFileFolder) {
  write_shard("model.safetensors", {"w"});
  auto c = SafetensorsCheckpoint::open(dir_.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  ASSERT_NE(c->find("w"), nullptr);
  EXPECT_FLOAT_EQ(c->find("w")->view().as<const float>()[3], 13.f);
}

TEST_F(SafetensorsCheckpointTest, ShardedFolder) {
  write_two_shards();
  write_index(good_map());
  Result<SafetensorsCheckpoint> opened = SafetensorsCheckpoint::open(dir_.path().string());
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  // Move it: the mappings and tensor pointers must survive.
  SafetensorsCheckpoint c = std::move(opened).value();
  EXPECT_EQ(c.names(), (std::vector<std::string>{"embed", "layer.0.w", "layer.1.w", "lm_head"}));
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(c.total_bytes(), 64);
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.metadata().at("total_size"), "64");
  auto head = c.get("lm_head");
  ASSERT_TRUE(head.is_ok());
  EXPECT_EQ((*head)->shape, (Shape{2, 2}));
  EXPECT_FLOAT_EQ((*head)->view().as<const float>()[1], 71.f);
  EXPECT_NE(c.find("embed")->data, nullptr);
  EXPECT_FLOAT_EQ(c.find("layer.0.w")->view().as<const float>()[0], 90.f);
  EXPECT_TRUE(has_error(c.get("nope").status(), StatusCode::kNotFound, {"'nope'"}));
}

TEST_F(SafetensorsCheckpointTest, UnlistedShardTensorsAreKept) {
  write_two_shards();
  nlohmann::json map = good_map();
  map.erase("lm_head");
  write_index(map);
  auto c = SafetensorsCheckpoint::open(dir_.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_NE(c->find("lm_head"), nullptr);
  EXPECT_EQ(c->size(), 4u);
}

TEST_F(SafetensorsCheckpointTest, WriterShardsAndReadsBack) {
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsWriteTensor> in;
  data.reserve(5);
  auto tname = [](int k) { return std::string{'t', static_cast<char>('0' + k)}; };
  for (int i = 0; i < 5; ++i) {
    data.push_back(iota(4 + i, static_cast<float>(i)));  // 16..32 bytes
    in.push_back({tname(4 - i), DType::kF32, Shape{4 + i}, as_bytes(data.back())});
  }
  const std::string sharded = dir_.file("sharded");
  ASSERT_TRUE(write_safetensors_checkpoint(sharded, in, 50, {{"format", "pt"}}).is_ok());
  EXPECT_TRUE(std::filesystem::exists(sharded + "/model-00001-of-00004.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(sharded + "/model.safetensors"));
  auto index = nlohmann::json::parse(read_bytes(sharded + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 16 + 20 + 24 + 28 + 32);
  EXPECT_EQ(index["weight_map"]["t0"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["t4"], "model-00004-of-00004.safetensors");
  auto c = SafetensorsCheckpoint::open(sharded);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->files().size(), 4u);
  EXPECT_EQ(c->total_bytes(), 120);
  for (int i = 0; i < 5; ++i) {
    const SafetensorsTensor* t = c->find(tname(4 - i));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, Shape{4 + i});
    EXPECT_FLOAT_EQ(t->view().as<const float>()[3], i + 3.f);
  }
  EXPECT_EQ(c->files()[0].metadata().at("format"), "pt");

  const std::string single = dir_.file("single");
  ASSERT_TRUE(write_safetensors_checkpoint(single, in, 1 << 20).is_ok());
  EXPECT_TRUE(std::filesystem::exists(single + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(single + "/model.safetensors.index.json"));
  auto c1 = SafetensorsCheckpoint::open(single);
  ASSERT_TRUE(c1.is_ok()) << c1.status().to_string();
  EXPECT_EQ(c1->size(), 5u);

  EXPECT_EQ(write_safetensors_checkpoint(dir_.file("z"), in, 0).code(),
            StatusCode::kInvalidArgument);
  in.push_back(in.front());
  EXPECT_EQ(write_safetensors_checkpoint(dir_.file("d"), in, 16).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsCheckpointTest, SingleFileWinsOverIndex) {
  write_shard("model.safetensors", {"only"});
  write_bytes(dir_.file("model.safetensors.index.json"), "garbage");
  auto c = SafetensorsCheckpoint::open(dir_.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->names(), std::vector<std::string>{"only"});
}

TEST_F(SafetensorsCheckpointTest, MissingThings) {
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kNotFound, {"model.safetensors.index.json"}));
  auto c = SafetensorsCheckpoint::open(dir_.file("absent"));
  EXPECT_TRUE(has_error(c.status(), StatusCode::kNotFound, {"absent"}));
  write_shard("model-00001-of-00002.safetensors", {"embed", "layer.0.w"});
  write_index(good_map());
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kNotFound,
                        {"model-00002-of-00002.safetensors", "does not exist"}));
}

TEST_F(SafetensorsCheckpointTest, TensorNotInItsShard) {
  write_two_shards();
  nlohmann::json map = good_map();
  map["lm_head"] = "model-00001-of-00002.safetensors";
  write_index(map);
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss,
                        {"'lm_head'", "model-00001-of-00002.safetensors", "does not contain"}));
  map = good_map();
  map["ghost"] = "model-00002-of-00002.safetensors";
  write_index(map);
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss, {"'ghost'"}));
}

TEST_F(SafetensorsCheckpointTest, DuplicateAcrossShards) {
  write_shard("model-00001-of-00002.safetensors", {"embed", "dup"});
  write_shard("model-00002-of-00002.safetensors", {"dup", "lm_head"});
  write_index({{"embed", "model-00001-of-00002.safetensors"},
               {"dup", "model-00002-of-00002.safetensors"},
               {"lm_head", "model-00002-of-00002.safetensors"}});
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss, {"'dup'", "both"}));
}

TEST_F(SafetensorsCheckpointTest, BadIndex) {
  write_bytes(dir_.file("model.safetensors.index.json"), "{\"weight_map\": ");
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss,
                        {"model.safetensors.index.json", "not valid JSON"}));
  write_bytes(dir_.file("model.safetensors.index.json"), "{\"metadata\": {}}");
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss, {"weight_map"}));
  write_index({{"w", 3}});
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss, {"'w'", "not a file name"}));
  write_index({{"w", "../outside.safetensors"}});
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss, {"outside the model folder"}));
  write_index({{"w", "/etc/passwd"}});
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss, {"outside the model folder"}));
}

TEST_F(SafetensorsCheckpointTest, CorruptShardNamesTheShard) {
  write_two_shards();
  write_index(good_map());
  write_bytes(dir_.file("model-00002-of-00002.safetensors"), le64(3) + "{}");
  EXPECT_TRUE(has_error(open_dir(), StatusCode::kDataLoss, {"model-00002-of-00002.safetensors"}));
}

}  // namespace
}  // namespace ferrite
