// Why attention divides the scores by √d_k, measured: on random q and k with unit-variance entries, a
// score q·k is a sum of d_k products and its spread grows like √d_k, so without the scale softmax
// puts nearly all of a row's weight on one key as d_k grows; divided by √d_k the scores keep a
// spread of about 1 and the rows stay as soft at every d_k. The √d_k view and lesson 3's handout
// plot these curves.
#pragma once

#include <cstdint>
#include <vector>

namespace mha {

// One d_k's row statistics, averaged over the rows drawn.
struct SaturationPoint {
  int d_k = 0;
  double max_weight_scaled = 0;    // mean over rows of the largest weight, softmax(q·kᵀ / √d_k)
  double entropy_scaled = 0;       // mean over rows of −Σ w·ln w (nats), scaled
  double max_weight_unscaled = 0;  // the same without the division: softmax(q·kᵀ)
  double entropy_unscaled = 0;
};

struct SaturationCurves {
  int keys = 0;  // weights a row: S
  int rows = 0;  // query rows averaged for each d_k
  std::uint64_t seed = 0;
  std::vector<SaturationPoint> points;  // in the order of the d_k asked for
  double uniform_entropy() const;       // ln(keys): a row of equal weights; 0 is one weight of 1
};

// The curves for each d_k in `d_ks` (each ≥ 1): for every d_k, `rows` query rows of `keys` keys,
// every entry of q and k drawn from N(0, 1) (mt19937 seeded by `seed` and d_k, Box–Muller, so the
// numbers are the same on every platform), scored with and without 1/√d_k. Throws ConfigError for
// a d_k, `keys` or `rows` below 1, or more than kMaxSaturationWork multiply-adds in all.
SaturationCurves softmax_saturation(const std::vector<int>& d_ks, int keys, int rows, std::uint64_t seed);
inline constexpr double kMaxSaturationWork = 4e8;

// 1, 2, 4, …, up to and including the largest power of two ≤ max_d_k.
std::vector<int> powers_of_two(int max_d_k);

}  // namespace mha
