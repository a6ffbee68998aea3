// Tests of the NPY reader and writer: round trips for every dtype, files written by numpy itself
// (tests/data/npy, made by make_fixtures.py there), Fortran order, NPY 2.0/3.0 headers, and every
// malformed, truncated or unsupported file giving a FileError that says what is wrong.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "errors.hpp"
#include "io/npy.hpp"
#include "temp_dir.hpp"

using mha::Array;
using mha::DType;
using mha::FileError;
using mha::Shape;
using Bytes = std::vector<unsigned char>;

namespace {

const std::string kNpyData = MHA_FIXTURES_DIR "/../data/npy/";

using mha::test::TempDir;

// Parses from an allocation of exactly `size` bytes, so ASan sees any read past the end.
Array parse(const Bytes& bytes, std::size_t size) {
  const Bytes exact(bytes.begin(), bytes.begin() + std::ptrdiff_t(size));
  return mha::parse_npy(exact.data(), exact.size(), "query.npy");
}
Array parse(const Bytes& bytes) {
  return parse(bytes, bytes.size());
}

// A hand-built NPY file: preamble of format version `major`.0, the header text as given, the data.
Bytes npy_file(const std::string& header, const Bytes& data = {}, int major = 1) {
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  const int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out.push_back(static_cast<unsigned char>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class T>
Bytes bytes_of(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<float> floats(const Array& a) {
  return mha::to_tensor<float>(a).data;
}

std::vector<float> iota_floats(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float(i);
  return v;
}

}  // namespace

TEST_CASE("NPY round trip keeps dtype, shape and bytes for every dtype", "[npy]") {
  TempDir dir;
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::boolean, DType::u8, DType::i64}) {
    for (const Shape& shape : {Shape{}, Shape{5}, Shape{3, 4, 8}}) {
      INFO(mha::dtype_name(dtype) << " " << mha::shape_str(shape));
      Array a;
      a.dtype = dtype;
      a.shape = shape;
      a.data.resize(std::size_t(mha::numel(shape)) * mha::dtype_size(dtype));
      for (std::size_t i = 0; i < a.data.size(); ++i)
        a.data[i] = dtype == DType::boolean ? (i % 3 == 0) : static_cast<unsigned char>(i * 37 + 11);
      const std::string path = dir.file("a.npy");
      mha::write_npy(path, a);
      REQUIRE_FALSE(std::filesystem::exists(path + ".tmp"));

      const Bytes file = mha::read_file_bytes(path);
      REQUIRE(file[6] == 1);  // version 1.0
      REQUIRE(file[7] == 0);
      const std::size_t data_start = 10 + file[8] + 256u * file[9];
      REQUIRE(data_start % 64 == 0);
      REQUIRE(file[data_start - 1] == '\n');

      const Array b = mha::read_npy(path);
      REQUIRE(b.dtype == a.dtype);
      REQUIRE(b.shape == a.shape);
      REQUIRE(b.data == a.data);
    }
  }
}

TEST_CASE("NPY writer produces the same bytes as numpy", "[npy]") {
  TempDir dir;
  for (const char* name :
       {"f32_3x4x8.npy", "f16_special.npy", "bool_2x3.npy", "u8_5.npy", "i64_scalar.npy"}) {
    INFO(name);
    const Bytes expected = mha::read_file_bytes(kNpyData + name);
    mha::write_npy(dir.file(name), mha::read_npy(kNpyData + name));
    REQUIRE(mha::read_file_bytes(dir.file(name)) == expected);
  }
}

TEST_CASE("NPY reads the values of files written by numpy", "[npy]") {
  SECTION("float32 (3, 4, 8)") {
    const Array a = mha::read_npy(kNpyData + "f32_3x4x8.npy");
    REQUIRE(a.dtype == DType::f32);
    REQUIRE(a.shape == Shape{3, 4, 8});
    const std::vector<float> v = floats(a);
    for (std::size_t i = 0; i < v.size(); ++i) REQUIRE(v[i] == float(i) * 0.5f - 7.0f);
  }
  SECTION("float64 in Fortran order comes back in C order") {
    const Array a = mha::read_npy(kNpyData + "f64_fortran_2x3x4.npy");
    REQUIRE(a.dtype == DType::f64);
    REQUIRE(a.shape == Shape{2, 3, 4});
    const std::vector<double> v = mha::to_tensor<double>(a).data;
    for (std::size_t i = 0; i < v.size(); ++i) REQUIRE(v[i] == double(i));
  }
  SECTION("float16 specials") {
    const Array a = mha::read_npy(kNpyData + "f16_special.npy");
    REQUIRE(a.dtype == DType::f16);
    REQUIRE(floats(a) == std::vector<float>{1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24),
                                            std::numeric_limits<float>::infinity()});
  }
  SECTION("bool, uint8 and an int64 scalar") {
    const Array b = mha::read_npy(kNpyData + "bool_2x3.npy");
    REQUIRE(b.dtype == DType::boolean);
    REQUIRE(b.shape == Shape{2, 3});
    REQUIRE(b.data == Bytes{1, 0, 1, 0, 0, 1});
    const Array u = mha::read_npy(kNpyData + "u8_5.npy");
    REQUIRE(u.dtype == DType::u8);
    REQUIRE(u.data == Bytes{0, 1, 127, 128, 255});
    const Array s = mha::read_npy(kNpyData + "i64_scalar.npy");
    REQUIRE(s.dtype == DType::i64);
    REQUIRE(s.shape.empty());
    REQUIRE(mha::to_tensor<double>(s).data == std::vector<double>{-1234567890123.0});
  }
  SECTION("NPY 2.0 and 3.0 headers") {
    for (const char* name : {"f32_v2.npy", "f32_v3.npy"}) {
      INFO(name);
      const Array a = mha::read_npy(kNpyData + name);
      REQUIRE(a.shape == Shape{2, 3});
      REQUIRE(floats(a) == iota_floats(6));
    }
  }
}

TEST_CASE("NPY hand-built Fortran-order files give C-order values", "[npy]") {
  SECTION("2-D") {
    // C-order [[1, 2, 3], [4, 5, 6]] stored column by column.
    const Array a = parse(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n",
                                   bytes_of<float>({1, 4, 2, 5, 3, 6})));
    REQUIRE(a.shape == Shape{2, 3});
    REQUIRE(floats(a) == std::vector<float>{1, 2, 3, 4, 5, 6});
  }
  SECTION("3-D") {
    // Element (i, j, k) has value 100i + 10j + k; Fortran order puts it at i + 2j + 6k.
    std::vector<double> stored(24);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) stored[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
    const Array a =
        parse(npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4), }\n", bytes_of(stored)));
    const std::vector<double> v = mha::to_tensor<double>(a).data;
    std::size_t n = 0;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) REQUIRE(v[n++] == 100 * i + 10 * j + k);
  }
  SECTION("1-D and empty arrays need no reordering") {
    REQUIRE(floats(parse(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }\n",
                                  bytes_of<float>({7, 8, 9})))) == std::vector<float>{7, 8, 9});
    REQUIRE(parse(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (0, 3), }\n")).data.empty());
  }
}

TEST_CASE("NPY header dicts are parsed robustly", "[npy]") {
  const Bytes two = bytes_of<float>({1.5f, -2.0f});
  for (const char* header : {
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
           "{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}",
           "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2,)}",
           "  {  'fortran_order' :  False ,  'descr' : '=f4' , 'shape' : ( 2 , ) , }  \n",
           "{'descr': 'f4', 'fortran_order': False, 'shape': (2L,), }\n",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }\r\n",
       }) {
    INFO(header);
    const Array a = parse(npy_file(header, two));
    REQUIRE(a.dtype == DType::f32);
    REQUIRE(a.shape == Shape{2});
    REQUIRE(floats(a) == std::vector<float>{1.5f, -2.0f});
  }
  SECTION("scalar and empty shapes") {
    const Array s =
        parse(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", bytes_of<double>({3.25})));
    REQUIRE(s.shape.empty());
    REQUIRE(mha::to_tensor<double>(s).data == std::vector<double>{3.25});
    REQUIRE(parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 0), }")).shape ==
            Shape{4, 0});
  }
  SECTION("byte-order marks that cannot change a one-byte type") {
    for (const char* descr : {"|b1", "<b1", ">b1", "=b1", "|u1", ">u1"}) {
      INFO(descr);
      const Array a = parse(npy_file(
          std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }", Bytes{1, 0}));
      REQUIRE(a.data == Bytes{1, 0});
    }
  }
}

TEST_CASE("NPY unsupported dtypes name the dtype and the supported ones", "[npy]") {
  const std::string supported = "(supported: <f4, <f8, <f2, |b1, |u1, <i8)";
  REQUIRE_THROWS_AS(mha::read_npy(kNpyData + "f32_big_endian.npy"), FileError);
  REQUIRE_THROWS_WITH(mha::read_npy(kNpyData + "f32_big_endian.npy"),
                      Catch::Contains("f32_big_endian.npy: dtype '>f4' is not supported " + supported) &&
                          Catch::Contains("big-endian"));
  REQUIRE_THROWS_WITH(mha::read_npy(kNpyData + "i32.npy"),
                      Catch::Contains("dtype '<i4' is not supported " + supported));
  REQUIRE_THROWS_WITH(mha::read_npy(kNpyData + "object.npy"),
                      Catch::Contains("dtype '|O' is not supported " + supported));
  REQUIRE_THROWS_AS(mha::read_npy(kNpyData + "structured.npy"), FileError);
  REQUIRE_THROWS_WITH(mha::read_npy(kNpyData + "structured.npy"),
                      Catch::Contains("structured dtypes") && Catch::Contains(supported));
  for (const char* descr : {"|f4", "<f16", "<c8", "", "float32"}) {
    INFO(descr);
    const Bytes file = npy_file(
        std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (1,), }", Bytes(4));
    REQUIRE_THROWS_AS(parse(file), FileError);
    REQUIRE_THROWS_WITH(parse(file), Catch::Contains("is not supported " + supported));
  }
}

TEST_CASE("NPY malformed files throw FileError saying what is wrong", "[npy]") {
  const std::string tail = "'fortran_order': False, 'shape': (2,), }";
  SECTION("missing or unreadable file") {
    TempDir dir;
    REQUIRE_THROWS_AS(mha::read_npy(dir.file("query.npy")), FileError);
    REQUIRE_THROWS_WITH(mha::read_npy(dir.file("query.npy")),
                        Catch::Contains("query.npy: cannot open: No such file or directory"));
    REQUIRE_THROWS_WITH(mha::read_npy(dir.path.string()), Catch::Contains("cannot read: Is a directory"));
  }
  SECTION("bad magic and unsupported versions") {
    Bytes file = npy_file("{'descr': '<f4', " + tail, Bytes(8));
    file[1] = 'X';
    REQUIRE_THROWS_AS(parse(file), FileError);
    REQUIRE_THROWS_WITH(parse(file), Catch::Contains("query.npy: not an NPY file"));
    REQUIRE_THROWS_WITH(parse(Bytes{'P', 'K'}), Catch::Contains("not an NPY file"));
    file = npy_file("{'descr': '<f4', " + tail, Bytes(8), 4);
    REQUIRE_THROWS_WITH(parse(file),
                        Catch::Contains("version 4.0 is not supported (supported: 1.0, 2.0, 3.0)"));
    file = npy_file("{'descr': '<f4', " + tail, Bytes(8));
    file[7] = 1;
    REQUIRE_THROWS_WITH(parse(file), Catch::Contains("version 1.1 is not supported"));
  }
  SECTION("malformed header dicts") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"'descr': '<f4', " + tail, "expected the header to start with '{'"},
        {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
        {"{'fortran_order': False, 'shape': (2,)}", "missing key 'descr'"},
        {"{'descr': '<f4', 'shape': (2,)}", "missing key 'fortran_order'"},
        {"{'descr': '<f4', 'descr': '<f4', " + tail, "key 'descr' appears twice"},
        {"{'descr': '<f4', 'extra': 1, " + tail, "unexpected key 'extra'"},
        {"{'descr' '<f4', " + tail, "expected ':' after key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}", "expected True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", "expected a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", "negative dimension"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}", "',' or ')' in 'shape'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "dimension too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", "unexpected text after"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "',' or '}' after the value"},
        {"{descr: '<f4', " + tail, "expected a quoted key"},
        {"{'descr': 4, " + tail, "expected a quoted dtype string"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "',' or '}'"},
        {"", "expected the header to start with '{'"},
    };
    for (const auto& [header, message] : cases) {
      INFO(header);
      const Bytes file = npy_file(header, Bytes(8));
      REQUIRE_THROWS_AS(parse(file), FileError);
      REQUIRE_THROWS_WITH(parse(file),
                          Catch::Contains("query.npy: malformed NPY header") && Catch::Contains(message));
    }
    std::string many_dims = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (int i = 0; i < 65; ++i) many_dims += "1, ";
    REQUIRE_THROWS_WITH(parse(npy_file(many_dims + "), }", Bytes(4))),
                        Catch::Contains("shape has more than 64 dimensions"));
  }
  SECTION("data size disagrees with the shape") {
    const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4, 8), }";
    REQUIRE_THROWS_AS(parse(npy_file(header, Bytes(200))), FileError);
    REQUIRE_THROWS_WITH(
        parse(npy_file(header, Bytes(200))),
        Catch::Contains("query.npy: truncated: shape (3, 4, 8) float32 needs 384 data bytes, file has 200"));
    REQUIRE_THROWS_WITH(parse(npy_file(header, Bytes(400))),
                        Catch::Contains("needs 384 data bytes, file has 400 (unexpected bytes after"));
  }
  SECTION("absurd shapes are refused before allocating") {
    const auto file_with_shape = [](const std::string& shape) {
      return npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + ", }", Bytes(64));
    };
    REQUIRE_THROWS_AS(parse(file_with_shape("(4611686018427387904, 4)")), FileError);
    REQUIRE_THROWS_WITH(parse(file_with_shape("(4611686018427387904, 4)")),
                        Catch::Contains("query.npy:") && Catch::Contains("2^62"));
    REQUIRE_THROWS_WITH(parse(file_with_shape("(1000000000, 1000000000)")),
                        Catch::Contains("truncated: shape (1000000000, 1000000000) float64 needs "
                                        "8000000000000000000 data bytes, file has 64"));
    REQUIRE_THROWS_WITH(parse(file_with_shape("(2305843009213693952, 2)")),
                        Catch::Contains("needs more than 2^64 data bytes"));
  }
  SECTION("header length beyond the end of the file") {
    Bytes file = npy_file("{'descr': '<f4', " + tail, Bytes(8));
    file[9] = 0x7f;
    REQUIRE_THROWS_WITH(parse(file), Catch::Contains("truncated: header length is"));
    file = npy_file("{'descr': '<f4', " + tail, Bytes(8), 2);
    file[11] = 0xff;
    REQUIRE_THROWS_WITH(parse(file), Catch::Contains("truncated: header length is"));
  }
}

TEST_CASE("NPY files cut at any point throw FileError and never crash", "[npy]") {
  for (const char* name : {"f32_3x4x8.npy", "f64_fortran_2x3x4.npy", "f32_v2.npy", "i64_scalar.npy"}) {
    INFO(name);
    const Bytes file = mha::read_file_bytes(kNpyData + name);
    REQUIRE_NOTHROW(parse(file));
    for (std::size_t cut = 0; cut < file.size(); ++cut) {
      INFO("cut at " << cut);
      REQUIRE_THROWS_AS(parse(file, cut), FileError);
    }
  }
  REQUIRE_THROWS_WITH(parse(Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1}),
                      Catch::Contains("truncated: file is 7 bytes"));
  REQUIRE_THROWS_WITH(parse(Bytes{}), Catch::Contains("truncated: file is 0 bytes"));
}

TEST_CASE("NPY randomly corrupted headers give FileError or a valid array", "[npy]") {
  const Bytes good = mha::read_file_bytes(kNpyData + "f64_fortran_2x3x4.npy");
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes file = good;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) file[rng() % 130] = static_cast<unsigned char>(rng());
    try {
      const Array a = parse(file);
      REQUIRE(a.data.size() == std::size_t(a.numel()) * mha::dtype_size(a.dtype));
    } catch (const FileError&) {
    }
  }
}

TEST_CASE("NPY writer refuses what it cannot write", "[npy]") {
  TempDir dir;
  Array bf;
  bf.dtype = DType::bf16;
  bf.shape = {2};
  bf.data = Bytes(4);
  REQUIRE_THROWS_AS(mha::write_npy(dir.file("a.npy"), bf), FileError);
  REQUIRE_THROWS_WITH(mha::write_npy(dir.file("a.npy"), bf), Catch::Contains("cannot write bfloat16"));

  Array bad;
  bad.shape = {3};
  bad.data = Bytes(8);
  REQUIRE_THROWS_WITH(mha::write_npy(dir.file("a.npy"), bad),
                      Catch::Contains("shape (3,) float32 needs 12 bytes but holds 8"));

  Array ok;
  ok.shape = {1};
  ok.data = Bytes(4);
  const std::string missing = dir.file("no_such_dir/a.npy");
  REQUIRE_THROWS_AS(mha::write_npy(missing, ok), FileError);
  REQUIRE_THROWS_WITH(mha::write_npy(missing, ok),
                      Catch::Contains(missing) && Catch::Contains("No such file or directory"));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("a.npy")));
}

TEST_CASE("NPY writer replaces an existing file", "[npy]") {
  TempDir dir;
  const std::string path = dir.file("a.npy");
  Array a;
  a.shape = {2};
  a.data = bytes_of<float>({1, 2});
  mha::write_npy(path, a);
  a.shape = {3};
  a.data = bytes_of<float>({4, 5, 6});
  mha::write_npy(path, a);
  REQUIRE(floats(mha::read_npy(path)) == std::vector<float>{4, 5, 6});
}
