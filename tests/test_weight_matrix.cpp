// Weight matrices read in place (F32, F16, BF16): the widening against the portable conversion on
// every compiled kernel copy (subnormals, infinities, NaN), the products on tiles against a plain
// double loop over the widened values, the refusals, and a Llama checkpoint's big matrices kept as
// the file stores them.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "cpu_dispatch.hpp"
#include "errors.hpp"
#include "fixtures.hpp"
#include "io/hf_checkpoint.hpp"
#include "kernels/forward_kernels.hpp"
#include "model/weight_matrix.hpp"

using namespace mha;

namespace {

// A matrix's stored bytes with their owner. Values are random but representable, plus the special
// ones in the first row: zero, minus zero, a subnormal, an infinity and a NaN.
struct Stored {
  std::shared_ptr<std::vector<unsigned char>> bytes;
  WeightMatrix matrix;
};

Stored make(DType dtype, std::int64_t rows, std::int64_t cols, unsigned seed, bool specials = false) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  const std::size_t es = dtype_size(dtype), n = std::size_t(rows * cols);
  auto bytes = std::make_shared<std::vector<unsigned char>>(n * es + 1);  // +1: room to misalign
  for (std::size_t i = 0; i < n; ++i) {
    const float f = normal(gen);
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (dtype == DType::f32) {
      std::memcpy(bytes->data() + 4 * i, &f, 4);
    } else if (dtype == DType::bf16) {
      const std::uint16_t b = std::uint16_t(bits >> 16);
      std::memcpy(bytes->data() + 2 * i, &b, 2);
    } else {  // a normal half: sign, exponent 10..17, mantissa
      const std::uint16_t h =
          std::uint16_t(((bits >> 16) & 0x8000u) | ((10 + i % 8) << 10) | (bits & 0x3FFu));
      std::memcpy(bytes->data() + 2 * i, &h, 2);
    }
  }
  if (specials) {
    const std::vector<std::uint16_t> half = {0x0000, 0x8000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E00};
    const std::vector<std::uint16_t> bf = {0x0000, 0x8000, 0x0001, 0x007F, 0x7F80, 0xFF80, 0x7FC0};
    const std::vector<std::uint32_t> f32 = {0,           0x80000000u, 1,          0x007FFFFFu,
                                            0x7F800000u, 0xFF800000u, 0x7FC00000u};
    for (std::size_t i = 0; i < 7; ++i) {
      if (dtype == DType::f32)
        std::memcpy(bytes->data() + 4 * i, &f32[i], 4);
      else
        std::memcpy(bytes->data() + 2 * i, dtype == DType::f16 ? &half[i] : &bf[i], 2);
    }
  }
  WeightMatrix m(dtype, {rows, cols}, bytes->data(), bytes, "test.weight");
  return {bytes, m};
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

// y = x·Wᵀ in double over the widened values, the yardstick.
Tensor<float> plain_linear(const Tensor<float>& x, const Tensor<float>& w) {
  const std::int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  Tensor<float> y({rows, out});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < out; ++j) {
      double acc = 0;
      for (std::int64_t i = 0; i < in; ++i)
        acc += double(x.data[std::size_t(r * in + i)]) * w.data[std::size_t(j * in + i)];
      y.data[std::size_t(r * out + j)] = float(acc);
    }
  return y;
}

}  // namespace

TEST_CASE("Weight matrices widen F16 and BF16 exactly, on every kernel copy", "[weights]") {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Stored s = make(dtype, 3, 37, 7, true);
    const WeightMatrix& m = s.matrix;
    CHECK(m.rows() == 3);
    CHECK(m.cols() == 37);
    CHECK(m.nbytes() == 3 * 37 * dtype_size(dtype));
    CHECK(m.nonfinite() == 3);  // +inf, -inf, NaN
    // The portable conversion is the yardstick: to_tensor, at and row agree with it bit for bit.
    std::vector<float> want(3 * 37);
    convert_elements(dtype, s.bytes->data(), 3 * 37, want.data());
    CHECK(same_bits(want[2], dtype == DType::f16    ? 5.9604645e-08f
                             : dtype == DType::bf16 ? 9.1835496e-41f
                                                    : 1.4e-45f));
    const Tensor<float> t = m.to_tensor();
    std::vector<float> row(37);
    for (std::int64_t r = 0; r < 3; ++r) {
      m.row(r, row.data());
      for (std::int64_t c = 0; c < 37; ++c) {
        const float w = want[std::size_t(r * 37 + c)];
        CHECK(same_bits(row[std::size_t(c)], w));
        CHECK(same_bits(m.at(r, c), w));
        CHECK(same_bits(t.data[std::size_t(r * 37 + c)], w));
      }
    }
    // The kernels' widening (AVX-512's vcvtph2ps and shifts, AVX2's shifts, the scalar tail) equals it,
    // NaN aside (vcvtph2ps may quiet a NaN's payload; a NaN stays a NaN).
    const int type = dtype == DType::f32   ? detail::kernels::kWeightF32
                     : dtype == DType::f16 ? detail::kernels::kWeightF16
                                           : detail::kernels::kWeightBF16;
    for (const std::string& copy : cpu_kernels_supported()) {
      detail::ScopedCpuKernels use(copy);
      std::vector<float> got(want.size());
      widen_elements(s.bytes->data(), type, std::int64_t(got.size()), got.data());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO(copy << ", element " << i);
        if (std::isnan(want[i]))
          CHECK(std::isnan(got[i]));
        else
          CHECK(same_bits(got[i], want[i]));
      }
    }
  }
}

TEST_CASE("Weight matrix products on tiles equal a plain loop over the widened values", "[weights]") {
  // in = 8200 makes the tile 16 rows, so 37 output columns run as three tiles (the last one short);
  // in = 24 puts every column in one tile.
  for (const std::int64_t in : {std::int64_t(24), std::int64_t(8200)})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const Stored s = make(dtype, 37, in, 11);
      const Tensor<float> w = s.matrix.to_tensor();
      Tensor<float> x({16, in});  // 16 rows: at in = 8200 the product is split over 2 threads
      std::mt19937 gen(3);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (float& v : x.data) v = u(gen);
      const Tensor<float> want = plain_linear(x, w);
      const double tol = in > 1000 ? 5e-4 : 1e-5;  // float sums of 8200 products against double
      for (const std::string& copy : cpu_kernels_supported()) {
        detail::ScopedCpuKernels use(copy);
        for (Backend b : {Backend::reference, Backend::eigen})
          for (int threads : {1, 2}) {
            INFO(dtype_name(dtype) << ", in " << in << ", " << copy << ", " << backend_name(b) << ", "
                                   << threads << " threads");
            Tensor<float> y({16, 37});
            linear(x.ptr(), s.matrix, y.ptr(), 16, b, threads);
            CHECK(test::mismatch(y, want, tol, 1e-5) == "");
            // The LM head's product: each row of W times one x.
            Tensor<float> v({37});
            matvec(s.matrix, x.ptr() + in, v.ptr(), b, threads);
            const Tensor<float> row1({37},
                                     std::vector<float>(want.data.begin() + 37, want.data.begin() + 74));
            CHECK(test::mismatch(v, row1, tol, 1e-5) == "");
          }
      }
    }
}

TEST_CASE("Weight matrices refuse what the products cannot read, naming the tensor", "[weights]") {
  auto bytes = std::make_shared<std::vector<unsigned char>>(64);
  CHECK_THROWS_MATCHES(WeightMatrix(DType::i64, {2, 4}, bytes->data(), bytes, "lm_head.weight"), DtypeError,
                       Catch::Predicate<DtypeError>([](const DtypeError& e) {
                         return e.argument == "lm_head.weight" &&
                                std::string(e.what()).find("int64") != std::string::npos;
                       }));
  CHECK_THROWS_MATCHES(
      WeightMatrix(DType::bf16, {32}, bytes->data(), bytes, "model.norm.weight"), ShapeError,
      Catch::Predicate<ShapeError>([](const ShapeError& e) { return e.argument == "model.norm.weight"; }));
  CHECK_THROWS_AS(WeightMatrix(Tensor<float>({2, 2, 2})), ShapeError);
  // F32 off a float boundary is copied to an aligned buffer, with the same values.
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  std::memcpy(bytes->data() + 1, values.data(), values.size() * 4);
  const WeightMatrix odd(DType::f32, {2, 3}, bytes->data() + 1, bytes);
  CHECK(reinterpret_cast<std::uintptr_t>(odd.data) % alignof(float) == 0);
  CHECK(odd.to_tensor().data == values);
  CHECK(odd.same_values(WeightMatrix(Tensor<float>({2, 3}, values))));
  CHECK_FALSE(odd.same_values(WeightMatrix(Tensor<float>({3, 2}, values))));
}

TEST_CASE("A Llama checkpoint keeps its embedding, MLP and LM head as the file stores them",
          "[weights][llama]") {
  struct Case {
    const char* variant;
    DType dtype;
  };
  for (const Case& k : {Case{"gqa", DType::f32}, Case{"mqa", DType::f16}, Case{"qwen2", DType::bf16}}) {
    INFO(k.variant);
    const LoadedLlama loaded = load_llama(std::string(MHA_FIXTURES_DIR) + "/llama/" + k.variant);
    const LlamaWeights& w = loaded.model.weights;
    CHECK(w.embed_tokens.dtype == k.dtype);
    CHECK(w.embed_tokens.owner);  // the mapped file, kept open by the model
    for (const LlamaLayer& l : w.layers)
      for (const WeightMatrix* m : {&l.gate_proj, &l.up_proj, &l.down_proj}) CHECK(m->dtype == k.dtype);
    CHECK(w.layers[0].gate_proj.shape == Shape{24, 16});  // (I, C), as nn.Linear stores it
    CHECK(w.layers[0].down_proj.shape == Shape{16, 24});
    if (!w.lm_head.empty()) CHECK(w.lm_head.dtype == k.dtype);
    // A copy of the model shares the mapping rather than the bytes being copied.
    const LlamaModel copy = loaded.model;
    CHECK(copy.weights.embed_tokens.data == w.embed_tokens.data);
  }
}
