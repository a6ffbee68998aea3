#include "cost.hpp"

#include <limits>

#include "mha.hpp"

namespace mha::cost {

Shape shape(const Dims& d, bool bias, bool has_mask) {
  Shape s;
  s.N = double(d.N), s.L = double(d.L), s.S = double(d.S), s.S_total = double(d.S_total), s.E = double(d.E);
  s.H = double(d.H), s.d_k = double(d.d_k), s.kv = double(d.G * d.d_k);
  s.kdim = double(d.kdim), s.vdim = double(d.vdim);
  s.bias = bias, s.has_mask = has_mask;
  return s;
}

Table stages(const Shape& s) {
  const double N = s.N, L = s.L, S = s.S, Sp = s.S_total, E = s.E, H = s.H, dk = s.d_k, kv = s.kv;
  const double Q = H * dk;  // the width of q and of the heads side by side: E unless head_dim is explicit
  const double b = s.bias ? 1 : 0, m = s.has_mask ? 1 : 0;
  const double scores = N * H * L * Sp;  // one per (item, head, query, key)
  using P = Part;
  // stage, name, part, multiply-adds, other FLOPs, exps, written, traced
  return Table{{
      {Stage::inputs, "inputs", P::other, 0, 0, 0, 0, N * L * E + N * S * (s.kdim + s.vdim)},
      {Stage::q_proj, "q_proj", P::projection, N * L * E * Q, b * N * L * Q, 0, N * L * Q, N * L * Q},
      // The S inputs are projected; the bias_k / zero rows are appended after (S' rows kept).
      {Stage::k_proj, "k_proj", P::projection, N * S * s.kdim * kv, b * N * S * kv, 0, N * Sp * kv,
       N * Sp * kv},
      {Stage::v_proj, "v_proj", P::projection, N * S * s.vdim * kv, b * N * S * kv, 0, N * Sp * kv,
       N * Sp * kv},
      {Stage::scores, "scores", P::attention, scores * dk, 0, 0, scores, scores},
      // torch scales q (N·L·H·d_k values) before the product; the trace also keeps the scaled scores.
      {Stage::scale, "scale", P::other, 0, N * L * Q, 0, N * L * Q, scores},
      // Fused into baddbmm: no tensor of its own; the trace keeps scores_masked, and the mask if any.
      {Stage::mask_add, "mask_add", P::attention, 0, m * scores, 0, 0, scores + m * scores},
      {Stage::softmax, "softmax", P::attention, 0, 5 * scores, scores, scores, scores},
      {Stage::context, "context", P::attention, scores * dk, 0, 0, N * H * L * dk, N * H * L * dk},
      {Stage::concat, "concat", P::other, 0, 0, 0, N * L * Q, N * L * Q},
      {Stage::out_proj, "out_proj", P::projection, N * L * Q * E, b * N * L * E, 0, N * L * E, N * L * E},
      {Stage::average, "average", P::attention, 0, scores, 0, N * L * Sp, N * L * Sp},
  }};
}

const StageCost& stage(const Table& t, Stage which) {
  return t[std::size_t(which)];
}

double multiply_adds(const Shape& s) {
  double sum = 0;
  for (const StageCost& c : stages(s)) sum += c.multiply_adds;
  return sum;
}

double forward_work(Shape s) {
  s.H = 1, s.d_k = s.E;
  return multiply_adds(s) + stage(stages(s), Stage::scores).multiply_adds;
}

double matmul_flops(const Shape& s) {
  return 2 * multiply_adds(s);
}

double matmul_flops(const Shape& s, Part part) {
  double sum = 0;
  for (const StageCost& c : stages(s))
    if (c.part == part) sum += 2 * c.multiply_adds;
  return sum;
}

double total_flops(const Shape& s) {
  double sum = 0;
  for (const StageCost& c : stages(s)) sum += c.flops();
  return sum;
}

double written_bytes(const Shape& s, std::size_t scalar_size) {
  double sum = 0;
  for (const StageCost& c : stages(s)) sum += c.written;
  return sum * double(scalar_size);
}

std::uint64_t trace_bytes(const Shape& s, std::size_t scalar_size) {
  // Counted in double so absurd sizes saturate instead of wrapping.
  double elems = 0;
  for (const StageCost& c : stages(s)) elems += c.traced;
  const double bytes = elems * double(scalar_size);
  return bytes >= 1.8e19 ? std::numeric_limits<std::uint64_t>::max() : std::uint64_t(bytes);
}

}  // namespace mha::cost
