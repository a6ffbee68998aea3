// The √d_k curves: without the scale softmax saturates as d_k grows (the largest weight of a row
// rises towards 1, its entropy falls towards 0); divided by √d_k the rows stay as soft at every d_k.
#include <catch2/catch.hpp>

#include "errors.hpp"
#include "saturation.hpp"

using namespace mha;

TEST_CASE("without the scale softmax saturates as d_k grows; with it the rows stay as soft", "[saturation]") {
  const std::vector<int> d_ks = powers_of_two(256);
  REQUIRE(d_ks.size() == 9);
  REQUIRE(d_ks.front() == 1);
  REQUIRE(d_ks.back() == 256);
  const int keys = 6;  // "the cat sat on the mat"
  const SaturationCurves c = softmax_saturation(d_ks, keys, 2000, 7);
  REQUIRE(c.points.size() == d_ks.size());
  const double uniform = c.uniform_entropy();

  for (const SaturationPoint& p : c.points) {
    // A row's largest weight lies between 1/keys (all equal) and 1; its entropy between 0 and ln keys.
    CHECK(p.max_weight_scaled >= 1.0 / keys);
    CHECK(p.max_weight_unscaled <= 1.0);
    CHECK(p.entropy_scaled > 0);
    CHECK(p.entropy_unscaled <= uniform);
  }
  // d_k = 1: the scale is 1, the two curves are the same numbers.
  CHECK(c.points.front().max_weight_scaled == Approx(c.points.front().max_weight_unscaled));

  // Unscaled: the largest weight rises and the entropy falls with every doubling (allowing for the
  // sampling noise of 2000 rows), ending near one weight of 1 and almost no entropy.
  for (std::size_t i = 1; i < c.points.size(); ++i) {
    CHECK(c.points[i].max_weight_unscaled > c.points[i - 1].max_weight_unscaled - 0.01);
    CHECK(c.points[i].entropy_unscaled < c.points[i - 1].entropy_unscaled + 0.02);
  }
  const SaturationPoint& last = c.points.back();
  CHECK(last.max_weight_unscaled > 0.9);
  CHECK(last.entropy_unscaled < 0.2 * uniform);
  CHECK(last.max_weight_unscaled - c.points.front().max_weight_unscaled > 0.3);

  // Scaled: flat. From d_k = 4 on the scores' spread is close to 1 (the product of two normals is far
  // from normal at d_k = 1), so the curves stay within a few hundredths of each other.
  double lo_m = 1, hi_m = 0, lo_h = 1e9, hi_h = 0;
  for (const SaturationPoint& p : c.points) {
    if (p.d_k < 4) continue;
    lo_m = std::min(lo_m, p.max_weight_scaled), hi_m = std::max(hi_m, p.max_weight_scaled);
    lo_h = std::min(lo_h, p.entropy_scaled), hi_h = std::max(hi_h, p.entropy_scaled);
  }
  CHECK(hi_m - lo_m < 0.05);
  CHECK(hi_h - lo_h < 0.1 * uniform);
  // And well away from saturation: at d_k = 256 the scaled row is much softer than the unscaled one.
  CHECK(last.max_weight_scaled < 0.7);
  CHECK(last.entropy_scaled > 0.5 * uniform);
}

TEST_CASE("the √d_k curves are the same numbers for the same seed, and a point does not depend on the others",
          "[saturation]") {
  const SaturationCurves a = softmax_saturation({4, 16, 64}, 8, 300, 3);
  const SaturationCurves b = softmax_saturation({64}, 8, 300, 3);
  const SaturationCurves c = softmax_saturation({4, 16, 64}, 8, 300, 4);
  CHECK(a.points[2].max_weight_unscaled == b.points[0].max_weight_unscaled);
  CHECK(a.points[2].entropy_scaled == b.points[0].entropy_scaled);
  CHECK(a.points[2].max_weight_unscaled != c.points[2].max_weight_unscaled);
}

TEST_CASE("the √d_k curves refuse sizes they cannot draw, naming the argument", "[saturation]") {
  auto arg = [](auto f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.argument;
    }
    return std::string();
  };
  CHECK(arg([] { softmax_saturation({0}, 6, 10, 1); }) == "d_k");
  CHECK(arg([] { softmax_saturation({4}, 0, 10, 1); }) == "keys");
  CHECK(arg([] { softmax_saturation({4}, 6, 0, 1); }) == "rows");
  CHECK(arg([] { softmax_saturation({4096}, 4096, 100000, 1); }) == "rows");
  CHECK(powers_of_two(100).back() == 64);
  CHECK(powers_of_two(1) == std::vector<int>{1});
}
