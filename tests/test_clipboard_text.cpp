// The clipboard's text forms of a heatmap: TSV with and without labels, a numpy literal, strided
// views, and NaN / infinities written as each format reads them.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "clipboard_text.hpp"

using mha::studio::MatrixView;

TEST_CASE("a matrix as TSV: labels as the first row and column, values that round-trip", "[clipboard]") {
  const std::vector<float> v = {0.25f, 0.75f, 1.0f / 3.0f, -2.5e-8f};
  const MatrixView m{v.data(), 2, 2, 2, 1};
  CHECK(mha::studio::matrix_tsv(m) == "0.25\t0.75\n0.333333343\t-2.50000003e-08\n");
  const std::vector<std::string> q = {"the", "cat"}, k = {"a\tb", "mat"};
  CHECK(mha::studio::matrix_tsv(m, &q, &k) ==
        "\ta b\tmat\n"
        "the\t0.25\t0.75\n"
        "cat\t0.333333343\t-2.50000003e-08\n");
  // Every printed value reads back as the same float.
  CHECK(std::stof("0.333333343") == 1.0f / 3.0f);
  CHECK(std::stof("-2.50000003e-08") == -2.5e-8f);
}

TEST_CASE("a strided view (a head of a trace, transposed) is read through its strides", "[clipboard]") {
  // A 2x3 buffer read as its 3x2 transpose.
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const MatrixView t{v.data(), 3, 2, 1, 3};
  CHECK(mha::studio::matrix_tsv(t) == "1\t4\n2\t5\n3\t6\n");
  CHECK(mha::studio::matrix_numpy(t) ==
        "np.array([[1, 4],\n"
        "          [2, 5],\n"
        "          [3, 6]], dtype=np.float32)");
}

TEST_CASE("NaN and infinities are written as each format spells them", "[clipboard]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {nan, inf, -inf, 0.5f};
  const MatrixView m{v.data(), 1, 4, 4, 1};
  CHECK(mha::studio::matrix_tsv(m) == "NaN\tinf\t-inf\t0.5\n");
  CHECK(mha::studio::matrix_numpy(m) == "np.array([[np.nan, np.inf, -np.inf, 0.5]], dtype=np.float32)");
}

TEST_CASE("an empty view gives empty text, not a crash", "[clipboard]") {
  CHECK(mha::studio::matrix_tsv(MatrixView{}).empty());
  CHECK(mha::studio::matrix_numpy(MatrixView{}) == "np.array([], dtype=np.float32)");
}
