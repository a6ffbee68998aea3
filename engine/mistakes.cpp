// The mistake catalogue and its variant forwards: the attention core again on a trace's projections,
// with the chosen mistakes made, so that what a mistaken forward gives can be shown and matched.
#include "mistakes.hpp"

#include <cmath>

#include "forward_detail.hpp"
#include "masks.hpp"

namespace mha {

const std::vector<MistakeInfo>& mistake_catalogue() {
  static const std::vector<MistakeInfo> catalogue = {
      {Mistake::split_without_transpose, "split_without_transpose", "heads split without the transpose",
       "q = q.view(N, H, L, d_k)", "q = q.view(N, L, H, d_k).transpose(1, 2)",
       "Reshape: mistake 1, split without transpose"},
      {Mistake::merge_without_transpose, "merge_without_transpose", "heads merged without the transpose",
       "context = context.contiguous().view(N, L, E)",
       "context = context.transpose(1, 2).contiguous().view(N, L, E)",
       "Reshape: steps 4 (transpose back) and 5 (concat)"},
      {Mistake::scale_by_d_model, "scale_by_d_model", "scores divided by sqrt(d_model)",
       "scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)",
       "scores = q @ k.transpose(-2, -1) / math.sqrt(d_model // num_heads)",
       "Heads: the scale (What-if: temperature and scale by sqrt(d_k))"},
      {Mistake::no_scale, "no_scale", "scores not scaled", "scores = q @ k.transpose(-2, -1)",
       "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
       "Heads: the scale (What-if: scale by sqrt(d_k) off)"},
      {Mistake::softmax_over_queries, "softmax_over_queries", "softmax over the queries",
       "weights = scores.softmax(dim=-2)", "weights = scores.softmax(dim=-1)",
       "Heads: attn_weights, each row sums to 1"},
      {Mistake::no_output_projection, "no_output_projection", "no output projection", "return context",
       "return self.W_o(context)", "Reshape: mistake 3, no out-proj"},
      {Mistake::mask_after_softmax, "mask_after_softmax", "mask applied after the softmax",
       "weights = scores.softmax(-1).masked_fill(blocked, 0)",
       "weights = scores.masked_fill(blocked, float('-inf')).softmax(-1)",
       "Mask editor: scores_masked, then attn_weights"},
      {Mistake::mask_fill_zero, "mask_fill_zero", "blocked scores set to 0 instead of -inf",
       "scores = scores.masked_fill(blocked, 0)", "scores = scores.masked_fill(blocked, float('-inf'))",
       "Mask editor: the additive convention (0 attends, -inf blocks)"},
      {Mistake::mask_heads_batches_mixed, "mask_heads_batches_mixed",
       "per-batch masks spread over the heads head-major", "attn_mask = mask.repeat(num_heads, 1, 1)",
       "attn_mask = mask.repeat_interleave(num_heads, dim=0)",
       "Mask editor: scope per batch, then per head (slice n*H + h)"},
      {Mistake::value_is_key, "value_is_key", "keys used as the values", "context = weights @ k",
       "context = weights @ v", "Pipeline: v, then context"},
  };
  return catalogue;
}

const MistakeInfo& mistake_info(Mistake m) {
  return mistake_catalogue()[std::size_t(m)];
}

std::optional<Mistake> mistake_from_id(const std::string& id) {
  for (const MistakeInfo& i : mistake_catalogue())
    if (id == i.id) return i.mistake;
  return std::nullopt;
}

std::vector<Mistake> MistakeSet::list() const {
  std::vector<Mistake> out;
  for (int m = 0; m < kMistakeCount; ++m)
    if (has(Mistake(m))) out.push_back(Mistake(m));
  return out;
}

bool compatible(MistakeSet s) {
  return !(s.has(Mistake::no_scale) && s.has(Mistake::scale_by_d_model)) &&
         !(s.has(Mistake::mask_after_softmax) && s.has(Mistake::mask_fill_zero));
}

std::vector<MistakeSet> singles_and_pairs() {
  std::vector<MistakeSet> sets;
  for (int a = 0; a < kMistakeCount; ++a) sets.push_back({Mistake(a)});
  for (int a = 0; a < kMistakeCount; ++a)
    for (int b = a + 1; b < kMistakeCount; ++b)
      if (const MistakeSet s{Mistake(a), Mistake(b)}; compatible(s)) sets.push_back(s);
  return sets;
}

template <class T>
VariantForward<T> mistaken_forward(const ForwardResult<T>& f, const Weights<T>& w, MistakeSet set) {
  const Dims& d = f.dims;
  const std::int64_t N = d.N, L = d.L, Sp = d.S_total, E = d.E, H = d.H, dk = d.d_k, kv = d.G * dk;
  const std::int64_t Q = d.qdim();  // H·d_k: E unless the heads have an explicit width
  const std::int64_t group = d.G > 0 ? std::max<std::int64_t>(1, H / d.G) : 1;
  // Dense copies: q (N, L, H·d_k), k and v (N, S', G·d_k), the merged mask (N, H, L, S').
  const std::vector<T> q = f.trace["q"].contiguous().data, k = f.trace["k"].contiguous().data,
                       v_right = f.trace["v"].contiguous().data;
  const std::vector<T>& v = set.has(Mistake::value_is_key) ? k : v_right;
  const Stage<T>* mask_stage = f.trace.find("attn_mask");
  const std::vector<T> mask = mask_stage ? mask_stage->contiguous().data : std::vector<T>{};
  const bool split_right = !set.has(Mistake::split_without_transpose);
  const bool merge_right = !set.has(Mistake::merge_without_transpose);
  // Where (batch n, head h, row r, column c) of the split tensor sits in the (N, rows, width) memory:
  // the right split takes columns h·d_k … of row r; the mistaken .view(N, H, rows, d_k) reads memory
  // in order, so its element is the ((h·rows + r)·d_k + c)-th value of batch item n.
  const auto at = [&](bool right, std::int64_t n, std::int64_t h, std::int64_t rows, std::int64_t width,
                      std::int64_t r, std::int64_t c) {
    return right ? (n * rows + r) * width + h * dk + c : n * rows * width + (h * rows + r) * dk + c;
  };
  T scale = f.score_divisor > 0 ? T(f.score_divisor) : std::sqrt(T(dk));
  if (set.has(Mistake::scale_by_d_model)) scale = std::sqrt(T(E));
  if (set.has(Mistake::no_scale)) scale = T(1);
  const bool after_softmax = set.has(Mistake::mask_after_softmax),
             fill_zero = set.has(Mistake::mask_fill_zero);
  const bool over_queries = set.has(Mistake::softmax_over_queries);

  VariantForward<T> r;
  r.concat.assign(std::size_t(N * L * Q), T(0));
  r.weights.assign(std::size_t(N * H * L * Sp), T(0));
  std::vector<T> masked(std::size_t(L * Sp)), line(std::size_t(std::max(L, Sp))), line_out(line.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / group;  // GQA: query head h reads key/value head h / (H / G)
      // The mask slice this head reads: its own, or, heads and batches mixed, the one torch's
      // (N·H, L, S) layout puts at index n·H + h when the per-batch masks were repeated head-major.
      const std::int64_t mask_n = set.has(Mistake::mask_heads_batches_mixed) ? (n * H + h) % N : n;
      T* weights = r.weights.data() + (n * H + h) * L * Sp;
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t j = 0; j < Sp; ++j) {
          T scaled = 0;
          for (std::int64_t c = 0; c < dk; ++c)
            scaled += (q[std::size_t(at(split_right, n, h, L, Q, i, c))] / scale) *
                      k[std::size_t(at(split_right, n, g, Sp, kv, j, c))];
          // The mask stays where it was: on the wrong rows when the split is wrong.
          const T m = mask.empty() ? T(0) : mask[std::size_t(((mask_n * H + h) * L + i) * Sp + j)];
          T& out = masked[std::size_t(i * Sp + j)];
          if (after_softmax)
            out = scaled;
          else if (fill_zero && is_blocked(float(m)))
            out = T(0);
          else
            out = scaled + m;
        }
      if (over_queries) {  // each key's column over the queries
        for (std::int64_t j = 0; j < Sp; ++j) {
          for (std::int64_t i = 0; i < L; ++i) line[std::size_t(i)] = masked[std::size_t(i * Sp + j)];
          detail::softmax_row(line.data(), line_out.data(), L, f.fully_masked);
          for (std::int64_t i = 0; i < L; ++i) weights[i * Sp + j] = line_out[std::size_t(i)];
        }
      } else {
        for (std::int64_t i = 0; i < L; ++i)
          detail::softmax_row(masked.data() + i * Sp, weights + i * Sp, Sp, f.fully_masked);
      }
      if (after_softmax && !mask.empty())
        for (std::int64_t i = 0; i < L; ++i)
          for (std::int64_t j = 0; j < Sp; ++j)
            if (is_blocked(float(mask[std::size_t(((mask_n * H + h) * L + i) * Sp + j)])))
              weights[i * Sp + j] = 0;
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t c = 0; c < dk; ++c) {
          T acc = 0;
          for (std::int64_t j = 0; j < Sp; ++j)
            acc += weights[i * Sp + j] * v[std::size_t(at(split_right, n, g, Sp, kv, j, c))];
          // Heads back side by side: transpose(1, 2).contiguous().view(N, L, E), or, without the
          // transpose, the in-order .view(N, L, E) of the (N, H, L, d_k) context.
          r.concat[std::size_t(at(merge_right, n, h, L, Q, i, c))] = acc;
        }
    }
  if (set.has(Mistake::no_output_projection) || w.out_proj_weight.empty()) {
    r.output = r.concat;
    return r;
  }
  // output = concat · out_proj_weightᵀ + out_proj_bias: (N·L, H·d_k) · (E, H·d_k)ᵀ.
  r.output.assign(std::size_t(N * L * E), T(0));
  const T* W = w.out_proj_weight.ptr();
  for (std::int64_t row = 0; row < N * L; ++row)
    for (std::int64_t o = 0; o < E; ++o) {
      T acc = w.out_proj_bias.empty() ? T(0) : w.out_proj_bias.data[std::size_t(o)];
      for (std::int64_t c = 0; c < Q; ++c) acc += r.concat[std::size_t(row * Q + c)] * W[o * Q + c];
      r.output[std::size_t(row * E + o)] = acc;
    }
  return r;
}

template <class T>
std::vector<T> attention_concat(const ForwardResult<T>& f, HeadSplit split) {
  const MistakeSet set = split == HeadSplit::transpose
                             ? MistakeSet{}
                             : MistakeSet{Mistake::split_without_transpose, Mistake::merge_without_transpose};
  return mistaken_forward(f, Weights<T>{}, set.with(Mistake::no_output_projection)).concat;
}

template VariantForward<float> mistaken_forward<float>(const ForwardResult<float>&, const Weights<float>&,
                                                       MistakeSet);
template VariantForward<double> mistaken_forward<double>(const ForwardResult<double>&, const Weights<double>&,
                                                         MistakeSet);
template std::vector<float> attention_concat<float>(const ForwardResult<float>&, HeadSplit);
template std::vector<double> attention_concat<double>(const ForwardResult<double>&, HeadSplit);

}  // namespace mha
