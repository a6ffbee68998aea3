#pragma once
// What one forward costs, stage by stage: multiply-adds, other FLOPs, exps, the elements each stage
// writes and the elements the trace keeps. One table (stages()); every total a caller needs (the
// trace's bytes, the backends' thread and GPU thresholds, the bench's GFLOP/s, the scheduler's work,
// the Pipeline and Complexity views) is a sum over it, so the numbers agree everywhere.
//
// Counted as torch computes the module: q / √d_k is scaled before the product with kᵀ (so "scale"
// touches N·L·E values, not the scores), the mask is added in the same baddbmm, a multiply-add is
// 2 FLOPs, softmax is ~5 FLOPs per score (max, subtract, exp, sum, divide) and one exp.

#include <array>
#include <cstddef>
#include <cstdint>

namespace mha {

struct Dims;

namespace cost {

// The sizes as doubles (products of int64 sizes overflow long before they stop being meaningful).
// kv = G·d_k, the width of k and v; S_total = S' (S plus the bias_k and zero-attention rows).
struct Shape {
  double N = 0, L = 0, S = 0, S_total = 0, E = 0, H = 0, d_k = 0, kv = 0, kdim = 0, vdim = 0;
  bool bias = false;      // in_proj_bias / out_proj.bias
  bool has_mask = false;  // an attn_mask or key_padding_mask is added to the scores
};
Shape shape(const Dims& d, bool bias = false, bool has_mask = false);

enum class Stage {
  inputs,    // query, key, value as given (kept by the trace)
  q_proj,    // q = query·W_qᵀ (+ b_q)                  (N, L, E)
  k_proj,    // k = key·W_kᵀ (+ b_k), then bias_k / zeros (N, S', G·d_k)
  v_proj,    // v = value·W_vᵀ (+ b_v), then bias_v / zeros (N, S', G·d_k)
  scores,    // q·kᵀ per head                           (N, H, L, S')
  scale,     // q / √d_k (torch scales q, not the scores)
  mask_add,  // scores + mask (fused into baddbmm; no FLOPs without a mask)
  softmax,   // over keys                               (N, H, L, S')
  context,   // weights·v per head                      (N, H, L, d_k)
  concat,    // heads merged (a copy)                   (N, L, E)
  out_proj,  // concat·W_oᵀ (+ b_o)                     (N, L, E)
  average,   // weights averaged over heads             (N, L, S')
};
constexpr std::size_t kStageCount = 12;

enum class Part { projection, attention, other };  // the Complexity view's colours and sums

struct StageCost {
  Stage stage = Stage::inputs;
  const char* name = "";
  Part part = Part::other;
  double multiply_adds = 0;  // of the matrix products (2 FLOPs each)
  double other_flops = 0;    // bias adds, the scale, the mask add, softmax (~5 a score), the average
  double exps = 0;
  double written = 0;  // elements of the new tensor torch makes (0: a view, or fused into the next)
  double traced = 0;   // elements the trace keeps for this stage (scores_scaled and the mask included)
  double flops() const { return 2 * multiply_adds + other_flops; }
};

using Table = std::array<StageCost, kStageCount>;
Table stages(const Shape& s);
const StageCost& stage(const Table& t, Stage which);

// Multiply-adds of the six matrix products (q, k, v, scores, weights·v, out); bias adds excluded.
double multiply_adds(const Shape& s);
// The work the app's scheduler and the CPU path choice (cpu_backend_for) count: multiply_adds with
// the scores product counted twice (raw and scaled), the heads folded into one of width E (only
// H·d_k = E enters the products), so the limits tuned on it decide as they always have.
double forward_work(Shape s);
// 2 · multiply_adds: the FLOPs the Eigen path's thread count and the bench's GFLOP/s count.
double matmul_flops(const Shape& s);
// The matmul FLOPs of one part: projection (q, k, v, out) or attention (q·kᵀ, weights·v).
double matmul_flops(const Shape& s, Part part);
// Every stage's FLOPs (matmuls, bias, scale, mask, softmax, average).
double total_flops(const Shape& s);
// Bytes of every tensor the stages make (Complexity's "new tensors"), at scalar_size bytes a value.
double written_bytes(const Shape& s, std::size_t scalar_size);
// Bytes the trace of a forward keeps (inputs, every stage, the mask), saturating at UINT64_MAX.
std::uint64_t trace_bytes(const Shape& s, std::size_t scalar_size);

}  // namespace cost
}  // namespace mha
