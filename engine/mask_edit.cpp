// forward_mask_edit: a forward after a mask edit recomputes only the query rows whose mask
// changed, on the buffers of the forward before it, when nothing else changed.
#include "mha.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "forward_detail.hpp"
#include "parallel.hpp"

namespace mha {

namespace {

bool same_config(const Config& a, const Config& b) {
  return a.embed_dim == b.embed_dim && a.num_heads == b.num_heads && a.kv_heads() == b.kv_heads() &&
         a.head_dim() == b.head_dim() && a.bias == b.bias && a.key_dim() == b.key_dim() &&
         a.value_dim() == b.value_dim() && a.add_bias_kv == b.add_bias_kv &&
         a.add_zero_attn == b.add_zero_attn && a.batch_first == b.batch_first;
}

// Copies each source into its buffer. At L = 512 a mask edit copies 42 MB, most of its time on one
// thread: two threads share the copies (largest first, each to the emptier thread) when there are
// enough bytes to repay starting one and `threads` (Options::threads) allows it.
template <class T>
void copy_all(const std::vector<std::pair<const std::vector<T>*, detail::Buffer<T>>>& copies, int threads) {
  std::vector<std::size_t> order(copies.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < copies.size(); ++i) order[i] = i, total += copies[i].first->size() * sizeof(T);
  const bool two = threads != 1 && std::thread::hardware_concurrency() > 1 && total >= (std::size_t(4) << 20);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return copies[a].first->size() > copies[b].first->size(); });
  std::vector<std::size_t> mine, theirs;
  std::size_t mine_bytes = 0, theirs_bytes = 0;
  for (std::size_t i : order) {
    const std::size_t bytes = copies[i].first->size();
    if (!two || mine_bytes <= theirs_bytes)
      mine.push_back(i), mine_bytes += bytes;
    else
      theirs.push_back(i), theirs_bytes += bytes;
  }
  auto run = [&copies](const std::vector<std::size_t>& list) {
    for (std::size_t i : list)
      std::copy(copies[i].first->begin(), copies[i].first->end(), copies[i].second->begin());
  };
  std::thread second;
  try {
    if (!theirs.empty()) second = std::thread(run, std::cref(theirs));
  } catch (const std::system_error&) {
    run(theirs);  // no thread to be had: this one does both halves
  }
  run(mine);
  if (second.joinable()) second.join();
}

// What both mask edits share: the checked problem, whether `base`'s rows can be recomputed alone,
// and which query rows and merged-mask rows changed. Only the rows that changed are merged, into
// `new_rows`, and p.mask holds the sizes alone: the result takes those rows into its own copy of
// the old mask.
// `newest` (in place only, may be null): a result of the same problem computed after `base`. Rows
// are then recomputed where the new mask differs from newest's, and copied from newest where only
// base's differs: base catches up on the edits in between without computing them again.
template <class T>
struct MaskEditPlan {
  detail::Problem<T> p;
  std::vector<std::string> warnings;
  const Stage<T>* old_mask = nullptr;  // the merged mask rows are recomputed against (newest's or base's)
  bool rows = false;                   // false: only a full forward computes this
  std::vector<char> changed;           // (N·L) flags: query rows (n, i) to recompute
  std::vector<char> copied;            // (N·L) flags: query rows (n, i) to copy from newest
  std::vector<std::size_t> mask_rows;  // offsets of base's merged-mask rows that differ from the new
  std::vector<T> new_rows;             // those rows' new values, in that order
};

// Whether base's rows can be recomputed for this problem: the same path, config, sizes, policy and
// kept stages, and a merged mask of the same broadcast shape.
template <class T>
bool rows_apply(const Config& c, const Options& o, const Dims& d, const MaskMerger<T>& merger,
                const ForwardResult<T>& base, bool in_rotary) {
  const Stage<T>* old_mask = base.trace.find("attn_mask");
  // With RoPE, q and k are the rotated ones, which the rows' recompute does not redo.
  if (!(o.backend == Backend::eigen && base.backend == Backend::eigen && o.score_divisor == 0 &&
        !base.trace.has("q_rot") && !in_rotary && same_config(c, base.config) &&
        detail::same_dims(d, base.dims) && base.fully_masked == o.fully_masked && merger.any() && old_mask))
    return false;
  const MergedMask<T> m = merger.shape();
  const Shape strides = {m.n_size > 1 ? m.h_size * m.l_size * m.s_size : 0,
                         m.h_size > 1 ? m.l_size * m.s_size : 0, m.l_size > 1 ? m.s_size : 0, 1};
  if (!(old_mask->strides == strides && old_mask->offset == 0 && m.l_size > 1 &&
        old_mask->storage->size() == std::size_t(m.n_size * m.h_size * m.l_size * m.s_size)))
    return false;
  // The stages base holds must be those this forward would hold: the result keeps base's set.
  for (const char* name : {"scores", "scores_scaled", "scores_masked", "attn_weights", "attn_weights_avg"})
    if (base.trace.has(name) !=
        (o.stages.empty() || std::find(o.stages.begin(), o.stages.end(), name) != o.stages.end()))
      return false;
  return base.overview.block == std::max<std::int64_t>(o.weights_overview, 0);
}

template <class T>
MaskEditPlan<T> plan_mask_edit(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                               const ForwardResult<T>& base, const ForwardResult<T>* newest = nullptr) {
  MaskEditPlan<T> plan;
  detail::Problem<T>& p = plan.p;
  p.d = check_inputs(c, w, in, o);
  const MaskMerger<T> merger(p.d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, &plan.warnings);
  plan.rows = rows_apply(c, o, p.d, merger, base, in.rotary.has_value());
  if (newest && !rows_apply(c, o, p.d, merger, *newest, in.rotary.has_value())) newest = nullptr;
  if (!plan.rows) return plan;
  const Dims& d = p.d;
  const MergedMask<T> m = merger.shape();
  p.mask = m;
  const Stage<T>* base_mask = base.trace.find("attn_mask");
  plan.old_mask = newest ? newest->trace.find("attn_mask") : base_mask;
  // Compared bit for bit (NaN included), row by row.
  plan.changed.assign(std::size_t(d.N * d.L), 0);
  if (newest) plan.copied.assign(std::size_t(d.N * d.L), 0);
  const T* old_values = plan.old_mask->storage->data();
  const T* base_values = base_mask->storage->data();
  const std::size_t row_bytes = std::size_t(m.s_size) * sizeof(T);
  // The rows (n, h, i) in order, shared between threads when the mask is large (at L = S = 2048 each
  // mask read is 16 MiB): each thread lists what differs in its share, and the lists are joined in
  // order.
  struct Found {
    std::vector<std::size_t> at;
    std::vector<char> recompute;
    std::vector<T> new_rows;
  };
  const std::int64_t rows = m.n_size * m.h_size * d.L;
  const std::size_t cells = std::size_t(rows * m.s_size);
  const int threads = cells >= (std::size_t(1) << 20) && o.threads != 1
                          ? int(std::max(1u, std::min(2u, std::thread::hardware_concurrency())))
                          : 1;
  std::vector<Found> found(static_cast<std::size_t>(threads));
  detail::parallel_ranges(threads, rows, [&](int t, std::int64_t r0, std::int64_t r1) {
    Found& f = found[std::size_t(t)];
    std::vector<T> row(std::size_t(m.s_size));
    for (std::int64_t x = r0; x < r1; ++x) {
      const std::int64_t n = x / (m.h_size * d.L), h = x / d.L % m.h_size, i = x % d.L;
      const std::size_t at = std::size_t(x * m.s_size);
      const T* now = row.data();
      merger.row(n, h, i, row.data());
      const bool recompute = std::memcmp(old_values + at, now, row_bytes) != 0;
      if (!recompute && (!newest || std::memcmp(base_values + at, now, row_bytes) == 0)) continue;
      f.at.push_back(at);
      f.recompute.push_back(recompute);
      f.new_rows.insert(f.new_rows.end(), row.begin(), row.end());
    }
  });
  for (const Found& f : found) {
    for (std::size_t k = 0; k < f.at.size(); ++k) {
      const std::int64_t x = std::int64_t(f.at[k]) / m.s_size;
      const std::int64_t n = x / (m.h_size * d.L), i = x % d.L;
      std::vector<char>& flags = f.recompute[k] ? plan.changed : plan.copied;
      for (std::int64_t nn = (m.n_size > 1 ? n : 0); nn < (m.n_size > 1 ? n + 1 : d.N); ++nn)
        flags[std::size_t(nn * d.L + i)] = 1;
    }
    plan.mask_rows.insert(plan.mask_rows.end(), f.at.begin(), f.at.end());
    plan.new_rows.insert(plan.new_rows.end(), f.new_rows.begin(), f.new_rows.end());
  }
  return plan;
}

}  // namespace

template <class T>
bool forward_mask_edit(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                       const ForwardResult<T>& base, Workspace<T>& ws, ForwardResult<T>& r,
                       std::vector<char>* rows_changed) {
  MaskEditPlan<T> plan = plan_mask_edit(c, w, in, o, base);
  if (!plan.rows) {
    forward(c, w, in, o, ws, r);
    return false;
  }
  detail::Problem<T>& p = plan.p;
  const Dims d = p.d;
  const std::vector<char>& changed = plan.changed;
  const T* old_values = plan.old_mask->storage->data();
  std::vector<std::string> warnings = std::move(plan.warnings);

  // Every check has passed. Let go of the previous result, so that its buffers can be reused.
  r = ForwardResult<T>();
  r.dims = d;
  r.config = c;
  r.backend = Backend::eigen;
  r.fully_masked = o.fully_masked;
  r.warnings = std::move(warnings);
  r.nonfinite_inputs = base.nonfinite_inputs;  // same inputs and weights
  detail::set_weights(p, c, w);
  p.fully_masked = o.fully_masked;

  detail::WorkspaceState<T>& st = ws.state();
  // Every stage is copied from base into this workspace's buffers, the unchanged ones included:
  // sharing them would tie base's workspace to this result, and its next forward would allocate.
  // The buffers are taken here, on this thread; copy_all then fills them.
  std::vector<std::pair<const std::vector<T>*, detail::Buffer<T>>> copies;
  // A stage base left out (Options::stages) stays out: the row recompute skips it as forward did.
  auto copy_of = [&](const char* name, detail::Buffer<T>& slot) -> detail::Buffer<T> {
    const Stage<T>* stage = base.trace.find(name);
    if (!stage) return nullptr;
    const std::vector<T>& from = *stage->storage;
    copies.emplace_back(&from, detail::reuse_or_allocate(slot, from.size(), st));
    return copies.back().second;
  };
  p.query = copy_of("query", st.query);
  p.key = copy_of("key", st.key);
  p.value = copy_of("value", st.value);
  detail::Buffers<T> b;
  detail::Buffers<T>& slots = st.buffers;
  b.q = copy_of("q", slots.q);
  b.k = copy_of("k", slots.k);
  b.v = copy_of("v", slots.v);
  b.scores = copy_of("scores", slots.scores);
  b.scores_scaled = copy_of("scores_scaled", slots.scores_scaled);
  b.scores_masked = copy_of("scores_masked", slots.scores_masked);
  b.weights = copy_of("attn_weights", slots.weights);
  b.context = copy_of("context", slots.context);
  b.concat = copy_of("concat", slots.concat);
  b.output = copy_of("output", slots.output);
  b.weights_avg = copy_of("attn_weights_avg", slots.weights_avg);
  auto copy_buffer = [&](const std::shared_ptr<const std::vector<T>>& from, detail::Buffer<T>& slot) {
    if (!from) return detail::Buffer<T>();
    copies.emplace_back(from.get(), detail::reuse_or_allocate(slot, from->size(), st));
    return copies.back().second;
  };
  b.overview_block = base.overview.block;
  b.overview_weights = copy_buffer(base.overview.weights, slots.overview_weights);
  b.overview_average = copy_buffer(base.overview.average, slots.overview_average);
  b.overview_checks = copy_buffer(base.overview.checks, slots.overview_checks);
  // The new merged mask: base's, copied with the rest, then the rows that changed. (No whole merge
  // into a mask of its own: at L = S = 4096 that was 64 MiB more per edit.)
  const detail::Buffer<T> mask_storage = copy_buffer(plan.old_mask->storage, st.mask);
  copy_all(copies, o.threads);
  const std::int64_t S = p.mask->s_size;
  for (std::size_t k = 0; k < plan.mask_rows.size(); ++k)
    std::copy(plan.new_rows.begin() + std::ptrdiff_t(k) * S,
              plan.new_rows.begin() + std::ptrdiff_t(k + 1) * S,
              mask_storage->begin() + std::ptrdiff_t(plan.mask_rows[k]));
  b.scratch = slots.scratch;

  // The rows base fully masked in the tasks redone (none to count when it masked none).
  const std::int64_t before =
      base.fully_masked_rows > 0 ? detail::fully_masked_in_tasks(p, b, changed, old_values, o.threads) : 0;
  // The mask is lent to the problem (a swap: nothing is copied) while the rows are recomputed.
  p.mask->values.swap(*mask_storage);
  std::int64_t after = 0;
  try {
    after = detail::forward_eigen_rows(p, b, changed, o.threads);
  } catch (...) {
    p.mask->values.swap(*mask_storage);
    throw;
  }
  p.mask->values.swap(*mask_storage);
  r.fully_masked_rows = base.fully_masked_rows - before + after;
  slots.scratch = b.scratch;
  r.trace = detail::make_trace(p, b, mask_storage);
  r.overview = detail::overview_of(b, d);
  if (rows_changed) *rows_changed = changed;
  return true;
}

namespace {

// Copies query rows (n, i) flagged in `rows` ((N·L) flags) of every per-row stage from `from` into
// `to`'s buffers: the (N, H, L, S') stages and context for every head, concat, output and the head
// average. Both are results of the same problem whose masks differ in no other way on those rows.
template <class T>
void copy_rows(const ForwardResult<T>& from, const std::vector<char>& rows, ForwardResult<T>& to) {
  const Dims& d = from.dims;
  const std::int64_t Sp = d.S_total, dk = d.d_k, E = d.E, Q = d.qdim();
  struct Layout {
    const char* name;
    std::int64_t heads, width;  // heads: H for (N, H, L, ·), 1 for (N, L, ·)
  };
  const Layout layouts[] = {{"scores", d.H, Sp},       {"scores_scaled", d.H, Sp}, {"scores_masked", d.H, Sp},
                            {"attn_weights", d.H, Sp}, {"context", d.H, dk},       {"concat", 1, Q},
                            {"output", 1, E},          {"attn_weights_avg", 1, Sp}};
  for (const Layout& l : layouts) {
    const Stage<T>* src = from.trace.find(l.name);
    const Stage<T>* dst = to.trace.find(l.name);
    if (!src || !dst) continue;
    const T* x = src->storage->data();
    T* y = std::const_pointer_cast<std::vector<T>>(dst->storage)->data();  // held by `to` alone
    for (std::int64_t n = 0; n < d.N; ++n)
      for (std::int64_t i = 0; i < d.L; ++i) {
        if (!rows[std::size_t(n * d.L + i)]) continue;
        for (std::int64_t h = 0; h < l.heads; ++h) {
          const std::int64_t at = ((n * l.heads + h) * d.L + i) * l.width;
          std::copy(x + at, x + at + l.width, y + at);
        }
      }
  }
  // The weights overview's rows likewise: (N, H, L, C), (N, L, C), (N, H + 1, L, 4).
  const WeightsOverview<T>&src = from.overview, &dst = to.overview;
  if (!src.valid() || !dst.valid()) return;
  const std::int64_t C = src.columns;
  const std::pair<const std::vector<T>*, const std::vector<T>*> parts[] = {
      {src.weights.get(), dst.weights.get()},
      {src.average.get(), dst.average.get()},
      {src.checks.get(), dst.checks.get()}};
  const std::int64_t heads[] = {d.H, 1, d.H + 1}, widths[] = {C, C, 4};
  for (int k = 0; k < 3; ++k) {
    const T* x = parts[k].first->data();
    T* y = const_cast<std::vector<T>*>(parts[k].second)->data();  // held by `to` alone
    for (std::int64_t n = 0; n < d.N; ++n)
      for (std::int64_t i = 0; i < d.L; ++i) {
        if (!rows[std::size_t(n * d.L + i)]) continue;
        for (std::int64_t h = 0; h < heads[k]; ++h) {
          const std::int64_t at = ((n * heads[k] + h) * d.L + i) * widths[k];
          std::copy(x + at, x + at + widths[k], y + at);
        }
      }
  }
}

}  // namespace

template <class T>
bool forward_mask_edit_in_place(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                                Workspace<T>& ws, ForwardResult<T>& r, const ForwardResult<T>* newest,
                                std::vector<char>* rows_changed) {
  if (newest == &r) newest = nullptr;
  MaskEditPlan<T> plan = plan_mask_edit(c, w, in, o, r, newest);
  if (!plan.rows || !detail::held_by_result_alone(r, ws)) return false;
  if (plan.copied.empty()) newest = nullptr;  // newest did not qualify: compared with r's own mask
  detail::Problem<T>& p = plan.p;
  detail::set_weights(p, c, w);
  p.fully_masked = o.fully_masked;
  detail::WorkspaceState<T>& st = ws.state();
  detail::Buffers<T> b;
  detail::result_buffers(r, p, b);
  b.scratch = st.buffers.scratch;

  // The rows the mask the rows are recomputed against (newest's, or r's own) fully masked in the
  // tasks redone: counted before r's mask takes the new rows.
  std::vector<T>& mask_values = *detail::result_buffer(r, "attn_mask");
  const std::int64_t counted = newest ? newest->fully_masked_rows : r.fully_masked_rows;
  const std::int64_t before = counted > 0 ? detail::fully_masked_in_tasks(
                                                p, b, plan.changed, plan.old_mask->storage->data(), o.threads)
                                          : 0;
  if (newest) copy_rows(*newest, plan.copied, r);
  // r's mask takes the rows that changed and is lent to the problem (a swap: nothing is copied)
  // while the rows are recomputed.
  const std::int64_t S = p.mask->s_size;
  for (std::size_t k = 0; k < plan.mask_rows.size(); ++k)
    std::copy(plan.new_rows.begin() + std::ptrdiff_t(k) * S,
              plan.new_rows.begin() + std::ptrdiff_t(k + 1) * S,
              mask_values.begin() + std::ptrdiff_t(plan.mask_rows[k]));
  p.mask->values.swap(mask_values);
  std::int64_t after = 0;
  try {
    after = detail::forward_eigen_rows(p, b, plan.changed, o.threads);
  } catch (...) {
    p.mask->values.swap(mask_values);
    throw;
  }
  p.mask->values.swap(mask_values);
  st.buffers.scratch = b.scratch;
  r.fully_masked_rows = counted - before + after;
  r.warnings = std::move(plan.warnings);
  // What find_stage computed from the old masks is gone with them; views compute it again.
  if (r.trace.computed) r.trace.computed = std::make_shared<ComputedStages<T>>();
  if (rows_changed) *rows_changed = std::move(plan.changed);
  return true;
}

namespace detail {

// Whether nothing but `r` and `ws` holds any buffer of r's trace: each storage's references are the
// stages of r that point at it and the workspace slots that do.
template <class T>
bool held_by_result_alone(const ForwardResult<T>& r, Workspace<T>& ws) {
  detail::WorkspaceState<T>& st = ws.state();
  const detail::Buffers<T>& b = st.buffers;
  const detail::Buffer<T>* slots[] = {&st.query,  &st.key,    &st.value, &st.mask,         &b.q,
                                      &b.k,       &b.v,       &b.scores, &b.scores_scaled, &b.scores_masked,
                                      &b.weights, &b.context, &b.concat, &b.output,        &b.weights_avg};
  for (const Stage<T>& stage : r.trace.stages) {
    long refs = 0;
    for (const Stage<T>& other : r.trace.stages) refs += other.storage == stage.storage;
    for (const detail::Buffer<T>* slot : slots) refs += *slot == stage.storage;
    if (stage.storage.use_count() != refs) return false;
  }
  // The weights overview's buffers: r's own reference and the workspace's slot.
  const std::pair<const std::shared_ptr<const std::vector<T>>*, const detail::Buffer<T>*> overview[] = {
      {&r.overview.weights, &b.overview_weights},
      {&r.overview.average, &b.overview_average},
      {&r.overview.checks, &b.overview_checks}};
  for (const auto& [held, slot] : overview)
    if (*held && held->use_count() != 1 + long(*slot == *held)) return false;
  return true;
}

template <class T>
Buffer<T> result_buffer(const ForwardResult<T>& r, const char* name) {
  // The trace's stages are read-only views of buffers the engine made writable (Buffer); an edit in
  // place writes them once held_by_result_alone has said that r holds them alone.
  const Stage<T>* stage = r.trace.find(name);
  return stage ? std::const_pointer_cast<std::vector<T>>(stage->storage) : nullptr;
}

template <class T>
void result_buffers(const ForwardResult<T>& r, Problem<T>& p, Buffers<T>& b) {
  p.query = result_buffer(r, "query"), p.key = result_buffer(r, "key"), p.value = result_buffer(r, "value");
  b.q = result_buffer(r, "q"), b.k = result_buffer(r, "k"), b.v = result_buffer(r, "v");
  b.scores = result_buffer(r, "scores"), b.scores_scaled = result_buffer(r, "scores_scaled");
  b.scores_masked = result_buffer(r, "scores_masked"), b.weights = result_buffer(r, "attn_weights");
  b.context = result_buffer(r, "context"), b.concat = result_buffer(r, "concat");
  b.output = result_buffer(r, "output"), b.weights_avg = result_buffer(r, "attn_weights_avg");
  auto writable = [](const std::shared_ptr<const std::vector<T>>& x) {
    return std::const_pointer_cast<std::vector<T>>(x);
  };
  b.overview_block = r.overview.block;
  b.overview_weights = writable(r.overview.weights);
  b.overview_average = writable(r.overview.average);
  b.overview_checks = writable(r.overview.checks);
}

template bool held_by_result_alone<float>(const ForwardResult<float>&, Workspace<float>&);
template bool held_by_result_alone<double>(const ForwardResult<double>&, Workspace<double>&);
template Buffer<float> result_buffer<float>(const ForwardResult<float>&, const char*);
template Buffer<double> result_buffer<double>(const ForwardResult<double>&, const char*);
template void result_buffers<float>(const ForwardResult<float>&, Problem<float>&, Buffers<float>&);
template void result_buffers<double>(const ForwardResult<double>&, Problem<double>&, Buffers<double>&);

}  // namespace detail

#define MHA_INSTANTIATE(T)                                                                               \
  template bool forward_mask_edit<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&, \
                                     const ForwardResult<T>&, Workspace<T>&, ForwardResult<T>&,          \
                                     std::vector<char>*);                                                \
  template bool forward_mask_edit_in_place<T>(const Config&, const Weights<T>&, const Inputs<T>&,        \
                                              const Options&, Workspace<T>&, ForwardResult<T>&,          \
                                              const ForwardResult<T>*, std::vector<char>*);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
