// RoPE's effect, read off a traced forward: the scores the heads would give the projections before
// the rotation.
#include "model/rope.hpp"

#include <cmath>

#include "errors.hpp"

namespace mha {

Tensor<float> scores_without_rope(const ForwardResult<float>& r) {
  if (!r.trace.has("q_rot"))
    throw ConfigError("rotary",
                      "scores without RoPE need a forward with rotary positions (a Llama-family model)");
  const Dims& d = r.dims;
  if (d.N != 1) throw ConfigError("rotary", "scores without RoPE are drawn for one sequence (N = 1)");
  const std::int64_t L = d.L, H = d.H, G = d.G, dk = d.d_k;
  const Tensor<float> q = r.trace["q"].contiguous();  // (1, L, H·d_k): before the rotation
  const Tensor<float> k = r.trace["k"].contiguous();  // (1, S', G·d_k); S' ≥ S with bias_k / zero rows
  const std::int64_t S = k.size(1);
  const double divisor = r.score_divisor > 0 ? r.score_divisor : std::sqrt(double(dk));
  Tensor<float> out({H, L, S});
  for (std::int64_t h = 0; h < H; ++h) {
    const std::int64_t g = h / (H / G);  // the key head this query head reads (repeat_interleave)
    for (std::int64_t i = 0; i < L; ++i) {
      const float* qi = q.ptr() + i * H * dk + h * dk;
      for (std::int64_t j = 0; j < S; ++j) {
        const float* kj = k.ptr() + j * G * dk + g * dk;
        double acc = 0;
        for (std::int64_t c = 0; c < dk; ++c) acc += double(qi[c]) * double(kj[c]);
        out.data[std::size_t((h * L + i) * S + j)] = float(acc / divisor);
      }
    }
  }
  return out;
}

std::vector<double> mean_score_by_offset(const float* scores, std::int64_t L, std::int64_t S) {
  std::vector<double> out(static_cast<std::size_t>(L), 0.0);
  for (std::int64_t off = 0; off < L; ++off) {
    double sum = 0;
    std::int64_t n = 0;
    for (std::int64_t i = off; i < L; ++i) {
      const std::int64_t j = i - off;
      if (j >= S) continue;
      sum += scores[i * S + j];
      ++n;
    }
    out[std::size_t(off)] = n > 0 ? sum / double(n) : 0.0;
  }
  return out;
}

}  // namespace mha
