// The input checks: the config, every tensor's shape against torch's rules, the memory guard
// (trace_bytes against max_trace_bytes), and the non-finite count of the inputs.
#include "mha.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <unistd.h>

#include "cost.hpp"
#include "errors.hpp"
#include "forward_detail.hpp"

namespace mha {

const char* mask_dtype_name(MaskDType d) {
  switch (d) {
    case MaskDType::boolean: return "bool";
    case MaskDType::uint8: return "uint8";
    case MaskDType::floating: return "float";
  }
  return "?";
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::reference: return "reference";
    case Backend::eigen: return "cpu";
    case Backend::gpu: return "gpu";
    case Backend::automatic: return "auto";
  }
  return "?";
}

Backend cpu_backend_for(double work) {
  return work <= kReferenceWorkLimit ? Backend::reference : Backend::eigen;
}

void validate(const Config& c) {
  auto positive = [](const char* name, std::int64_t v) {
    if (v <= 0) throw ConfigError(name, std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive("embed_dim", c.embed_dim);
  positive("num_heads", c.num_heads);
  if (c.num_kv_heads < 0) positive("num_kv_heads", c.num_kv_heads);
  if (c.kdim < 0) positive("kdim", c.kdim);
  if (c.vdim < 0) positive("vdim", c.vdim);
  if (c.explicit_head_dim < 0) positive("explicit_head_dim", c.explicit_head_dim);
  if (c.explicit_head_dim == 0 && c.embed_dim % c.num_heads != 0)
    throw ConfigError("num_heads", "embed_dim " + std::to_string(c.embed_dim) +
                                       " not divisible by num_heads " + std::to_string(c.num_heads) +
                                       ": each head gets d_k = embed_dim / num_heads columns");
  if (c.num_heads % c.kv_heads() != 0)
    throw ConfigError("num_kv_heads", "num_kv_heads " + std::to_string(c.kv_heads()) +
                                          " does not divide num_heads " + std::to_string(c.num_heads) +
                                          ": every key/value head must serve the same number of "
                                          "query heads");
}

namespace {

template <class T>
void check_consistent(const char* name, const Tensor<T>& t) {
  if (t.data.size() != std::size_t(numel(t.shape)))
    throw ShapeError(name, std::string(name) + ": shape " + shape_str(t.shape) + " needs " +
                               std::to_string(numel(t.shape)) + " values, holds " +
                               std::to_string(t.data.size()));
}

template <class T>
void expect_shape(const char* name, const Tensor<T>& t, const Shape& want, const std::string& why) {
  if (t.empty())
    throw ShapeError(name, std::string(name) + ": missing; expected shape " + shape_str(want) + " " + why);
  check_consistent(name, t);
  if (t.shape != want)
    throw ShapeError(name, std::string(name) + ": expected shape " + shape_str(want) + " " + why + ", got " +
                               shape_str(t.shape));
}

template <class T>
void expect_absent(const char* name, const Tensor<T>& t, const char* because) {
  if (!t.empty()) throw ShapeError(name, std::string(name) + " was given but " + because);
}

std::uint64_t default_trace_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t(8) << 30;
  return std::uint64_t(pages) * std::uint64_t(page) / 2;
}

}  // namespace

namespace detail {

template <class T>
std::int64_t count_nonfinite(const Tensor<T>& t) {
  // Counted in int chunks, which the compiler keeps in vector lanes (an int64 count made it unpack
  // every compare: most of a teaching-size forward's own time, outside the kernels).
  std::int64_t n = 0;
  const T* x = t.data.data();
  for (std::size_t i = 0, size = t.data.size(); i < size;) {
    const std::size_t end = std::min(size, i + (std::size_t(1) << 20));
    int chunk = 0;
    for (; i < end; ++i) chunk += !std::isfinite(x[i]);
    n += chunk;
  }
  return n;
}

}  // namespace detail

std::uint64_t trace_bytes(const Dims& d, std::size_t scalar_size, bool has_mask) {
  return cost::trace_bytes(cost::shape(d, false, has_mask), scalar_size);
}

namespace {

// What check_inputs guards: the trace's bytes, less the (N, H, L, S') stages and the head average that
// Options::stages leaves out of the trace (every path but the reference honours it).
std::uint64_t kept_trace_bytes(const Dims& d, std::size_t scalar_size, bool has_mask, const Options& o) {
  std::uint64_t need = trace_bytes(d, scalar_size, has_mask);
  if (o.stages.empty() || o.backend == Backend::reference) return need;
  const double plane = double(d.N) * double(d.L) * double(d.S_total) * double(scalar_size);
  for (const std::string& name : on_demand_stages()) {
    if (std::find(o.stages.begin(), o.stages.end(), name) != o.stages.end()) continue;
    const double bytes = name == "attn_weights_avg" ? plane : plane * double(d.H);
    need -= std::min<std::uint64_t>(need, bytes >= 1.8e19 ? need : std::uint64_t(bytes));
  }
  return need;
}

}  // namespace

void check_trace_fits(const Dims& d, std::size_t scalar_size, bool has_mask, std::uint64_t max_trace_bytes) {
  check_bytes_fit(d, trace_bytes(d, scalar_size, has_mask), max_trace_bytes);
}

void check_bytes_fit(const Dims& d, std::uint64_t need, std::uint64_t max_trace_bytes) {
  const std::uint64_t limit = max_trace_bytes ? max_trace_bytes : default_trace_limit();
  if (need > limit)
    throw TooLargeError("sizes",
                        "the trace at N=" + std::to_string(d.N) + ", L=" + std::to_string(d.L) +
                            ", S=" + std::to_string(d.S) + ", E=" + std::to_string(d.E) +
                            ", H=" + std::to_string(d.H) + " would need " + std::to_string(need) +
                            " bytes (" + std::to_string(double(need) / double(1 << 30)) +
                            " GiB), more than the limit of " + std::to_string(limit) +
                            " bytes; nothing was allocated",
                        need, limit);
}

Dims dims_for(const Config& c, std::int64_t N, std::int64_t L, std::int64_t S) {
  Dims d;
  d.N = N;
  d.L = L;
  d.S = S;
  d.S_total = S + (c.add_bias_kv ? 1 : 0) + (c.add_zero_attn ? 1 : 0);
  d.E = c.embed_dim;
  d.H = c.num_heads;
  d.G = c.kv_heads();
  d.d_k = c.head_dim();
  d.kdim = c.key_dim();
  d.vdim = c.value_dim();
  return d;
}

template <class T>
Dims check_inputs(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o) {
  validate(c);
  // 0 is √d_k (torch); a negative or non-finite divisor would flip or blank every score.
  if (!(o.score_divisor >= 0) || !std::isfinite(o.score_divisor))
    throw ConfigError("score_divisor",
                      "score_divisor must be 0 (torch's √d_k) or a finite number above 0, got " +
                          std::to_string(o.score_divisor));
  Dims d;
  const std::int64_t qd = in.query.dim();
  if (qd != 2 && qd != 3)
    throw ShapeError("query", "query should be unbatched 2D or batched 3D tensor but received " +
                                  std::to_string(qd) + "-D query tensor of shape " +
                                  shape_str(in.query.shape));
  d.batched = qd == 3;
  if (in.key.dim() != qd || in.value.dim() != qd)
    throw ShapeError("key", std::string("For ") + (d.batched ? "batched (3-D)" : "unbatched (2-D)") +
                                " query, expected key and value to be " + std::to_string(qd) +
                                "-D but found " + std::to_string(in.key.dim()) + "-D and " +
                                std::to_string(in.value.dim()) + "-D tensors respectively");
  check_consistent("query", in.query);
  check_consistent("key", in.key);
  check_consistent("value", in.value);
  const int b = (!d.batched || c.batch_first) ? 0 : 1;  // batch axis
  const int t = (!d.batched || c.batch_first) ? 1 : 0;  // sequence axis
  const std::string layout = !d.batched ? "(L, E)" : c.batch_first ? "(N, L, E)" : "(L, N, E)";
  d = dims_for(c, d.batched ? in.query.shape[b] : 1, in.query.shape[d.batched ? t : 0],
               in.key.shape[d.batched ? t : 0]);
  d.batched = qd == 3;
  d.E = in.query.shape.back();
  if (d.E != c.embed_dim)
    throw ShapeError("query", "query: was expecting embedding dimension of " + std::to_string(c.embed_dim) +
                                  " (last axis of " + layout + "), but got query of shape " +
                                  shape_str(in.query.shape));
  if (d.N <= 0 || d.L <= 0 || d.S <= 0)
    throw ShapeError("query", "query/key: sizes must be positive, got query " + shape_str(in.query.shape) +
                                  " and key " + shape_str(in.key.shape));
  auto kv_shape = [&](std::int64_t feat) {
    if (!d.batched) return Shape{d.S, feat};
    return c.batch_first ? Shape{d.N, d.S, feat} : Shape{d.S, d.N, feat};
  };
  const std::string kv_layout = !d.batched ? "" : c.batch_first ? " (N, S, ·)" : " (S, N, ·)";
  if (in.key.shape != kv_shape(d.kdim))
    throw ShapeError("key", "key: expected shape " + shape_str(kv_shape(d.kdim)) + kv_layout + " with kdim " +
                                std::to_string(d.kdim) + " and the query's batch " + std::to_string(d.N) +
                                ", got " + shape_str(in.key.shape));
  if (in.value.shape != kv_shape(d.vdim))
    throw ShapeError("value", "value: expected shape " + shape_str(kv_shape(d.vdim)) + kv_layout +
                                  " (key's batch and sequence length, vdim " + std::to_string(d.vdim) +
                                  "), got " + shape_str(in.value.shape));

  // Parameters, under torch's names.
  const std::int64_t E = d.E, Q = d.qdim(), kv = d.G * d.d_k;
  const bool packed = !w.in_proj_weight.empty();
  if (packed) {
    if (!c.qkv_same_embed_dim())
      throw ShapeError("in_proj_weight",
                       "in_proj_weight: packed weights need kdim == vdim == embed_dim; "
                       "with kdim " +
                           std::to_string(d.kdim) + " and vdim " + std::to_string(d.vdim) +
                           " give q_proj_weight, k_proj_weight and v_proj_weight");
    expect_shape("in_proj_weight", w.in_proj_weight, {Q + 2 * kv, E},
                 Q != E    ? "(num_heads·head_dim + 2·num_kv_heads·head_dim, embed_dim)"
                 : kv == E ? "(3·embed_dim, embed_dim)"
                           : "(embed_dim + 2·num_kv_heads·d_k, embed_dim)");
    expect_absent("q_proj_weight", w.q_proj_weight, "in_proj_weight is given too");
  } else {
    expect_shape("q_proj_weight", w.q_proj_weight, {Q, E},
                 Q != E ? "(num_heads·head_dim, embed_dim)" : "(embed_dim, embed_dim)");
    expect_shape("k_proj_weight", w.k_proj_weight, {kv, d.kdim}, "(num_kv_heads·d_k, kdim)");
    expect_shape("v_proj_weight", w.v_proj_weight, {kv, d.vdim}, "(num_kv_heads·d_k, vdim)");
  }
  expect_shape("out_proj.weight", w.out_proj_weight, {E, Q},
               Q != E ? "(embed_dim, num_heads·head_dim)" : "(embed_dim, embed_dim)");
  if (c.bias) {
    expect_shape(
        "in_proj_bias", w.in_proj_bias, {Q + 2 * kv},
        Q != E ? "(num_heads·head_dim + 2·num_kv_heads·head_dim,)" : "(embed_dim + 2·num_kv_heads·d_k,)");
    expect_shape("out_proj.bias", w.out_proj_bias, {E}, "(embed_dim,)");
  } else {
    expect_absent("in_proj_bias", w.in_proj_bias, "bias=False");
    expect_absent("out_proj.bias", w.out_proj_bias, "bias=False");
  }
  if (c.add_bias_kv) {
    expect_shape("bias_k", w.bias_k, {1, 1, kv}, "(1, 1, num_kv_heads·d_k)");
    expect_shape("bias_v", w.bias_v, {1, 1, kv}, "(1, 1, num_kv_heads·d_k)");
  } else {
    expect_absent("bias_k", w.bias_k, "add_bias_kv=False");
    expect_absent("bias_v", w.bias_v, "add_bias_kv=False");
  }

  if (in.rotary) {
    // Rows past S would be bias_k or the zero row, which have no position to rotate by.
    if (c.add_bias_kv || c.add_zero_attn)
      throw ConfigError("rotary",
                        "rotary position embedding cannot be combined with add_bias_kv or add_zero_attn");
    if (d.d_k % 2 != 0)
      throw ConfigError("rotary", "rotary position embedding pairs the halves of each head: d_k = " +
                                      std::to_string(d.d_k) + " is odd");
    const std::int64_t P = std::max(d.L, d.S);
    const std::string why = "(positions, d_k) with positions ≥ max(L, S) = " + std::to_string(P);
    check_consistent("rotary.cos", in.rotary->cos);
    check_consistent("rotary.sin", in.rotary->sin);
    for (const auto& [name, t] :
         {std::pair{"rotary.cos", &in.rotary->cos}, std::pair{"rotary.sin", &in.rotary->sin}})
      if (t->dim() != 2 || t->shape[0] < P || t->shape[1] != d.d_k)
        throw ShapeError(name, std::string(name) + ": expected shape " + why +
                                   " and d_k = " + std::to_string(d.d_k) + ", got " + shape_str(t->shape));
    if (in.rotary->cos.shape != in.rotary->sin.shape)
      throw ShapeError("rotary.sin", "rotary.sin: shape " + shape_str(in.rotary->sin.shape) +
                                         " differs from rotary.cos's " + shape_str(in.rotary->cos.shape));
  }

  check_bytes_fit(
      d, kept_trace_bytes(d, sizeof(T), in.attn_mask.has_value() || in.key_padding_mask.has_value(), o),
      o.max_trace_bytes);
  return d;
}

#define MHA_INSTANTIATE(T)                                                                           \
  template Dims check_inputs<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&); \
  template std::int64_t detail::count_nonfinite<T>(const Tensor<T>&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
