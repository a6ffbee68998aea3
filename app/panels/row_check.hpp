// The Heads view's per-row check of attention weights (heads.cpp), in a header of its own so that
// tests can compare its vectorised path with the plain loop beside it.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mha::app::heads {

// One (rows, cols) matrix of a stage, addressed through its strides (no copy).
struct Plane {
  const float* p = nullptr;
  std::int64_t rs = 0, cs = 1;
  int rows = 0, cols = 0;
  float at(int i, int j) const { return p[std::int64_t(i) * rs + std::int64_t(j) * cs]; }
};

inline bool blocked(float v) {  // a -inf mask value
  return std::isinf(v) && v < 0;
}

// One row's share of the view's RowCheck (heads.cpp), kept per row so that a new result recomputes only the
// rows that changed; summed in row order (sum_rows) they give the whole check, the same digits every time.
struct RowPart {
  double ent = 0, ent_max = 0, err = 0;
  enum Kind : std::uint8_t { ordinary, nan, zero } kind = ordinary;
};

// A contiguous row (every weights row) is checked in loops the compiler vectorises: the entropy's
// p·log2(p) terms in float through Eigen's vectorised log, the row sum in double over 8 running sums
// (one running sum is a chain of dependent adds), the visible keys by comparison. libm's scalar log2
// and that chain were most of the Heads view's per-result work at L = 512. Any other row: the loop
// after it, which says the same thing plainly.
inline RowPart check_row(const Plane& w, const Plane* mask, int i) {
  double sum = 0, ent = 0;
  bool nan = false, all_zero = true;
  int visible = w.cols;
  if (w.cs == 1 && (!mask || mask->cs == 1)) {
    const float* x = w.p + std::int64_t(i) * w.rs;
    double part[8] = {};
    int j = 0;
    for (; j + 8 <= w.cols; j += 8)
      for (int k = 0; k < 8; ++k) part[k] += double(x[j + k]);
    for (; j < w.cols; ++j) part[0] += double(x[j]);
    sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    nan = std::isnan(sum);  // a NaN weight makes the sum NaN (weights are never infinite)
    const Eigen::Map<const Eigen::ArrayXf> p(x, w.cols);
    all_zero = !nan && p.abs().maxCoeff() == 0.0f;
    // A weight of 0 gives 0·log(FLT_MIN) = 0.
    ent = -double((p * p.max(std::numeric_limits<float>::min()).log()).sum()) / std::log(2.0);
    if (mask) {
      const float* m = mask->p + std::int64_t(i) * mask->rs;
      for (int k = 0; k < w.cols; ++k) visible -= int(m[k] == -std::numeric_limits<float>::infinity());
    }
  } else {
    for (int j = 0; j < w.cols; ++j) {
      const float p = w.at(i, j);
      if (std::isnan(p)) nan = true;
      if (p != 0) all_zero = false;
      if (p > 0) ent -= double(p) * std::log2(double(p));
      sum += double(p);
      if (mask && blocked(mask->at(i, j))) --visible;
    }
  }
  RowPart r;
  r.kind = nan ? RowPart::nan : all_zero ? RowPart::zero : RowPart::ordinary;
  r.ent = ent;
  r.ent_max = std::log2(double(std::max(visible, 1)));
  r.err = std::fabs(sum - 1.0);
  return r;
}

}  // namespace mha::app::heads
