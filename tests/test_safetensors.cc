#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "runtime/core/crc32c.h"
#include "tests/temp_dir.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public testing::TempDirTest {
 protected:
  static std::string read_all(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // A file of the format built by hand: header text, then data.
  std::string handmade(const std::string& name, const std::string& header, const std::string& data) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
    return write(name, bytes + header + data);
  }

  void expect_refused(const std::string& file, const std::string& words) {
    auto r = SafetensorsReader::open(file);
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_NE(r.status().message().find(file), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status();
  }
};

// The three tensors the round trip writes, and their bytes.
std::vector<SafeTensor> sample_tensors() {
  return {{"h.0.attn.c_attn.weight", DType::kF32, {2, 3}},
          {"wte.weight", DType::kBF16, {4}},
          {"empty", DType::kF32, {0, 7}},
          {"ln_f.bias", DType::kF16, {1, 1, 5}}};
}

std::vector<char> sample_bytes(size_t i, size_t n) {
  std::vector<char> b(n);
  for (size_t k = 0; k < n; ++k) b[k] = static_cast<char>(i * 31 + k * 7 + 1);
  return b;
}

TEST_F(SafetensorsTest, WritesTheFormatExactlyAndReadsItBack) {
  const std::string file = path("model.safetensors");
  const auto tensors = sample_tensors();
  // Each tensor given in two parts (the first may be empty).
  const auto crc = write_safetensors(file, tensors, {{"format", "pt"}}, [&](size_t i, const ByteSink& out) {
    const std::vector<char> b = sample_bytes(i, tensors[i].numel() * dtype_size(tensors[i].dtype));
    ZEROD_RETURN_IF_ERROR(out(b.data(), b.size() / 2));
    return out(b.data() + b.size() / 2, b.size() - b.size() / 2);
  });
  ASSERT_TRUE(crc.ok()) << crc.status();
  EXPECT_FALSE(fs::exists(file + ".tmp"));

  // An independent reading of the bytes, by the format's definition.
  const std::string bytes = read_all(file);
  EXPECT_EQ(*crc, crc32c(bytes.data(), bytes.size()));  // of the whole file
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data starts 8-byte aligned";
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  const std::string data = bytes.substr(8 + n);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const std::map<std::string, std::pair<std::string, size_t>> want_dtype = {
      {"F32", {"F32", 4}}, {"BF16", {"BF16", 2}}, {"F16", {"F16", 2}}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& e = h.at(tensors[i].name);
    const std::string dt = e.at("dtype");
    EXPECT_EQ(dt, i == 1 ? "BF16" : i == 3 ? "F16" : "F32");
    EXPECT_EQ(e.at("shape").get<std::vector<int64_t>>(), tensors[i].shape);
    const uint64_t b = e.at("data_offsets")[0], en = e.at("data_offsets")[1];
    int64_t numel = 1;
    for (int64_t d : tensors[i].shape) numel *= d;
    EXPECT_EQ(en - b, numel * want_dtype.at(dt).second);
    const std::vector<char> want = sample_bytes(i, en - b);
    EXPECT_EQ(data.substr(b, en - b), std::string(want.begin(), want.end())) << tensors[i].name;
    ranges.push_back({b, en});
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto [b, en] : ranges) {
    EXPECT_EQ(b, at) << "sorted, no gap, no overlap";
    at = en;
  }
  EXPECT_EQ(at, data.size());

  // Our reader agrees.
  auto r = SafetensorsReader::open(file);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tensors().size(), tensors.size());
  EXPECT_EQ(r->metadata().at("format"), "pt");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafeTensor* t = r->find(tensors[i].name);
    ASSERT_NE(t, nullptr) << tensors[i].name;
    EXPECT_EQ(t->dtype, tensors[i].dtype);
    EXPECT_EQ(t->shape, tensors[i].shape);
    std::vector<char> got(t->end - t->begin);
    ASSERT_TRUE(r->read(*t, got.data()).ok());
    EXPECT_EQ(got, sample_bytes(i, got.size()));
  }
  EXPECT_EQ(r->find("missing"), nullptr);
}

TEST_F(SafetensorsTest, RefusesBrokenFilesNamingTheFileAndTensor) {
  const std::string ok_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_TRUE(SafetensorsReader::open(handmade("ok", ok_header, std::string(8, 'x'))).ok());

  expect_refused(write("short", "abc"), "too short");
  expect_refused(handmade("truncated", ok_header, std::string(7, 'x')), "tensor 'a'");
  expect_refused(handmade("trailing", ok_header, std::string(9, 'x')), "cover 8 of the 9");
  {
    std::string bytes(8, '\0');
    bytes[0] = 100;  // a header of 100 bytes in an 8+3 byte file
    expect_refused(write("longheader", bytes + "{}x"), "header length 100");
  }
  expect_refused(handmade("notjson", "{not json", ""), "notjson: the header is not valid JSON");
  expect_refused(handmade("notobject", "[1]", ""), "header is not a JSON object");
  // Keys given twice: nlohmann would keep the last of each.
  expect_refused(handmade("twice",
                          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":)"
                          R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                          std::string(8, 'x')),
                 "duplicate key 'a' in the top level");
  expect_refused(handmade("twice_dtype", R"({"a":{"dtype":"F32","shape":[2],"dtype":"I8","data_offsets":[0,8]}})",
                          std::string(8, 'x')),
                 "duplicate key 'dtype' in a");
  expect_refused(handmade("f64", R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, 'x')),
                 "tensor 'a' has dtype F64");
  expect_refused(handmade("size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')),
                 "tensor 'a' has 8 bytes for 3 elements");
  expect_refused(handmade("overlap",
                          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                              "b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          std::string(8, 'x')),
                 "overlaps");
  expect_refused(handmade("gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')),
                 "(a gap)");
  expect_refused(handmade("nooffsets", R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, 'x')),
                 "tensor 'a' needs data_offsets");
  expect_refused(handmade("hugeshape",
                          R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                          std::string(8, 'x')),
                 "larger than the file");
  EXPECT_EQ(SafetensorsReader::open(path("absent")).status().code(), absl::StatusCode::kNotFound);
}

// read_f32 converts 16-bit ranges in parts: a range at any offset, across
// parts, holds the values a whole-tensor conversion gives; a tensor that is
// not a float type is refused by name.
TEST_F(SafetensorsTest, ReadF32ConvertsAnyRangeOfASixteenBitTensor) {
  constexpr int64_t kN = 40000;  // over two of read_f32's parts
  const std::string file = path("half.safetensors");
  const std::vector<SafeTensor> tensors = {{"b", DType::kBF16, {kN}}, {"h", DType::kF16, {kN}}, {"i", DType::kI8, {4}}};
  std::vector<uint16_t> bits(kN);
  for (int64_t i = 0; i < kN; ++i) bits[i] = static_cast<uint16_t>(0x3c00 + (i * 7919) % 0x3ff);  // finite in both
  ASSERT_TRUE(write_safetensors(file, tensors, {}, [&](size_t i, const ByteSink& out) {
                return i < 2 ? out(bits.data(), kN * 2) : out("abcd", 4);
              }).ok());
  auto r = SafetensorsReader::open(file);
  ASSERT_TRUE(r.ok()) << r.status();
  for (DType t : {DType::kBF16, DType::kF16}) {
    const SafeTensor& tensor = *r->find(t == DType::kBF16 ? "b" : "h");
    std::vector<float> whole(kN);
    convert_to_f32(t, bits.data(), whole.data(), kN);
    for (auto [first, n] : {std::pair<int64_t, int64_t>{0, kN}, {123, 39000}, {16383, 2}, {kN - 1, 1}, {5, 0}}) {
      std::vector<float> got(n, NAN);
      ASSERT_TRUE(r->read_f32(tensor, first, n, got.data()).ok());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), whole.begin() + first)) << dtype_name(t) << " at " << first;
    }
  }
  float out[4];
  const absl::Status bad = r->read_f32(*r->find("i"), 0, 4, out);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("tensor 'i'"), std::string::npos) << bad;
}

TEST_F(SafetensorsTest, AFailedWriteLeavesNoFile) {
  const std::string file = path("model.safetensors");
  write("model.safetensors", "previous");
  const std::vector<SafeTensor> tensors = sample_tensors();
  // Tensor 3's writer fails; then one gives a byte too few, one a byte too many.
  const auto writer = [&](int short_by) {
    return [&, short_by](size_t i, const ByteSink& out) {
      if (i == 3 && short_by == 0) return absl::DataLossError("source gone");
      const size_t n = tensors[i].numel() * dtype_size(tensors[i].dtype) - (i == 3 ? short_by : 0);
      return out(std::vector<char>(n).data(), n);
    };
  };
  const auto s = write_safetensors(file, tensors, {}, writer(0));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  for (int short_by : {1, -1}) {
    const auto wrong = write_safetensors(file, tensors, {}, writer(short_by));
    EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInternal) << short_by;
    EXPECT_NE(wrong.status().message().find("ln_f.bias"), std::string::npos) << wrong.status();
  }
  EXPECT_EQ(read_all(file), "previous");
  EXPECT_FALSE(fs::exists(file + ".tmp"));
  EXPECT_FALSE(write_safetensors(file, {{"x", DType::kF32, {1}}, {"x", DType::kF32, {1}}}, {},
                                 [](size_t, const ByteSink& out) { return out("four", 4); })
                   .ok());
  EXPECT_EQ(read_all(file), "previous");
}

}  // namespace
}  // namespace zerod
