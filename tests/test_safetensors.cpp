// Tests of the safetensors reader and writer: round trips for every supported dtype, hand-built
// files, f16/bf16 widening through to_tensor, and every malformed, truncated or unsupported file
// giving a FileError that names the file (and the tensor) and says what is wrong.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "errors.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "temp_dir.hpp"

using mha::Array;
using mha::DType;
using mha::FileError;
using mha::Shape;
using Bytes = std::vector<unsigned char>;
using Tensors = std::map<std::string, Array>;

namespace {

using mha::test::TempDir;

// Parses from an allocation of exactly `size` bytes, so ASan sees any read past the end.
Tensors parse(const Bytes& bytes, std::size_t size) {
  const Bytes exact(bytes.begin(), bytes.begin() + std::ptrdiff_t(size));
  return mha::parse_safetensors(exact.data(), exact.size(), "model.safetensors");
}
Tensors parse(const Bytes& bytes) {
  return parse(bytes, bytes.size());
}

// A hand-built file: little-endian u64 length of `header`, the header text, then `data`.
Bytes st_file(const std::string& header, const Bytes& data = {}) {
  Bytes out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<unsigned char>(std::uint64_t(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// A file holding one tensor "w" described by the given JSON fields.
Bytes one_tensor(const std::string& fields, const Bytes& data) {
  return st_file("{\"w\": {" + fields + "}}", data);
}

template <class T>
Bytes bytes_of(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

Array half_array(DType dtype, const std::vector<std::uint16_t>& bits) {
  Array a;
  a.dtype = dtype;
  a.shape = {std::int64_t(bits.size())};
  a.data = bytes_of(bits);
  return a;
}

const float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("safetensors round trip keeps dtype, shape and bytes for every dtype", "[safetensors]") {
  TempDir dir;
  Tensors tensors;
  int n = 0;
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::boolean}) {
    for (const Shape& shape : {Shape{}, Shape{5}, Shape{3, 4, 8}}) {
      Array a;
      a.dtype = dtype;
      a.shape = shape;
      a.data.resize(std::size_t(mha::numel(shape)) * mha::dtype_size(dtype));
      for (std::size_t i = 0; i < a.data.size(); ++i)
        a.data[i] = dtype == DType::boolean ? (i % 3 == 0) : static_cast<unsigned char>(i * 37 + n);
      tensors[std::string(mha::dtype_name(dtype)) + mha::shape_str(shape)] = a;
      ++n;
    }
  }
  const std::string path = dir.file("model.safetensors");
  mha::write_safetensors(path, tensors);
  REQUIRE_FALSE(std::filesystem::exists(path + ".tmp"));

  const Bytes file = mha::read_file_bytes(path);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[std::size_t(i)];
  REQUIRE(header_len % 8 == 0);  // data buffer 8-byte aligned

  const Tensors back = mha::read_safetensors(path);
  REQUIRE(back.size() == tensors.size());
  for (const auto& [name, a] : tensors) {
    INFO(name);
    REQUIRE(back.count(name) == 1);
    const Array& b = back.at(name);
    REQUIRE(b.dtype == a.dtype);
    REQUIRE(b.shape == a.shape);
    REQUIRE(b.data == a.data);
  }
}

TEST_CASE("safetensors empty file set round trips", "[safetensors]") {
  TempDir dir;
  mha::write_safetensors(dir.file("empty.safetensors"), {});
  REQUIRE(mha::read_safetensors(dir.file("empty.safetensors")).empty());
}

TEST_CASE("safetensors reads a hand-built file with metadata", "[safetensors]") {
  const Bytes data = bytes_of<std::uint16_t>({0x3F80, 0xC020, 0x0000, 0x4000});  // bf16 1 -2.5 0 2
  Bytes all = data;
  const Bytes f32 = bytes_of<float>({0.25f, -8.0f});
  all.insert(all.end(), f32.begin(), f32.end());
  all.push_back(1);
  all.push_back(0);
  const Tensors t =
      parse(st_file("{\"__metadata__\": {\"format\": \"pt\"},"
                    " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]},"
                    " \"a\": {\"shape\": [2, 2], \"data_offsets\": [0, 8], \"dtype\": \"BF16\"},"
                    " \"m\": {\"dtype\": \"BOOL\", \"shape\": [1, 2], \"data_offsets\": [16, 18]}}   ",
                    all));
  REQUIRE(t.size() == 3);
  REQUIRE(t.at("a").dtype == DType::bf16);
  REQUIRE(t.at("a").shape == Shape{2, 2});
  REQUIRE(mha::to_tensor<float>(t.at("a")).data == std::vector<float>{1.0f, -2.5f, 0.0f, 2.0f});
  REQUIRE(mha::to_tensor<float>(t.at("b")).data == std::vector<float>{0.25f, -8.0f});
  REQUIRE(t.at("m").dtype == DType::boolean);
  REQUIRE(t.at("m").data == Bytes{1, 0});
}

TEST_CASE("f16 and bf16 arrays widen to the right float values", "[safetensors][npy]") {
  TempDir dir;
  // f16: 1, -2.5, 65504 (largest), 2^-24 (smallest subnormal), 1023 * 2^-24 (largest subnormal),
  // inf, -inf, -0.
  const Array f16 = half_array(DType::f16, {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x8000});
  // bf16: 1, -2.5, 65280 (65504 is not representable), 2^-133 (smallest subnormal),
  // 255 * 2^120 = 3.39e38 (largest), inf.
  const Array bf16 = half_array(DType::bf16, {0x3F80, 0xC020, 0x477F, 0x0001, 0x7F7F, 0x7F80});
  const std::vector<float> f16_expected = {
      1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), 1023 * std::ldexp(1.0f, -24), kInf, -kInf, -0.0f};
  const std::vector<float> bf16_expected = {
      1.0f, -2.5f, 65280.0f, std::ldexp(1.0f, -133), std::ldexp(255.0f, 120), kInf};

  mha::write_safetensors(dir.file("h.safetensors"), {{"f16", f16}, {"bf16", bf16}});
  const Tensors t = mha::read_safetensors(dir.file("h.safetensors"));
  REQUIRE(t.at("f16").dtype == DType::f16);
  REQUIRE(t.at("bf16").dtype == DType::bf16);
  REQUIRE(mha::to_tensor<float>(t.at("f16")).data == f16_expected);
  REQUIRE(mha::to_tensor<float>(t.at("bf16")).data == bf16_expected);
  REQUIRE(std::signbit(mha::to_tensor<float>(f16).data.back()));

  // The same f16 bits through an NPY file.
  mha::write_npy(dir.file("h.npy"), f16);
  REQUIRE(mha::to_tensor<float>(mha::read_npy(dir.file("h.npy"))).data == f16_expected);

  // NaN stays NaN in both formats.
  REQUIRE(std::isnan(mha::to_tensor<float>(half_array(DType::f16, {0x7E00})).data[0]));
  REQUIRE(std::isnan(mha::to_tensor<float>(half_array(DType::bf16, {0x7FC0})).data[0]));
  REQUIRE(mha::to_tensor<double>(half_array(DType::f16, {0x3555})).data[0] ==
          Approx(1.0 / 3.0).epsilon(1e-3));
}

TEST_CASE("safetensors unsupported dtypes name the tensor, the dtype and the supported ones",
          "[safetensors]") {
  for (const char* dtype : {"I32", "U8", "I64", "F8_E4M3", "f32", ""}) {
    INFO(dtype);
    const Bytes file = one_tensor(
        std::string("\"dtype\": \"") + dtype + "\", \"shape\": [1], \"data_offsets\": [0, 4]", Bytes(4));
    REQUIRE_THROWS_AS(parse(file), FileError);
    REQUIRE_THROWS_WITH(parse(file),
                        Catch::Contains(std::string("model.safetensors: tensor 'w': dtype '") + dtype +
                                        "' is not supported (supported: F32, F64, F16, "
                                        "BF16, BOOL)"));
  }
}

TEST_CASE("safetensors malformed files throw FileError saying what is wrong", "[safetensors]") {
  SECTION("missing file") {
    TempDir dir;
    REQUIRE_THROWS_AS(mha::read_safetensors(dir.file("model.safetensors")), FileError);
    REQUIRE_THROWS_WITH(mha::read_safetensors(dir.file("model.safetensors")),
                        Catch::Contains("model.safetensors: cannot open: No such file or directory"));
  }
  SECTION("header length") {
    REQUIRE_THROWS_WITH(parse(Bytes{1, 0, 0}), Catch::Contains("truncated: file is 3 bytes"));
    REQUIRE_THROWS_WITH(parse(Bytes{}), Catch::Contains("truncated: file is 0 bytes"));
    Bytes huge = st_file("{}");
    huge[4] = 1;  // 2^32 + 2 bytes
    REQUIRE_THROWS_AS(parse(huge), FileError);
    REQUIRE_THROWS_WITH(parse(huge), Catch::Contains("exceeds the limit of 100000000 bytes"));
    Bytes longer = st_file("{}");
    longer[0] = 50;
    REQUIRE_THROWS_WITH(parse(longer), Catch::Contains("truncated: header length is 50 bytes, file has 2"));
  }
  SECTION("bad JSON and wrong structure") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{\"w\": {\"dtype\": \"F32\",", "malformed JSON header"},
        {"not json", "malformed JSON header"},
        {"", "malformed JSON header"},
        {"[1, 2]", "the JSON header must be an object, got array"},
        {"{\"w\": 3}", "tensor 'w': expected an object"},
        {"{\"__metadata__\": [1]}", "\"__metadata__\" must be an object"},
        {"{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", "tensor 'w': missing \"dtype\""},
        {"{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", "missing \"shape\""},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", "missing \"data_offsets\""},
        {"{\"w\": {\"dtype\": 1, \"shape\": [1], \"data_offsets\": [0, 4]}}", "\"dtype\" must be a string"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}",
         "\"shape\" must be an array"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
         "\"shape\" entries must be non-negative integers, got -1"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}",
         "must be non-negative integers, got 1.5"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}",
         "\"data_offsets\" must be [begin, end], got [0]"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [\"0\", 4]}}",
         "\"data_offsets\" must be non-negative integers"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}",
         "data_offsets [4, 0] has begin after end"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 12]}}",
         "tensor 'w': truncated: data_offsets [0, 12] reach past the end of the 8-byte data buffer"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}",
         "tensor 'w': shape (3,) float32 needs 12 bytes, but data_offsets [0, 8] hold 8"},
        {"{\"w\": {\"dtype\": \"F64\", \"shape\": [1000000000, 1000000000], \"data_offsets\": [0, 8]}}",
         "needs 8000000000000000000 bytes"},
        {"{\"w\": {\"dtype\": \"F64\", \"shape\": [2305843009213693952, 2], \"data_offsets\": [0, 8]}}",
         "needs more than 2^64 bytes"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0, 8]}}",
         "2^62"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [18446744073709551615], \"data_offsets\": [0, 8]}}",
         "too large"},
    };
    for (const auto& [header, message] : cases) {
      INFO(header);
      const Bytes file = st_file(header, Bytes(8));
      REQUIRE_THROWS_AS(parse(file), FileError);
      REQUIRE_THROWS_WITH(parse(file), Catch::Contains("model.safetensors: ") && Catch::Contains(message));
    }
    std::string many_dims = "\"dtype\": \"F32\", \"data_offsets\": [0, 4], \"shape\": [1";
    for (int i = 0; i < 64; ++i) many_dims += ", 1";
    REQUIRE_THROWS_WITH(parse(one_tensor(many_dims + "]", Bytes(4))),
                        Catch::Contains("shape has 65 dimensions (at most 64)"));
  }
}

TEST_CASE("safetensors files cut at any point throw FileError and never crash", "[safetensors]") {
  TempDir dir;
  Array a;
  a.shape = {2, 3};
  a.data = bytes_of<float>({1, 2, 3, 4, 5, 6});
  Array m;
  m.dtype = DType::boolean;
  m.shape = {3};
  m.data = {1, 0, 1};
  mha::write_safetensors(dir.file("m.safetensors"), {{"a", a}, {"mask", m}});
  const Bytes file = mha::read_file_bytes(dir.file("m.safetensors"));
  REQUIRE(parse(file).size() == 2);
  for (std::size_t cut = 0; cut < file.size(); ++cut) {
    INFO("cut at " << cut);
    REQUIRE_THROWS_AS(parse(file, cut), FileError);
  }
}

TEST_CASE("safetensors randomly corrupted files give FileError or valid arrays", "[safetensors]") {
  TempDir dir;
  Array a;
  a.dtype = DType::f64;
  a.shape = {2, 2};
  a.data = bytes_of<double>({1, 2, 3, 4});
  mha::write_safetensors(dir.file("m.safetensors"), {{"a", a}, {"b", a}});
  const Bytes good = mha::read_file_bytes(dir.file("m.safetensors"));
  std::mt19937 rng(99);
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes file = good;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) file[rng() % (good.size() - 64)] = static_cast<unsigned char>(rng());
    try {
      for (const auto& entry : parse(file)) {
        const Array& t = entry.second;
        REQUIRE(t.data.size() == std::size_t(t.numel()) * mha::dtype_size(t.dtype));
      }
    } catch (const FileError&) {
    }
  }
}

TEST_CASE("safetensors writer refuses what it cannot write", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  Array u8;
  u8.dtype = DType::u8;
  u8.shape = {1};
  u8.data = {7};
  REQUIRE_THROWS_AS(mha::write_safetensors(path, {{"x", u8}}), FileError);
  REQUIRE_THROWS_WITH(mha::write_safetensors(path, {{"x", u8}}),
                      Catch::Contains("cannot write tensor 'x': dtype uint8 is not supported "
                                      "(supported: F32, F64, F16, BF16, BOOL)"));

  Array bad;
  bad.shape = {3};
  bad.data = Bytes(8);
  REQUIRE_THROWS_WITH(mha::write_safetensors(path, {{"x", bad}}),
                      Catch::Contains("shape (3,) float32 does not match its 8 data bytes"));

  Array ok;
  ok.shape = {1};
  ok.data = Bytes(4);
  REQUIRE_THROWS_WITH(mha::write_safetensors(path, {{"__metadata__", ok}}),
                      Catch::Contains("reserved for metadata"));
  REQUIRE_THROWS_WITH(mha::write_safetensors(path, {{"\xff\xfe", ok}}),
                      Catch::Contains("cannot write the JSON header"));
  const std::string missing = dir.file("no_such_dir/w.safetensors");
  REQUIRE_THROWS_WITH(mha::write_safetensors(missing, {{"x", ok}}),
                      Catch::Contains(missing) && Catch::Contains("No such file or directory"));
  REQUIRE_FALSE(std::filesystem::exists(path));
}
