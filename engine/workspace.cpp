// Workspaces: the buffers a forward writes its trace into, reused between forwards when nobody
// else holds them (reserve sizes them ahead), and the inputs copied batch-first into them.
#include "mha.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "forward_detail.hpp"

namespace mha {

namespace detail {

template <class T>
Buffer<T> reuse_or_allocate(Buffer<T>& slot, std::size_t n, WorkspaceState<T>& ws, Reuse rule) {
  // A buffer nobody else holds is resized within its capacity when that is at most twice what is
  // needed: going back and forth between sizes (the app's head-count edits) then faults in no new
  // pages, and a much smaller problem still gives the memory back.
  const bool fits = slot && slot->capacity() >= n && slot->capacity() <= 2 * n;
  if (fits && slot.use_count() == 1) {
    slot->resize(n);
    return slot;
  }
  if (fits && rule == Reuse::fitting) return slot;  // held elsewhere: left as it is (see Reuse)
  // A buffer someone else still holds (a result on screen, or a mask edit's result sharing its
  // unchanged stages) is replaced by one of the same capacity when that is within 2× of n, all of it
  // faulted in now: going back to the larger size then needs no new pages either.
  const std::size_t capacity = fits ? slot->capacity() : n;
  slot.reset();  // drop ours first, so a size change never holds the old and the new buffer at once
  slot = std::make_shared<std::vector<T>>(capacity);
  slot->resize(n);
  ++ws.allocations;
  return slot;
}

template <class T>
Buffers<T>& prepare_buffers(const Dims& d, Backend backend, WorkspaceState<T>& ws, Reuse rule,
                            const std::vector<std::string>& stages, std::int64_t overview_block,
                            bool rotary) {
  const std::size_t kv = std::size_t(d.G * d.d_k), NL = std::size_t(d.N * d.L),
                    NSp = std::size_t(d.N * d.S_total);
  const std::size_t E = std::size_t(d.E), Q = std::size_t(d.qdim()),
                    scores = std::size_t(d.N * d.H * d.L * d.S_total);
  Buffers<T>& b = ws.buffers;
  // A buffer is wanted when any stage it stores is named (a tensor and its views share one). The
  // Eigen path computes through q, k, v, context and concat, so it keeps them whatever was named; it
  // leaves out the (N, H, L, S') stages and the head average nobody named, which stage_rows() computes
  // on demand. The reference path fills every stage.
  const bool subset = backend != Backend::reference && !stages.empty();
  const bool computes_through = backend == Backend::eigen;
  auto fill = [&](Buffer<T>& slot, std::size_t n, std::initializer_list<const char*> names,
                  bool needed_by_eigen = false) {
    bool wanted = !subset || (computes_through && needed_by_eigen);
    for (const char* name : names)
      wanted = wanted || std::find(stages.begin(), stages.end(), name) != stages.end();
    if (wanted)
      slot = reuse_or_allocate(slot, n, ws, rule);
    else
      slot.reset();
  };
  fill(b.q, NL * Q, {"q", "q_rot", "q_view", "q_heads"}, true);
  fill(b.k, NSp * kv, {"k", "k_rot", "k_view", "k_heads"}, true);
  // With RoPE, q and k above are the rotated ones the heads read; these keep the projections.
  if (rotary) {
    b.q_proj = reuse_or_allocate(b.q_proj, NL * Q, ws, rule);
    b.k_proj = reuse_or_allocate(b.k_proj, NSp * kv, ws, rule);
  } else {
    b.q_proj.reset(), b.k_proj.reset();
  }
  fill(b.v, NSp * kv, {"v", "v_view", "v_heads"}, true);
  fill(b.scores, scores, {"scores"});
  fill(b.scores_scaled, scores, {"scores_scaled"});
  fill(b.scores_masked, scores, {"scores_masked"});
  fill(b.weights, scores, {"attn_weights"});
  fill(b.context, NL * Q, {"context", "context_transposed"}, true);
  fill(b.concat, NL * Q, {"concat"}, true);
  b.output = reuse_or_allocate(b.output, NL * E, ws, rule);  // the module's return value: always
  fill(b.weights_avg, NL * std::size_t(d.S_total), {"attn_weights_avg"});
  if (backend == Backend::eigen)
    b.q_scaled = reuse_or_allocate(b.q_scaled, NL * Q, ws, rule);
  else
    b.q_scaled.reset();
  b.overview_block = backend == Backend::eigen && overview_block > 0 ? overview_block : 0;
  if (b.overview_block > 0) {
    const std::size_t C = std::size_t((d.S_total + b.overview_block - 1) / b.overview_block);
    b.overview_weights = reuse_or_allocate(b.overview_weights, std::size_t(d.N * d.H * d.L) * C, ws, rule);
    b.overview_average = reuse_or_allocate(b.overview_average, NL * C, ws, rule);
    b.overview_checks =
        reuse_or_allocate(b.overview_checks, std::size_t(d.N * (d.H + 1) * d.L) * 4, ws, rule);
  } else {
    b.overview_weights.reset(), b.overview_average.reset(), b.overview_checks.reset();
  }
  b.fully_masked_rows = 0;
  return b;
}

}  // namespace detail

namespace detail {

// Copies a (N, L, F) / (L, N, F) / (L, F) tensor into batch-first (N, L, F), in a buffer of the
// workspace.
template <class T>
detail::Buffer<T> to_batch_first(const Tensor<T>& t, bool batched, bool batch_first, detail::Buffer<T>& slot,
                                 detail::WorkspaceState<T>& ws) {
  detail::Buffer<T> out = detail::reuse_or_allocate(slot, t.data.size(), ws);
  if (!batched || batch_first) {
    std::copy(t.data.begin(), t.data.end(), out->begin());
    return out;
  }
  const std::int64_t L = t.shape[0], N = t.shape[1], F = t.shape[2];
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t f = 0; f < F; ++f)
        (*out)[std::size_t((n * L + l) * F + f)] = t.data[std::size_t((l * N + n) * F + f)];
  return out;
}

}  // namespace detail

template <class T>
Workspace<T>::Workspace() noexcept = default;
template <class T>
Workspace<T>::~Workspace() = default;
template <class T>
Workspace<T>::Workspace(const Workspace&) {}
template <class T>
Workspace<T>& Workspace<T>::operator=(const Workspace& other) {
  if (this != &other) state_.reset();
  return *this;
}
template <class T>
Workspace<T>::Workspace(Workspace&&) noexcept = default;
template <class T>
Workspace<T>& Workspace<T>::operator=(Workspace&&) noexcept = default;

template <class T>
bool held_alone(const ForwardResult<T>& r, Workspace<T>& ws) {
  return detail::held_by_result_alone(r, ws);
}

template <class T>
void reserve(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o, Workspace<T>& ws) {
  const Dims d = check_inputs(c, w, in, o);
  std::vector<std::string> warnings;
  // The merged mask's sizes only (checked as forward checks them): nothing merged, no L·S array made.
  const MaskMerger<T> merger(d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, &warnings);
  const MergedMask<T> shape = merger.shape();
  // The buffers forward would prepare. Backend::automatic is resolved as eigen: the GPU path uses
  // the same buffers less q_scaled, which a later GPU forward then simply lets go of.
  const Backend backend = o.backend == Backend::reference ? Backend::reference : Backend::eigen;
  detail::WorkspaceState<T>& st = ws.state();
  const detail::Reuse rule = detail::Reuse::fitting;
  detail::reuse_or_allocate(st.query, in.query.data.size(), st, rule);
  // Key and value the query's (self-attention): forward shares its copy; no buffers of their own.
  for (const auto& [t, slot] : {std::pair{&in.key, &st.key}, std::pair{&in.value, &st.value}})
    if (t->identical(in.query))
      slot->reset();
    else
      detail::reuse_or_allocate(*slot, t->data.size(), st, rule);
  detail::prepare_buffers(d, backend, st, rule, o.stages, o.weights_overview, in.rotary.has_value());
  if (backend == Backend::eigen) detail::reserve_eigen_scratch(d, st.buffers, o.threads);
  if (merger.any())
    detail::reuse_or_allocate(st.mask, std::size_t(shape.n_size * shape.h_size * shape.l_size * shape.s_size),
                              st, rule);
}

template <class T>
void move_scratch(Workspace<T>& from, Workspace<T>& to) {
  if (&from == &to) return;
  detail::Buffers<T>&a = from.state().buffers, &b = to.state().buffers;
  b.scratch = std::move(a.scratch);
  b.q_scaled = std::move(a.q_scaled);
  a.scratch.reset();
  a.q_scaled.reset();
}

template <class T>
std::int64_t Workspace<T>::allocations() const {
  return state_ ? state_->allocations : 0;
}

template <class T>
detail::WorkspaceState<T>& Workspace<T>::state() {
  if (!state_) state_ = std::make_unique<detail::WorkspaceState<T>>();
  return *state_;
}

#define MHA_INSTANTIATE(T)                                                                                  \
  template class Workspace<T>;                                                                              \
  template void reserve<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&,              \
                           Workspace<T>&);                                                                  \
  template bool held_alone<T>(const ForwardResult<T>&, Workspace<T>&);                                      \
  template void move_scratch<T>(Workspace<T>&, Workspace<T>&);                                              \
  template detail::Buffer<T> detail::reuse_or_allocate<T>(detail::Buffer<T>&, std::size_t,                  \
                                                          detail::WorkspaceState<T>&, detail::Reuse);       \
  template detail::Buffers<T>& detail::prepare_buffers<T>(const Dims&, Backend, detail::WorkspaceState<T>&, \
                                                          detail::Reuse, const std::vector<std::string>&,   \
                                                          std::int64_t, bool);                              \
  template detail::Buffer<T> detail::to_batch_first<T>(const Tensor<T>&, bool, bool, detail::Buffer<T>&,    \
                                                       detail::WorkspaceState<T>&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
