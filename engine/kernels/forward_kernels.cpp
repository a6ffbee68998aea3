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
#include <cstring>
#include <limits>

#include "forward_kernels.hpp"
#include "weights_check.hpp"

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
template <class T>
using ColMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
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

// acc + x·b rounded as torch's plain loops round it: the product, then the sum. The empty asm makes
// the product opaque, so a compiler allowed to contract (-mfma with GCC's -ffp-contract=fast) cannot
// fuse the two into one FMA.
template <class T>
inline T plain_madd(T acc, T x, T b) {
  T p = x * b;
#if defined(__SSE2__) && defined(__GNUC__)
  __asm__("" : "+x"(p));
#endif
  return acc + p;
}

// y = x·Wᵀ + b, torch's F.linear: x (rows, in), W (out, in), y (rows, out) with row stride y_stride.
// as_torch (rounds_as_torch): each element one fused multiply-add chain in index order from 0, as
// BLAS sgemm sums at the notebook's sizes (std::fma: exact on every instruction set).
template <class T>
void linear(const T* x, std::int64_t rows, std::int64_t in, const T* W, const T* b, std::int64_t out, T* y,
            std::int64_t y_stride, bool as_torch = false) {
  if (rows <= 0) return;
  if (as_torch) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < out; ++o) {
        T acc = 0;
        for (std::int64_t i = 0; i < in; ++i) acc = std::fma(x[r * in + i], W[o * in + i], acc);
        y[r * y_stride + o] = acc + (b ? b[o] : T(0));
      }
    return;
  }
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
                         std::int64_t in, const T* W, const T* b, std::int64_t out, T* y, bool as_torch) {
  for (std::int64_t r = r0; r < r1;) {
    const std::int64_t n = r / S, s = r % S, end = std::min(r1, (n + 1) * S);
    linear(x + r * in, end - r, in, W, b, out, y + (n * Sp + s) * out, out, as_torch);
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

// --- Row-exact products: scores, context and out-projection ---
//
// C = A·B where B is packed in panels of P columns (Args: k_packed, v_packed, w_o_packed). Every
// element of C is one chain of multiply-adds over k = 0, 1, ..., depth − 1 started from 0, in one
// vector lane, whichever tile of rows and panel of columns holds it. So a row computed alone has the
// digits it has inside a block of 128: an edit of one mask cell redoes one query row and matches the
// whole forward bit for bit (Eigen's GEMM sums a single row in another order).
//
// Lanes<T>: one vector register of this instruction set and the multiply-add the chain uses (fused
// with FMA, a multiply then an add on SSE2 alone, the same in every lane and every tile); madd1 is
// that step on one value.
template <class T>
struct Lanes;
#if defined(__AVX512F__)
template <>
struct Lanes<float> {
  using V = __m512;
  static constexpr int n = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V madd(V acc, float x, V b) { return _mm512_fmadd_ps(_mm512_set1_ps(x), b, acc); }
  static float madd1(float acc, float x, float b) { return std::fma(x, b, acc); }
};
template <>
struct Lanes<double> {
  using V = __m512d;
  static constexpr int n = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static V madd(V acc, double x, V b) { return _mm512_fmadd_pd(_mm512_set1_pd(x), b, acc); }
  static double madd1(double acc, double x, double b) { return std::fma(x, b, acc); }
};
#elif defined(__AVX2__) && defined(__FMA__)
template <>
struct Lanes<float> {
  using V = __m256;
  static constexpr int n = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V madd(V acc, float x, V b) { return _mm256_fmadd_ps(_mm256_set1_ps(x), b, acc); }
  static float madd1(float acc, float x, float b) { return std::fma(x, b, acc); }
};
template <>
struct Lanes<double> {
  using V = __m256d;
  static constexpr int n = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V madd(V acc, double x, V b) { return _mm256_fmadd_pd(_mm256_set1_pd(x), b, acc); }
  static double madd1(double acc, double x, double b) { return std::fma(x, b, acc); }
};
#elif defined(__SSE2__)
template <>
struct Lanes<float> {
  using V = __m128;
  static constexpr int n = 4;
  static V zero() { return _mm_setzero_ps(); }
  static V load(const float* p) { return _mm_loadu_ps(p); }
  static void store(float* p, V v) { _mm_storeu_ps(p, v); }
  static V madd(V acc, float x, V b) { return _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(x), b)); }
  static float madd1(float acc, float x, float b) { return acc + x * b; }
};
template <>
struct Lanes<double> {
  using V = __m128d;
  static constexpr int n = 2;
  static V zero() { return _mm_setzero_pd(); }
  static V load(const double* p) { return _mm_loadu_pd(p); }
  static void store(double* p, V v) { _mm_storeu_pd(p, v); }
  static V madd(V acc, double x, V b) { return _mm_add_pd(acc, _mm_mul_pd(_mm_set1_pd(x), b)); }
  static double madd1(double acc, double x, double b) { return acc + x * b; }
};
#else
template <class T>
struct Lanes {
  using V = T;
  static constexpr int n = 1;
  static V zero() { return T(0); }
  static V load(const T* p) { return *p; }
  static void store(T* p, V v) { *p = v; }
  static V madd(V acc, T x, V b) { return acc + x * b; }
  static T madd1(T acc, T x, T b) { return acc + x * b; }
};
#endif

// Tiles: kTileRows rows of A by kTileVecs vectors of columns (the scores' and the out-projection's),
// and up to kContextVecs vectors for the context, whose d_k columns are few; sized so the
// accumulators stay in registers (32 with AVX-512, 16 below).
#if defined(__AVX512F__)
constexpr int kTileRows = 6, kTileVecs = 2, kContextVecs = 4;
#elif defined(__AVX2__)
constexpr int kTileRows = 6, kTileVecs = 2, kContextVecs = 2;
#else
constexpr int kTileRows = 4, kTileVecs = 3, kContextVecs = 3;
#endif

// R rows of C (row stride ldc), the `cols` (≤ W·n) columns of one panel of B (depth × W·n), over
// the first `depth` rows of the panel.
template <class T, int R, int W>
void tile(const T* A, std::int64_t lda, const T* panel, std::int64_t depth, T* C, std::int64_t ldc,
          std::int64_t cols) {
  using L = Lanes<T>;
  typename L::V acc[R][W];
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = L::zero();
  for (std::int64_t k = 0; k < depth; ++k) {
    typename L::V b[W];
    for (int w = 0; w < W; ++w) b[w] = L::load(panel + (k * W + w) * L::n);
    for (int r = 0; r < R; ++r) {
      const T x = A[r * lda + k];
      for (int w = 0; w < W; ++w) acc[r][w] = L::madd(acc[r][w], x, b[w]);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (cols == W * L::n) {
      for (int w = 0; w < W; ++w) L::store(C + r * ldc + w * L::n, acc[r][w]);
    } else {  // the last panel: its columns past `cols` are padding
      T out[W * L::n];
      for (int w = 0; w < W; ++w) L::store(out + w * L::n, acc[r][w]);
      std::copy(out, out + cols, C + r * ldc);
    }
  }
}

// C (rows, cols) = A (rows, depth) · B (depth, cols), B packed in panels of W·n columns. With
// `used` < depth, the chains stop after the first `used` rows of B (whose rest A multiplies by 0).
template <class T, int W>
void product(const T* A, std::int64_t lda, const T* packed, std::int64_t depth, T* C, std::int64_t ldc,
             std::int64_t rows, std::int64_t cols, std::int64_t used = -1) {
  constexpr std::int64_t P = W * Lanes<T>::n;
  if (used < 0) used = depth;
  for (std::int64_t c0 = 0; c0 < cols; c0 += P) {
    const T* panel = packed + c0 * depth;
    const std::int64_t width = std::min(P, cols - c0);
    std::int64_t r = 0;
    for (; r + kTileRows <= rows; r += kTileRows)
      tile<T, kTileRows, W>(A + r * lda, lda, panel, used, C + r * ldc + c0, ldc, width);
    for (; r < rows; ++r) tile<T, 1, W>(A + r * lda, lda, panel, used, C + r * ldc + c0, ldc, width);
  }
}

// One row of the products above, from operands as the forward holds them, not packed: each
// element the same chain of multiply-adds as in a tile (lane by lane, or madd1 for the columns past
// the last whole vector), so the digits are those of the packed products. A row redone alone (a
// mask edit) then reads k, v and W_o once instead of packing them first.
//
// c[j] = Σ_k a[k]·bt[j·ldbt + k]: B given transposed (keys as rows: kᵀ; W_o as torch stores it).
// One scalar chain per element, eight at a time (the chain's latency hidden, each bt row read
// forward); gathering eight or sixteen rows into a vector was slower on the machine measured.
template <class T>
void row_product_transposed(const T* a, std::int64_t depth, const T* bt, std::int64_t ldbt, T* c,
                            std::int64_t cols) {
  using L = Lanes<T>;
  constexpr std::int64_t chains = 8;
  std::int64_t j = 0;
  for (; j + chains <= cols; j += chains) {
    T acc[chains] = {};
    const T* row = bt + j * ldbt;
    for (std::int64_t k = 0; k < depth; ++k)
      for (std::int64_t u = 0; u < chains; ++u) acc[u] = L::madd1(acc[u], a[k], row[u * ldbt + k]);
    std::copy(acc, acc + chains, c + j);
  }
  for (; j < cols; ++j) {
    T acc = T(0);
    for (std::int64_t k = 0; k < depth; ++k) acc = L::madd1(acc, a[k], bt[j * ldbt + k]);
    c[j] = acc;
  }
}

// c[j] = Σ_k a[k]·b[k·ldb + j]: B as its rows (v: (S', d_k) with row stride kv).
template <class T>
void row_product(const T* a, std::int64_t depth, const T* b, std::int64_t ldb, T* c, std::int64_t cols) {
  using L = Lanes<T>;
  constexpr std::int64_t n = L::n;
  std::int64_t j = 0;
  for (; j + 4 * n <= cols; j += 4 * n) {
    typename L::V acc[4] = {L::zero(), L::zero(), L::zero(), L::zero()};
    for (std::int64_t k = 0; k < depth; ++k)
      for (std::int64_t u = 0; u < 4; ++u) acc[u] = L::madd(acc[u], a[k], L::load(b + k * ldb + j + u * n));
    for (std::int64_t u = 0; u < 4; ++u) L::store(c + j + u * n, acc[u]);
  }
  for (; j + n <= cols; j += n) {
    typename L::V acc = L::zero();
    for (std::int64_t k = 0; k < depth; ++k) acc = L::madd(acc, a[k], L::load(b + k * ldb + j));
    L::store(c + j, acc);
  }
  for (; j < cols; ++j) {
    T acc = T(0);
    for (std::int64_t k = 0; k < depth; ++k) acc = L::madd1(acc, a[k], b[k * ldb + j]);
    c[j] = acc;
  }
}

// The context's product over the first `keys` keys, its panel width (a.v_panel) picked for d_k by
// plan_packing.
template <class T>
void context_product(const Args<T>& a, const T* W, const T* packed, T* C, std::int64_t rows,
                     std::int64_t keys) {
  switch (a.v_panel / Lanes<T>::n) {
    case 1: return product<T, 1>(W, a.ld, packed, a.Sp, C, a.dk, rows, a.dk, keys);
    case 2: return product<T, 2>(W, a.ld, packed, a.Sp, C, a.dk, rows, a.dk, keys);
#if !defined(__AVX2__) || defined(__AVX512F__)
    case 3: return product<T, 3>(W, a.ld, packed, a.Sp, C, a.dk, rows, a.dk, keys);
#endif
#if defined(__AVX512F__)
    case 4: return product<T, 4>(W, a.ld, packed, a.Sp, C, a.dk, rows, a.dk, keys);
#endif
    default: return;  // plan_packing picks no other width
  }
}

constexpr std::int64_t kFewOutRows = 64;  // see Args::out_few_rows

template <class T>
void plan_packing(Args<T>& a) {
  constexpr std::int64_t n = Lanes<T>::n;
  auto up = [](std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; };
  a.k_panel = kTileVecs * n;
  a.o_panel = kTileVecs * n;
  a.v_panel = std::min<std::int64_t>(kContextVecs, (a.dk + n - 1) / n) * n;
  a.k_group = up(a.Sp, a.k_panel) * a.dk;
  a.v_group = up(a.dk, a.v_panel) * a.Sp;
  a.out_few_rows = a.N * a.L <= kFewOutRows;
  // W_oᵀ (H·d_k, E); with few rows, the concat rows' panels (H·d_k, rows) and outputᵀ (E, rows)
  const std::int64_t Q = a.qdim();
  a.o_size = a.out_few_rows ? up(a.N * a.L, a.o_panel) * (Q + a.E) : up(a.E, a.o_panel) * Q;
  a.ld = up(a.Sp, 64 / std::int64_t(sizeof(T)));
}

// Panels of P columns of the (rows, cols) matrix whose element (r, c) is at(r, c); zeros past cols.
template <class T, class At>
void pack_panels(T* dst, std::int64_t rows, std::int64_t cols, std::int64_t P, const At& at) {
  for (std::int64_t c0 = 0; c0 < cols; c0 += P) {
    T* panel = dst + c0 * rows;
    const std::int64_t width = std::min(P, cols - c0);
    for (std::int64_t c = 0; c < P; ++c)
      if (c < width)
        for (std::int64_t r = 0; r < rows; ++r) panel[r * P + c] = at(r, c0 + c);
      else
        for (std::int64_t r = 0; r < rows; ++r) panel[r * P + c] = T(0);
  }
}

template <class T>
void pack_group(const Args<T>& a, std::int64_t n, std::int64_t g, bool keys, bool values) {
  const std::int64_t G = a.kv / a.dk, kv = a.kv;
  const T* k = a.k + n * a.Sp * kv + g * a.dk;  // (S', d_k), row stride kv
  const T* v = a.v + n * a.Sp * kv + g * a.dk;
  if (keys)  // kᵀ: (d_k, S'); read along each key's row
    pack_panels(a.k_packed + (n * G + g) * a.k_group, a.dk, a.Sp, a.k_panel,
                [&](std::int64_t r, std::int64_t c) { return k[c * kv + r]; });
  if (values) {  // v: (S', d_k), a panel of columns at a time
    T* dst = a.v_packed + (n * G + g) * a.v_group;
    const std::int64_t P = a.v_panel;
    for (std::int64_t c0 = 0; c0 < a.dk; c0 += P) {
      T* panel = dst + c0 * a.Sp;
      const std::int64_t width = std::min(P, a.dk - c0);
      for (std::int64_t j = 0; j < a.Sp; ++j) {
        std::copy(v + j * kv + c0, v + j * kv + c0 + width, panel + j * P);
        std::fill(panel + j * P + width, panel + (j + 1) * P, T(0));
      }
    }
  }
}

template <class T>
void pack_out(const Args<T>& a) {  // W_oᵀ (H·d_k, E): W_o is torch's (out, in)
  if (a.out_few_rows) return;      // out_projection packs the concat rows instead
  const std::int64_t Q = a.qdim();
  const T* w = a.w_o;
  pack_panels(a.w_o_packed, Q, a.E, a.o_panel, [&](std::int64_t r, std::int64_t c) { return w[c * Q + r]; });
}

template <class T>
void in_projection(const Args<T>& a, int t) {
  const std::int64_t N = a.N, L = a.L, S = a.S, E = a.E, Q = a.qdim(), threads = a.threads;
  const T scale = a.score_divisor > 0 ? T(a.score_divisor) : std::sqrt(T(a.dk));
  const bool as_torch = a.as_torch;
  const std::int64_t q0 = N * L * t / threads, q1 = N * L * (t + 1) / threads;
  linear(a.query + q0 * E, q1 - q0, E, a.w_q, a.b_q, Q, a.q + q0 * Q, Q, as_torch);
  Map<T>(a.q_scaled + q0 * Q, q1 - q0, Q).array() = Map<T>(a.q + q0 * Q, q1 - q0, Q).array() / scale;
  const std::int64_t k0 = N * S * t / threads, k1 = N * S * (t + 1) / threads;
  linear_batched_rows(a.key, k0, k1, S, a.Sp, a.kdim, a.w_k, a.b_k, a.kv, a.k, as_torch);
  linear_batched_rows(a.value, k0, k1, S, a.Sp, a.vdim, a.w_v, a.b_v, a.kv, a.v, as_torch);
}

// The rows of [s0, s1), a range in_projection projects in one product, to project again so that
// row r gets the digits it has there: the products hold rows in groups of kRowGroup from the range's
// start, and a row's digits depend only on whether its group is whole (Eigen's GEMM: a panel of 4
// rows; a group cut short at the range's end takes another path, and one row alone a matrix-vector
// product). So [a, e): r's group, the groups up to s1 when those end within two groups, and a row
// cut off alone at the end with the group before it. tests/test_incremental.cpp checks the claim
// against whole forwards for each kernel copy.
constexpr std::int64_t kRowGroup = 4;
inline std::pair<std::int64_t, std::int64_t> row_group(std::int64_t r, std::int64_t s0, std::int64_t s1) {
  std::int64_t a = s0 + (r - s0) / kRowGroup * kRowGroup;
  const std::int64_t e = s1 - a < 2 * kRowGroup ? s1 : a + kRowGroup;
  if (e - a == 1 && a - s0 >= kRowGroup) a -= kRowGroup;
  return {a, e};
}

// Calls f(a, e) for the row ranges of [s0, s1) that cover its flagged rows (flag(r)), each the
// row_group spans of its rows joined where they touch.
template <class Flag, class F>
void flagged_groups(std::int64_t s0, std::int64_t s1, const Flag& flag, const F& f) {
  std::int64_t a = 0, e = -1;  // the range being joined (none while e < 0)
  for (std::int64_t r = s0; r < s1; ++r) {
    if (!flag(r) || r < e) continue;
    const auto [ra, re] = row_group(r, s0, s1);
    if (e >= 0 && ra <= e) {
      e = re;
    } else {
      if (e >= 0) f(a, e);
      a = ra, e = re;
    }
  }
  if (e >= 0) f(a, e);
}

template <class T>
void in_projection_rows(const Args<T>& a, int t, const char* q_rows, const char* k_rows, const char* v_rows) {
  const std::int64_t N = a.N, L = a.L, S = a.S, Sp = a.Sp, E = a.E, Q = a.qdim(), threads = a.threads;
  const bool as_torch = a.as_torch;  // then a row's digits are its own whatever the groups
  const std::int64_t q0 = N * L * t / threads, q1 = N * L * (t + 1) / threads;
  if (q_rows)
    flagged_groups(
        q0, q1, [&](std::int64_t r) { return q_rows[r] != 0; },
        [&](std::int64_t r0, std::int64_t r1) {
          linear(a.query + r0 * E, r1 - r0, E, a.w_q, a.b_q, Q, a.q + r0 * Q, Q, as_torch);
        });
  // Keys and values: the per-batch pieces linear_batched_rows projects, each its own product.
  const std::int64_t k0 = N * S * t / threads, k1 = N * S * (t + 1) / threads;
  for (std::int64_t r = k0; r < k1;) {
    const std::int64_t n = r / S, end = std::min(k1, (n + 1) * S);
    auto project = [&](const char* rows, const T* x, std::int64_t in, const T* W, const T* b, T* y) {
      if (!rows) return;
      flagged_groups(
          r, end, [&](std::int64_t i) { return rows[i] != 0; },
          [&](std::int64_t r0, std::int64_t r1) {
            linear(x + r0 * in, r1 - r0, in, W, b, a.kv, y + (n * Sp + r0 % S) * a.kv, a.kv, as_torch);
          });
    };
    project(k_rows, a.key, a.kdim, a.w_k, a.b_k, a.k);
    project(v_rows, a.value, a.vdim, a.w_v, a.b_v, a.v);
    r = end;
  }
}

// Row i of head h of item n (h = H: the head average) into the weights overview: its first `len`
// values (the rest are 0) pooled into columns of overview_block keys, and checked. The check reads
// only as far as len, whose zeros after it would change no digit, and every key past len is blocked,
// so the visible keys are all counted (weights_check.hpp).
// scores, x_max, z: the masked scores the row's softmax read, their largest and its sum of
// exponentials, for the check without a log per value (null for the head average and rows that are
// not an ordinary softmax: check_row then).
template <class T>
void overview_row(const Args<T>& a, std::int64_t n, std::int64_t h, std::int64_t i, const T* row,
                  std::int64_t len, const T* mask_row, const T* scores = nullptr, T x_max = 0, T z = 0) {
  const std::int64_t Sp = a.Sp, block = a.overview_block, C = a.overview_columns;
  const weights_check::PlaneOf<T> w{row, Sp, 1, 1, int(len)};
  const weights_check::PlaneOf<T> m{mask_row, Sp, 1, 1, int(len)};
  // With a mask every key past len is blocked; without one all S' are visible.
  const int keys = mask_row ? -1 : int(Sp);
  const bool fast = scores && std::isfinite(z) && z > 0;
  const weights_check::RowPart part =
      fast ? weights_check::check_softmax_row(row, scores, x_max, z, int(len), mask_row, int(Sp))
           : weights_check::check_row(w, mask_row ? &m : nullptr, 0, keys);
  T* c = a.overview_checks + ((n * (a.H + 1) + h) * a.L + i) * 4;
  c[0] = T(part.ent), c[1] = T(part.ent_max), c[2] = T(part.err), c[3] = T(part.kind);
  T* out =
      h < a.H ? a.overview_weights + ((n * a.H + h) * a.L + i) * C : a.overview_average + (n * a.L + i) * C;
  if (part.kind == weights_check::RowPart::nan) {  // a NaN weight makes the whole row NaN
    std::fill(out, out + C, std::numeric_limits<T>::quiet_NaN());
    return;
  }
  // Columns up to len: the weights after it are 0, and a column's largest weight is at least 0 (what
  // lies past len may not be written at all: see `width` in fused).
  const std::int64_t used = std::min(C, (len + block - 1) / block);
  // Whole columns 8 keys at a time where the block allows (a vector max each), the rest one by one.
  const std::int64_t whole = block % 8 == 0 ? std::min(used, len / block) : 0;
  using Eight = Eigen::Array<T, 8, 1>;
  for (std::int64_t col = 0; col < whole; ++col) {
    const T* x = row + col * block;
    Eight top = Eigen::Map<const Eight>(x);
    for (std::int64_t k = 8; k < block; k += 8) top = top.max(Eigen::Map<const Eight>(x + k));
    out[col] = top.maxCoeff();
  }
  for (std::int64_t col = whole; col < used; ++col)
    out[col] = *std::max_element(row + col * block, row + std::min(len, (col + 1) * block));
  std::fill(out + used, out + C, T(0));  // past len every weight is 0
}

// Tasks [task0, task1) of the fused loop. A task is (batch item n, query rows i0 .. i0+rows); it runs
// every head over its rows, so each task owns disjoint rows of every buffer, and the head average
// accumulates in cache instead of re-reading all weights afterwards. The blocks are computed in the
// thread's scratch and streamed out to the trace (stream_copy). A stage whose pointer is null is
// computed only as far as a later stage needs it, and not written.
template <class T>
void fused(const Args<T>& a, int thread, std::int64_t task0, std::int64_t task1, Tally* tally) {
  const std::int64_t L = a.L, Sp = a.Sp, Q = a.qdim(), dk = a.dk, kv = a.kv, block = a.block;
  const T scale = a.score_divisor > 0 ? T(a.score_divisor) : std::sqrt(T(dk));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // Softmax arguments below this are left to std::exp (see the loop): well above where Eigen's exp clamps.
  const T exp_floor = sizeof(T) == 4 ? T(-80) : T(-700);
  const bool want_context = a.context || a.concat;
  const bool want_average = a.weights_avg || a.overview_weights;
  const bool want_weights = a.weights || want_average || want_context;
  const bool want_masked = a.scores_masked || want_weights;
  const bool as_torch = a.as_torch;
  Tally& mine = *tally;
  const std::int64_t ld = a.ld, G = kv / dk;
  // x rounded up to a multiple of 64 bytes, at most S'
  auto rounded = [Sp](std::int64_t x) {
    constexpr std::int64_t line = 64 / std::int64_t(sizeof(T));
    return std::min(Sp, (x + line - 1) / line * line);
  };
  T* sc_block = a.scratch + thread * a.scratch_per_thread;  // (block, S') scaled scores, row stride ld
  T* w_block = sc_block + block * ld;                       // (block, S') weights
  T* avg_block = w_block + block * ld;                      // (block, S') head sum
  T* row_tmp = avg_block + block * ld;                      // (S',)
  T* ctx_block = row_tmp + ld;                              // (block, d_k) context
  Clock::time_point t = a.timing ? Clock::now() : Clock::time_point();
  for (std::int64_t task = task0; task < task1; ++task) {
    const std::int64_t n = task / a.blocks_per_item, i0 = (task % a.blocks_per_item) * block;
    const std::int64_t rows = std::min(block, L - i0);
    // Where no (N, H, L, S') stage nor the head average is written out and blocked keys are skipped,
    // a weights row is needed only as far as the last key some head of the task sees: the rows are
    // zeroed, and the head sum made, over those `width` columns only (not under the NaN policy with a
    // row of the task fully blocked: its NaN spans every key, and so does the context's product).
    // width is a multiple of 128 bytes: Eigen's vectorised row sum pairs its packets, so the zeros
    // after it would only have added +0 to each of its two running sums (the same digits).
    std::int64_t width = Sp;
    if (a.open_end && !a.weights && !a.weights_avg) {
      std::int64_t last = 0;
      for (std::int64_t h = a.head_begin; h < a.head_end && last < Sp; ++h) {
        const std::int64_t* e = a.open_end +
                                ((a.mask_n > 1 ? n : 0) * a.mask_h + (a.mask_h > 1 ? h : 0)) * a.mask_l +
                                (a.mask_l > 1 ? i0 : 0);
        for (std::int64_t i = 0; i < rows; ++i) {
          const std::int64_t end = e[a.mask_l > 1 ? i : 0];
          last = std::max(last, end == 0 && !a.fully_masked_zero ? Sp : end);
        }
      }
      constexpr std::int64_t pair = 128 / std::int64_t(sizeof(T));
      width = std::min(Sp, (last + pair - 1) / pair * pair);
    }
    StridedMap<T> weights(w_block, rows, width, Eigen::OuterStride<>(ld));  // (rows, width) each
    StridedMap<T> avg(avg_block, rows, width, Eigen::OuterStride<>(ld));
    for (std::int64_t h = a.head_begin; h < a.head_end; ++h) {
      const std::int64_t g = h / a.heads_per_kv;
      const T* Qs = a.q_scaled + (n * L + i0 - a.q_row0) * Q + h * dk;  // (rows, d_k), row stride H·d_k
      // Row i0 of (n, h) in the (N, H, L, S') outputs.
      const std::int64_t off = n * a.out_n_stride + h * a.out_h_stride + (i0 - a.out_row0) * Sp;
      // Row i0 of the mask's broadcast (n, h) plane, and its step per query row (0 when shared).
      const T* mask =
          a.mask ? a.mask + (((a.mask_n > 1 ? n : 0) * a.mask_h + (a.mask_h > 1 ? h : 0)) * a.mask_l +
                             (a.mask_l > 1 ? i0 : 0)) *
                                Sp
                 : nullptr;
      const std::int64_t mask_row_step = a.mask_l > 1 ? Sp : 0;
      // Where blocked keys are skipped (Args::open_end): each row's end, and the keys the block needs.
      // A row's softmax runs to its end rounded up to 64 bytes (at most S'), so Eigen's vectorised
      // exp and max meet each value in the same lane as over the whole row; what lies past it is -inf
      // and gives weight 0. A NaN in the mask is before the end (it is not -inf): the row is NaN
      // either way. The scores are computed that far, the context over the block's keys.
      const std::int64_t* ends =
          a.open_end ? a.open_end + ((a.mask_n > 1 ? n : 0) * a.mask_h + (a.mask_h > 1 ? h : 0)) * a.mask_l +
                           (a.mask_l > 1 ? i0 : 0)
                     : nullptr;
      const std::int64_t end_step = a.mask_l > 1 ? 1 : 0;
      std::int64_t block_end = Sp;
      if (ends) {
        block_end = 0;
        for (std::int64_t i = 0; i < rows; ++i) block_end = std::max(block_end, ends[i * end_step]);
      }
      const std::int64_t cols = rounded(block_end);
      std::int64_t keys = ends ? block_end : Sp;  // the context's (all: a row NaN for every key blocked)

      // (rows, cols) = (q / √d_k)·kᵀ; a row alone reads k as it is (the same digits, no packing)
      const T* k = a.k + n * Sp * kv + g * dk;  // (S', d_k), row stride kv
      if (as_torch) {                           // torch's plain bmm loop
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t j = 0; j < cols; ++j) {
            T acc = 0;
            for (std::int64_t c = 0; c < dk; ++c) acc = plain_madd(acc, Qs[i * Q + c], k[j * kv + c]);
            sc_block[i * ld + j] = acc;
          }
      } else if (rows == 1)
        row_product_transposed(Qs, dk, k, kv, sc_block, cols);
      else
        product<T, kTileVecs>(Qs, Q, a.k_packed + (n * G + g) * a.k_group, dk, sc_block, ld, rows, cols);
      if (a.timing) mine.scores += ms_since(t);

      for (std::int64_t i = 0; i < rows; ++i) {
        const T* s_row = sc_block + i * ld;
        if (a.scores_scaled) stream_copy(a.scores_scaled + off + i * Sp, s_row, Sp);
        // The raw scores are not a second GEMM: they are the scaled ones times √d_k. When √d_k is a
        // power of two (d_k = 4, 16, 64, ...) that is exactly q·kᵀ summed in the same order; otherwise
        // it adds one rounding (relative 2^-24 in float), where the reference computes q·kᵀ directly.
        if (a.scores) {
          Vector<T>(row_tmp, Sp) = ConstVector<T>(s_row, Sp) * scale;
          stream_copy(a.scores + off + i * Sp, row_tmp, Sp);
        }
        if (!want_masked) continue;
        const T* mask_row = mask ? mask + i * mask_row_step : nullptr;
        const std::int64_t len = ends ? rounded(ends[i * end_step]) : Sp;
        if (mask) Vector<T>(row_tmp, len) = ConstVector<T>(s_row, len) + ConstVector<T>(mask_row, len);
        const T* x_row = mask ? row_tmp : s_row;  // the masked scores
        if (a.scores_masked) stream_copy(a.scores_masked + off + i * Sp, x_row, Sp);
        if (!want_weights) continue;

        ConstVector<T> x(x_row, len);
        auto w = weights.row(i);
        const T row_max = len > 0 ? x.maxCoeff() : neg_inf;
        // Every key blocked: torch gives NaN (exp(-inf - -inf)). A NaN score (NaN/Inf inputs) is not
        // a blocked key: the else branch propagates it to the whole row, as torch does.
        const bool fully_masked_row = row_max == neg_inf && !x.hasNaN();
        T z = 0;  // the row's sum of exponentials
        if (fully_masked_row) {
          ++mine.fully_masked_rows;
          w.setConstant(a.fully_masked_zero ? T(0) : std::numeric_limits<T>::quiet_NaN());
          if (!a.fully_masked_zero) keys = Sp;  // NaN weights: NaN context, as without skipping
        } else if (as_torch) {  // std::exp, summed in key order, times 1 / sum: the reference's
          T* wp = w.data();
          for (std::int64_t j = 0; j < len; ++j) z += std::exp(x_row[j] - row_max);
          const T inv = T(1) / z;
          for (std::int64_t j = 0; j < len; ++j) wp[j] = std::exp(x_row[j] - row_max) * inv;
          w.tail(width - len).setZero();
        } else {
          // vectorised; within an ulp or two of std::exp (the reference)
          w.head(len) = (x.array() - row_max).exp();
          // Eigen's vectorised exp clamps its argument (near -88.7 in float), so exp(-inf) would come
          // out ~1e-39 instead of 0. Arguments below exp_floor, blocked keys among them, are redone
          // with std::exp: blocked keys get exactly 0, as torch (SLEEF exp) gives them.
          // Looked for 16 values at a time (a vectorised test), redone one by one where one is.
          if (len > 0 && x.minCoeff() - row_max < exp_floor) {
            T* wp = w.data();
            constexpr std::int64_t chunk = 16;
            for (std::int64_t j0 = 0; j0 < len; j0 += chunk) {
              const std::int64_t j1 = std::min(len, j0 + chunk);
              int low = 0;
              for (std::int64_t j = j0; j < j1; ++j) low |= x_row[j] - row_max < exp_floor;
              if (!low) continue;
              for (std::int64_t j = j0; j < j1; ++j) {
                const T arg = x_row[j] - row_max;
                if (arg < exp_floor) wp[j] = arg == neg_inf ? T(0) : std::exp(arg);
              }
            }
          }
          w.tail(width - len).setZero();
          z = w.sum();
          w *= T(1) / z;
        }
        if (a.weights) stream_copy(a.weights + off + i * Sp, w.data(), Sp);
        if (a.overview_weights)
          overview_row(a, n, h, i0 + i, w.data(), fully_masked_row ? width : len, mask_row, x_row, row_max,
                       z);
      }
      if (a.timing) mine.mask_softmax += ms_since(t);

      // torch: attn_weights.sum(dim=1) / num_heads; summed here in head order, divided below.
      if (want_average) {
        if (h == a.head_begin)
          avg = weights;
        else
          avg += weights;
        if (a.timing) mine.average += ms_since(t);
      }

      if (want_context) {
        // weights·v over the keys some row of the block sees: the others add exact zeros
        if (as_torch) {                             // torch's plain bmm loop
          const T* v = a.v + n * Sp * kv + g * dk;  // (S', d_k), row stride kv
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t c = 0; c < dk; ++c) {
              T acc = 0;
              for (std::int64_t j = 0; j < keys; ++j)
                acc = plain_madd(acc, w_block[i * ld + j], v[j * kv + c]);
              ctx_block[i * dk + c] = acc;
            }
        } else if (rows == 1)
          row_product(w_block, keys, a.v + n * Sp * kv + g * dk, kv, ctx_block, dk);
        else
          context_product(a, w_block, a.v_packed + (n * G + g) * a.v_group, ctx_block, rows, keys);
        Map<T> context(ctx_block, rows, dk);  // (rows, d_k)
        if (a.context) Map<T>(a.context + ((n * a.H + h) * L + i0) * dk, rows, dk) = context;
        // concat[n, i, h·d_k + c] = context[n, h, i, c]: transpose(1, 2).contiguous().view
        if (a.concat)
          StridedMap<T>(a.concat + (n * L + i0) * Q + h * dk, rows, dk, Eigen::OuterStride<>(Q)) = context;
        if (a.timing) mine.context += ms_since(t);
      }
    }
    if (want_average) {
      avg /= T(a.H);
      for (std::int64_t i = 0; i < rows; ++i) {
        if (a.weights_avg)
          stream_copy(a.weights_avg + n * a.avg_n_stride + (i0 - a.out_row0 + i) * Sp, avg_block + i * ld,
                      Sp);
        if (a.overview_weights) {
          // The average's values end where the last of its heads' rows does.
          std::int64_t len = Sp;
          if (a.open_end) {
            len = 0;
            for (std::int64_t h = a.head_begin; h < a.head_end; ++h)
              len = std::max(
                  len,
                  rounded(a.open_end[((a.mask_n > 1 ? n : 0) * a.mask_h + (a.mask_h > 1 ? h : 0)) * a.mask_l +
                                     (a.mask_l > 1 ? i0 + i : 0)]));
          }
          // A head's NaN row (every key blocked) makes the average NaN over every key.
          if (std::isnan(avg_block[i * ld])) len = Sp;
          overview_row(a, n, a.H, i0 + i, avg_block + i * ld, len, static_cast<const T*>(nullptr));
        }
      }
      if (a.timing) mine.average += ms_since(t);
    }
  }
  stream_fence();
}

// Rows [r0, r1) of output = concat·W_oᵀ + b_o, each row's digits whatever rows come with it.
template <class T>
void out_projection(const Args<T>& a, std::int64_t r0, std::int64_t r1) {
  const std::int64_t E = a.E, Q = a.qdim();  // concat (rows, H·d_k) · W_oᵀ (H·d_k, E)
  T* y = a.output + r0 * E;
  const std::int64_t rows = r1 - r0;
  if (a.as_torch) {  // F.linear at the notebook's sizes: see linear
    linear(a.concat + r0 * Q, rows, Q, a.w_o, static_cast<const T*>(nullptr), E, y, E, true);
  } else if (rows == 1) {  // W_o as torch stores it, (out, in): no packing for one row
    row_product_transposed(a.concat + r0 * Q, Q, a.w_o, Q, y, E);
  } else if (a.out_few_rows) {  // outputᵀ (E, rows) = W_o·concatᵀ, then transposed into place
    const T* x = a.concat + r0 * Q;
    T* panels = a.w_o_packed;  // concatᵀ's panels (H·d_k, rows), then outputᵀ (plan_packing)
    T* yt = panels + (a.N * a.L + a.o_panel - 1) / a.o_panel * a.o_panel * Q;
    pack_panels(panels, Q, rows, a.o_panel, [&](std::int64_t e, std::int64_t i) { return x[i * Q + e]; });
    product<T, kTileVecs>(a.w_o, Q, panels, Q, yt, rows, E, rows);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t o = 0; o < E; ++o) y[i * E + o] = yt[o * rows + i];
  } else {
    product<T, kTileVecs>(a.concat + r0 * Q, Q, a.w_o_packed, Q, y, E, rows, E);
  }
  if (a.b_o)
    for (std::int64_t r = 0; r < r1 - r0; ++r)
      for (std::int64_t c = 0; c < E; ++c) y[r * E + c] += a.b_o[c];
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

// IEEE half to float, exact (subnormals, infinities and NaN included).
inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void widen(const void* src, int type, std::int64_t n, float* dst) {
  const unsigned char* s = static_cast<const unsigned char*>(src);
  if (type == kWeightF32) {
    std::memcpy(dst, s, std::size_t(n) * 4);
    return;
  }
  std::int64_t i = 0;
#if defined(__AVX512F__)
  // BF16 is float's top half: widen by a 16-bit shift; F16 by vcvtph2ps (AVX-512 F), 16 at a time.
  if (type == kWeightBF16) {
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * i));
      _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  } else {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dst + i,
                       _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * i))));
  }
#elif defined(__AVX2__)
  if (type == kWeightBF16)
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
#endif
  for (; i < n; ++i) {
    std::uint16_t b;
    std::memcpy(&b, s + 2 * i, 2);
    if (type == kWeightBF16) {
      const std::uint32_t bits = std::uint32_t(b) << 16;
      std::memcpy(dst + i, &bits, 4);
    } else {
      dst[i] = half_bits_to_float(b);
    }
  }
}

// Stored elements that are NaN or infinite: those whose exponent is all ones.
std::int64_t nonfinite(const void* src, int type, std::int64_t n) {
  const unsigned char* s = static_cast<const unsigned char*>(src);
  std::int64_t count = 0, i = 0;
  if (type == kWeightF32) {
#if defined(__AVX512F__)
    const __m512i e = _mm512_set1_epi32(0x7F800000);
    for (; i + 16 <= n; i += 16) {
      const __m512i v = _mm512_and_si512(_mm512_loadu_si512(s + 4 * i), e);
      count += __builtin_popcount(unsigned(_mm512_cmpeq_epi32_mask(v, e)));
    }
#endif
    for (; i < n; ++i) {
      std::uint32_t b;
      std::memcpy(&b, s + 4 * i, 4);
      count += (b & 0x7F800000u) == 0x7F800000u;
    }
    return count;
  }
  const std::uint16_t exponent = type == kWeightF16 ? 0x7C00u : 0x7F80u;
#if defined(__AVX512BW__)
  const __m512i e = _mm512_set1_epi16(short(exponent));
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_and_si512(_mm512_loadu_si512(s + 2 * i), e);
    count += __builtin_popcount(unsigned(_mm512_cmpeq_epi16_mask(v, e)));
  }
#endif
  for (; i < n; ++i) {
    std::uint16_t b;
    std::memcpy(&b, s + 2 * i, 2);
    count += (b & exponent) == exponent;
  }
  return count;
}

void linear_typed(const float* x, const void* W, int type, float* y, std::int64_t rows, std::int64_t in,
                  std::int64_t out, std::int64_t c0, std::int64_t c1, float* scratch, std::int64_t tile) {
  if (c1 <= c0 || rows <= 0) return;
  const ConstMap<float> X(x, rows, in);
  if (type == kWeightF32) {
    StridedMap<float> Y(y + c0, rows, c1 - c0, Eigen::OuterStride<>(out));
    Y.noalias() = X * ConstMap<float>(static_cast<const float*>(W) + c0 * in, c1 - c0, in).transpose();
    return;
  }
  const unsigned char* w = static_cast<const unsigned char*>(W);
  // Into column-major storage Eigen packs x (a few rows) and streams W's rows as they lie; straight
  // into the row-major y it would pack each tile of W transposed, most of the work at a few rows.
  ColMatrix<float> tile_out;
  for (std::int64_t t0 = c0; t0 < c1; t0 += tile) {
    const std::int64_t n = std::min(tile, c1 - t0);
    widen(w + 2 * t0 * in, type, n * in, scratch);
    StridedMap<float> Y(y + t0, rows, n, Eigen::OuterStride<>(out));
    tile_out.noalias() = X * ConstMap<float>(scratch, n, in).transpose();
    Y = tile_out;
  }
}

void gemv_typed(const void* A, int type, const float* x, float* y, std::int64_t cols, std::int64_t r0,
                std::int64_t r1, float* scratch, std::int64_t tile) {
  const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, 1>> X(x, cols);
  if (type == kWeightF32) {
    gemv(static_cast<const float*>(A), x, y, cols, r0, r1);
    return;
  }
  const unsigned char* a = static_cast<const unsigned char*>(A);
  for (std::int64_t t0 = r0; t0 < r1; t0 += tile) {
    const std::int64_t n = std::min(tile, r1 - t0);
    widen(a + 2 * t0 * cols, type, n * cols, scratch);
    Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, 1>> Y(y + t0, n);
    Y.noalias() = ConstMap<float>(scratch, n, cols) * X;
  }
}

#define MHA_STR2(x) #x
#define MHA_STR(x) MHA_STR2(x)
const Variant kVariant = {
    MHA_STR(MHA_KERNEL_VARIANT),
    {&in_projection<float>, &in_projection_rows<float>, &fused<float>, &out_projection<float>,
     &plan_packing<float>, &pack_group<float>, &pack_out<float>},
    {&in_projection<double>, &in_projection_rows<double>, &fused<double>, &out_projection<double>,
     &plan_packing<double>, &pack_group<double>, &pack_out<double>},
    &sgemm,
    &conv1d,
    &gemv,
    &widen,
    &linear_typed,
    &gemv_typed,
    &nonfinite};

}  // namespace

const Variant& variant() {
  return kVariant;
}

}  // namespace mha::detail::kernels::MHA_KERNEL_VARIANT
