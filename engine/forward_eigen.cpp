// The Eigen forward: batched GEMMs for the projections, one GEMM per head for scores and context,
// a row-wise fused mask + softmax. Fills the same buffers as the reference (forward_reference.cpp).
#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "forward_detail.hpp"

namespace mha::detail {

namespace {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Map = Eigen::Map<RowMatrix<T>>;
template <class T>
using ConstMap = Eigen::Map<const RowMatrix<T>>;
// A column block of a row-major matrix, e.g. head h's d_k columns of q: (rows, cols), row stride given.
template <class T>
using StridedMap = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ConstStridedMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ConstVector = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>;

// y = x·Wᵀ + b, torch's F.linear: x (rows, in), W (out, in), y (rows, out) with row stride y_stride.
template <class T>
void linear(const T* x, std::int64_t rows, std::int64_t in, const T* W, const T* b, std::int64_t out, T* y,
            std::int64_t y_stride) {
  StridedMap<T> Y(y, rows, out, Eigen::OuterStride<>(y_stride));
  Y.noalias() = ConstMap<T>(x, rows, in) * ConstMap<T>(W, out, in).transpose();
  if (b) Y.rowwise() += ConstVector<T>(b, out);
}

}  // namespace

template <class T>
void forward_eigen(const Problem<T>& p, Buffers<T>& b) {
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, E = d.E, H = d.H, dk = d.d_k;
  const std::int64_t kv = d.G * dk;
  T* q = b.q->data();
  T* k = b.k->data();
  T* v = b.v->data();

  // In-projections: one GEMM for all N·L query rows; keys/values per batch item because their
  // rows S.. hold bias_k and the zero row.
  linear(p.query->data(), N * L, E, p.w_q, p.b_q, E, q, E);
  for (std::int64_t n = 0; n < N; ++n) {
    linear(p.key->data() + n * S * d.kdim, S, d.kdim, p.w_k, p.b_k, kv, k + n * Sp * kv, kv);
    linear(p.value->data() + n * S * d.vdim, S, d.vdim, p.w_v, p.b_v, kv, v + n * Sp * kv, kv);
    std::int64_t row = S;
    if (p.bias_k) {
      Map<T>(k + (n * Sp + row) * kv, 1, kv) = ConstMap<T>(p.bias_k, 1, kv);
      Map<T>(v + (n * Sp + row) * kv, 1, kv) = ConstMap<T>(p.bias_v, 1, kv);
      ++row;
    }
    if (p.add_zero_attn) {
      Map<T>(k + (n * Sp + row) * kv, 1, kv).setZero();
      Map<T>(v + (n * Sp + row) * kv, 1, kv).setZero();
    }
  }

  const T scale = std::sqrt(T(dk));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  RowMatrix<T> q_scaled(L, dk);  // torch divides q by √d_k before the product; so do we
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = p.kv_head(h);
      ConstStridedMap<T> Qh(q + n * L * E + h * dk, L, dk, Eigen::OuterStride<>(E));
      ConstStridedMap<T> Kh(k + n * Sp * kv + g * dk, Sp, dk, Eigen::OuterStride<>(kv));
      ConstStridedMap<T> Vh(v + n * Sp * kv + g * dk, Sp, dk, Eigen::OuterStride<>(kv));
      const std::int64_t off = (n * H + h) * L * Sp;
      Map<T> raw(b.scores->data() + off, L, Sp);
      Map<T> scaled(b.scores_scaled->data() + off, L, Sp);
      Map<T> masked(b.scores_masked->data() + off, L, Sp);
      Map<T> weights(b.weights->data() + off, L, Sp);
      raw.noalias() = Qh * Kh.transpose();
      q_scaled = Qh.array() / scale;
      scaled.noalias() = q_scaled * Kh.transpose();

      // Fused mask + softmax, row by row (the mask is broadcast, so rows are read by index).
      for (std::int64_t i = 0; i < L; ++i) {
        auto x = masked.row(i);
        if (p.mask)
          x = scaled.row(i) + ConstVector<T>(p.mask->values.data() + p.mask_index(n, h, i, 0), Sp);
        else
          x = scaled.row(i);
        const T row_max = x.maxCoeff();
        auto w = weights.row(i);
        if (row_max == neg_inf) {  // every key blocked: torch gives NaN (exp(-inf - -inf))
          ++b.fully_masked_rows;
          w.setConstant(p.fully_masked == FullyMasked::zero ? T(0) : std::numeric_limits<T>::quiet_NaN());
          continue;
        }
        // Eigen's vectorised exp clamps its argument near -88, so exp(-inf) would come out ~1e-39:
        // blocked keys are set to exactly 0, as torch (SLEEF exp) gives them.
        w = (x.array() == neg_inf).select(T(0), (x.array() - row_max).exp());
        w *= T(1) / w.sum();
      }
      StridedMap<T>(b.context->data() + (n * H + h) * L * dk, L, dk, Eigen::OuterStride<>(dk)).noalias() =
          weights * Vh;
      // concat[n, i, h·d_k + c] = context[n, h, i, c]: transpose(1, 2).contiguous().view
      StridedMap<T>(b.concat->data() + n * L * E + h * dk, L, dk, Eigen::OuterStride<>(E)) =
          ConstMap<T>(b.context->data() + (n * H + h) * L * dk, L, dk);
    }

  linear(b.concat->data(), N * L, E, p.w_o, p.b_o, E, b.output->data(), E);
  for (std::int64_t n = 0; n < N; ++n) {
    Map<T> avg(b.weights_avg->data() + n * L * Sp, L, Sp);
    avg.setZero();
    for (std::int64_t h = 0; h < H; ++h) avg += ConstMap<T>(b.weights->data() + (n * H + h) * L * Sp, L, Sp);
    avg /= T(H);
  }
}

template void forward_eigen<float>(const Problem<float>&, Buffers<float>&);
template void forward_eigen<double>(const Problem<double>&, Buffers<double>&);

}  // namespace mha::detail
