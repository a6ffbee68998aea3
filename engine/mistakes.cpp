// The attention core again on a trace's projections, with the head split chosen: the right one to
// check against the trace, the mistaken one to show what it gives.
#include "mistakes.hpp"

#include <cmath>

#include "forward_detail.hpp"

namespace mha {

template <class T>
std::vector<T> attention_concat(const ForwardResult<T>& f, HeadSplit split) {
  const Dims& d = f.dims;
  const std::int64_t N = d.N, L = d.L, Sp = d.S_total, E = d.E, H = d.H, dk = d.d_k, kv = d.G * dk;
  const std::int64_t group = d.G > 0 ? std::max<std::int64_t>(1, H / d.G) : 1;
  // Dense copies: q (N, L, E), k and v (N, S', G·d_k), the merged mask (N, H, L, S').
  const std::vector<T> q = f.trace["q"].contiguous().data, k = f.trace["k"].contiguous().data,
                       v = f.trace["v"].contiguous().data;
  const Stage<T>* mask_stage = f.trace.find("attn_mask");
  const std::vector<T> mask = mask_stage ? mask_stage->contiguous().data : std::vector<T>{};
  const bool right = split == HeadSplit::transpose;
  // Where (batch n, head h, row r, column c) of the split tensor sits in the (N, rows, width) memory:
  // the right split takes columns h·d_k … of row r; the mistaken .view(N, H, rows, d_k) reads memory
  // in order, so its element is the ((h·rows + r)·d_k + c)-th value of batch item n.
  const auto at = [&](std::int64_t n, std::int64_t h, std::int64_t rows, std::int64_t width, std::int64_t r,
                      std::int64_t c) {
    return right ? (n * rows + r) * width + h * dk + c : n * rows * width + (h * rows + r) * dk + c;
  };
  const T scale = std::sqrt(T(dk));
  std::vector<T> masked(static_cast<std::size_t>(Sp)), weights(static_cast<std::size_t>(Sp)),
      concat(static_cast<std::size_t>(N * L * E));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / group;  // GQA: query head h reads key/value head h / (H / G)
      for (std::int64_t i = 0; i < L; ++i) {
        for (std::int64_t j = 0; j < Sp; ++j) {
          T scaled = 0;
          for (std::int64_t c = 0; c < dk; ++c)
            scaled += (q[std::size_t(at(n, h, L, E, i, c))] / scale) * k[std::size_t(at(n, g, Sp, kv, j, c))];
          // The mask stays where it was: on the wrong rows when the split is wrong.
          masked[std::size_t(j)] =
              scaled + (mask.empty() ? T(0) : mask[std::size_t(((n * H + h) * L + i) * Sp + j)]);
        }
        detail::softmax_row(masked.data(), weights.data(), Sp, f.fully_masked);
        for (std::int64_t c = 0; c < dk; ++c) {
          T acc = 0;
          for (std::int64_t j = 0; j < Sp; ++j)
            acc += weights[std::size_t(j)] * v[std::size_t(at(n, g, Sp, kv, j, c))];
          // Heads back side by side: transpose(1, 2).contiguous().view(N, L, E), or, for the
          // mistake, the same in-order .view(N, L, E) that split them.
          concat[std::size_t(at(n, h, L, E, i, c))] = acc;
        }
      }
    }
  return concat;
}

template std::vector<float> attention_concat<float>(const ForwardResult<float>&, HeadSplit);
template std::vector<double> attention_concat<double>(const ForwardResult<double>&, HeadSplit);

}  // namespace mha
