// The Eigen forward: GEMMs for the projections, then one fused pass per (batch item, block of query
// rows) through every head — scores GEMM, mask + softmax, head average, context GEMM — while the block
// is still in cache. Each phase is split over threads by rows. Fills the same buffers as the
// reference (forward_reference.cpp), and is tested against it stage by stage.
//
// This file is compiled for baseline x86-64 and holds the plan: sizes, scratch, threads, timing.
// The arithmetic is in kernels/forward_kernels.cpp, compiled once per instruction set; the copy
// run is chosen here, once per process, from what the CPU supports (cpu_dispatch.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cost.hpp"
#include "cpu_dispatch.hpp"
#include "errors.hpp"
#include "forward_detail.hpp"
#include "kernels/forward_kernels.hpp"
#include "parallel.hpp"

namespace mha {

namespace {

using kernels_t = detail::kernels::Variant;

// "sse2" is the baseline copy: every x86-64 runs it, and elsewhere it is the only one picked.
bool cpu_runs(const std::string& name) {
  if (name == "sse2") return true;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (name == "avx2") return avx2;
  if (name == "avx512")
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
  return false;
}

// Lowest first; the best supported one is the default.
const kernels_t* const kAll[] = {&detail::kernels::sse2::variant(), &detail::kernels::avx2::variant(),
                                 &detail::kernels::avx512::variant()};

const kernels_t* find(const std::string& name) {
  for (const kernels_t* k : kAll)
    if (name == k->name && cpu_runs(name)) return k;
  return nullptr;
}

// The best this CPU runs, or MHA_CPU's choice when it can run it (else a note on stderr).
const kernels_t* chosen() {
  static const kernels_t* const best = [] {
    const kernels_t* top = kAll[0];
    for (const kernels_t* k : kAll)
      if (cpu_runs(k->name)) top = k;
    if (const char* env = std::getenv("MHA_CPU"); env && *env) {
      if (const kernels_t* k = find(env)) return k;
      std::fprintf(stderr,
                   "mha: MHA_CPU=%s is not supported by this CPU or build (sse2, avx2, avx512); using %s\n",
                   env, top->name);
    }
    return top;
  }();
  return best;
}

std::atomic<const kernels_t*> g_override{nullptr};  // ScopedCpuKernels

const kernels_t& active() {
  const kernels_t* k = g_override.load(std::memory_order_acquire);
  return k ? *k : *chosen();
}

}  // namespace

const char* cpu_kernels() {
  return active().name;
}

std::vector<std::string> cpu_kernels_supported() {
  std::vector<std::string> names;
  for (const kernels_t* k : kAll)
    if (cpu_runs(k->name)) names.push_back(k->name);
  return names;
}

void sgemm_rows(const float* A, const float* B, float* C, std::int64_t n, std::int64_t r0, std::int64_t r1) {
  active().sgemm(A, B, C, n, r0, r1);
}

void conv1d_columns(const float* x, const float* W, const float* b, float* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out, std::int64_t c0, std::int64_t c1, bool gelu) {
  active().conv1d(x, W, b, y, rows, in, out, c0, c1, gelu);
}

void gemv_rows(const float* A, const float* x, float* y, std::int64_t cols, std::int64_t r0,
               std::int64_t r1) {
  active().gemv(A, x, y, cols, r0, r1);
}

detail::ScopedCpuKernels::ScopedCpuKernels(const std::string& name) : previous_(g_override.load()) {
  const kernels_t* k = find(name);
  if (!k) throw ConfigError("MHA_CPU", "kernels \"" + name + "\" are not supported by this CPU or build");
  g_override.store(k, std::memory_order_release);
}

detail::ScopedCpuKernels::~ScopedCpuKernels() {
  g_override.store(static_cast<const kernels_t*>(previous_), std::memory_order_release);
}

}  // namespace mha

namespace mha::detail {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point& t) {
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t).count();
  t = now;
  return ms;
}

// Query rows per task of the fused loop. Few rows make the per-head GEMMs slow: Eigen packs a whole
// head's keys (or values) on every call, which costs as much as the arithmetic of some rows (hence
// at least 16). Over that, the task's three (rows, S') scratch blocks (scores, weights, head sum)
// should stay near the core: at most 1 MiB each (2 MiB of L2 per core on the machine measured, a
// large L3 behind it), and at most 128 rows (64 was 3–7 % slower at L = 2048). And at
// least 8 tasks per batch item: a mask edit recomputes the tasks holding its rows on one thread
// (forward_eigen_rows), so at L = 512 a one-cell edit redid 256 rows of every head, as slow as the
// whole forward on two threads; with 64-row blocks it redoes 64, and the full forward measured the
// same (`mha bench --size medium`, alternated 6 times: medians 19.5–20.8 ms, 19.1–20.5 with 256).
std::int64_t rows_per_block(std::int64_t L, std::int64_t Sp, std::size_t scalar) {
  const std::int64_t fit = 1024 * 1024 / (Sp * std::int64_t(scalar));
  const std::int64_t rows = std::clamp<std::int64_t>(std::min(fit, L / 8), 16, 128);
  return std::min(rows, L);
}

}  // namespace

template <class T>
const kernels::Table<T>& table() {
  if constexpr (sizeof(T) == 4)
    return active().f32;
  else
    return active().f64;
}

template <class T>
double forward_flops(const Dims& d) {
  return cost::matmul_flops(cost::shape(d));  // the six products; decides whether threads pay off
}

// The kernels' arguments: sizes, weights and every buffer.
template <class T>
kernels::Args<T> make_args(const Problem<T>& p, Buffers<T>& b) {
  const Dims& d = p.d;
  kernels::Args<T> a;
  a.N = d.N, a.L = d.L, a.S = d.S, a.Sp = d.S_total, a.E = d.E, a.H = d.H, a.dk = d.d_k, a.kv = d.G * d.d_k,
  a.kdim = d.kdim, a.vdim = d.vdim;
  a.heads_per_kv = d.H / d.G;
  a.score_divisor = p.score_divisor;
  a.query = p.query->data(), a.key = p.key->data(), a.value = p.value->data();
  a.w_q = p.w_q, a.w_k = p.w_k, a.w_v = p.w_v, a.w_o = p.w_o;
  a.b_q = p.b_q, a.b_k = p.b_k, a.b_v = p.b_v, a.b_o = p.b_o;
  if (p.mask) {
    a.mask = p.mask->values.data();
    a.mask_n = p.mask->n_size, a.mask_h = p.mask->h_size, a.mask_l = p.mask->l_size;
  }
  a.fully_masked_zero = p.fully_masked == FullyMasked::zero;
  // A null buffer is a stage nobody asked for (Options::stages): the kernels leave it out.
  auto at = [](Buffer<T>& buf) { return buf ? buf->data() : nullptr; };
  a.q = at(b.q), a.q_scaled = at(b.q_scaled), a.k = at(b.k), a.v = at(b.v);
  a.scores = at(b.scores), a.scores_scaled = at(b.scores_scaled);
  a.scores_masked = at(b.scores_masked), a.weights = at(b.weights);
  a.context = at(b.context), a.concat = at(b.concat);
  a.output = at(b.output), a.weights_avg = at(b.weights_avg);
  a.out_n_stride = d.H * d.L * d.S_total, a.out_h_stride = d.L * d.S_total, a.avg_n_stride = d.L * d.S_total;
  a.head_begin = 0, a.head_end = d.H;
  return a;
}

// Each thread's scratch starts on a 64-byte boundary, whatever address malloc gave: Eigen's vectorised
// sums peel a few elements to reach packet alignment, so the weights' row sums (and so the digits
// of every stage after them) would otherwise depend on where the buffer happened to land.
template <class T>
void plan_fused(kernels::Args<T>& a, Buffers<T>& b, int threads) {
  a.block = rows_per_block(a.L, a.Sp, sizeof(T));
  a.blocks_per_item = (a.L + a.block - 1) / a.block;
  constexpr std::int64_t line = 64 / sizeof(T);
  a.scratch_per_thread = (3 * a.block * a.Sp + a.Sp + a.block * a.dk + line - 1) / line * line;
  const std::size_t scratch_size = std::size_t(threads * a.scratch_per_thread + line);
  if (!b.scratch || b.scratch->size() < scratch_size)
    b.scratch = std::make_shared<std::vector<T>>(scratch_size);
  a.scratch =
      b.scratch->data() +
      (line - std::int64_t(reinterpret_cast<std::uintptr_t>(b.scratch->data()) % 64 / sizeof(T))) % line;
}

template <class T>
void forward_eigen(const Problem<T>& p, Buffers<T>& b, int threads_requested, StageTimes* times,
                   ForwardControl* control) {
  const Dims& d = p.d;
  // Progress in fifths of the fused loop's task count: the in-projections one, the loop three, the
  // out-projection one (roughly their shares of the time at large L).
  auto check = [control] {
    if (control && control->cancel.load(std::memory_order_relaxed))
      throw Cancelled("forward", "cancelled: a newer edit replaced this forward");
  };
  auto advance = [control](std::int64_t units) {
    if (control) control->done.fetch_add(units, std::memory_order_relaxed);
  };
  if (control) control->done = 0, control->total = 0;  // known once the tasks are planned
  check();
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, kv = d.G * d.d_k;
  const int threads = thread_count(threads_requested, forward_flops<T>(d));
  const kernels::Table<T>& kernel = table<T>();
  kernels::Args<T> a = make_args(p, b);
  a.threads = threads;
  a.timing = times != nullptr;
  Clock::time_point t_phase = a.timing ? Clock::now() : Clock::time_point();

  // 1. In-projections, each thread a share of the rows of q, k and v. torch divides q by √d_k before
  //    the product with kᵀ; that q / √d_k is kept as scratch for every head. Then the bias_k and
  //    zero rows after each batch item's S keys and values.
  parallel_ranges(threads, threads, [&](int, std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) kernel.in_projection(a, int(t));
  });
  for (std::int64_t n = 0; n < N; ++n) {
    std::int64_t row = S;
    if (p.bias_k) {
      std::copy(p.bias_k, p.bias_k + kv, a.k + (n * Sp + row) * kv);
      std::copy(p.bias_v, p.bias_v + kv, a.v + (n * Sp + row) * kv);
      ++row;
    }
    if (p.add_zero_attn) {
      std::fill_n(a.k + (n * Sp + row) * kv, kv, T(0));
      std::fill_n(a.v + (n * Sp + row) * kv, kv, T(0));
    }
  }
  if (a.timing) times->projections = ms_since(t_phase);

  // 2. The fused loop (kernels::Table::fused). Each task is a block of rows computed alone (the same
  //    values whichever thread runs it), so the threads take the next task as they come free: a
  //    thread that loses its core for a while (the app draws a frame meanwhile) holds up no one.
  //    With a control, a cancel is looked for before each task.
  plan_fused(a, b, threads);
  const std::int64_t tasks = N * a.blocks_per_item;
  if (control) control->total = 5 * tasks;
  advance(tasks);
  check();
  std::vector<kernels::Tally> tally(static_cast<std::size_t>(threads));
  std::atomic<std::int64_t> next_task{0};
  parallel_ranges(threads, threads, [&](int thread, std::int64_t, std::int64_t) {
    for (std::int64_t t; (t = next_task.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
      check();
      kernel.fused(a, thread, t, t + 1, &tally[std::size_t(thread)]);
      advance(3);
    }
  });
  check();
  for (const kernels::Tally& t : tally) b.fully_masked_rows += t.fully_masked_rows;
  if (a.timing) {
    // The four phases interleave on every thread: share the loop's wall time out by thread time.
    const double wall = ms_since(t_phase);
    double sc = 0, sm = 0, av = 0, cx = 0;
    for (const kernels::Tally& t : tally) {
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
  parallel_ranges(threads, N * L,
                  [&](int, std::int64_t r0, std::int64_t r1) { kernel.out_projection(a, r0, r1); });
  advance(tasks);
  if (a.timing) {
    times->out_proj = ms_since(t_phase);
    times->threads = threads;
  }
}

template <class T>
std::int64_t forward_eigen_rows(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& rows_changed,
                                const MergedMask<T>* old_mask, int threads_requested) {
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, Sp = d.S_total, H = d.H, E = d.E;
  // The same threads as forward_eigen: they set the out-projection's row ranges, and a GEMM's digits
  // depend on the rows it is given (one row is a GEMV in Eigen, summed in another order).
  const int threads = thread_count(threads_requested, forward_flops<T>(d));
  const kernels::Table<T>& kernel = table<T>();
  kernels::Args<T> a = make_args(p, b);
  a.threads = threads;
  plan_fused(a, b, 1);  // the changed tasks run on this thread: there are few
  // The tasks whose rows changed, and the out-projection ranges holding them.
  std::vector<std::int64_t> tasks;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t blk = 0; blk < a.blocks_per_item; ++blk) {
      const std::int64_t i0 = blk * a.block, i1 = std::min(L, i0 + a.block);
      if (std::any_of(rows_changed.begin() + n * L + i0, rows_changed.begin() + n * L + i1,
                      [](char c) { return c != 0; }))
        tasks.push_back(n * a.blocks_per_item + blk);
    }
  // The fused kernel rewrites the raw and scaled scores of its rows too: the same values, since the
  // mask comes after them.
  const std::size_t scores = std::size_t(N * H * L * Sp);
  std::int64_t delta = 0;
  if (old_mask) {
    // The fully masked rows the old masks gave in these tasks, to take out of the count: the same
    // kernel with the old mask, every output thrown away.
    kernels::Args<T> old = a;
    old.mask = old_mask->values.data();
    std::unique_ptr<T[]> w1(new T[scores]), w2(new T[scores]), ctx(new T[std::size_t(N * L * E)]),
        cat(new T[std::size_t(N * L * E)]), avg(new T[std::size_t(N * L * Sp)]);
    old.scores_masked = w1.get(), old.weights = w2.get(), old.context = ctx.get(), old.concat = cat.get(),
    old.weights_avg = avg.get();
    for (std::int64_t task : tasks) {
      kernels::Tally t;
      kernel.fused(old, 0, task, task + 1, &t);
      delta -= t.fully_masked_rows;
    }
  }
  for (std::int64_t task : tasks) {
    kernels::Tally t;
    kernel.fused(a, 0, task, task + 1, &t);
    delta += t.fully_masked_rows;
  }
  for (int t = 0; t < std::min<std::int64_t>(threads, N * L); ++t) {
    const int parts = int(std::min<std::int64_t>(threads, N * L));
    const std::int64_t r0 = N * L * t / parts, r1 = N * L * (t + 1) / parts;
    if (std::any_of(rows_changed.begin() + r0, rows_changed.begin() + r1, [](char c) { return c != 0; }))
      kernel.out_projection(a, r0, r1);
  }
  return delta;
}

}  // namespace mha::detail

namespace mha {

const std::vector<std::string>& on_demand_stages() {
  static const std::vector<std::string> names = {"scores", "scores_scaled", "scores_masked", "attn_weights",
                                                 "attn_weights_avg"};
  return names;
}

template <class T>
Tensor<T> stage_rows(const ForwardResult<T>& r, const std::string& stage, std::int64_t n, std::int64_t h,
                     std::int64_t i0, std::int64_t rows) {
  const std::vector<std::string>& names = on_demand_stages();
  if (std::find(names.begin(), names.end(), stage) == names.end())
    throw ConfigError("stage", "\"" + stage +
                                   "\" is not computed on demand (scores, scores_scaled, scores_masked, "
                                   "attn_weights, attn_weights_avg)");
  if (r.backend != Backend::eigen)
    throw ConfigError("backend", std::string("stages are computed on demand from cpu-backend results; this "
                                             "one was computed by ") +
                                     backend_name(r.backend));
  const Dims& d = r.dims;
  const bool average = stage == "attn_weights_avg";
  auto outside = [](const char* what, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo || v > hi)
      throw ConfigError(what,
                        std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  };
  outside("n", n, 0, d.N - 1);
  if (!average) outside("h", h, 0, d.H - 1);
  outside("i0", i0, 0, d.L);
  outside("rows", rows, 0, d.L - i0);
  const std::int64_t Sp = d.S_total, E = d.E;
  Tensor<T> out({rows, Sp});
  if (rows == 0) return out;

  // The forward's arguments, on the result's q, k, v and merged mask; every output null but one.
  detail::kernels::Args<T> a;
  a.N = d.N, a.L = d.L, a.S = d.S, a.Sp = Sp, a.E = E, a.H = d.H, a.dk = d.d_k, a.kv = d.G * d.d_k;
  a.kdim = d.kdim, a.vdim = d.vdim, a.heads_per_kv = d.H / d.G;
  a.score_divisor = r.score_divisor;
  a.fully_masked_zero = r.fully_masked == FullyMasked::zero;
  auto data = [&](const char* name) {
    const Stage<T>& s = r.trace[name];
    return s.storage->data() + s.offset;
  };
  const T* q = data("q");                                            // (N, L, E)
  a.k = const_cast<T*>(data("k")), a.v = const_cast<T*>(data("v"));  // read only
  if (const Stage<T>* m = r.trace.find("attn_mask")) {  // strides 0 where the merged mask broadcasts
    a.mask = m->storage->data() + m->offset;
    a.mask_n = m->strides[0] ? d.N : 1, a.mask_h = m->strides[1] ? d.H : 1,
    a.mask_l = m->strides[2] ? d.L : 1;
  }
  detail::Buffers<T> b;
  detail::plan_fused(a, b, 1);
  // The forward's tasks (blocks of query rows) that hold rows [i0, i0 + rows).
  const std::int64_t first = i0 / a.block, last = (i0 + rows - 1) / a.block;
  const std::int64_t span0 = first * a.block, span1 = std::min(d.L, (last + 1) * a.block);
  // q / √d_k of those rows, as the in-projection divides (an exact division: the same digits).
  const T scale = r.score_divisor > 0 ? T(r.score_divisor) : std::sqrt(T(d.d_k));
  std::vector<T> q_scaled(std::size_t((span1 - span0) * E));
  const T* q_rows = q + (n * d.L + span0) * E;
  for (std::size_t x = 0; x < q_scaled.size(); ++x) q_scaled[x] = q_rows[x] / scale;
  a.q_scaled = q_scaled.data(), a.q_row0 = n * d.L + span0;
  std::vector<T> span(std::size_t((span1 - span0) * Sp));  // (span rows, S') of this (n, h)
  T* target = span.data();
  if (stage == "scores") a.scores = target;
  if (stage == "scores_scaled") a.scores_scaled = target;
  if (stage == "scores_masked") a.scores_masked = target;
  if (stage == "attn_weights") a.weights = target;
  if (average) a.weights_avg = target;
  a.out_n_stride = 0, a.out_h_stride = 0, a.avg_n_stride = 0, a.out_row0 = span0;
  a.head_begin = average ? 0 : h, a.head_end = average ? d.H : h + 1;
  for (std::int64_t blk = first; blk <= last; ++blk) {
    detail::kernels::Tally tally;
    detail::table<T>().fused(a, 0, n * a.blocks_per_item + blk, n * a.blocks_per_item + blk + 1, &tally);
  }
  std::copy(span.begin() + (i0 - span0) * Sp, span.begin() + (i0 - span0 + rows) * Sp, out.data.begin());
  return out;
}

template Tensor<float> stage_rows<float>(const ForwardResult<float>&, const std::string&, std::int64_t,
                                         std::int64_t, std::int64_t, std::int64_t);
template Tensor<double> stage_rows<double>(const ForwardResult<double>&, const std::string&, std::int64_t,
                                           std::int64_t, std::int64_t, std::int64_t);

}  // namespace mha

namespace mha::detail {

template void forward_eigen<float>(const Problem<float>&, Buffers<float>&, int, StageTimes*, ForwardControl*);
template void forward_eigen<double>(const Problem<double>&, Buffers<double>&, int, StageTimes*,
                                    ForwardControl*);
template std::int64_t forward_eigen_rows<float>(const Problem<float>&, Buffers<float>&,
                                                const std::vector<char>&, const MergedMask<float>*, int);
template std::int64_t forward_eigen_rows<double>(const Problem<double>&, Buffers<double>&,
                                                 const std::vector<char>&, const MergedMask<double>*, int);

}  // namespace mha::detail
