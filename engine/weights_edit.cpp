// forward_weights_edit_in_place: a forward after an edit of the weights recomputes only the heads
// whose weights changed, in the buffers of the result before it.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "forward_detail.hpp"
#include "mha.hpp"
#include "parallel.hpp"

namespace mha {

namespace {

bool same_values(const Tensor<float>& a, const Tensor<float>& b, std::int64_t from, std::int64_t count) {
  return std::memcmp(a.ptr() + from, b.ptr() + from, std::size_t(count) * sizeof(float)) == 0;
}
bool same_values(const Tensor<double>& a, const Tensor<double>& b, std::int64_t from, std::int64_t count) {
  return std::memcmp(a.ptr() + from, b.ptr() + from, std::size_t(count) * sizeof(double)) == 0;
}

// The heads ((H) flags) whose scores, weights or context the change from `was` to `w` moves: a row
// of W_q or b_q moves its query head; a row of W_k, W_v, b_k, b_v, or bias_k / bias_v, moves its
// key/value head and so every query head reading it. out_proj moves only the output, which is
// recomputed whatever changed. False when the tensors' shapes differ (not an edit of values).
template <class T>
bool changed_heads(const Dims& d, const Weights<T>& w, const Weights<T>& was, std::vector<char>& heads,
                   bool& q, bool& kv) {
  const std::int64_t Q = d.qdim(), dk = d.d_k, G = d.G, per_kv = d.H / d.G;
  heads.assign(std::size_t(d.H), 0);
  q = kv = false;
  auto kv_head = [&](std::int64_t g) {
    kv = true;
    for (std::int64_t h = g * per_kv; h < (g + 1) * per_kv; ++h) heads[std::size_t(h)] = 1;
  };
  // Rows of a (rows, cols) weight or a (rows,) bias from `row0`: row r of q (r < H·d_k) is head r / d_k,
  // of k then v (G·d_k rows each) key/value head (r mod G·d_k) / d_k.
  auto rows = [&](const Tensor<T>& a, const Tensor<T>& b, std::int64_t row0, bool q_first) {
    if (a.shape != b.shape) return false;
    if (a.empty()) return true;
    const std::int64_t n = a.shape[0], cols = a.shape.size() > 1 ? a.shape[1] : 1;
    for (std::int64_t r = 0; r < n; ++r) {
      if (same_values(a, b, r * cols, cols)) continue;
      const std::int64_t at = row0 + r;
      if (q_first && at < Q)
        heads[std::size_t(at / dk)] = 1, q = true;
      else
        kv_head((at - (q_first ? Q : 0)) % (G * dk) / dk);
    }
    return true;
  };
  auto whole = [&](const Tensor<T>& a, const Tensor<T>& b) { return a.shape == b.shape; };
  bool ok =
      rows(w.in_proj_weight, was.in_proj_weight, 0, true) &&
      rows(w.in_proj_bias, was.in_proj_bias, 0, true) && rows(w.q_proj_weight, was.q_proj_weight, 0, true) &&
      rows(w.k_proj_weight, was.k_proj_weight, 0, false) &&
      rows(w.v_proj_weight, was.v_proj_weight, 0, false) && whole(w.out_proj_weight, was.out_proj_weight) &&
      whole(w.out_proj_bias, was.out_proj_bias) && whole(w.bias_k, was.bias_k) && whole(w.bias_v, was.bias_v);
  // bias_k / bias_v: (1, 1, G·d_k), one row appended to the keys and values of every batch item.
  for (const auto* pair : {&w.bias_k, &w.bias_v}) {
    const Tensor<T>& a = *pair;
    const Tensor<T>& b = pair == &w.bias_k ? was.bias_k : was.bias_v;
    if (!ok || a.empty()) continue;
    for (std::int64_t g = 0; g < G; ++g)
      if (!same_values(a, b, g * dk, dk)) kv_head(g);
  }
  return ok;
}

// Whether the masks `merger` merges are those merged into `mask` (a result's attn_mask stage), bit
// for bit, compared a row at a time (on two threads from 2^20 cells).
template <class T>
bool same_mask(const MaskMerger<T>& merger, const Stage<T>& mask, int threads) {
  const MergedMask<T> m = merger.shape();
  const Shape strides = {m.n_size > 1 ? m.h_size * m.l_size * m.s_size : 0,
                         m.h_size > 1 ? m.l_size * m.s_size : 0, m.l_size > 1 ? m.s_size : 0, 1};
  const std::int64_t rows = m.n_size * m.h_size * m.l_size;
  if (mask.strides != strides || mask.offset != 0 || mask.storage->size() != std::size_t(rows * m.s_size))
    return false;
  const T* old = mask.storage->data();
  std::atomic<bool> differ{false};
  const int parts = rows * m.s_size >= (std::int64_t(1) << 20) && threads != 1 ? 2 : 1;
  detail::parallel_ranges(parts, rows, [&](int, std::int64_t r0, std::int64_t r1) {
    std::vector<T> row(std::size_t(m.s_size));
    for (std::int64_t x = r0; x < r1 && !differ.load(std::memory_order_relaxed); ++x) {
      merger.row(x / (m.h_size * m.l_size), x / m.l_size % m.h_size, x % m.l_size, row.data());
      if (std::memcmp(old + x * m.s_size, row.data(), row.size() * sizeof(T)) != 0) differ = true;
    }
  });
  return !differ;
}

}  // namespace

template <class T>
bool forward_weights_edit_in_place(const Config& c, const Weights<T>& w, const Weights<T>& was,
                                   const Inputs<T>& in, const Options& o, Workspace<T>& ws,
                                   ForwardResult<T>& r, std::vector<char>* heads_changed) {
  detail::Problem<T> p;
  p.d = check_inputs(c, w, in, o);
  const Dims& d = p.d;
  // What the head recompute covers; anything else is for a full forward.
  if (o.backend != Backend::eigen || r.backend != Backend::eigen || o.score_divisor != r.score_divisor ||
      r.fully_masked != o.fully_masked || !detail::same_dims(d, r.dims) || c.bias != r.config.bias ||
      c.add_bias_kv != r.config.add_bias_kv || c.add_zero_attn != r.config.add_zero_attn ||
      c.batch_first != r.config.batch_first || in.rotary || r.trace.has("q_rot"))  // RoPE: not redone here
    return false;
  for (const char* name : {"scores", "scores_scaled", "scores_masked", "attn_weights", "attn_weights_avg"})
    if (r.trace.has(name) !=
        (o.stages.empty() || std::find(o.stages.begin(), o.stages.end(), name) != o.stages.end()))
      return false;
  // The head average is summed again from every head's weights.
  if (r.trace.has("attn_weights_avg") && !r.trace.has("attn_weights")) return false;
  // The overview's average rows sum every head's weights, which are not kept: a full forward.
  if (r.overview.valid() || o.weights_overview > 0) return false;
  // The masks must be r's: merged row by row and compared with r's merged mask, which then stands
  // in for them.
  const MaskMerger<T> merger(d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, nullptr);
  const Stage<T>* mask = r.trace.find("attn_mask");
  if (merger.any() != (mask != nullptr)) return false;
  if (mask && !same_mask(merger, *mask, o.threads)) return false;
  std::vector<char> heads;
  bool q = false, kv = false;  // which projections the edit moves
  if (!changed_heads(d, w, was, heads, q, kv)) return false;
  if (std::all_of(heads.begin(), heads.end(), [](char x) { return x != 0; })) return false;  // all: a forward
  if (!detail::held_by_result_alone(r, ws)) return false;

  detail::set_weights(p, c, w);
  p.fully_masked = o.fully_masked;
  p.score_divisor = o.score_divisor;
  detail::Buffers<T> b;
  detail::result_buffers(r, p, b);
  detail::WorkspaceState<T>& st = ws.state();
  b.q_scaled = st.buffers.q_scaled = detail::reuse_or_allocate(st.buffers.q_scaled, b.q->size(), st);
  b.scratch = st.buffers.scratch;
  std::vector<T>* mask_values = mask ? detail::result_buffer(r, "attn_mask").get() : nullptr;
  if (mask) {
    p.mask = merger.shape();
    p.mask->values.swap(*mask_values);  // lent while the heads are recomputed
  }
  std::int64_t before = 0, after = 0;
  try {
    if (r.fully_masked_rows > 0) before = detail::fully_masked_in_heads(p, b, heads, o.threads);
    after = detail::forward_eigen_heads(p, b, heads, q, kv, o.threads);
  } catch (...) {
    if (mask) p.mask->values.swap(*mask_values);
    throw;
  }
  if (mask) p.mask->values.swap(*mask_values);
  st.buffers.scratch = b.scratch;
  r.config = c;
  r.fully_masked_rows += after - before;
  if (o.count_nonfinite_weights) {
    std::int64_t now = 0, then = 0;
    for (const auto& [name, t] : state_dict(const_cast<Weights<T>&>(w))) now += detail::count_nonfinite(*t);
    for (const auto& [name, t] : state_dict(const_cast<Weights<T>&>(was)))
      then += detail::count_nonfinite(*t);
    r.nonfinite_inputs += now - then;
  }
  // What find_stage computed from the old weights is gone with them; views compute it again.
  if (r.trace.computed) r.trace.computed = std::make_shared<ComputedStages<T>>();
  if (heads_changed) *heads_changed = std::move(heads);
  return true;
}

#define MHA_INSTANTIATE(T)                                                                            \
  template bool forward_weights_edit_in_place<T>(const Config&, const Weights<T>&, const Weights<T>&, \
                                                 const Inputs<T>&, const Options&, Workspace<T>&,     \
                                                 ForwardResult<T>&, std::vector<char>*);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
