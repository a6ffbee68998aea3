// The cost table (engine/cost) against operations counted one by one in a plain loop version of the
// forward, as torch computes it: q scaled by 1/√d_k before q·kᵀ, the mask added to the scores,
// softmax over keys, weights·v, heads merged, out-projection, weights averaged over heads.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "compute.hpp"
#include "cost.hpp"
#include "mha.hpp"

using namespace mha;
using namespace mha::studio;

namespace {

struct Case {
  const char* name;
  std::int64_t N, L, S, E, H, G, kdim, vdim;
  bool bias, bias_kv, zero_attn, mask;
};

// What the loop did, per stage of cost::Stage.
struct Counted {
  std::vector<double> multiply_adds = std::vector<double>(cost::kStageCount, 0.0);
  std::vector<double> adds = std::vector<double>(cost::kStageCount, 0.0);  // bias, mask, scale, average
  std::vector<double> written = std::vector<double>(cost::kStageCount, 0.0);
  double exps = 0;
};

std::size_t at(cost::Stage s) {
  return std::size_t(s);
}

// One forward with every multiply-add, add, scale and exp counted where it happens. Values are
// small deterministic numbers; only the counts matter here.
Counted count_forward(const Case& c) {
  using cost::Stage;
  const std::int64_t N = c.N, L = c.L, S = c.S, E = c.E, H = c.H, G = c.G, dk = E / H, kv = G * dk;
  const std::int64_t Sp = S + (c.bias_kv ? 1 : 0) + (c.zero_attn ? 1 : 0), group = H / G;
  auto val = [](std::int64_t i) { return float((i * 37) % 11) / 11.0f - 0.5f; };
  Counted n;
  auto written = [&](Stage s, std::size_t elems) { n.written[at(s)] += double(elems); };

  // In-projections: y[r, o] = Σ_i x[r, i]·W[o, i] (+ b[o]).
  auto project = [&](Stage s, std::int64_t rows, std::int64_t in, std::int64_t out, std::int64_t rows_kept) {
    std::vector<float> y(std::size_t(N * rows_kept * out), 0.0f);  // (N, rows_kept, out)
    for (std::int64_t b = 0; b < N; ++b)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < out; ++o) {
          float acc = 0;
          for (std::int64_t i = 0; i < in; ++i) {
            acc += val(b * rows * in + r * in + i) * val(o * in + i + 1);
            n.multiply_adds[at(s)] += 1;
          }
          if (c.bias) {
            acc += val(o + 2);
            n.adds[at(s)] += 1;
          }
          y[std::size_t((b * rows_kept + r) * out + o)] = acc;
        }
    // bias_k / bias_v, then a zero row: appended, not computed (rows_kept − rows of them).
    written(s, y.size());
    return y;
  };
  const std::vector<float> q = project(Stage::q_proj, L, E, E, L);         // (N, L, E)
  const std::vector<float> k = project(Stage::k_proj, S, c.kdim, kv, Sp);  // (N, S', G·d_k)
  const std::vector<float> v = project(Stage::v_proj, S, c.vdim, kv, Sp);  // (N, S', G·d_k)

  // torch scales q, not the scores.
  std::vector<float> q_scaled(q.size());  // (N, L, E)
  for (std::size_t i = 0; i < q.size(); ++i) {
    q_scaled[i] = q[i] / std::sqrt(float(dk));
    n.adds[at(Stage::scale)] += 1;
  }
  written(Stage::scale, q_scaled.size());

  std::vector<float> scores(std::size_t(N * H * L * Sp));  // (N, H, L, S')
  std::vector<float> weights(scores.size());               // (N, H, L, S')
  std::vector<float> concat(std::size_t(N * L * E));       // (N, L, E)
  for (std::int64_t b = 0; b < N; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / group;  // the key/value head this query head reads
      for (std::int64_t i = 0; i < L; ++i) {
        float* row = &scores[std::size_t(((b * H + h) * L + i) * Sp)];
        for (std::int64_t j = 0; j < Sp; ++j) {
          float acc = 0;
          for (std::int64_t d = 0; d < dk; ++d) {
            acc += q_scaled[std::size_t((b * L + i) * E + h * dk + d)] *
                   k[std::size_t((b * Sp + j) * kv + g * dk + d)];
            n.multiply_adds[at(Stage::scores)] += 1;
          }
          row[j] = acc;
          if (c.mask) {  // causal, additive: -inf above the diagonal
            row[j] += j > i ? -INFINITY : 0.0f;
            n.adds[at(Stage::mask_add)] += 1;
          }
        }
        float* w = &weights[std::size_t(((b * H + h) * L + i) * Sp)];
        float m = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < Sp; ++j) m = std::max(m, row[j]);
        for (std::int64_t j = 0; j < Sp; ++j) {
          w[j] = std::exp(row[j] - m);
          n.exps += 1;
          sum += w[j];
        }
        for (std::int64_t j = 0; j < Sp; ++j) w[j] /= sum;
        // weights·v into this head's columns of concat.
        for (std::int64_t d = 0; d < dk; ++d) {
          float acc = 0;
          for (std::int64_t j = 0; j < Sp; ++j) {
            acc += w[j] * v[std::size_t((b * Sp + j) * kv + g * dk + d)];
            n.multiply_adds[at(Stage::context)] += 1;
          }
          concat[std::size_t((b * L + i) * E + h * dk + d)] = acc;
        }
      }
    }
  written(Stage::scores, scores.size());
  written(Stage::softmax, weights.size());
  written(Stage::context, std::size_t(N * H * L * dk));  // torch's (N·H, L, d_k) before the merge
  written(Stage::concat, concat.size());
  project(Stage::out_proj, L, E, E, L);  // reads concat's shape; the values do not matter here

  std::vector<float> average(std::size_t(N * L * Sp), 0.0f);  // (N, L, S')
  for (std::int64_t b = 0; b < N; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t j = 0; j < Sp; ++j) {
          average[std::size_t((b * L + i) * Sp + j)] +=
              weights[std::size_t(((b * H + h) * L + i) * Sp + j)] / float(H);
          n.adds[at(Stage::average)] += 1;
        }
  written(Stage::average, average.size());
  return n;
}

Dims dims_of(const Case& c) {
  Dims d;
  d.N = c.N, d.L = c.L, d.S = c.S, d.E = c.E, d.H = c.H, d.G = c.G, d.d_k = c.E / c.H;
  d.kdim = c.kdim, d.vdim = c.vdim;
  d.S_total = c.S + (c.bias_kv ? 1 : 0) + (c.zero_attn ? 1 : 0);
  return d;
}

}  // namespace

TEST_CASE("the cost table matches the operations a plain forward loop counts", "[cost]") {
  const Case cases[] = {
      {"self-attention", 2, 5, 5, 8, 2, 2, 8, 8, false, false, false, false},
      {"bias and causal mask", 1, 6, 6, 12, 3, 3, 12, 12, true, false, false, true},
      {"GQA", 2, 4, 4, 16, 4, 2, 16, 16, true, false, false, false},
      {"cross-attention, kdim/vdim", 2, 3, 7, 8, 2, 2, 5, 6, true, false, false, false},
      {"bias_kv and zero_attn", 1, 4, 4, 8, 4, 1, 8, 8, true, true, true, true},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      const Counted n = count_forward(c);
      const cost::Table t = cost::stages(cost::shape(dims_of(c), c.bias, c.mask));
      for (const cost::StageCost& s : t) {
        INFO(s.name);
        CHECK(s.multiply_adds == n.multiply_adds[at(s.stage)]);
        if (s.stage == cost::Stage::softmax) {
          CHECK(s.exps == n.exps);
          CHECK(s.other_flops == 5 * n.exps);  // max, subtract, exp, sum, divide
        } else {
          CHECK(s.exps == 0);
          CHECK(s.other_flops == n.adds[at(s.stage)]);
        }
        CHECK(s.written == n.written[at(s.stage)]);
      }
      const cost::Shape sh = cost::shape(dims_of(c), c.bias, c.mask);
      double counted = 0;
      for (double m : n.multiply_adds) counted += m;
      CHECK(cost::multiply_adds(sh) == counted);
      CHECK(cost::matmul_flops(sh) == 2 * counted);
      CHECK(cost::matmul_flops(sh, cost::Part::projection) + cost::matmul_flops(sh, cost::Part::attention) ==
            2 * counted);
    }
  }
}

// The callers' thresholds were tuned on their former counts; the table must reproduce them exactly.
TEST_CASE("the totals keep the counts the thresholds and the bench were set with", "[cost]") {
  for (const Case& c : {Case{"self", 2, 7, 7, 24, 4, 4, 24, 24, true, false, false, true},
                        Case{"GQA cross bias_kv", 3, 5, 9, 16, 4, 2, 8, 12, false, true, true, false}}) {
    INFO(c.name);
    const Dims d = dims_of(c);
    const double N = double(d.N), L = double(d.L), S = double(d.S), Sp = double(d.S_total), E = double(d.E),
                 H = double(d.H), dk = double(d.d_k), kv = double(d.G * d.d_k);
    const cost::Shape sh = cost::shape(d, c.bias, c.mask);
    // The GPU's auto threshold (multiply-adds) and the Eigen path's thread threshold (2 FLOPs each).
    CHECK(cost::multiply_adds(sh) ==
          2 * N * L * E * E + N * S * double(d.kdim + d.vdim) * kv + 2 * N * H * L * Sp * dk);
    // The trace: inputs, q, k, v, scores ×3, weights, the mask, context, concat, output, average.
    const double elems = N * L * E + N * S * double(d.kdim + d.vdim) + N * L * E + 2 * N * Sp * kv +
                         (4 + (c.mask ? 1 : 0)) * N * H * L * Sp + N * H * L * dk + 2 * N * L * E +
                         N * L * Sp;
    CHECK(cost::trace_bytes(sh, 4) == std::uint64_t(4 * elems));
    CHECK(trace_bytes(d, 4, c.mask) == std::uint64_t(4 * elems));
  }
  // The bench's GFLOP/s denominator at self-attention sizes: 8·L·E² + 4·L²·E per item.
  Dims d = dims_of({"bench", 1, 512, 512, 512, 8, 8, 512, 512, false, false, false, false});
  CHECK(cost::matmul_flops(cost::shape(d)) == 8.0 * 512 * 512 * 512 + 4.0 * 512 * 512 * 512);
  d = dims_of({"bench", 3, 4, 4, 8, 2, 2, 8, 8, false, false, false, false});
  CHECK(cost::matmul_flops(cost::shape(d)) == 3 * (8.0 * 4 * 8 * 8 + 4.0 * 4 * 4 * 8));
  // The studio scheduler's work: N·(2·L·E² + 2·S·E·kv + 3·L·S·E), kv = E·G/H.
  for (auto [L, S, E, H, G, cross] : {std::tuple{16, 16, 64, 4, 0, false}, std::tuple{9, 13, 24, 6, 3, true},
                                      std::tuple{384, 384, 128, 8, 0, false}}) {
    Scenario s;
    s.batch = 2, s.tgt_len = L, s.src_len = S, s.embed_dim = E, s.num_heads = H, s.num_kv_heads = G;
    s.cross_attention = cross;
    const double n = 2, l = double(s.L()), src = double(s.S()), e = E, kv = G > 0 ? e * G / H : e;
    CHECK(forward_work(s) == n * (2 * l * e * e + 2 * src * e * kv + 3 * l * src * e));
  }
}
