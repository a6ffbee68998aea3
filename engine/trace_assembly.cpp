// The trace: every stage of a forward as a named view on the workspace's buffers, with the torch
// expression that makes it, its shape and strides (views share their parent's storage).
#include "mha.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "forward_detail.hpp"
#include "parallel.hpp"
#include "stage_table.hpp"

namespace mha {

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

// The table's note, for the stages whose note is the same in every forward.
const char* fixed_note(const char* name) {
  return stage_info(name)->note;
}

}  // namespace

namespace detail {

// mask_storage: the merged mask's values, in a workspace buffer (unused without a mask): copied
// there from p.mask's values, or already there when those are empty (forward merges into it).
template <class T>
Trace<T> make_trace(const detail::Problem<T>& p, const detail::Buffers<T>& b,
                    detail::Buffer<T> mask_storage) {
  namespace n = stage_name;
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, E = d.E, H = d.H, G = d.G, dk = d.d_k,
                     kv = G * dk, Q = d.qdim();
  // The width of q and of the heads side by side: E, or H·d_k where the config gives the heads
  // their own width (Hugging Face's head_dim).
  const std::string q_width = Q == E ? "E" : "H * d_k";
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
  t.stages.reserve(26);  // every stage below, without regrowing
  // A stage whose buffer is null was not asked for (Options::stages): it is left out, its metadata
  // kept for find_stage().
  struct Stages {
    Trace<T>& t;
    void push_back(Stage<T> st) { (st.storage ? t.stages : t.left_out).push_back(std::move(st)); }
  } s{t};
  s.push_back(stage<T>(n::query, "query", fixed_note(n::query), {N, L, E}, p.query));
  s.push_back(stage<T>(n::key, "key", fixed_note(n::key), {N, S, d.kdim}, p.key));
  s.push_back(stage<T>(n::value, "value", fixed_note(n::value), {N, S, d.vdim}, p.value));
  // With RoPE (Inputs::rotary) q and k are the projections, q_rot and k_rot what the heads read, and
  // the views below view those; cos and sin are the (P, d_k) tables, rotate_half as Hugging Face's.
  const bool rope = p.rope_cos != nullptr;
  const std::string qh = rope ? n::q_rot : n::q, kh = rope ? n::k_rot : n::k;
  s.push_back(
      stage<T>(n::q, "F.linear(query, W_q, b_q)", fixed_note(n::q), {N, L, Q}, rope ? b.q_proj : b.q));
  s.push_back(stage<T>(n::k, kv_formula("key", "W_k", "b_k", "bias_k"), fixed_note(n::k) + std::string(gqa),
                       {N, Sp, kv}, rope ? b.k_proj : b.k));
  s.push_back(
      stage<T>(n::v, kv_formula("value", "W_v", "b_v", "bias_v"), fixed_note(n::v), {N, Sp, kv}, b.v));
  if (rope) {
    s.push_back(stage<T>(n::q_rot,
                         "(q.view(N, L, H, d_k) * cos[:L, None] + rotate_half(q.view(N, L, H, d_k)) * "
                         "sin[:L, None]).view(N, L, " +
                             q_width + ")",
                         fixed_note(n::q_rot), {N, L, Q}, b.q));
    s.push_back(stage<T>(n::k_rot,
                         "(k.view(N, S, G, d_k) * cos[:S, None] + rotate_half(k.view(N, S, G, d_k)) * "
                         "sin[:S, None]).view(N, S, G * d_k)",
                         fixed_note(n::k_rot), {N, Sp, kv}, b.k));
  }
  s.push_back(
      stage<T>(n::q_view, qh + ".view(N, L, H, d_k)",
               "a view of " + qh + ": same storage, contiguous; head h owns columns h·d_k … (h+1)·d_k-1",
               {N, L, H, dk}, b.q, {}, qh));
  s.push_back(stage<T>(n::k_view, kh + (Sp > S ? ".view(N, -1, G, d_k)" : ".view(N, S, G, d_k)"),
                       "a view of " + kh + ": same storage, contiguous", {N, Sp, G, dk}, b.k, {}, kh));
  s.push_back(stage<T>(n::v_view, Sp > S ? "v.view(N, -1, G, d_k)" : "v.view(N, S, G, d_k)",
                       fixed_note(n::v_view), {N, Sp, G, dk}, b.v, {}, n::v));
  s.push_back(stage<T>(
      n::q_heads, "q_view.transpose(1, 2)",
      "a view of " + qh + ": non-contiguous (only strides swap), so .view() on it fails until .contiguous()",
      {N, H, L, dk}, b.q, {L * Q, dk, Q, 1}, qh));
  s.push_back(stage<T>(n::k_heads, "k_view.transpose(1, 2)", "a view of " + kh + ": non-contiguous",
                       {N, G, Sp, dk}, b.k, {Sp * kv, dk, kv, 1}, kh));
  s.push_back(stage<T>(n::v_heads, "v_view.transpose(1, 2)", fixed_note(n::v_heads), {N, G, Sp, dk}, b.v,
                       {Sp * kv, dk, kv, 1}, n::v));
  s.push_back(stage<T>(n::scores, "q_heads @ " + k_rep + ".transpose(-2, -1)", fixed_note(n::scores),
                       {N, H, L, Sp}, b.scores));
  if (p.score_divisor > 0)  // Options::score_divisor: a what-if, said so in the trace
    s.push_back(
        stage<T>(n::scores_scaled,
                 "(q_heads / " + std::to_string(p.score_divisor) + ") @ " + k_rep + ".transpose(-2, -1)",
                 "WHAT-IF, not torch: q divided by " + std::to_string(p.score_divisor) +
                     " instead of √d_k (a temperature, or the scale off)",
                 {N, H, L, Sp}, b.scores_scaled));
  else
    s.push_back(stage<T>(n::scores_scaled, "(q_heads / math.sqrt(d_k)) @ " + k_rep + ".transpose(-2, -1)",
                         fixed_note(n::scores_scaled), {N, H, L, Sp}, b.scores_scaled));
  if (p.mask) {
    const MergedMask<T>& m = *p.mask;
    const Shape strides = {m.n_size > 1 ? m.h_size * m.l_size * m.s_size : 0,
                           m.h_size > 1 ? m.l_size * m.s_size : 0, m.l_size > 1 ? m.s_size : 0, 1};
    if (!m.values.empty()) std::copy(m.values.begin(), m.values.end(), mask_storage->begin());
    s.push_back(stage<T>(n::attn_mask,
                         "attn_mask merged with key_padding_mask; bool True -> -inf, float added",
                         fixed_note(n::attn_mask), {N, H, L, Sp}, std::move(mask_storage), strides));
  }
  s.push_back(stage<T>(n::scores_masked, p.mask ? "scores_scaled + attn_mask" : "scores_scaled",
                       fixed_note(n::scores_masked), {N, H, L, Sp}, b.scores_masked));
  s.push_back(stage<T>(n::attn_weights,
                       p.fully_masked == FullyMasked::nan
                           ? "F.softmax(scores_masked, dim=-1)"
                           : "F.softmax(scores_masked, dim=-1).nan_to_num(0.0)",
                       p.fully_masked == FullyMasked::nan
                           ? fixed_note(n::attn_weights)
                           : "each row sums to 1; a row with every key blocked is 0 (course notebook)",
                       {N, H, L, Sp}, b.weights));
  s.push_back(
      stage<T>(n::context, "attn_weights @ " + v_rep, fixed_note(n::context), {N, H, L, dk}, b.context));
  s.push_back(stage<T>(n::context_transposed, "context.transpose(1, 2)", fixed_note(n::context_transposed),
                       {N, L, H, dk}, b.context, {H * L * dk, dk, L * dk, 1}, n::context));
  s.push_back(stage<T>(n::concat, "context_transposed.contiguous().view(N, L, " + q_width + ")",
                       fixed_note(n::concat), {N, L, Q}, b.concat));
  s.push_back(stage<T>(n::output, "F.linear(concat, out_proj.weight, out_proj.bias)", fixed_note(n::output),
                       {N, L, E}, b.output));
  s.push_back(stage<T>(n::attn_weights_avg, "attn_weights.sum(dim=1) / num_heads",
                       fixed_note(n::attn_weights_avg), {N, L, Sp}, b.weights_avg));
  if (!t.left_out.empty()) t.computed = std::make_shared<ComputedStages<T>>();
  return t;
}

}  // namespace detail

template <class T>
const Stage<T>* find_stage(const ForwardResult<T>& r, const std::string& name, bool compute) {
  if (const Stage<T>* s = r.trace.find(name)) return s;
  const Stage<T>* meta = nullptr;
  for (const Stage<T>& s : r.trace.left_out)
    if (s.name == name) meta = &s;
  const std::vector<std::string>& names = on_demand_stages();
  if (!meta || !r.trace.computed || r.backend != Backend::eigen ||
      std::find(names.begin(), names.end(), name) == names.end())
    return nullptr;
  ComputedStages<T>& c = *r.trace.computed;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (const std::unique_ptr<Stage<T>>& s : c.stages)
      if (s->name == name) return s.get();
  }
  if (!compute) return nullptr;
  // Computed without the lock, so that a look-up (compute false) of this result on another thread
  // never waits for it; two threads computing the same stage at once keep the first one's.
  const Dims& d = r.dims;
  const bool average = name == stage_name::attn_weights_avg;
  const std::int64_t N = d.N, H = average ? 1 : d.H, L = d.L, Sp = d.S_total;
  std::shared_ptr<std::vector<T>> storage;
  try {  // within the memory guard's limit (half of physical memory), and memory there to be had
    check_bytes_fit(d, std::uint64_t(numel(meta->shape)) * sizeof(T), 0);
    storage = std::make_shared<std::vector<T>>(std::size_t(numel(meta->shape)));
  } catch (const TooLargeError&) {
    return nullptr;
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  // (n, h) planes, split over the threads when there are enough cells to repay starting one.
  const int threads = detail::thread_count(0, double(N * H) * double(L) * double(Sp) * double(d.d_k));
  detail::parallel_ranges(threads, N * H, [&](int, std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k)
      detail::stage_rows_into(r, name, k / H, k % H, 0, L, storage->data() + k * L * Sp);
  });
  auto st = std::make_unique<Stage<T>>(*meta);
  st->storage = std::move(storage);
  st->offset = 0;
  std::lock_guard<std::mutex> lock(c.mutex);
  for (const std::unique_ptr<Stage<T>>& s : c.stages)
    if (s->name == name) return s.get();
  c.stages.push_back(std::move(st));
  return c.stages.back().get();
}

template <class T>
WeightsOverview<T> detail::overview_of(const Buffers<T>& b, const Dims& d) {
  WeightsOverview<T> o;
  if (b.overview_block <= 0 || !b.overview_weights) return o;
  o.block = b.overview_block;
  o.columns = (d.S_total + o.block - 1) / o.block;
  o.weights = b.overview_weights;
  o.average = b.overview_average;
  o.checks = b.overview_checks;
  return o;
}

#define MHA_INSTANTIATE(T)                                                                      \
  template const Stage<T>* find_stage<T>(const ForwardResult<T>&, const std::string&, bool);    \
  template Trace<T> detail::make_trace<T>(const detail::Problem<T>&, const detail::Buffers<T>&, \
                                          detail::Buffer<T>);                                   \
  template WeightsOverview<T> detail::overview_of<T>(const detail::Buffers<T>&, const Dims&);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
