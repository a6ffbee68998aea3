// The per-row check of attention weights: a softmax row sums to 1, its entropy sits between 0 (one
// key) and log2 of the keys it may see (uniform). One home for both users: the Heads view checks
// the rows of a trace it holds, and a forward asked for a weights overview (Options::weights_overview)
// checks each row while the fused loop has it in cache.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

// Compiled into the fused loop's kernels too (forward_kernels.cpp, once per instruction set), where
// it must get a name of its own in each copy, as Eigen does there.
#if defined(MHA_KERNEL_VARIANT)
namespace mha::detail::kernels::MHA_KERNEL_VARIANT::weights_check {
#else
namespace mha::weights_check {
#endif

// One (rows, cols) matrix of a stage, addressed through its strides (no copy).
template <class T>
struct PlaneOf {
  const T* p = nullptr;
  std::int64_t rs = 0, cs = 1;
  int rows = 0, cols = 0;
  T at(int i, int j) const { return p[std::int64_t(i) * rs + std::int64_t(j) * cs]; }
};
using Plane = PlaneOf<float>;

template <class T>
bool blocked(T v) {  // a -inf mask value
  return std::isinf(v) && v < 0;
}

// One row's check, kept per row so that a new result recomputes only the rows that changed; summed
// in row order they give a map's figures, the same digits every time.
struct RowPart {
  double ent = 0, ent_max = 0, err = 0;  // entropy in bits, log2 of the visible keys, |row sum - 1|
  enum Kind : std::uint8_t { ordinary, nan, zero } kind = ordinary;
};

// A contiguous row (every weights row) is checked 16 values at a time, in loops the compiler
// vectorises: the entropy's p·log2(p) terms through Eigen's vectorised log (a fixed 16: every value
// takes the same path whatever the row's length), the terms and the row sum in double over 8 running
// sums (value j into sum j mod 8; one running sum is a chain of dependent adds). So zeros after a
// row's last value change no digit (0 adds -0 and +0): the fused loop checks a row only as far as
// its last visible key. libm's scalar log2 and one chain were most of the Heads view's work at
// L = 512. Any other row: the loop after it, which says the same thing plainly.
template <class T>
struct Same {
  using type = T;
};

// mask: the row's merged-mask plane (its -inf cells are the keys the row may not see), or null.
// keys: without a mask, the row's length when w holds only its first values (the rest 0); -1: w.cols.
template <class T>
RowPart check_row(const PlaneOf<T>& w, const typename Same<PlaneOf<T>>::type* mask, int i, int keys = -1) {
  double sum = 0, ent = 0;
  bool nan = false, all_zero = true;
  int visible = keys >= 0 ? keys : w.cols;
  if (w.cs == 1 && (!mask || mask->cs == 1)) {
    const T* x = w.p + std::int64_t(i) * w.rs;
    constexpr int kChunk = 16;  // two rows of the 8 running sums
    using Chunk = Eigen::Array<T, kChunk, 1>;
    using Sums = Eigen::Array<double, 8, 1>;
    Sums part = Sums::Zero(), term = Sums::Zero();
    T top = 0;  // the largest |p|
    for (int j0 = 0; j0 < w.cols; j0 += kChunk) {
      Chunk p;
      const int n = std::min(kChunk, w.cols - j0);
      if (n == kChunk)
        p = Eigen::Map<const Chunk>(x + j0);
      else
        p.setZero(), std::copy(x + j0, x + j0 + n, p.data());
      // A weight of 0 gives 0·log(min normal) = -0.
      const Chunk t = p * p.max(std::numeric_limits<T>::min()).log();
      top = std::max(top, p.abs().maxCoeff());
      // value k into sum k mod 8, in k order
      part += p.template head<8>().template cast<double>();
      part += p.template tail<8>().template cast<double>();
      term += t.template head<8>().template cast<double>();
      term += t.template tail<8>().template cast<double>();
    }
    auto total = [](const Sums& a) {
      return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    };
    sum = total(part);
    nan = std::isnan(sum);  // a NaN weight makes the sum NaN (weights are never infinite)
    all_zero = !nan && top == T(0);
    ent = -total(term) / std::log(2.0);
    if (mask) {
      const T* m = mask->p + std::int64_t(i) * mask->rs;
      for (int k = 0; k < w.cols; ++k) visible -= int(m[k] == -std::numeric_limits<T>::infinity());
    }
  } else {
    for (int j = 0; j < w.cols; ++j) {
      const T p = w.at(i, j);
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

// The same check of a softmax row from the scores that made it, without a log per value: with
// p_j = exp(x_j - x_max) / z, the entropy -sum p_j ln p_j is ln z·sum p_j - sum p_j (x_j - x_max)
// (a blocked key, x_j = -inf, has p_j = 0 and adds nothing). The sums run in T over 16 lanes (no
// conversion per value). The fused loop's fast path for the rows it computes; check_row, the plain
// definition, is its reference, which the tests compare it with (entropy and row sum within float
// rounding, the rest exactly). p and x hold the row's first `len` values, the weights past them 0;
// mask_row: its merged-mask row, every key past len blocked (or null, and then keys: the row's
// length). For an ordinary row only (a finite, positive z).
template <class T>
RowPart check_softmax_row(const T* p, const T* x, T x_max, T z, int len, const T* mask_row, int keys) {
  constexpr int kChunk = 16;
  using Chunk = Eigen::Array<T, kChunk, 1>;
  Chunk part = Chunk::Zero(), term = Chunk::Zero();
  for (int j0 = 0; j0 < len; j0 += kChunk) {
    Chunk w, d;
    const int n = std::min(kChunk, len - j0);
    if (n == kChunk) {
      w = Eigen::Map<const Chunk>(p + j0);
      d = Eigen::Map<const Chunk>(x + j0) - x_max;
    } else {
      w.setZero(), d.setZero();
      for (int k = 0; k < n; ++k) w[k] = p[j0 + k], d[k] = x[j0 + k] - x_max;
    }
    part += w;
    // A blocked key's -inf is clamped to the lowest finite value: 0 times it adds -0.
    term += w * d.max(std::numeric_limits<T>::lowest());
  }
  double sum = 0, dot = 0;
  for (int k = 0; k < kChunk; ++k) sum += double(part[k]), dot += double(term[k]);
  int visible = mask_row ? len : keys;
  if (mask_row)
    for (int k = 0; k < len; ++k) visible -= int(mask_row[k] == -std::numeric_limits<T>::infinity());
  RowPart r;
  r.ent = (std::log(double(z)) * sum - dot) / std::log(2.0);
  r.ent_max = std::log2(double(std::max(visible, 1)));
  r.err = std::fabs(sum - 1.0);
  r.kind = RowPart::ordinary;
  return r;
}

}  // namespace
