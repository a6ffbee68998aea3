// The forward: the backend choice, the problem handed to the chosen path, and the course-shaped
// API. Input checks are in checks.cpp, workspaces in workspace.cpp, the trace in trace_assembly.cpp,
// the mask-edit recompute in mask_edit.cpp; the arithmetic in forward_reference.cpp and
// forward_eigen.cpp.
#include "mha.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "forward_detail.hpp"
#include "torch_rng.hpp"

namespace mha {

namespace detail {

// Points the problem at the weights (in_proj_weight's q, k, v rows, or the separate matrices).
template <class T>
void set_weights(detail::Problem<T>& p, const Config& c, const Weights<T>& w) {
  const std::int64_t E = p.d.E, Q = p.d.qdim(), kv = p.d.G * p.d.d_k;
  if (!w.in_proj_weight.empty()) {
    p.w_q = w.in_proj_weight.ptr();
    p.w_k = p.w_q + Q * E;
    p.w_v = p.w_k + kv * E;
  } else {
    p.w_q = w.q_proj_weight.ptr();
    p.w_k = w.k_proj_weight.ptr();
    p.w_v = w.v_proj_weight.ptr();
  }
  if (c.bias) {
    p.b_q = w.in_proj_bias.ptr();
    p.b_k = p.b_q + Q;
    p.b_v = p.b_k + kv;
    p.b_o = w.out_proj_bias.ptr();
  }
  p.w_o = w.out_proj_weight.ptr();
  if (c.add_bias_kv) {
    p.bias_k = w.bias_k.ptr();
    p.bias_v = w.bias_v.ptr();
  }
  p.add_zero_attn = c.add_zero_attn;
}

}  // namespace detail

namespace {

// The in-projection stages of `base` (an Eigen result) that forward_inputs_edit starts from, and its
// batch-first inputs to compare rows with; null where base lacks one or it is not plain (N, rows,
// width) storage.
template <class T>
const T* plain_stage(const ForwardResult<T>& base, const char* name, std::int64_t count) {
  const Stage<T>* s = base.trace.find(name);
  if (!s || s->offset != 0 || s->storage->size() != std::size_t(count) ||
      s->strides != contiguous_strides(s->shape))
    return nullptr;
  return s->storage->data();
}

// (rows) flags of the rows of `now` that differ from `was`'s, bit for bit (rows of `width`).
template <class T>
std::vector<char> rows_differ(const T* now, const T* was, std::int64_t rows, std::int64_t width) {
  std::vector<char> flags(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    flags[std::size_t(r)] =
        std::memcmp(now + r * width, was + r * width, std::size_t(width) * sizeof(T)) != 0;
  return flags;
}

// forward, and with `base` (forward_inputs_edit, checked there) its in-projections for the rows
// whose inputs did not change.
template <class T>
ForwardResult<T>& forward_from(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                               Workspace<T>& ws, ForwardResult<T>& r, const ForwardResult<T>* base) {
  detail::Problem<T> p;
  p.d = check_inputs(c, w, in, o);
  std::vector<std::string> warnings;
  // The masks are checked here and merged below, straight into the workspace's buffer.
  const MaskMerger<T> merger(p.d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, &warnings);
  if (merger.any()) p.mask = merger.shape();
  Backend backend = o.backend;
  for (const std::string& name : o.stages)
    if (std::find(stage_names().begin(), stage_names().end(), name) == stage_names().end())
      throw ConfigError("stages", "no stage is named \"" + name + "\" (see stage_names())");
  if (backend == Backend::automatic)
    backend = sizeof(T) == 4 && o.device && o.score_divisor == 0 && !in.rotary &&
                      o.device->prefers(p.d, o.stages.empty())
                  ? Backend::gpu
                  : Backend::eigen;
  if (backend == Backend::gpu && !o.device)
    throw ConfigError("backend", "the GPU backend needs mha_gpu (engine/gpu): this program passed no device");
  if (backend == Backend::gpu && sizeof(T) != 4)
    throw DtypeError("backend", "the GPU path computes in float32 only; float64 runs on the cpu backend");
  // Every check has passed. Let go of the previous result, so that its buffers can be reused.
  r = ForwardResult<T>();
  r.dims = p.d;
  r.config = c;
  r.backend = backend;
  r.fully_masked = o.fully_masked;
  r.score_divisor = o.score_divisor;
  r.warnings = std::move(warnings);

  detail::WorkspaceState<T>& st = ws.state();
  p.fully_masked = o.fully_masked;
  p.score_divisor = o.score_divisor;
  p.query = detail::to_batch_first(in.query, p.d.batched, c.batch_first, st.query, st);
  // Self-attention passes one tensor three times: key and value then share the query's batch-first
  // copy instead of two more (the workspace lets go of their own buffers).
  auto copy_or_share = [&](const Tensor<T>& t, detail::Buffer<T>& slot) {
    if (!t.identical(in.query)) return detail::to_batch_first(t, p.d.batched, c.batch_first, slot, st);
    slot.reset();
    return p.query;
  };
  p.key = copy_or_share(in.key, st.key);
  p.value = copy_or_share(in.value, st.value);
  detail::set_weights(p, c, w);
  if (in.rotary) p.rope_cos = in.rotary->cos.ptr(), p.rope_sin = in.rotary->sin.ptr();

  // Each input counted, a key or value that shares the query's copy (the same bits) as the query.
  const std::int64_t in_query = detail::count_nonfinite(in.query);
  r.nonfinite_inputs = in_query;
  r.nonfinite_inputs += p.key == p.query ? in_query : detail::count_nonfinite(in.key);
  r.nonfinite_inputs += p.value == p.query ? in_query : detail::count_nonfinite(in.value);
  if (o.count_nonfinite_weights)
    for (const Tensor<T>* t : {&w.in_proj_weight, &w.q_proj_weight, &w.k_proj_weight, &w.v_proj_weight,
                               &w.in_proj_bias, &w.bias_k, &w.bias_v, &w.out_proj_weight, &w.out_proj_bias})
      r.nonfinite_inputs += detail::count_nonfinite(*t);

  // From base: its q, k and v, and which rows of them this forward's inputs change.
  std::vector<char> q_rows, k_rows, v_rows;
  if (base) {
    const Dims& d = p.d;
    const std::int64_t kv = d.G * d.d_k;
    p.given_q = plain_stage(*base, "q", d.N * d.L * d.qdim());
    p.given_k = plain_stage(*base, "k", d.N * d.S_total * kv);
    p.given_v = plain_stage(*base, "v", d.N * d.S_total * kv);
    const T* query = plain_stage(*base, "query", d.N * d.L * d.E);
    const T* key = plain_stage(*base, "key", d.N * d.S * d.kdim);
    const T* value = plain_stage(*base, "value", d.N * d.S * d.vdim);
    if (p.given_q && p.given_k && p.given_v && query && key && value) {
      q_rows = rows_differ(p.query->data(), query, d.N * d.L, d.E);
      k_rows = rows_differ(p.key->data(), key, d.N * d.S, d.kdim);
      v_rows = rows_differ(p.value->data(), value, d.N * d.S, d.vdim);
      p.q_rows = q_rows.data(), p.k_rows = k_rows.data(), p.v_rows = v_rows.data();
    } else {
      p.given_q = p.given_k = p.given_v = nullptr;
    }
  }
  detail::Buffers<T>* b = &detail::prepare_buffers(p.d, backend, st, detail::Reuse::free_only, o.stages,
                                                   o.weights_overview, p.rope_cos != nullptr);
  // The merged mask goes into the workspace's buffer, which the trace keeps, and is lent to the
  // problem while the paths compute (no second L·S array allocated and copied per forward).
  detail::Buffer<T> mask_storage;
  struct Lent {
    std::vector<T>* from = nullptr;
    std::vector<T>* to = nullptr;
    ~Lent() {
      if (from) from->swap(*to);
    }
  } lent;
  if (p.mask) {
    const MergedMask<T>& m = *p.mask;
    mask_storage =
        detail::reuse_or_allocate(st.mask, std::size_t(m.n_size * m.h_size * m.l_size * m.s_size), st);
    merger.merge_into(*mask_storage);
    p.mask->values.swap(*mask_storage);
    lent.from = &p.mask->values;
    lent.to = mask_storage.get();
  }
  if (backend == Backend::gpu && (p.score_divisor > 0 || p.rope_cos)) {  // the shaders divide by √d_k
    r.fallback_reason = p.rope_cos
                            ? "rotary position embedding is computed on the CPU paths only"
                            : "the what-if scale (temperature, scale off) is computed on the CPU paths only";
    r.backend = backend = Backend::eigen;
    b = &detail::prepare_buffers(p.d, backend, st, detail::Reuse::free_only, o.stages, o.weights_overview,
                                 p.rope_cos != nullptr);
  }
  if (backend == Backend::gpu) {
    if constexpr (std::is_same_v<T, float>) {
      try {
        o.device->forward(p, *b, o.stage_times);
      } catch (const DeviceError& e) {
        r.fallback_reason = e.what();
        r.backend = backend = Backend::eigen;
        // The Eigen path's scratch, and the buffers it computes through.
        b = &detail::prepare_buffers(p.d, backend, st, detail::Reuse::free_only, o.stages, o.weights_overview,
                                     p.rope_cos != nullptr);
      }
    }
  }
  if (backend == Backend::reference)
    detail::forward_reference(p, *b);
  else if (backend == Backend::eigen)
    detail::forward_eigen(p, *b, o.threads, o.stage_times, o.control);
  r.fully_masked_rows = b->fully_masked_rows;
  if (lent.from) lent.from->swap(*lent.to), lent.from = nullptr;  // back: the trace's buffer holds it
  r.trace = detail::make_trace(p, *b, std::move(mask_storage));
  r.overview = detail::overview_of(*b, p.d);
  return r;
}

// Whether the in-projection weights (and bias_k, bias_v) of `w` and `was` hold the same bits.
template <class T>
bool same_projections(const Config& c, const Dims& d, const Weights<T>& w, const Weights<T>& was) {
  detail::Problem<T> a, b;
  a.d = b.d = d;
  detail::set_weights(a, c, w);
  detail::set_weights(b, c, was);
  const std::int64_t E = d.E, Q = d.qdim(), kv = d.G * d.d_k;
  auto same = [](const T* x, const T* y, std::int64_t n) {
    return (x == nullptr) == (y == nullptr) && (!x || std::memcmp(x, y, std::size_t(n) * sizeof(T)) == 0);
  };
  return same(a.w_q, b.w_q, Q * E) && same(a.w_k, b.w_k, kv * d.kdim) && same(a.w_v, b.w_v, kv * d.vdim) &&
         same(a.b_q, b.b_q, Q) && same(a.b_k, b.b_k, kv) && same(a.b_v, b.b_v, kv) &&
         same(a.bias_k, b.bias_k, kv) && same(a.bias_v, b.bias_v, kv);
}

}  // namespace

template <class T>
ForwardResult<T>& forward(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                          Workspace<T>& ws, ForwardResult<T>& r) {
  return forward_from(c, w, in, o, ws, r, static_cast<const ForwardResult<T>*>(nullptr));
}

template <class T>
bool forward_inputs_edit(const Config& c, const Weights<T>& w, const Weights<T>& was, const Inputs<T>& in,
                         const Options& o, const ForwardResult<T>& base, Workspace<T>& ws,
                         ForwardResult<T>& r) {
  const Dims d = check_inputs(c, w, in, o);
  const Dims& e = base.dims;
  // The projections' shapes: E, kdim, vdim and G·d_k (the head count may differ), and the rows.
  const bool qualifies =
      &base != &r && o.backend == Backend::eigen && base.backend == Backend::eigen && d.N == e.N &&
      d.L == e.L && d.S == e.S && d.S_total == e.S_total && d.E == e.E && d.kdim == e.kdim &&
      d.vdim == e.vdim && d.G * d.d_k == e.G * e.d_k && d.qdim() == e.qdim() && d.batched == e.batched &&
      c.bias == base.config.bias && c.add_bias_kv == base.config.add_bias_kv &&
      c.add_zero_attn == base.config.add_zero_attn &&
      // Products of fewer than 4 rows plus E and the width computed coefficient by coefficient
      // (kernels' linear) would take another path for a group than for its whole range.
      d.E + d.kdim >= 20 && d.E + d.vdim >= 20 && 2 * d.E >= 20 && same_projections(c, d, w, was) &&
      // With RoPE, base's q and k stages are the unrotated projections, which project_given does not rotate.
      !in.rotary && !base.trace.has("q_rot");
  forward_from(c, w, in, o, ws, r, qualifies ? &base : nullptr);
  return qualifies;
}

template <class T>
ForwardResult<T> forward(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o) {
  Workspace<T> ws;  // dies here; the result's trace keeps the buffers
  ForwardResult<T> r;
  forward(c, w, in, o, ws, r);
  return r;
}

template <class T>
Tensor<T> ForwardResult<T>::output() const {
  Tensor<T> bf = trace["output"].contiguous();  // (N, L, E)
  if (!dims.batched) return Tensor<T>({dims.L, dims.E}, std::move(bf.data));
  if (config.batch_first) return bf;
  Tensor<T> out({dims.L, dims.N, dims.E});
  for (std::int64_t n = 0; n < dims.N; ++n)
    for (std::int64_t l = 0; l < dims.L; ++l)
      for (std::int64_t e = 0; e < dims.E; ++e)
        out.data[std::size_t((l * dims.N + n) * dims.E + e)] =
            bf.data[std::size_t((n * dims.L + l) * dims.E + e)];
  return out;
}

template <class T>
Tensor<T> ForwardResult<T>::attn_weights(bool average_attn_weights) const {
  Tensor<T> w = trace[average_attn_weights ? "attn_weights_avg" : "attn_weights"].contiguous();
  if (!dims.batched) w.shape.erase(w.shape.begin());  // torch squeezes the batch dimension
  return w;
}

template <class T>
MultiHeadAttention<T>::MultiHeadAttention(std::int64_t d_model, std::int64_t num_heads, bool bias,
                                          std::uint64_t seed) {
  config_.embed_dim = d_model;
  config_.num_heads = num_heads;
  config_.bias = bias;
  validate(config_);
  TorchGenerator gen(seed);
  weights_ = torch_default_init<T>(config_, gen);
}

template <class T>
Tensor<T> MultiHeadAttention<T>::forward(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V,
                                         const std::optional<Mask<T>>& mask) {
  Inputs<T> in{Q, K, V, mask, std::nullopt, std::nullopt};
  mha::forward(config_, weights_, in, options_, workspace_, last_);
  return last_.output();
}

template <class T>
Tensor<T> MultiHeadAttention<T>::forward(const Tensor<T>& x, const std::optional<Mask<T>>& mask) {
  return forward(x, x, x, mask);
}

template <class T>
Tensor<T> multi_head_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                               std::int64_t num_heads, std::int64_t d_model, const Weights<T>& weights,
                               const std::optional<Mask<T>>& mask, const Options& options) {
  Config c;
  c.embed_dim = d_model;
  c.num_heads = num_heads;
  c.bias = !weights.in_proj_bias.empty();
  c.kdim = k.dim() > 0 ? k.shape.back() : 0;
  c.vdim = v.dim() > 0 ? v.shape.back() : 0;
  Inputs<T> in{q, k, v, mask, std::nullopt, std::nullopt};
  return forward(c, weights, in, options).output();
}

#define MHA_INSTANTIATE(T)                                                                                  \
  template ForwardResult<T> forward<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&); \
  template struct ForwardResult<T>;                                                                         \
  template class MultiHeadAttention<T>;                                                                     \
  template Tensor<T> multi_head_attention<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,          \
                                             std::int64_t, std::int64_t, const Weights<T>&,                 \
                                             const std::optional<Mask<T>>&, const Options&);                \
  template ForwardResult<T>& forward<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&, \
                                        Workspace<T>&, ForwardResult<T>&);                                  \
  template bool forward_inputs_edit<T>(const Config&, const Weights<T>&, const Weights<T>&,                 \
                                       const Inputs<T>&, const Options&, const ForwardResult<T>&,           \
                                       Workspace<T>&, ForwardResult<T>&);                                   \
  template void detail::set_weights<T>(detail::Problem<T>&, const Config&, const Weights<T>&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
