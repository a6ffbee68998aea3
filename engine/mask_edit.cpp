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

namespace mha {

namespace {

bool same_config(const Config& a, const Config& b) {
  return a.embed_dim == b.embed_dim && a.num_heads == b.num_heads && a.kv_heads() == b.kv_heads() &&
         a.bias == b.bias && a.key_dim() == b.key_dim() && a.value_dim() == b.value_dim() &&
         a.add_bias_kv == b.add_bias_kv && a.add_zero_attn == b.add_zero_attn &&
         a.batch_first == b.batch_first;
}

bool same_dims(const Dims& a, const Dims& b) {
  return a.N == b.N && a.L == b.L && a.S == b.S && a.S_total == b.S_total && a.E == b.E && a.H == b.H &&
         a.G == b.G && a.d_k == b.d_k && a.kdim == b.kdim && a.vdim == b.vdim && a.batched == b.batched;
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

}  // namespace

template <class T>
bool forward_mask_edit(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                       const ForwardResult<T>& base, Workspace<T>& ws, ForwardResult<T>& r) {
  detail::Problem<T> p;
  p.d = check_inputs(c, w, in, o);
  std::vector<std::string> warnings;
  p.mask = merge_masks(p.d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, &warnings);
  const Stage<T>* old_mask = base.trace.find("attn_mask");
  // Only what the row recompute covers; anything else is a full forward.
  bool rows = o.backend == Backend::eigen && base.backend == Backend::eigen && o.score_divisor == 0 &&
              same_config(c, base.config) && same_dims(p.d, base.dims) &&
              base.fully_masked == o.fully_masked && p.mask && old_mask;
  if (rows) {
    const MergedMask<T>& m = *p.mask;
    const Shape strides = {m.n_size > 1 ? m.h_size * m.l_size * m.s_size : 0,
                           m.h_size > 1 ? m.l_size * m.s_size : 0, m.l_size > 1 ? m.s_size : 0, 1};
    rows = old_mask->strides == strides && old_mask->offset == 0 && m.l_size > 1 &&
           old_mask->storage->size() == m.values.size();
  }
  // The stages base holds must be those this forward would hold: the result keeps base's set.
  for (const char* name : {"scores", "scores_scaled", "scores_masked", "attn_weights", "attn_weights_avg"})
    rows = rows && base.trace.has(name) == (o.stages.empty() || std::find(o.stages.begin(), o.stages.end(),
                                                                          name) != o.stages.end());
  if (!rows) {
    forward(c, w, in, o, ws, r);
    return false;
  }
  const Dims d = p.d;
  const MergedMask<T>& m = *p.mask;
  // The query rows (n, i) whose mask differs in any head, compared bit for bit (NaN included).
  std::vector<char> changed(std::size_t(d.N * d.L), 0);
  const T* old_values = old_mask->storage->data();
  for (std::int64_t n = 0; n < m.n_size; ++n)
    for (std::int64_t h = 0; h < m.h_size; ++h)
      for (std::int64_t i = 0; i < d.L; ++i) {
        const std::size_t at = std::size_t(((n * m.h_size + h) * m.l_size + i) * m.s_size);
        if (std::memcmp(old_values + at, m.values.data() + at, std::size_t(m.s_size) * sizeof(T)) != 0)
          for (std::int64_t nn = (m.n_size > 1 ? n : 0); nn < (m.n_size > 1 ? n + 1 : d.N); ++nn)
            changed[std::size_t(nn * d.L + i)] = 1;
      }

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
  copy_all(copies, o.threads);
  // q / √d_k as the Eigen path's in-projection computes it (an exact division, so equal digits).
  b.q_scaled = slots.q_scaled = detail::reuse_or_allocate(slots.q_scaled, b.q->size(), st);
  const T scale = p.scale();
  for (std::size_t x = 0; x < b.q->size(); ++x) (*b.q_scaled)[x] = (*b.q)[x] / scale;
  b.scratch = slots.scratch;

  std::optional<MergedMask<T>> before;
  if (base.fully_masked_rows > 0) {
    before = m;
    std::copy(old_values, old_values + m.values.size(), before->values.begin());
  }
  r.fully_masked_rows = base.fully_masked_rows +
                        detail::forward_eigen_rows(p, b, changed, before ? &*before : nullptr, o.threads);
  slots.scratch = b.scratch;
  detail::Buffer<T> mask_storage = detail::reuse_or_allocate(st.mask, m.values.size(), st);
  r.trace = detail::make_trace(p, b, std::move(mask_storage));
  return true;
}

#define MHA_INSTANTIATE(T)                                                                               \
  template bool forward_mask_edit<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&, \
                                     const ForwardResult<T>&, Workspace<T>&, ForwardResult<T>&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
