// Input checks, normalisation to batch-first, the memory guard, the trace assembly and the
// course-shaped API. The arithmetic itself is in forward_reference.cpp and forward_eigen.cpp.
#include "mha.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cost.hpp"
#include "errors.hpp"
#include "forward_detail.hpp"
#include "torch_rng.hpp"

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

void validate(const Config& c) {
  auto positive = [](const char* name, std::int64_t v) {
    if (v <= 0) throw ConfigError(name, std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive("embed_dim", c.embed_dim);
  positive("num_heads", c.num_heads);
  if (c.num_kv_heads < 0) positive("num_kv_heads", c.num_kv_heads);
  if (c.kdim < 0) positive("kdim", c.kdim);
  if (c.vdim < 0) positive("vdim", c.vdim);
  if (c.embed_dim % c.num_heads != 0)
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

std::uint64_t default_trace_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t(8) << 30;
  return std::uint64_t(pages) * std::uint64_t(page) / 2;
}

}  // namespace

std::uint64_t trace_bytes(const Dims& d, std::size_t scalar_size, bool has_mask) {
  return cost::trace_bytes(cost::shape(d, false, has_mask), scalar_size);
}

void check_trace_fits(const Dims& d, std::size_t scalar_size, bool has_mask, std::uint64_t max_trace_bytes) {
  const std::uint64_t need = trace_bytes(d, scalar_size, has_mask);
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
  const std::int64_t E = d.E, kv = d.G * d.d_k;
  const bool packed = !w.in_proj_weight.empty();
  if (packed) {
    if (!c.qkv_same_embed_dim())
      throw ShapeError("in_proj_weight",
                       "in_proj_weight: packed weights need kdim == vdim == embed_dim; "
                       "with kdim " +
                           std::to_string(d.kdim) + " and vdim " + std::to_string(d.vdim) +
                           " give q_proj_weight, k_proj_weight and v_proj_weight");
    expect_shape("in_proj_weight", w.in_proj_weight, {E + 2 * kv, E},
                 kv == E ? "(3·embed_dim, embed_dim)" : "(embed_dim + 2·num_kv_heads·d_k, embed_dim)");
    expect_absent("q_proj_weight", w.q_proj_weight, "in_proj_weight is given too");
  } else {
    expect_shape("q_proj_weight", w.q_proj_weight, {E, E}, "(embed_dim, embed_dim)");
    expect_shape("k_proj_weight", w.k_proj_weight, {kv, d.kdim}, "(num_kv_heads·d_k, kdim)");
    expect_shape("v_proj_weight", w.v_proj_weight, {kv, d.vdim}, "(num_kv_heads·d_k, vdim)");
  }
  expect_shape("out_proj.weight", w.out_proj_weight, {E, E}, "(embed_dim, embed_dim)");
  if (c.bias) {
    expect_shape("in_proj_bias", w.in_proj_bias, {E + 2 * kv}, "(embed_dim + 2·num_kv_heads·d_k,)");
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

  check_trace_fits(d, sizeof(T), in.attn_mask.has_value() || in.key_padding_mask.has_value(),
                   o.max_trace_bytes);
  return d;
}

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
                            const std::vector<std::string>& stages) {
  const std::size_t kv = std::size_t(d.G * d.d_k), NL = std::size_t(d.N * d.L),
                    NSp = std::size_t(d.N * d.S_total);
  const std::size_t E = std::size_t(d.E), scores = std::size_t(d.N * d.H * d.L * d.S_total);
  Buffers<T>& b = ws.buffers;
  // A buffer is wanted when any stage it stores is named (a tensor and its views share one).
  const bool subset = backend == Backend::gpu && !stages.empty();
  auto fill = [&](Buffer<T>& slot, std::size_t n, std::initializer_list<const char*> names) {
    bool wanted = !subset;
    for (const char* name : names)
      wanted = wanted || std::find(stages.begin(), stages.end(), name) != stages.end();
    if (wanted)
      slot = reuse_or_allocate(slot, n, ws, rule);
    else
      slot.reset();
  };
  fill(b.q, NL * E, {"q", "q_view", "q_heads"});
  fill(b.k, NSp * kv, {"k", "k_view", "k_heads"});
  fill(b.v, NSp * kv, {"v", "v_view", "v_heads"});
  fill(b.scores, scores, {"scores"});
  fill(b.scores_scaled, scores, {"scores_scaled"});
  fill(b.scores_masked, scores, {"scores_masked"});
  fill(b.weights, scores, {"attn_weights"});
  fill(b.context, NL * std::size_t(d.H * d.d_k), {"context", "context_transposed"});
  fill(b.concat, NL * E, {"concat"});
  b.output = reuse_or_allocate(b.output, NL * E, ws, rule);  // the module's return value: always
  fill(b.weights_avg, NL * std::size_t(d.S_total), {"attn_weights_avg"});
  if (backend == Backend::eigen)
    b.q_scaled = reuse_or_allocate(b.q_scaled, NL * E, ws, rule);
  else
    b.q_scaled.reset();
  b.fully_masked_rows = 0;
  return b;
}

}  // namespace detail

namespace {

template <class T>
Stage<T> stage(std::string name, std::string formula, std::string note, Shape shape,
               detail::Buffer<T> storage, Shape strides = {}, std::string view_of = "") {
  Stage<T> s;
  s.name = std::move(name);
  s.formula = std::move(formula);
  s.note = std::move(note);
  s.strides = strides.empty() ? contiguous_strides(shape) : std::move(strides);
  s.shape = std::move(shape);
  s.storage = std::move(storage);
  s.view_of = std::move(view_of);
  return s;
}

// mask_storage: the merged mask's values, in a workspace buffer (unused without a mask).
template <class T>
Trace<T> make_trace(const detail::Problem<T>& p, const detail::Buffers<T>& b,
                    detail::Buffer<T> mask_storage) {
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, E = d.E, H = d.H, G = d.G, dk = d.d_k,
                     kv = G * dk;
  // Every formula runs as written in torch 1.13 with the names the notes define (W_q, b_q, bias_k,
  // out_proj, N, L, S, E, H, G, d_k, num_heads, attn_mask as the merged additive mask), which
  // tests/trace_snippets.py checks against the stages. bias_k and a zero row are appended along S.
  auto kv_formula = [&](const char* x, const char* w, const char* bias, const char* extra) {
    std::string f = std::string("F.linear(") + x + ", " + w + ", " + bias + ")";
    if (p.bias_k) f = "torch.cat([" + f + ", " + extra + ".reshape(1, 1, -1).expand(N, 1, -1)], dim=1)";
    if (p.add_zero_attn) f = "torch.cat([" + f + ", torch.zeros(N, 1, G * d_k)], dim=1)";
    return f;
  };
  const char* gqa = G < H ? " (G key/value heads shared by H/G query heads each)" : "";
  // Grouped-query attention: each key/value head serves H/G query heads in a row, so the product
  // repeats them along the head dimension (a (N, G, ...) tensor does not broadcast against H).
  const std::string k_rep = G < H && G > 1 ? "k_heads.repeat_interleave(H // G, dim=1)" : "k_heads";
  const std::string v_rep = G < H && G > 1 ? "v_heads.repeat_interleave(H // G, dim=1)" : "v_heads";
  Trace<T> t;
  t.stages.reserve(24);  // every stage below, without regrowing
  // A stage whose buffer is null was not asked for (Options::stages): it is left out.
  struct Stages {
    std::vector<Stage<T>>& v;
    void push_back(Stage<T> st) {
      if (st.storage) v.push_back(std::move(st));
    }
  } s{t.stages};
  s.push_back(stage<T>("query", "query", "input, batch-first", {N, L, E}, p.query));
  s.push_back(stage<T>("key", "key", "input, batch-first", {N, S, d.kdim}, p.key));
  s.push_back(stage<T>("value", "value", "input, batch-first", {N, S, d.vdim}, p.value));
  s.push_back(
      stage<T>("q", "F.linear(query, W_q, b_q)", "in-projection: W_q = in_proj_weight[:E]", {N, L, E}, b.q));
  s.push_back(stage<T>("k", kv_formula("key", "W_k", "b_k", "bias_k"),
                       std::string("in-projection: W_k = in_proj_weight[E:E+G·d_k]") + gqa, {N, Sp, kv},
                       b.k));
  s.push_back(stage<T>("v", kv_formula("value", "W_v", "b_v", "bias_v"),
                       "in-projection: W_v = in_proj_weight[E+G·d_k:]", {N, Sp, kv}, b.v));
  s.push_back(stage<T>("q_view", "q.view(N, L, H, d_k)",
                       "a view of q: same storage, contiguous; head h owns columns h·d_k … (h+1)·d_k-1",
                       {N, L, H, dk}, b.q, {}, "q"));
  s.push_back(stage<T>("k_view", Sp > S ? "k.view(N, -1, G, d_k)" : "k.view(N, S, G, d_k)",
                       "a view of k: same storage, contiguous", {N, Sp, G, dk}, b.k, {}, "k"));
  s.push_back(stage<T>("v_view", Sp > S ? "v.view(N, -1, G, d_k)" : "v.view(N, S, G, d_k)",
                       "a view of v: same storage, contiguous", {N, Sp, G, dk}, b.v, {}, "v"));
  s.push_back(stage<T>("q_heads", "q_view.transpose(1, 2)",
                       "a view of q: non-contiguous (only strides swap), so .view() on it fails until "
                       ".contiguous()",
                       {N, H, L, dk}, b.q, {L * E, dk, E, 1}, "q"));
  s.push_back(stage<T>("k_heads", "k_view.transpose(1, 2)", "a view of k: non-contiguous", {N, G, Sp, dk},
                       b.k, {Sp * kv, dk, kv, 1}, "k"));
  s.push_back(stage<T>("v_heads", "v_view.transpose(1, 2)", "a view of v: non-contiguous", {N, G, Sp, dk},
                       b.v, {Sp * kv, dk, kv, 1}, "v"));
  s.push_back(stage<T>("scores", "q_heads @ " + k_rep + ".transpose(-2, -1)",
                       "raw dot products q_i·k_j per head: O(L·S·d_k) each", {N, H, L, Sp}, b.scores));
  if (p.score_divisor > 0)  // Options::score_divisor: a what-if, said so in the trace
    s.push_back(
        stage<T>("scores_scaled",
                 "(q_heads / " + std::to_string(p.score_divisor) + ") @ " + k_rep + ".transpose(-2, -1)",
                 "WHAT-IF, not torch: q divided by " + std::to_string(p.score_divisor) +
                     " instead of √d_k (a temperature, or the scale off)",
                 {N, H, L, Sp}, b.scores_scaled));
  else
    s.push_back(stage<T>("scores_scaled", "(q_heads / math.sqrt(d_k)) @ " + k_rep + ".transpose(-2, -1)",
                         "÷√d_k keeps the softmax out of saturation; torch scales q before the product",
                         {N, H, L, Sp}, b.scores_scaled));
  if (p.mask) {
    const MergedMask<T>& m = *p.mask;
    const Shape strides = {m.n_size > 1 ? m.h_size * m.l_size * m.s_size : 0,
                           m.h_size > 1 ? m.l_size * m.s_size : 0, m.l_size > 1 ? m.s_size : 0, 1};
    std::copy(m.values.begin(), m.values.end(), mask_storage->begin());
    s.push_back(stage<T>("attn_mask",
                         "attn_mask merged with key_padding_mask; bool True -> -inf, float added",
                         "additive; broadcast (stride 0) where one mask serves every batch item, "
                         "head or query",
                         {N, H, L, Sp}, std::move(mask_storage), strides));
  }
  s.push_back(stage<T>("scores_masked", p.mask ? "scores_scaled + attn_mask" : "scores_scaled",
                       "-inf where a key is blocked", {N, H, L, Sp}, b.scores_masked));
  s.push_back(stage<T>("attn_weights",
                       p.fully_masked == FullyMasked::nan
                           ? "F.softmax(scores_masked, dim=-1)"
                           : "F.softmax(scores_masked, dim=-1).nan_to_num(0.0)",
                       p.fully_masked == FullyMasked::nan
                           ? "each row sums to 1; a row with every key blocked is NaN (torch)"
                           : "each row sums to 1; a row with every key blocked is 0 (course notebook)",
                       {N, H, L, Sp}, b.weights));
  s.push_back(stage<T>("context", "attn_weights @ " + v_rep, "per-head context: a weighted mix of values",
                       {N, H, L, dk}, b.context));
  s.push_back(stage<T>("context_transposed", "context.transpose(1, 2)", "a view of context: non-contiguous",
                       {N, L, H, dk}, b.context, {H * L * dk, dk, L * dk, 1}, "context"));
  s.push_back(stage<T>("concat", "context_transposed.contiguous().view(N, L, E)",
                       "heads side by side: .contiguous() copies, then .view() is legal", {N, L, E},
                       b.concat));
  s.push_back(stage<T>("output", "F.linear(concat, out_proj.weight, out_proj.bias)",
                       "out-projection mixes the heads", {N, L, E}, b.output));
  s.push_back(stage<T>("attn_weights_avg", "attn_weights.sum(dim=1) / num_heads",
                       "what need_weights=True returns by default (average_attn_weights)", {N, L, Sp},
                       b.weights_avg));
  return t;
}

// Points the problem at the weights (in_proj_weight's q, k, v rows, or the separate matrices).
template <class T>
void set_weights(detail::Problem<T>& p, const Config& c, const Weights<T>& w) {
  const std::int64_t E = p.d.E, kv = p.d.G * p.d.d_k;
  if (!w.in_proj_weight.empty()) {
    p.w_q = w.in_proj_weight.ptr();
    p.w_k = p.w_q + E * E;
    p.w_v = p.w_k + kv * E;
  } else {
    p.w_q = w.q_proj_weight.ptr();
    p.w_k = w.k_proj_weight.ptr();
    p.w_v = w.v_proj_weight.ptr();
  }
  if (c.bias) {
    p.b_q = w.in_proj_bias.ptr();
    p.b_k = p.b_q + E;
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

}  // namespace

template <class T>
ForwardResult<T>& forward(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                          Workspace<T>& ws, ForwardResult<T>& r) {
  detail::Problem<T> p;
  p.d = check_inputs(c, w, in, o);
  std::vector<std::string> warnings;
  p.mask = merge_masks(p.d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, &warnings);
  Backend backend = o.backend;
  for (const std::string& name : o.stages)
    if (std::find(stage_names().begin(), stage_names().end(), name) == stage_names().end())
      throw ConfigError("stages", "no stage is named \"" + name + "\" (see stage_names())");
  if (backend == Backend::automatic)
    backend = sizeof(T) == 4 && o.device && o.score_divisor == 0 && o.device->prefers(p.d, o.stages.empty())
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
  r.warnings = std::move(warnings);

  detail::WorkspaceState<T>& st = ws.state();
  p.fully_masked = o.fully_masked;
  p.score_divisor = o.score_divisor;
  p.query = to_batch_first(in.query, p.d.batched, c.batch_first, st.query, st);
  p.key = to_batch_first(in.key, p.d.batched, c.batch_first, st.key, st);
  p.value = to_batch_first(in.value, p.d.batched, c.batch_first, st.value, st);
  set_weights(p, c, w);

  for (const Tensor<T>* t : {&in.query, &in.key, &in.value}) r.nonfinite_inputs += count_nonfinite(*t);
  if (o.count_nonfinite_weights)
    for (const Tensor<T>* t : {&w.in_proj_weight, &w.q_proj_weight, &w.k_proj_weight, &w.v_proj_weight,
                               &w.in_proj_bias, &w.bias_k, &w.bias_v, &w.out_proj_weight, &w.out_proj_bias})
      r.nonfinite_inputs += count_nonfinite(*t);

  detail::Buffers<T>* b = &detail::prepare_buffers(p.d, backend, st, detail::Reuse::free_only, o.stages);
  detail::Buffer<T> mask_storage;
  if (p.mask) mask_storage = detail::reuse_or_allocate(st.mask, p.mask->values.size(), st);
  if (backend == Backend::gpu && p.score_divisor > 0) {  // the shaders divide by √d_k
    r.fallback_reason = "the what-if scale (temperature, scale off) is computed on the CPU paths only";
    r.backend = backend = Backend::eigen;
    b = &detail::prepare_buffers(p.d, backend, st);
  }
  if (backend == Backend::gpu) {
    if constexpr (std::is_same_v<T, float>) {
      try {
        o.device->forward(p, *b, o.stage_times);
      } catch (const DeviceError& e) {
        r.fallback_reason = e.what();
        r.backend = backend = Backend::eigen;
        b = &detail::prepare_buffers(p.d, backend, st);  // the Eigen path's scratch
      }
    }
  }
  if (backend == Backend::reference)
    detail::forward_reference(p, *b);
  else if (backend == Backend::eigen)
    detail::forward_eigen(p, *b, o.threads, o.stage_times);
  r.fully_masked_rows = b->fully_masked_rows;
  r.trace = make_trace(p, *b, std::move(mask_storage));
  return r;
}

template <class T>
ForwardResult<T> forward(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o) {
  Workspace<T> ws;  // dies here; the result's trace keeps the buffers
  ForwardResult<T> r;
  forward(c, w, in, o, ws, r);
  return r;
}

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
  set_weights(p, c, w);
  p.fully_masked = o.fully_masked;

  detail::WorkspaceState<T>& st = ws.state();
  // Every stage is copied from base into this workspace's buffers, the unchanged ones included:
  // sharing them would tie base's workspace to this result, and its next forward would allocate.
  // The buffers are taken here, on this thread; copy_all then fills them.
  std::vector<std::pair<const std::vector<T>*, detail::Buffer<T>>> copies;
  auto copy_of = [&](const char* name, detail::Buffer<T>& slot) {
    const std::vector<T>& from = *base.trace[name].storage;
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
  r.trace = make_trace(p, b, std::move(mask_storage));
  return true;
}

template <class T>
void reserve(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o, Workspace<T>& ws) {
  const Dims d = check_inputs(c, w, in, o);
  std::vector<std::string> warnings;
  const auto mask = merge_masks(d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, &warnings);
  // The buffers forward would prepare. Backend::automatic is resolved as eigen: the GPU path uses
  // the same buffers less q_scaled, which a later GPU forward then simply lets go of.
  const Backend backend = o.backend == Backend::reference ? Backend::reference : Backend::eigen;
  detail::WorkspaceState<T>& st = ws.state();
  const detail::Reuse rule = detail::Reuse::fitting;
  detail::reuse_or_allocate(st.query, in.query.data.size(), st, rule);
  detail::reuse_or_allocate(st.key, in.key.data.size(), st, rule);
  detail::reuse_or_allocate(st.value, in.value.data.size(), st, rule);
  detail::prepare_buffers(d, backend, st, rule);
  if (mask) detail::reuse_or_allocate(st.mask, mask->values.size(), st, rule);
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
  Inputs<T> in{Q, K, V, mask, std::nullopt};
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
  Inputs<T> in{q, k, v, mask, std::nullopt};
  return forward(c, weights, in, options).output();
}

#define MHA_INSTANTIATE(T)                                                                                  \
  template Dims check_inputs<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&);        \
  template ForwardResult<T> forward<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&); \
  template struct ForwardResult<T>;                                                                         \
  template class MultiHeadAttention<T>;                                                                     \
  template Tensor<T> multi_head_attention<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,          \
                                             std::int64_t, std::int64_t, const Weights<T>&,                 \
                                             const std::optional<Mask<T>>&, const Options&);                \
  template ForwardResult<T>& forward<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&, \
                                        Workspace<T>&, ForwardResult<T>&);                                  \
  template class Workspace<T>;                                                                              \
  template bool forward_mask_edit<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&,    \
                                     const ForwardResult<T>&, Workspace<T>&, ForwardResult<T>&);            \
  template void reserve<T>(const Config&, const Weights<T>&, const Inputs<T>&, const Options&,              \
                           Workspace<T>&);                                                                  \
  template detail::Buffer<T> detail::reuse_or_allocate<T>(detail::Buffer<T>&, std::size_t,                  \
                                                          detail::WorkspaceState<T>&, detail::Reuse);       \
  template detail::Buffers<T>& detail::prepare_buffers<T>(const Dims&, Backend, detail::WorkspaceState<T>&, \
                                                          detail::Reuse, const std::vector<std::string>&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
