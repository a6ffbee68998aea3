// The Eigen forward: Eigen's GEMMs for the in-projections, then one fused pass per (batch item, block
// of query rows) through every head — scores product, mask + softmax, head average, context product —
// while the block is still in cache, then the out-projection. The fused pass's products and the
// out-projection are the kernels' own, which give a row the same digits whatever rows come with it,
// so an edit redoes the rows it changed alone (forward_eigen_rows). Each phase is split over threads
// by rows. Fills the same buffers as the reference (forward_reference.cpp), and is tested against it
// stage by stage.
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
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
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

void linear_typed_columns(const float* x, const void* W, int type, float* y, std::int64_t rows,
                          std::int64_t in, std::int64_t out, std::int64_t c0, std::int64_t c1, float* scratch,
                          std::int64_t tile) {
  active().linear(x, W, type, y, rows, in, out, c0, c1, scratch, tile);
}

void gemv_typed_rows(const void* A, int type, const float* x, float* y, std::int64_t cols, std::int64_t r0,
                     std::int64_t r1, float* scratch, std::int64_t tile) {
  active().gemv_typed(A, type, x, y, cols, r0, r1, scratch, tile);
}

void widen_elements(const void* src, int type, std::int64_t n, float* dst) {
  active().widen(src, type, n, dst);
}

std::int64_t count_nonfinite_elements(const void* src, int type, std::int64_t n) {
  const std::int64_t chunk = std::int64_t(1) << 22, chunks = (n + chunk - 1) / chunk;
  const std::size_t width = type == detail::kernels::kWeightF32 ? 4 : 2;
  const int threads = detail::thread_count(0, double(n));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(std::max(threads, 1)), 0);
  detail::parallel_ranges(threads, chunks, [&](int t, std::int64_t c0, std::int64_t c1) {
    const std::int64_t begin = c0 * chunk, end = std::min(n, c1 * chunk);
    counts[std::size_t(t)] = active().nonfinite(static_cast<const unsigned char*>(src) + begin * width, type,
                                                end - begin);
  });
  std::int64_t total = 0;
  for (std::int64_t c : counts) total += c;
  return total;
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

// Query rows per task of the fused loop. Few rows make the products slow: each panel of kᵀ is
// loaded once per tile of rows (hence at least 16). Over that, the task's three (rows, S') scratch
// blocks (scores, weights, head sum) should stay near the core: at most 1 MiB each (2 MiB of L2 per
// core on the machine measured, a large L3 behind it), and at most 128 rows (64 was 3–7 % slower at
// L = 2048). And at least 8 tasks per batch item, so that a thread that loses its core for a while
// (the app draws a frame) holds up little: at L = 512, 128-row blocks were 2 % faster alone
// (`mha bench --size medium`, alternated 3 times: 11.5–11.6 ms against 11.8).
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
  a.as_torch = kernels::rounds_as_torch(d.L, d.S_total, d.d_k);
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

// The weights overview's buffers (Options::weights_overview), where b has them: the fused loop
// pools and checks each weights row into them.
template <class T>
void attach_overview(kernels::Args<T>& a, const Dims& d, Buffers<T>& b) {
  if (b.overview_block <= 0 || !b.overview_weights) return;
  a.overview_weights = b.overview_weights->data();
  a.overview_average = b.overview_average->data();
  a.overview_checks = b.overview_checks->data();
  a.overview_block = b.overview_block;
  a.overview_columns = (d.S_total + b.overview_block - 1) / b.overview_block;
}

// The scratch holds the products' packed operands (Args::k_packed, v_packed, w_o_packed; filled by
// pack_operands), then each thread's blocks. Each part starts on a 64-byte boundary, whatever address
// malloc gave: Eigen's vectorised sums peel a few elements to reach packet alignment, so the
// weights' row sums (and so the digits of every stage after them) would otherwise depend on where
// the buffer happened to land. block: the rows of a task (0: rows_per_block's).
template <class T>
void plan_fused(kernels::Args<T>& a, Buffers<T>& b, int threads, std::int64_t block = 0) {
  table<T>().plan_packing(a);
  a.block = block > 0 ? block : rows_per_block(a.L, a.Sp, sizeof(T));
  a.blocks_per_item = (a.L + a.block - 1) / a.block;
  constexpr std::int64_t line = 64 / sizeof(T);
  auto lines = [](std::int64_t x) { return (x + line - 1) / line * line; };
  const std::int64_t groups = a.N * (a.kv / a.dk);
  const std::int64_t k_size = lines(groups * a.k_group), v_size = lines(groups * a.v_group);
  const std::int64_t packed = k_size + v_size + lines(a.o_size);
  a.scratch_per_thread = lines(3 * a.block * a.ld + a.ld + a.block * a.dk);
  const std::size_t scratch_size = std::size_t(packed + threads * a.scratch_per_thread + line);
  if (!b.scratch || b.scratch->size() < scratch_size)
    b.scratch = std::make_shared<std::vector<T>>(scratch_size);
  T* base =
      b.scratch->data() +
      (line - std::int64_t(reinterpret_cast<std::uintptr_t>(b.scratch->data()) % 64 / sizeof(T))) % line;
  a.k_packed = base, a.v_packed = base + k_size, a.w_o_packed = base + k_size + v_size;
  a.scratch = base + packed;
}

template <class T>
void reserve_eigen_scratch(const Dims& d, Buffers<T>& b, int threads_requested) {
  kernels::Args<T> a;
  a.N = d.N, a.L = d.L, a.S = d.S, a.Sp = d.S_total, a.E = d.E, a.H = d.H, a.dk = d.d_k, a.kv = d.G * d.d_k;
  a.heads_per_kv = d.H / d.G;
  plan_fused(a, b, thread_count(threads_requested, forward_flops<T>(d)));
}

// Packs what the products read into the scratch plan_fused laid out: the keys (and with `values`
// the values) of the key/value heads of heads [h0, h1) of every batch item, and W_o with `out`;
// the pieces shared between the threads.
template <class T>
void pack_operands(const kernels::Args<T>& a, int threads, std::int64_t h0, std::int64_t h1, bool values,
                   bool out) {
  const kernels::Table<T>& kernel = table<T>();
  const std::int64_t g0 = h0 / a.heads_per_kv, g1 = h1 > h0 ? (h1 - 1) / a.heads_per_kv + 1 : g0;
  const std::int64_t groups = a.N * (g1 - g0), items = groups + (out ? 1 : 0);
  std::atomic<std::int64_t> next{0};
  parallel_ranges(std::min<std::int64_t>(threads, items), items, [&](int, std::int64_t, std::int64_t) {
    for (std::int64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < items;)
      if (k < groups)
        kernel.pack_group(a, k / (g1 - g0), g0 + k % (g1 - g0), true, values);
      else
        kernel.pack_out(a);
  });
}

// The in-projections, each of a.threads threads a share of the rows of q, k and v (q / √d_k too),
// then the bias_k and zero rows after each batch item's S keys and values. q false: k and v alone;
// kv false: q alone (a weights edit that leaves the others as they are).
template <class T>
void project(const Problem<T>& p, const kernels::Table<T>& kernel, const kernels::Args<T>& a, bool q = true,
             bool kv_too = true) {
  const Dims& d = p.d;
  const std::int64_t S = d.S, Sp = d.S_total, kv = d.G * d.d_k;
  kernels::Args<T> some = a;
  if (!q) some.L = 0;       // no query rows to project
  if (!kv_too) some.S = 0;  // no key or value rows
  parallel_ranges(a.threads, a.threads, [&](int, std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) kernel.in_projection(some, int(t));
  });
  if (!kv_too) return;
  for (std::int64_t n = 0; n < d.N; ++n) {
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
}

// project() from the problem's given in-projections: every row copied, the flagged ones projected
// again with the digits a whole projection gives them (kernels::Table::in_projection_rows), then
// q / √d_k as the in-projection computes it (an exact division). The bias_k and zero rows come with
// the copy.
template <class T>
void project_given(const Problem<T>& p, const kernels::Table<T>& kernel, const kernels::Args<T>& a) {
  const Dims& d = p.d;
  const std::int64_t q_count = d.N * d.L * d.qdim(), kv_count = d.N * d.S_total * d.G * d.d_k;
  parallel_ranges(a.threads, q_count + 2 * kv_count, [&](int, std::int64_t x0, std::int64_t x1) {
    auto copy = [&](const T* from, T* to, std::int64_t begin, std::int64_t count) {
      const std::int64_t lo = std::max(x0, begin), hi = std::min(x1, begin + count);
      if (lo < hi) std::copy(from + (lo - begin), from + (hi - begin), to + (lo - begin));
    };
    copy(p.given_q, a.q, 0, q_count);
    copy(p.given_k, a.k, q_count, kv_count);
    copy(p.given_v, a.v, q_count + kv_count, kv_count);
  });
  const T scale = p.scale();
  parallel_ranges(a.threads, a.threads, [&](int, std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      kernel.in_projection_rows(a, int(t), p.q_rows, p.k_rows, p.v_rows);
      const std::int64_t q0 = d.N * d.L * t / a.threads * d.qdim(),
                         q1 = d.N * d.L * (t + 1) / a.threads * d.qdim();
      for (std::int64_t x = q0; x < q1; ++x) a.q_scaled[x] = a.q[x] / scale;
    }
  });
}

// The out-projection's (N·L) rows, in pieces of at most kOutRows taken by the threads as they come
// free: every row of it (`only`: null), or the runs of rows flagged in `only` ((N·L) flags). Its
// product gives a row the same digits whatever rows come with it (kernels::Table::out_projection),
// so forward_eigen_rows redoes the changed rows alone.
constexpr std::int64_t kOutRows = 128;

template <class T>
void out_projection_blocks(const kernels::Table<T>& kernel, const kernels::Args<T>& a, int threads,
                           const std::vector<char>* only) {
  const std::int64_t rows = a.N * a.L;
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  if (a.out_few_rows) {  // one piece (Args::out_few_rows), from the first flagged row to the last
    std::int64_t r0 = 0, r1 = rows;
    if (only) {
      while (r0 < rows && !(*only)[std::size_t(r0)]) ++r0;
      while (r1 > r0 && !(*only)[std::size_t(r1 - 1)]) --r1;
    }
    if (r1 > r0) kernel.out_projection(a, r0, r1);
    return;
  }
  for (std::int64_t r0 = 0; r0 < rows;) {
    if (only && !(*only)[std::size_t(r0)]) {
      ++r0;
      continue;
    }
    std::int64_t r1 = r0 + 1;
    while (r1 < rows && r1 - r0 < kOutRows && (!only || (*only)[std::size_t(r1)])) ++r1;
    pieces.emplace_back(r0, r1);
    r0 = r1;
  }
  std::atomic<std::size_t> next{0};
  parallel_ranges(threads, std::int64_t(pieces.size()), [&](int, std::int64_t, std::int64_t) {
    for (std::size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < pieces.size();)
      kernel.out_projection(a, pieces[k].first, pieces[k].second);
  });
}

// Args::open_end for a forward that writes no pre-softmax stage: each merged-mask row's end past
// which every key is blocked, in `ends`. Only when no score and no value can be NaN or infinite,
// checked from the largest |q / √d_k|, |k| and |v| (a score is at most d_k times their product):
// then a blocked key's score plus -inf is -inf and its weight exactly 0, and 0·v adds nothing to a
// context chain, so leaving those keys out changes no digit. Returns false (nothing skipped) else.
template <class T>
bool blocked_key_ends(const Problem<T>& p, const kernels::Args<T>& a, int threads,
                      std::vector<std::int64_t>& ends) {
  if (!p.mask || a.scores || a.scores_scaled || a.scores_masked) return false;
  auto largest = [](const T* x, std::int64_t count) {
    T m = 0;
    for (std::int64_t i = 0; i < count; ++i) m = std::max(m, std::abs(x[i]));  // NaN: m stays, caught below
    for (std::int64_t i = 0; i < count; ++i)
      if (std::isnan(x[i])) return std::numeric_limits<T>::infinity();
    return m;
  };
  const std::int64_t kv_count = a.N * a.Sp * a.kv;
  const T q = largest(a.q_scaled, a.N * a.L * a.qdim()), k = largest(a.k, kv_count),
          v = largest(a.v, kv_count);
  if (!(std::isfinite(q) && std::isfinite(k) && std::isfinite(v) &&
        T(a.dk) * q * k < std::numeric_limits<T>::max() / 4))
    return false;
  const MergedMask<T>& m = *p.mask;
  const std::int64_t rows = m.n_size * m.h_size * m.l_size, S = m.s_size;
  ends.resize(std::size_t(rows));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  parallel_ranges(threads, rows, [&](int, std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* row = m.values.data() + r * S;
      std::int64_t e = S;
      while (e > 0 && row[e - 1] == neg_inf) --e;
      ends[std::size_t(r)] = e;
    }
  });
  return true;
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
  const std::int64_t N = d.N;
  const int threads = thread_count(threads_requested, forward_flops<T>(d));
  const kernels::Table<T>& kernel = table<T>();
  kernels::Args<T> a = make_args(p, b);
  a.threads = threads;
  a.timing = times != nullptr;
  Clock::time_point t_phase = a.timing ? Clock::now() : Clock::time_point();

  // 1. In-projections, each thread a share of the rows of q, k and v. torch divides q by √d_k before
  //    the product with kᵀ; that q / √d_k is kept as scratch for every head. Then the bias_k and
  //    zero rows after each batch item's S keys and values.
  //    With RoPE the projections go to q_proj and k_proj, then q and k are their rotations, and
  //    q / √d_k is taken again from the rotated q (the same exact division).
  if (p.rope_cos) a.q = b.q_proj->data(), a.k = b.k_proj->data();
  if (p.given_q)
    project_given(p, kernel, a);
  else
    project(p, kernel, a);
  if (p.rope_cos) {
    a.q = b.q->data(), a.k = b.k->data();
    const T scale = p.scale();
    parallel_ranges(threads, N * (d.L + d.S), [&](int, std::int64_t r0, std::int64_t r1) {
      rotate_rows(p, b, r0, r1);
      const std::int64_t q0 = std::min(r0, N * d.L) * d.qdim(), q1 = std::min(r1, N * d.L) * d.qdim();
      for (std::int64_t x = q0; x < q1; ++x) a.q_scaled[x] = a.q[x] / scale;
    });
  }
  if (a.timing) times->projections = ms_since(t_phase);

  // 2. The fused loop (kernels::Table::fused). Each task is a block of rows computed alone (the same
  //    values whichever thread runs it), so the threads take the next task as they come free: a
  //    thread that loses its core for a while (the app draws a frame meanwhile) holds up no one.
  //    With a control, a cancel is looked for before each task.
  plan_fused(a, b, threads);
  pack_operands(a, threads, 0, a.H, true, a.output != nullptr);
  attach_overview(a, d, b);
  std::vector<std::int64_t> ends;
  if (blocked_key_ends(p, a, threads, ends)) a.open_end = ends.data();
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

  // 3. Out-projection, in fixed blocks of rows taken by the threads as they come free.
  out_projection_blocks(kernel, a, threads, nullptr);
  advance(tasks);
  if (a.timing) {
    times->out_proj = ms_since(t_phase);
    times->threads = threads;
  }
}

namespace {

// The fused tasks that recompute the changed query rows, and each one's q / √d_k rows, as the
// in-projection computes them (an exact division, so the same digits): the callers' buffers hold no
// q_scaled. The products give a row the digits it has in its block of the whole forward, so a
// block with few changed rows (a quarter or less) has a task for each of them alone; one with more
// is redone whole, which costs less per row. What forward_eigen_rows and fully_masked_in_tasks share.
template <class T>
struct ChangedTasks {
  struct Task {
    std::int64_t n, i0, block;  // rows [i0, i0 + block) of batch item n (i0 a multiple of block)
  };
  kernels::Args<T> a;  // the problem's arguments
  int threads = 1;
  std::int64_t block = 0;  // the whole forward's rows per task
  std::vector<Task> tasks;
  std::vector<std::vector<T>> q_scaled;

  ChangedTasks(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& rows_changed,
               int threads_requested) {
    const Dims& d = p.d;
    const std::int64_t L = d.L, Q = d.qdim();
    // The same threads as forward_eigen (not that the digits depend on them).
    threads = thread_count(threads_requested, forward_flops<T>(d));
    a = make_args(p, b);
    a.threads = threads;
    block = rows_per_block(L, d.S_total, sizeof(T));
    for (std::int64_t n = 0; n < d.N; ++n)
      for (std::int64_t i0 = 0; i0 < L; i0 += block) {
        const std::int64_t i1 = std::min(L, i0 + block);
        const auto first = rows_changed.begin() + n * L;
        const std::int64_t changed = std::count_if(first + i0, first + i1, [](char c) { return c != 0; });
        if (changed == 0) continue;
        if (changed * 4 > i1 - i0) {
          tasks.push_back({n, i0, block});
          continue;
        }
        for (std::int64_t i = i0; i < i1; ++i)
          if (first[i]) tasks.push_back({n, i, 1});
      }
    const T scale = p.scale();
    q_scaled.resize(tasks.size());
    for (std::size_t k = 0; k < tasks.size(); ++k) {
      const T* q = b.q->data() + (tasks[k].n * L + tasks[k].i0) * Q;
      q_scaled[k].resize(std::size_t(rows(k) * Q));
      for (std::size_t x = 0; x < q_scaled[k].size(); ++x) q_scaled[k][x] = q[x] / scale;
    }
  }
  std::int64_t rows(std::size_t k) const { return std::min(tasks[k].block, a.L - tasks[k].i0); }
  // Fewer tasks than threads (one edited cell): each task's heads are split between the threads.
  std::int64_t parts(bool may_split) const {
    return may_split && std::int64_t(tasks.size()) < threads && a.H > 1 ? std::min<std::int64_t>(threads, a.H)
                                                                        : 1;
  }
  // Lays out the scratch for `args` (a copy of a) and packs what the tasks of more than one row
  // read: the keys, with `values` the values too, and W_o when `out_rows` ((N·L) flags, or null)
  // has two changed rows in a row. A task of one row reads k, v and W_o unpacked.
  void plan(kernels::Args<T>& args, Buffers<T>& b, bool values, const std::vector<char>* out_rows) const {
    plan_fused(args, b, threads, block);
    const bool blocks = std::any_of(tasks.begin(), tasks.end(), [](const Task& t) { return t.block > 1; });
    bool out = false;
    if (out_rows)
      for (std::size_t r = 1; r < out_rows->size() && !out; ++r) out = (*out_rows)[r] && (*out_rows)[r - 1];
    if (blocks || out) pack_operands(args, threads, 0, blocks ? args.H : 0, values, out);
  }
  // Runs the fused kernel on every task with `args` (split into `parts` head ranges each); `adjust`
  // changes a task's arguments for the thread running it. Returns the fully masked rows counted.
  template <class F>
  std::int64_t run(const kernels::Table<T>& kernel, const kernels::Args<T>& args, std::int64_t parts,
                   const F& adjust) {
    std::vector<kernels::Tally> tally(static_cast<std::size_t>(threads));
    std::atomic<std::size_t> next{0};
    const std::size_t items = tasks.size() * std::size_t(parts);
    parallel_ranges(threads, std::int64_t(items), [&](int thread, std::int64_t, std::int64_t) {
      for (std::size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
        const std::size_t task = k / std::size_t(parts);
        const Task& at = tasks[task];
        const std::int64_t part = std::int64_t(k % std::size_t(parts));
        kernels::Args<T> mine = args;
        mine.block = at.block, mine.blocks_per_item = (a.L + at.block - 1) / at.block;
        mine.q_scaled = q_scaled[task].data(), mine.q_row0 = at.n * a.L + at.i0;
        mine.head_begin = a.H * part / parts, mine.head_end = a.H * (part + 1) / parts;
        adjust(mine, thread, task);
        const std::int64_t index = at.n * mine.blocks_per_item + at.i0 / at.block;
        kernel.fused(mine, thread, index, index + 1, &tally[std::size_t(thread)]);
      }
    });
    std::int64_t rows = 0;
    for (const kernels::Tally& t : tally) rows += t.fully_masked_rows;
    return rows;
  }
};

}  // namespace

template <class T>
std::int64_t forward_eigen_rows(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& rows_changed,
                                int threads_requested) {
  const Dims& d = p.d;
  const std::int64_t L = d.L, Sp = d.S_total, H = d.H;
  const kernels::Table<T>& kernel = table<T>();
  ChangedTasks<T> c(p, b, rows_changed, threads_requested);
  // With its heads split, a task's head average (when kept) is summed afterwards from the weights,
  // in head order and divided by H, as the kernel sums it (the same digits). The overview's average
  // rows come from the kernel's sum: a task then runs every head.
  const std::int64_t parts = c.parts(!b.overview_weights && (b.weights || !b.weights_avg));
  kernels::Args<T> a = c.a;
  c.plan(a, b, true, &rows_changed);
  attach_overview(a, p.d, b);
  if (parts > 1) a.weights_avg = nullptr;
  const std::int64_t fully_masked = c.run(kernel, a, parts, [](kernels::Args<T>&, int, std::size_t) {});
  if (parts > 1 && b.weights_avg)
    for (std::size_t k = 0; k < c.tasks.size(); ++k) {
      const std::int64_t n = c.tasks[k].n, i0 = c.tasks[k].i0;
      T* avg = b.weights_avg->data() + (n * L + i0) * Sp;
      const T* w = b.weights->data() + (n * H * L + i0) * Sp;
      parallel_ranges(c.threads, c.rows(k) * Sp, [&](int, std::int64_t x0, std::int64_t x1) {
        std::copy(w + x0, w + x1, avg + x0);
        for (std::int64_t h = 1; h < H; ++h)
          for (std::int64_t x = x0; x < x1; ++x) avg[x] += w[h * L * Sp + x];
        for (std::int64_t x = x0; x < x1; ++x) avg[x] /= T(H);
      });
    }
  out_projection_blocks(kernel, a, c.threads, &rows_changed);
  return fully_masked;
}

template <class T>
std::int64_t fully_masked_in_tasks(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& rows_changed,
                                   const T* mask, int threads_requested) {
  const kernels::Table<T>& kernel = table<T>();
  ChangedTasks<T> c(p, b, rows_changed, threads_requested);
  // Only the scores and the softmax, which counts; every stage left out but the head average, which
  // keeps the softmax on and goes to a (rows, S') buffer of each thread's own.
  kernels::Args<T> a = c.a;
  c.plan(a, b, false, nullptr);
  a.mask = mask;
  a.scores = a.scores_scaled = a.scores_masked = a.weights = a.context = a.concat = a.output = nullptr;
  std::vector<std::vector<T>> avg(std::size_t(c.threads), std::vector<T>(std::size_t(c.block * a.Sp)));
  return c.run(kernel, a, c.parts(true), [&](kernels::Args<T>& mine, int thread, std::size_t k) {
    mine.weights_avg = avg[std::size_t(thread)].data(), mine.avg_n_stride = 0, mine.out_row0 = c.tasks[k].i0;
  });
}

namespace {

// The runs of consecutive heads flagged in `heads` ((H) flags), as [begin, end) pairs.
std::vector<std::pair<std::int64_t, std::int64_t>> head_runs(const std::vector<char>& heads) {
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  for (std::int64_t h = 0; h < std::int64_t(heads.size()); ++h)
    if (heads[std::size_t(h)]) {
      if (!runs.empty() && runs.back().second == h)
        runs.back().second = h + 1;
      else
        runs.emplace_back(h, h + 1);
    }
  return runs;
}

// Every fused task of the flagged heads (each run of heads a work item with every task), on the
// threads as they come free, `adjust` changing an item's arguments for the thread running it.
// Returns the fully masked rows counted.
template <class T, class F>
std::int64_t run_heads(const kernels::Table<T>& kernel, const kernels::Args<T>& a,
                       const std::vector<char>& heads, const F& adjust) {
  const auto runs = head_runs(heads);
  const std::int64_t tasks = a.N * a.blocks_per_item;
  const std::size_t items = std::size_t(tasks) * runs.size();
  std::vector<kernels::Tally> tally(static_cast<std::size_t>(a.threads));
  std::atomic<std::size_t> next{0};
  parallel_ranges(a.threads, std::int64_t(items), [&](int thread, std::int64_t, std::int64_t) {
    for (std::size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
      const std::int64_t task = std::int64_t(k % std::size_t(tasks));
      kernels::Args<T> mine = a;
      std::tie(mine.head_begin, mine.head_end) = runs[k / std::size_t(tasks)];
      adjust(mine, thread, task);
      kernel.fused(mine, thread, task, task + 1, &tally[std::size_t(thread)]);
    }
  });
  std::int64_t rows = 0;
  for (const kernels::Tally& t : tally) rows += t.fully_masked_rows;
  return rows;
}

}  // namespace

template <class T>
std::int64_t forward_eigen_heads(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& heads, bool q,
                                 bool kv, int threads_requested) {
  const Dims& d = p.d;
  const std::int64_t L = d.L, Sp = d.S_total, H = d.H;
  const kernels::Table<T>& kernel = table<T>();
  kernels::Args<T> a = make_args(p, b);
  a.threads = thread_count(threads_requested, forward_flops<T>(d));
  std::int64_t fully_masked = 0;
  if (std::any_of(heads.begin(), heads.end(), [](char x) { return x != 0; })) {
    project(p, kernel, a, q, kv);
    if (!q) {  // q as it was; q / √d_k from it, as the in-projection computes it (an exact division)
      const T scale = p.scale();
      for (std::size_t x = 0; x < b.q->size(); ++x) (*b.q_scaled)[x] = (*b.q)[x] / scale;
    }
    plan_fused(a, b, a.threads);
    pack_operands(a, a.threads, 0, H, true, true);
    a.weights_avg = nullptr;  // summed below from every head's weights
    fully_masked = run_heads(kernel, a, heads, [](kernels::Args<T>&, int, std::int64_t) {});
    if (b.weights_avg) {  // in head order, divided by H, as the kernel sums it (the same digits)
      T* avg = b.weights_avg->data();
      const T* w = b.weights->data();
      // A chunk of cells at a time, each head's plane added in turn, in loops the compiler vectorises.
      constexpr std::int64_t chunk = 4096;
      const std::int64_t plane = L * Sp, chunks = (plane + chunk - 1) / chunk;
      parallel_ranges(a.threads, d.N * chunks, [&](int, std::int64_t c0, std::int64_t c1) {
        for (std::int64_t ck = c0; ck < c1; ++ck) {
          const std::int64_t n = ck / chunks, x0 = ck % chunks * chunk, x1 = std::min(plane, x0 + chunk);
          T* out = avg + n * plane;
          const T* wn = w + n * H * plane;
          std::copy(wn + x0, wn + x1, out + x0);
          for (std::int64_t h = 1; h < H; ++h)
            for (std::int64_t x = x0; x < x1; ++x) out[x] += wn[h * plane + x];
          for (std::int64_t x = x0; x < x1; ++x) out[x] /= T(H);
        }
      });
    }
  } else {
    plan_fused(a, b, a.threads);
    pack_operands(a, a.threads, 0, 0, false, true);  // W_o alone
  }
  out_projection_blocks(kernel, a, a.threads, nullptr);
  return fully_masked;
}

template <class T>
std::int64_t fully_masked_in_heads(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& heads,
                                   int threads_requested) {
  const kernels::Table<T>& kernel = table<T>();
  kernels::Args<T> a = make_args(p, b);
  a.threads = thread_count(threads_requested, forward_flops<T>(p.d));
  // q / √d_k from the q the buffers hold, as the in-projection computes it (an exact division).
  const T scale = p.scale();
  T* qs = b.q_scaled->data();
  const T* q = b.q->data();
  for (std::size_t x = 0; x < b.q->size(); ++x) qs[x] = q[x] / scale;
  plan_fused(a, b, a.threads);
  pack_operands(a, a.threads, 0, a.H, false, false);
  // Only the scores and the softmax, which counts (see fully_masked_in_tasks).
  a.scores = a.scores_scaled = a.scores_masked = a.weights = a.context = a.concat = a.output = nullptr;
  std::vector<std::vector<T>> avg(std::size_t(a.threads), std::vector<T>(std::size_t(a.block * a.Sp)));
  return run_heads(kernel, a, heads, [&](kernels::Args<T>& mine, int thread, std::int64_t task) {
    mine.weights_avg = avg[std::size_t(thread)].data(), mine.avg_n_stride = 0;
    mine.out_row0 = task % a.blocks_per_item * a.block;
  });
}

}  // namespace mha::detail

namespace mha {

// Up to this many rows stage_rows computes each row alone instead of the blocks that hold them.
constexpr std::int64_t kFewStageRows = 4;

const std::vector<std::string>& on_demand_stages() {
  static const std::vector<std::string> names = {"scores", "scores_scaled", "scores_masked", "attn_weights",
                                                 "attn_weights_avg"};
  return names;
}

namespace detail {

template <class T>
void stage_rows_into(const ForwardResult<T>& r, const std::string& stage, std::int64_t n, std::int64_t h,
                     std::int64_t i0, std::int64_t rows, T* out) {
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
  const std::int64_t Sp = d.S_total, E = d.E, Q = d.qdim();
  if (rows == 0) return;

  // The forward's arguments, on the result's q, k, v and merged mask; every output null but one.
  detail::kernels::Args<T> a;
  a.N = d.N, a.L = d.L, a.S = d.S, a.Sp = Sp, a.E = E, a.H = d.H, a.dk = d.d_k, a.kv = d.G * d.d_k;
  a.kdim = d.kdim, a.vdim = d.vdim, a.heads_per_kv = d.H / d.G;
  a.score_divisor = r.score_divisor;
  a.as_torch = detail::kernels::rounds_as_torch(d.L, Sp, d.d_k);
  a.fully_masked_zero = r.fully_masked == FullyMasked::zero;
  auto data = [&](const char* name) {
    const Stage<T>& s = r.trace[name];
    return s.storage->data() + s.offset;
  };
  // What the heads read: with RoPE, the rotated q and k.
  const bool rotary = r.trace.has("q_rot");
  const T* q = data(rotary ? "q_rot" : "q");                                            // (N, L, H·d_k)
  a.k = const_cast<T*>(data(rotary ? "k_rot" : "k")), a.v = const_cast<T*>(data("v"));  // read only
  if (const Stage<T>* m = r.trace.find("attn_mask")) {  // strides 0 where the merged mask broadcasts
    a.mask = m->storage->data() + m->offset;
    a.mask_n = m->strides[0] ? d.N : 1, a.mask_h = m->strides[1] ? d.H : 1,
    a.mask_l = m->strides[2] ? d.L : 1;
  }
  a.head_begin = average ? 0 : h, a.head_end = average ? d.H : h + 1;
  const T scale = r.score_divisor > 0 ? T(r.score_divisor) : std::sqrt(T(d.d_k));
  if (rows <= kFewStageRows) {
    // A task per row, on this thread: the products give a row the digits it has in its block, and a
    // row alone reads k as it is (no packing; the Inspector asks for one row of each stage).
    detail::table<T>().plan_packing(a);
    a.block = 1, a.blocks_per_item = d.L;
    constexpr std::int64_t line = 64 / sizeof(T);
    a.scratch_per_thread = (4 * a.ld + d.d_k + line - 1) / line * line;
    std::vector<T> scratch(std::size_t(a.scratch_per_thread + line));
    a.scratch =
        scratch.data() +
        (line - std::int64_t(reinterpret_cast<std::uintptr_t>(scratch.data()) % 64 / sizeof(T))) % line;
    std::vector<T> q_scaled(static_cast<std::size_t>(Q));
    detail::kernels::Tally tally;
    for (std::int64_t i = i0; i < i0 + rows; ++i) {
      const T* q_row = q + (n * d.L + i) * Q;
      for (std::int64_t x = 0; x < Q; ++x) q_scaled[std::size_t(x)] = q_row[x] / scale;
      a.q_scaled = q_scaled.data(), a.q_row0 = n * d.L + i;
      T* target = out + (i - i0) * Sp;
      a.scores = stage == "scores" ? target : nullptr;
      a.scores_scaled = stage == "scores_scaled" ? target : nullptr;
      a.scores_masked = stage == "scores_masked" ? target : nullptr;
      a.weights = stage == "attn_weights" ? target : nullptr;
      a.weights_avg = average ? target : nullptr;
      a.out_n_stride = 0, a.out_h_stride = 0, a.avg_n_stride = 0, a.out_row0 = i;
      detail::table<T>().fused(a, 0, n * d.L + i, n * d.L + i + 1, &tally);
    }
    return;
  }
  detail::Buffers<T> b;
  // The forward's tasks (blocks of query rows) that hold rows [i0, i0 + rows), on the threads as
  // they come free when there is work enough (each block alone gives the same values).
  a.block = detail::rows_per_block(d.L, Sp, sizeof(T));
  const std::int64_t first = i0 / a.block, last = (i0 + rows - 1) / a.block;
  const double work =
      2.0 * double((last - first + 1) * a.block) * double(Sp * d.d_k * (a.head_end - a.head_begin));
  const int threads = int(std::min<std::int64_t>(detail::thread_count(0, work), last - first + 1));
  detail::plan_fused(a, b, threads);
  detail::pack_operands(a, threads, a.head_begin, a.head_end, false, false);
  const std::int64_t span0 = first * a.block, span1 = std::min(d.L, (last + 1) * a.block);
  // q / √d_k of those rows, as the in-projection divides (an exact division: the same digits).
  std::vector<T> q_scaled(std::size_t((span1 - span0) * Q));
  const T* q_rows = q + (n * d.L + span0) * Q;
  for (std::size_t x = 0; x < q_scaled.size(); ++x) q_scaled[x] = q_rows[x] / scale;
  a.q_scaled = q_scaled.data(), a.q_row0 = n * d.L + span0;
  // (span rows, S') of this (n, h): straight into `out` when the rows asked for are whole blocks
  // (a view of a whole head), else into a span of whole blocks, copied from.
  const bool whole_blocks = span0 == i0 && span1 == i0 + rows;
  std::vector<T> span(whole_blocks ? 0 : std::size_t((span1 - span0) * Sp));
  T* target = whole_blocks ? out : span.data();
  if (stage == "scores") a.scores = target;
  if (stage == "scores_scaled") a.scores_scaled = target;
  if (stage == "scores_masked") a.scores_masked = target;
  if (stage == "attn_weights") a.weights = target;
  if (average) a.weights_avg = target;
  a.out_n_stride = 0, a.out_h_stride = 0, a.avg_n_stride = 0, a.out_row0 = span0;
  std::atomic<std::int64_t> next{first};
  std::vector<detail::kernels::Tally> tally(static_cast<std::size_t>(threads));
  detail::parallel_ranges(threads, threads, [&](int thread, std::int64_t, std::int64_t) {
    for (std::int64_t blk; (blk = next.fetch_add(1, std::memory_order_relaxed)) <= last;) {
      const std::int64_t task = n * a.blocks_per_item + blk;
      detail::table<T>().fused(a, thread, task, task + 1, &tally[std::size_t(thread)]);
    }
  });
  if (!whole_blocks)
    std::copy(span.begin() + (i0 - span0) * Sp, span.begin() + (i0 - span0 + rows) * Sp, out);
}

template void stage_rows_into<float>(const ForwardResult<float>&, const std::string&, std::int64_t,
                                     std::int64_t, std::int64_t, std::int64_t, float*);
template void stage_rows_into<double>(const ForwardResult<double>&, const std::string&, std::int64_t,
                                      std::int64_t, std::int64_t, std::int64_t, double*);

}  // namespace detail

template <class T>
Tensor<T> stage_rows(const ForwardResult<T>& r, const std::string& stage, std::int64_t n, std::int64_t h,
                     std::int64_t i0, std::int64_t rows) {
  Tensor<T> out({std::max<std::int64_t>(rows, 0), r.dims.S_total});
  detail::stage_rows_into(r, stage, n, h, i0, rows, out.data.data());
  return out;
}

template Tensor<float> stage_rows<float>(const ForwardResult<float>&, const std::string&, std::int64_t,
                                         std::int64_t, std::int64_t, std::int64_t);
template Tensor<double> stage_rows<double>(const ForwardResult<double>&, const std::string&, std::int64_t,
                                           std::int64_t, std::int64_t, std::int64_t);

}  // namespace mha

namespace mha::detail {

template void reserve_eigen_scratch<float>(const Dims&, Buffers<float>&, int);
template void reserve_eigen_scratch<double>(const Dims&, Buffers<double>&, int);
template void forward_eigen<float>(const Problem<float>&, Buffers<float>&, int, StageTimes*, ForwardControl*);
template void forward_eigen<double>(const Problem<double>&, Buffers<double>&, int, StageTimes*,
                                    ForwardControl*);
template std::int64_t forward_eigen_rows<float>(const Problem<float>&, Buffers<float>&,
                                                const std::vector<char>&, int);
template std::int64_t forward_eigen_rows<double>(const Problem<double>&, Buffers<double>&,
                                                 const std::vector<char>&, int);
template std::int64_t forward_eigen_heads<float>(const Problem<float>&, Buffers<float>&,
                                                 const std::vector<char>&, bool, bool, int);
template std::int64_t forward_eigen_heads<double>(const Problem<double>&, Buffers<double>&,
                                                  const std::vector<char>&, bool, bool, int);
template std::int64_t fully_masked_in_heads<float>(const Problem<float>&, Buffers<float>&,
                                                   const std::vector<char>&, int);
template std::int64_t fully_masked_in_heads<double>(const Problem<double>&, Buffers<double>&,
                                                    const std::vector<char>&, int);
template std::int64_t fully_masked_in_tasks<float>(const Problem<float>&, Buffers<float>&,
                                                   const std::vector<char>&, const float*, int);
template std::int64_t fully_masked_in_tasks<double>(const Problem<double>&, Buffers<double>&,
                                                    const std::vector<char>&, const double*, int);

}  // namespace mha::detail
