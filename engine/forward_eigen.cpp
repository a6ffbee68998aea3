// The Eigen forward: GEMMs for the projections, then one fused pass per (batch item, block of query
// rows) through every head — scores GEMM, mask + softmax, head average, context GEMM — while the block
// is still in cache. Each phase is split over threads by rows. Fills the same buffers as the
// reference (forward_reference.cpp), and is tested against it stage by stage.
#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <system_error>
#include <thread>
#include <vector>

#include "forward_detail.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// Starting a thread costs some tens of µs, more than a whole teaching-size forward (~20 µs), so
// problems under a few MFLOP run on the caller's thread.
int thread_count(int requested, double flops) {
  if (flops < 4e6) return 1;
  const int n = requested > 0 ? requested : int(std::thread::hardware_concurrency());
  return std::max(n, 1);
}

// Runs fn(thread, begin, end) over [0, count) cut into `threads` contiguous ranges, the first on
// the calling thread. If a thread cannot be started, the caller runs its range. An exception from
// any range is rethrown once all have finished.
template <class F>
void parallel_ranges(int threads, std::int64_t count, const F& fn) {
  threads = int(std::min<std::int64_t>(threads, count));
  if (threads <= 1) {
    fn(0, std::int64_t(0), count);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  auto run = [&](int t) {
    try {
      fn(t, count * t / threads, count * (t + 1) / threads);
    } catch (...) {
      errors[std::size_t(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  int started = 1;
  try {
    for (; started < threads; ++started) pool.emplace_back(run, started);
  } catch (const std::system_error&) {
  }
  for (int t = started; t < threads; ++t) run(t);
  run(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
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
// cost no read-for-ownership and do not evict the block being worked on. Elsewhere a plain copy.
void stream_copy(float* dst, const float* src, std::int64_t n) {
#if defined(__SSE2__)
  std::int64_t j = 0;
  for (; j < n && (reinterpret_cast<std::uintptr_t>(dst + j) & 15); ++j) dst[j] = src[j];
  for (; j + 4 <= n; j += 4) _mm_stream_ps(dst + j, _mm_loadu_ps(src + j));
  for (; j < n; ++j) dst[j] = src[j];
#else
  std::copy(src, src + n, dst);
#endif
}

void stream_copy(double* dst, const double* src, std::int64_t n) {
#if defined(__SSE2__)
  std::int64_t j = 0;
  for (; j < n && (reinterpret_cast<std::uintptr_t>(dst + j) & 15); ++j) dst[j] = src[j];
  for (; j + 2 <= n; j += 2) _mm_stream_pd(dst + j, _mm_loadu_pd(src + j));
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

// Query rows per task of the fused loop. Under ~64 rows the per-head GEMMs run slowly: Eigen packs
// a whole head's keys (or values) on every call, which costs as much as the arithmetic of a few dozen
// rows. Over that, the task's three (rows, S') scratch blocks (scores, weights, head sum) should stay
// near the core: at most 1 MiB each (2 MiB of L2 per core on the machine measured, a large L3
// behind it; bigger and smaller blocks were both slower there).
std::int64_t rows_per_block(std::int64_t L, std::int64_t Sp, std::size_t scalar) {
  const std::int64_t rows = std::clamp<std::int64_t>(1024 * 1024 / (Sp * std::int64_t(scalar)), 16, 256);
  return std::min(rows, L);
}

// One thread's share of the fused loop's time and counts; padded so threads never share a cache line.
struct alignas(64) ThreadTally {
  double scores = 0, mask_softmax = 0, average = 0, context = 0;
  std::int64_t fully_masked_rows = 0;
};

}  // namespace

template <class T>
void forward_eigen(const Problem<T>& p, Buffers<T>& b, int threads_requested, StageTimes* times) {
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, E = d.E, H = d.H, dk = d.d_k;
  const std::int64_t kv = d.G * dk;
  T* q = b.q->data();
  T* q_scaled = b.q_scaled->data();
  T* k = b.k->data();
  T* v = b.v->data();
  const T scale = std::sqrt(T(dk));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // Softmax arguments below this are left to std::exp (see the loop): well above where Eigen's exp clamps.
  const T exp_floor = sizeof(T) == 4 ? T(-80) : T(-700);
  const double flops = double(N) * (2.0 * L * E * E + 2.0 * S * kv * (d.kdim + d.vdim) +
                                    4.0 * double(H) * L * Sp * dk + 2.0 * L * E * E);
  const int threads = thread_count(threads_requested, flops);
  const bool timing = times != nullptr;
  Clock::time_point t_phase = timing ? Clock::now() : Clock::time_point();

  // 1. In-projections, each thread a share of the rows of q, k and v. torch divides q by √d_k before
  //    the product with kᵀ; that q / √d_k is kept as scratch for every head.
  parallel_ranges(threads, threads, [&](int, std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t q0 = N * L * t / threads, q1 = N * L * (t + 1) / threads;
      linear(p.query->data() + q0 * E, q1 - q0, E, p.w_q, p.b_q, E, q + q0 * E, E);
      Map<T>(q_scaled + q0 * E, q1 - q0, E).array() = Map<T>(q + q0 * E, q1 - q0, E).array() / scale;
      const std::int64_t k0 = N * S * t / threads, k1 = N * S * (t + 1) / threads;
      linear_batched_rows(p.key->data(), k0, k1, S, Sp, d.kdim, p.w_k, p.b_k, kv, k);
      linear_batched_rows(p.value->data(), k0, k1, S, Sp, d.vdim, p.w_v, p.b_v, kv, v);
    }
  });
  for (std::int64_t n = 0; n < N; ++n) {
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
  if (timing) times->projections = ms_since(t_phase);

  // 2. The fused loop. A task is (batch item n, query rows i0 .. i0+rows); it runs every head over
  //    its rows, so each task owns disjoint rows of every buffer, and the head average accumulates
  //    in cache instead of re-reading all weights afterwards. The blocks are computed in the
  //    thread's scratch and streamed out to the trace (stream_copy).
  const std::int64_t block = rows_per_block(L, Sp, sizeof(T));
  const std::int64_t blocks_per_item = (L + block - 1) / block;
  // Each thread's scratch starts on a 64-byte boundary, whatever address malloc gave: Eigen's vectorised
  // sums peel a few elements to reach packet alignment, so the weights' row sums (and so the digits
  // of every stage after them) would otherwise depend on where the buffer happened to land.
  constexpr std::int64_t line = 64 / sizeof(T);
  const std::int64_t scratch_per_thread = (3 * block * Sp + Sp + block * dk + line - 1) / line * line;
  const std::size_t scratch_size = std::size_t(threads * scratch_per_thread + line);
  if (!b.scratch || b.scratch->size() < scratch_size)
    b.scratch = std::make_shared<std::vector<T>>(scratch_size);
  T* const scratch =
      b.scratch->data() +
      (line - std::int64_t(reinterpret_cast<std::uintptr_t>(b.scratch->data()) % 64 / sizeof(T))) % line;
  std::vector<ThreadTally> tally(static_cast<std::size_t>(threads));
  parallel_ranges(threads, N * blocks_per_item, [&](int thread, std::int64_t task0, std::int64_t task1) {
    ThreadTally& mine = tally[std::size_t(thread)];
    T* sc_block = scratch + thread * scratch_per_thread;  // (block, S') scaled scores
    T* w_block = sc_block + block * Sp;                   // (block, S') weights
    T* avg_block = w_block + block * Sp;                  // (block, S') head sum
    T* row_tmp = avg_block + block * Sp;                  // (S',)
    T* ctx_block = row_tmp + Sp;                          // (block, d_k) context
    Clock::time_point t = timing ? Clock::now() : Clock::time_point();
    for (std::int64_t task = task0; task < task1; ++task) {
      const std::int64_t n = task / blocks_per_item, i0 = (task % blocks_per_item) * block;
      const std::int64_t rows = std::min(block, L - i0);
      Map<T> scaled(sc_block, rows, Sp);  // (rows, S') each
      Map<T> weights(w_block, rows, Sp);
      Map<T> avg(avg_block, rows, Sp);
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t g = p.kv_head(h);
        ConstStridedMap<T> Qs(q_scaled + (n * L + i0) * E + h * dk, rows, dk, Eigen::OuterStride<>(E));
        ConstStridedMap<T> Kg(k + n * Sp * kv + g * dk, Sp, dk, Eigen::OuterStride<>(kv));  // (S', d_k)
        ConstStridedMap<T> Vg(v + n * Sp * kv + g * dk, Sp, dk, Eigen::OuterStride<>(kv));  // (S', d_k)
        const std::int64_t off = ((n * H + h) * L + i0) * Sp;  // row i0 of (n, h) in the (N, H, L, S') arrays

        scaled.noalias() = Qs * Kg.transpose();
        if (timing) mine.scores += ms_since(t);

        for (std::int64_t i = 0; i < rows; ++i) {
          const T* s_row = sc_block + i * Sp;
          stream_copy(b.scores_scaled->data() + off + i * Sp, s_row, Sp);
          // The raw scores are not a second GEMM: they are the scaled ones times √d_k. When √d_k is a
          // power of two (d_k = 4, 16, 64, ...) that is exactly q·kᵀ summed in the same order; otherwise
          // it adds one rounding (relative 2^-24 in float), where the reference computes q·kᵀ directly.
          Vector<T>(row_tmp, Sp) = ConstVector<T>(s_row, Sp) * scale;
          stream_copy(b.scores->data() + off + i * Sp, row_tmp, Sp);
          if (p.mask)
            Vector<T>(row_tmp, Sp) =
                ConstVector<T>(s_row, Sp) +
                ConstVector<T>(p.mask->values.data() + p.mask_index(n, h, i0 + i, 0), Sp);
          const T* x_row = p.mask ? row_tmp : s_row;  // the masked scores
          stream_copy(b.scores_masked->data() + off + i * Sp, x_row, Sp);

          ConstVector<T> x(x_row, Sp);
          auto w = weights.row(i);
          const T row_max = x.maxCoeff();
          // Every key blocked: torch gives NaN (exp(-inf - -inf)). A NaN score (NaN/Inf inputs) is not
          // a blocked key: the else branch propagates it to the whole row, as torch does.
          if (row_max == neg_inf && !x.hasNaN()) {
            ++mine.fully_masked_rows;
            w.setConstant(p.fully_masked == FullyMasked::zero ? T(0) : std::numeric_limits<T>::quiet_NaN());
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
          stream_copy(b.weights->data() + off + i * Sp, w.data(), Sp);
        }
        if (timing) mine.mask_softmax += ms_since(t);

        // torch: attn_weights.sum(dim=1) / num_heads; summed here in head order, divided below.
        if (h == 0)
          avg = weights;
        else
          avg += weights;
        if (timing) mine.average += ms_since(t);

        // Computed in the aligned scratch for the reason given in linear(), then copied out.
        Map<T> context(ctx_block, rows, dk);  // (rows, d_k)
        context.noalias() = weights * Vg;
        Map<T>(b.context->data() + ((n * H + h) * L + i0) * dk, rows, dk) = context;
        // concat[n, i, h·d_k + c] = context[n, h, i, c]: transpose(1, 2).contiguous().view
        StridedMap<T>(b.concat->data() + (n * L + i0) * E + h * dk, rows, dk, Eigen::OuterStride<>(E)) =
            context;
        if (timing) mine.context += ms_since(t);
      }
      avg /= T(H);
      stream_copy(b.weights_avg->data() + (n * L + i0) * Sp, avg_block, rows * Sp);
      if (timing) mine.average += ms_since(t);
    }
    stream_fence();
  });
  for (const ThreadTally& t : tally) b.fully_masked_rows += t.fully_masked_rows;
  if (timing) {
    // The four phases interleave on every thread: share the loop's wall time out by thread time.
    const double wall = ms_since(t_phase);
    double sc = 0, sm = 0, av = 0, cx = 0;
    for (const ThreadTally& t : tally) {
      sc += t.scores;
      sm += t.mask_softmax;
      av += t.average;
      cx += t.context;
    }
    const double total = std::max(sc + sm + av + cx, 1e-12);
    times->scores = wall * sc / total;
    times->mask_softmax = wall * sm / total;
    times->average = wall * av / total;
    times->context = wall * cx / total;
  }

  // 3. Out-projection, each thread a share of the rows.
  parallel_ranges(threads, N * L, [&](int, std::int64_t r0, std::int64_t r1) {
    linear(b.concat->data() + r0 * E, r1 - r0, E, p.w_o, p.b_o, E, b.output->data() + r0 * E, E);
  });
  if (timing) {
    times->out_proj = ms_since(t_phase);
    times->threads = threads;
  }
}

template void forward_eigen<float>(const Problem<float>&, Buffers<float>&, int, StageTimes*);
template void forward_eigen<double>(const Problem<double>&, Buffers<double>&, int, StageTimes*);

}  // namespace mha::detail
