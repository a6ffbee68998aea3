// The Eigen forward's arithmetic (see forward_eigen.cpp for the plan). This file is compiled once per
// instruction set, with MHA_KERNEL_VARIANT = sse2, avx2 or avx512 and that set's -m flags. Everything
// it defines lives in mha::detail::kernels::<variant>, and Eigen itself is renamed Eigen_<variant>:
// Eigen's templates (and ours) instantiated here with AVX code get names of their own, so the linker
// never picks an AVX copy for the SSE2 path. It uses no std:: container or thread (those live in the
// portable forward_eigen.cpp); tests/check_kernel_symbols.cmake checks every symbol it exports.
#if !defined(MHA_KERNEL_VARIANT)
#error "compile with -DMHA_KERNEL_VARIANT=sse2|avx2|avx512 (see CMakeLists.txt)"
#endif
#define MHA_CAT2(a, b) a##b
#define MHA_CAT(a, b) MHA_CAT2(a, b)
#define Eigen MHA_CAT(Eigen_, MHA_KERNEL_VARIANT)

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include "forward_kernels.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace mha::detail::kernels::MHA_KERNEL_VARIANT {

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
using Vector = Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>;
template <class T>
using ConstVector = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>;

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point& t) {
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t).count();
  t = now;
  return ms;
}

// y = x·Wᵀ + b, torch's F.linear: x (rows, in), W (out, in), y (rows, out) with row stride y_stride.
template <class T>
void linear(const T* x, std::int64_t rows, std::int64_t in, const T* W, const T* b, std::int64_t out, T* y,
            std::int64_t y_stride) {
  if (rows <= 0) return;
  StridedMap<T> Y(y, rows, out, Eigen::OuterStride<>(y_stride));
  if (in + rows + out < EIGEN_GEMM_TO_COEFFBASED_THRESHOLD) {
    // Eigen computes products this small coefficient by coefficient, vectorised in a pattern set by
    // the destination's alignment; into aligned storage (fixed-size: on the stack), the digits do
    // not depend on where malloc put the trace's buffer.
    using Small = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor,
                                EIGEN_GEMM_TO_COEFFBASED_THRESHOLD, EIGEN_GEMM_TO_COEFFBASED_THRESHOLD>;
    Small product(rows, out);
    product.noalias() = ConstMap<T>(x, rows, in) * ConstMap<T>(W, out, in).transpose();
    Y = product;
  } else {
    Y.noalias() = ConstMap<T>(x, rows, in) * ConstMap<T>(W, out, in).transpose();
  }
  if (b) Y.rowwise() += ConstVector<T>(b, out);
}

// Rows [r0, r1) of a per-batch projection: input row n·S + s (of `in` features) goes to output row
// n·Sp + s, since rows S.. of each batch item hold bias_k and the zero row.
template <class T>
void linear_batched_rows(const T* x, std::int64_t r0, std::int64_t r1, std::int64_t S, std::int64_t Sp,
                         std::int64_t in, const T* W, const T* b, std::int64_t out, T* y) {
  for (std::int64_t r = r0; r < r1;) {
    const std::int64_t n = r / S, s = r % S, end = std::min(r1, (n + 1) * S);
    linear(x + r * in, end - r, in, W, b, out, y + (n * Sp + s) * out, out);
    r = end;
  }
}

// Copies n values to dst, which this forward writes once and never reads back. With SSE2 (every
// x86-64) that is done with non-temporal stores: they bypass the cache, so the trace's big arrays
// cost no read-for-ownership and do not evict the block being worked on. The AVX copies store a
// whole 32- or 64-byte vector at a time. Elsewhere a plain copy.
#if defined(__AVX512F__)
constexpr std::uintptr_t kStreamBytes = 64;
inline void stream_block(float* d, const float* s) {
  _mm512_stream_ps(d, _mm512_loadu_ps(s));
}
inline void stream_block(double* d, const double* s) {
  _mm512_stream_pd(d, _mm512_loadu_pd(s));
}
#elif defined(__AVX__)
constexpr std::uintptr_t kStreamBytes = 32;
inline void stream_block(float* d, const float* s) {
  _mm256_stream_ps(d, _mm256_loadu_ps(s));
}
inline void stream_block(double* d, const double* s) {
  _mm256_stream_pd(d, _mm256_loadu_pd(s));
}
#elif defined(__SSE2__)
constexpr std::uintptr_t kStreamBytes = 16;
inline void stream_block(float* d, const float* s) {
  _mm_stream_ps(d, _mm_loadu_ps(s));
}
inline void stream_block(double* d, const double* s) {
  _mm_stream_pd(d, _mm_loadu_pd(s));
}
#endif

template <class T>
void stream_copy(T* dst, const T* src, std::int64_t n) {
#if defined(__SSE2__)
  constexpr std::int64_t step = std::int64_t(kStreamBytes / sizeof(T));
  std::int64_t j = 0;
  for (; j < n && (reinterpret_cast<std::uintptr_t>(dst + j) & (kStreamBytes - 1)); ++j) dst[j] = src[j];
  for (; j + step <= n; j += step) stream_block(dst + j, src + j);
  for (; j < n; ++j) dst[j] = src[j];
#else
  std::copy(src, src + n, dst);
#endif
}

// Non-temporal stores are weakly ordered: fence them before another thread may read the data.
void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

template <class T>
void in_projection(const Args<T>& a, int t) {
  const std::int64_t N = a.N, L = a.L, S = a.S, E = a.E, threads = a.threads;
  const T scale = a.score_divisor > 0 ? T(a.score_divisor) : std::sqrt(T(a.dk));
  const std::int64_t q0 = N * L * t / threads, q1 = N * L * (t + 1) / threads;
  linear(a.query + q0 * E, q1 - q0, E, a.w_q, a.b_q, E, a.q + q0 * E, E);
  Map<T>(a.q_scaled + q0 * E, q1 - q0, E).array() = Map<T>(a.q + q0 * E, q1 - q0, E).array() / scale;
  const std::int64_t k0 = N * S * t / threads, k1 = N * S * (t + 1) / threads;
  linear_batched_rows(a.key, k0, k1, S, a.Sp, a.kdim, a.w_k, a.b_k, a.kv, a.k);
  linear_batched_rows(a.value, k0, k1, S, a.Sp, a.vdim, a.w_v, a.b_v, a.kv, a.v);
}

// Tasks [task0, task1) of the fused loop. A task is (batch item n, query rows i0 .. i0+rows); it runs
// every head over its rows, so each task owns disjoint rows of every buffer, and the head average
// accumulates in cache instead of re-reading all weights afterwards. The blocks are computed in the
// thread's scratch and streamed out to the trace (stream_copy). A stage whose pointer is null is
// computed only as far as a later stage needs it, and not written.
template <class T>
void fused(const Args<T>& a, int thread, std::int64_t task0, std::int64_t task1, Tally* tally) {
  const std::int64_t L = a.L, Sp = a.Sp, E = a.E, dk = a.dk, kv = a.kv, block = a.block;
  const T scale = a.score_divisor > 0 ? T(a.score_divisor) : std::sqrt(T(dk));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // Softmax arguments below this are left to std::exp (see the loop): well above where Eigen's exp clamps.
  const T exp_floor = sizeof(T) == 4 ? T(-80) : T(-700);
  const bool want_context = a.context || a.concat;
  const bool want_weights = a.weights || a.weights_avg || want_context;
  const bool want_masked = a.scores_masked || want_weights;
  Tally& mine = *tally;
  T* sc_block = a.scratch + thread * a.scratch_per_thread;  // (block, S') scaled scores
  T* w_block = sc_block + block * Sp;                       // (block, S') weights
  T* avg_block = w_block + block * Sp;                      // (block, S') head sum
  T* row_tmp = avg_block + block * Sp;                      // (S',)
  T* ctx_block = row_tmp + Sp;                              // (block, d_k) context
  Clock::time_point t = a.timing ? Clock::now() : Clock::time_point();
  for (std::int64_t task = task0; task < task1; ++task) {
    const std::int64_t n = task / a.blocks_per_item, i0 = (task % a.blocks_per_item) * block;
    const std::int64_t rows = std::min(block, L - i0);
    Map<T> scaled(sc_block, rows, Sp);  // (rows, S') each
    Map<T> weights(w_block, rows, Sp);
    Map<T> avg(avg_block, rows, Sp);
    for (std::int64_t h = a.head_begin; h < a.head_end; ++h) {
      const std::int64_t g = h / a.heads_per_kv;
      ConstStridedMap<T> Qs(a.q_scaled + (n * L + i0 - a.q_row0) * E + h * dk, rows, dk,
                            Eigen::OuterStride<>(E));
      ConstStridedMap<T> Kg(a.k + n * Sp * kv + g * dk, Sp, dk, Eigen::OuterStride<>(kv));  // (S', d_k)
      ConstStridedMap<T> Vg(a.v + n * Sp * kv + g * dk, Sp, dk, Eigen::OuterStride<>(kv));  // (S', d_k)
      // Row i0 of (n, h) in the (N, H, L, S') outputs.
      const std::int64_t off = n * a.out_n_stride + h * a.out_h_stride + (i0 - a.out_row0) * Sp;
      // Row i0 of the mask's broadcast (n, h) plane, and its step per query row (0 when shared).
      const T* mask =
          a.mask ? a.mask + (((a.mask_n > 1 ? n : 0) * a.mask_h + (a.mask_h > 1 ? h : 0)) * a.mask_l +
                             (a.mask_l > 1 ? i0 : 0)) *
                                Sp
                 : nullptr;
      const std::int64_t mask_row_step = a.mask_l > 1 ? Sp : 0;

      scaled.noalias() = Qs * Kg.transpose();
      if (a.timing) mine.scores += ms_since(t);

      for (std::int64_t i = 0; i < rows; ++i) {
        const T* s_row = sc_block + i * Sp;
        if (a.scores_scaled) stream_copy(a.scores_scaled + off + i * Sp, s_row, Sp);
        // The raw scores are not a second GEMM: they are the scaled ones times √d_k. When √d_k is a
        // power of two (d_k = 4, 16, 64, ...) that is exactly q·kᵀ summed in the same order; otherwise
        // it adds one rounding (relative 2^-24 in float), where the reference computes q·kᵀ directly.
        if (a.scores) {
          Vector<T>(row_tmp, Sp) = ConstVector<T>(s_row, Sp) * scale;
          stream_copy(a.scores + off + i * Sp, row_tmp, Sp);
        }
        if (!want_masked) continue;
        if (mask)
          Vector<T>(row_tmp, Sp) = ConstVector<T>(s_row, Sp) + ConstVector<T>(mask + i * mask_row_step, Sp);
        const T* x_row = mask ? row_tmp : s_row;  // the masked scores
        if (a.scores_masked) stream_copy(a.scores_masked + off + i * Sp, x_row, Sp);
        if (!want_weights) continue;

        ConstVector<T> x(x_row, Sp);
        auto w = weights.row(i);
        const T row_max = x.maxCoeff();
        // Every key blocked: torch gives NaN (exp(-inf - -inf)). A NaN score (NaN/Inf inputs) is not
        // a blocked key: the else branch propagates it to the whole row, as torch does.
        if (row_max == neg_inf && !x.hasNaN()) {
          ++mine.fully_masked_rows;
          w.setConstant(a.fully_masked_zero ? T(0) : std::numeric_limits<T>::quiet_NaN());
        } else {
          w = (x.array() - row_max).exp();  // vectorised; within an ulp or two of std::exp (the reference)
          // Eigen's vectorised exp clamps its argument (near -88.7 in float), so exp(-inf) would come
          // out ~1e-39 instead of 0. Arguments below exp_floor, blocked keys among them, are redone
          // with std::exp: blocked keys get exactly 0, as torch (SLEEF exp) gives them.
          if (x.minCoeff() - row_max < exp_floor) {
            T* wp = w.data();
            for (std::int64_t j = 0; j < Sp; ++j) {
              const T arg = x_row[j] - row_max;
              if (arg < exp_floor) wp[j] = arg == neg_inf ? T(0) : std::exp(arg);
            }
          }
          w *= T(1) / w.sum();
        }
        if (a.weights) stream_copy(a.weights + off + i * Sp, w.data(), Sp);
      }
      if (a.timing) mine.mask_softmax += ms_since(t);

      // torch: attn_weights.sum(dim=1) / num_heads; summed here in head order, divided below.
      if (a.weights_avg) {
        if (h == a.head_begin)
          avg = weights;
        else
          avg += weights;
        if (a.timing) mine.average += ms_since(t);
      }

      if (want_context) {
        // Computed in the aligned scratch for the reason given in linear(), then copied out.
        Map<T> context(ctx_block, rows, dk);  // (rows, d_k)
        context.noalias() = weights * Vg;
        if (a.context) Map<T>(a.context + ((n * a.H + h) * L + i0) * dk, rows, dk) = context;
        // concat[n, i, h·d_k + c] = context[n, h, i, c]: transpose(1, 2).contiguous().view
        if (a.concat)
          StridedMap<T>(a.concat + (n * L + i0) * E + h * dk, rows, dk, Eigen::OuterStride<>(E)) = context;
        if (a.timing) mine.context += ms_since(t);
      }
    }
    if (a.weights_avg) {
      avg /= T(a.H);
      stream_copy(a.weights_avg + n * a.avg_n_stride + (i0 - a.out_row0) * Sp, avg_block, rows * Sp);
      if (a.timing) mine.average += ms_since(t);
    }
  }
  stream_fence();
}

template <class T>
void out_projection(const Args<T>& a, std::int64_t r0, std::int64_t r1) {
  linear(a.concat + r0 * a.E, r1 - r0, a.E, a.w_o, a.b_o, a.E, a.output + r0 * a.E, a.E);
}

void sgemm(const float* A, const float* B, float* C, std::int64_t n, std::int64_t r0, std::int64_t r1) {
  Map<float>(C + r0 * n, r1 - r0, n).noalias() =
      ConstMap<float>(A + r0 * n, r1 - r0, n) * ConstMap<float>(B, n, n);
}

void conv1d(const float* x, const float* W, const float* b, float* y, std::int64_t rows, std::int64_t in,
            std::int64_t out, std::int64_t c0, std::int64_t c1, bool gelu) {
  if (c1 <= c0 || rows <= 0) return;
  StridedMap<float> Y(y + c0, rows, c1 - c0, Eigen::OuterStride<>(out));
  Y.noalias() =
      ConstMap<float>(x, rows, in) * ConstStridedMap<float>(W + c0, in, c1 - c0, Eigen::OuterStride<>(out));
  if (b) Y.rowwise() += ConstVector<float>(b + c0, c1 - c0);
  if (gelu) {
    // gelu_new(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), with Eigen's vectorised tanh.
    auto A = Y.array();
    const float c = 0.7978845608028654f;  // √(2/π)
    A = 0.5f * A * (1.0f + (c * (A + 0.044715f * A * A * A)).tanh());
  }
}

void gemv(const float* A, const float* x, float* y, std::int64_t cols, std::int64_t r0, std::int64_t r1) {
  if (r1 <= r0) return;
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, 1>> Y(y + r0, r1 - r0);
  Y.noalias() = ConstMap<float>(A + r0 * cols, r1 - r0, cols) *
                Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, 1>>(x, cols);
}

#define MHA_STR2(x) #x
#define MHA_STR(x) MHA_STR2(x)
const Variant kVariant = {MHA_STR(MHA_KERNEL_VARIANT),
                          {&in_projection<float>, &fused<float>, &out_projection<float>},
                          {&in_projection<double>, &fused<double>, &out_projection<double>},
                          &sgemm,
                          &conv1d,
                          &gemv};

}  // namespace

const Variant& variant() {
  return kVariant;
}

}  // namespace mha::detail::kernels::MHA_KERNEL_VARIANT
