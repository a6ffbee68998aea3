// Internal to the engine: the checked, normalised problem both forward paths consume, and the
// buffers they fill. Everything here is batch-first and contiguous; views are made in mha.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "masks.hpp"
#include "mha.hpp"

namespace mha::detail {

template <class T>
using Buffer = std::shared_ptr<std::vector<T>>;

template <class T>
struct Problem {
  Dims d;
  FullyMasked fully_masked = FullyMasked::nan;
  Buffer<T> query, key, value;  // (N, L, E), (N, S, kdim), (N, S, vdim): batch-first copies
  // Q below is H·d_k (Dims::qdim): E unless Config::explicit_head_dim.
  // Projection weights, row-major, torch's (out_features, in_features).
  const T* w_q = nullptr;             // (Q, E)
  const T* w_k = nullptr;             // (G·d_k, kdim)
  const T* w_v = nullptr;             // (G·d_k, vdim)
  const T* b_q = nullptr;             // (Q,) or nullptr when bias=False
  const T* b_k = nullptr;             // (G·d_k,)
  const T* b_v = nullptr;             // (G·d_k,)
  const T* w_o = nullptr;             // (E, Q)
  const T* b_o = nullptr;             // (E,)
  const T* bias_k = nullptr;          // (G·d_k,) appended as key row S when add_bias_kv
  const T* bias_v = nullptr;          // (G·d_k,)
  bool add_zero_attn = false;         // zero row appended last
  std::optional<MergedMask<T>> mask;  // additive, broadcast over (N, H, L, S_total)
  double score_divisor = 0;           // Options::score_divisor: 0 is √d_k (torch)
  const T* rope_cos = nullptr;        // (P, d_k) Inputs::rotary: null without RoPE
  const T* rope_sin = nullptr;        // (P, d_k)
  // The in-projections of an earlier forward of the same module on inputs that differ in some rows
  // (forward_inputs_edit): q (N, L, Q), k and v (N, S', G·d_k) start as copies of these, and only
  // the rows flagged are projected again (q_rows: (N·L) flags; k_rows, v_rows: (N·S); null: none).
  // given_q null: every row is projected.
  const T *given_q = nullptr, *given_k = nullptr, *given_v = nullptr;
  const char *q_rows = nullptr, *k_rows = nullptr, *v_rows = nullptr;

  // What q is divided by before the product: √d_k rounded in T (torch), or the what-if divisor.
  T scale() const { return score_divisor > 0 ? T(score_divisor) : std::sqrt(T(d.d_k)); }

  // Index of the merged mask value for (n, h, i, j); only valid when mask is set.
  std::size_t mask_index(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const MergedMask<T>& m = *mask;
    return std::size_t(
        (((m.n_size > 1 ? n : 0) * m.h_size + (m.h_size > 1 ? h : 0)) * m.l_size + (m.l_size > 1 ? i : 0)) *
            m.s_size +
        j);
  }
  // Query head h reads key/value head h / (H / G): grouped-query attention (G = H is plain MHA).
  std::int64_t kv_head(std::int64_t h) const { return h / (d.H / d.G); }
};

// What the forward paths write. Shapes with S' = S_total:
template <class T>
struct Buffers {
  Buffer<T> q;              // (N, L, Q)      what the heads read: with RoPE, the rotated q (Q = H·d_k)
  Buffer<T> k, v;           // (N, S', G·d_k) k likewise
  Buffer<T> q_proj;         // (N, L, Q)      with RoPE: the in-projection before the rotation (null without)
  Buffer<T> k_proj;         // (N, S', G·d_k)
  Buffer<T> scores;         // (N, H, L, S')  q·kᵀ per head
  Buffer<T> scores_scaled;  // (N, H, L, S')  (q / √d_k)·kᵀ, torch's order
  Buffer<T> scores_masked;  // (N, H, L, S')  + merged mask
  Buffer<T> weights;        // (N, H, L, S')  softmax over keys
  Buffer<T> context;        // (N, H, L, d_k) weights·v
  Buffer<T> concat;         // (N, L, Q)      heads side by side
  Buffer<T> output;         // (N, L, E)      out projection
  Buffer<T> weights_avg;    // (N, L, S')     sum over heads / H
  Buffer<T> q_scaled;       // (N, L, Q)      q / √d_k: scratch of the Eigen path, not in the trace
  Buffer<T> scratch;        // the Eigen path's per-thread blocks, sized (and kept) by forward_eigen
  // Options::weights_overview's (WeightsOverview; null without one): C = ceil(S' / overview_block)
  Buffer<T> overview_weights;  // (N, H, L, C)
  Buffer<T> overview_average;  // (N, L, C)
  Buffer<T> overview_checks;   // (N, H + 1, L, 4)
  std::int64_t overview_block = 0;
  std::int64_t fully_masked_rows = 0;
};

// The result's view of b's overview buffers (empty without one).
template <class T>
WeightsOverview<T> overview_of(const Buffers<T>& b, const Dims& d);

// What a Workspace keeps between forwards: the trace's buffers (the batch-first input copies and
// the merged mask included) and the Eigen path's scratch.
template <class T>
struct WorkspaceState {
  Buffer<T> query, key, value, mask;
  Buffers<T> buffers;
  std::int64_t allocations = 0;
};

// Which buffers of a workspace are kept (see prepare_buffers).
enum class Reuse {
  free_only,  // a forward: a buffer is reused only when nobody else holds it
  // reserve(): a buffer that fits is kept even when a result still holds it (it is not touched). The
  // app's results are let go before their workspace's next forward, which then resizes it in place;
  // replacing it here would fault in a second copy of every buffer for nothing.
  fitting,
};

// Points ws.buffers at storage for a forward of sizes `d`, reusing each buffer that only the
// workspace holds and whose capacity is 1–2× the new size (resized to it), allocating the others. Every
// element of the reused buffers is overwritten by both forward paths, so old values never leak into a new
// trace. Backend::gpu with `stages` (Options::stages) non-empty: the buffers of stages not named are
// left null, and the device path leaves them so.
// overview_block: Options::weights_overview (the Eigen path only; other backends get none).
template <class T>
Buffers<T>& prepare_buffers(const Dims& d, Backend backend, WorkspaceState<T>& ws,
                            Reuse rule = Reuse::free_only, const std::vector<std::string>& stages = {},
                            std::int64_t overview_block = 0, bool rotary = false);
// The same rule for one buffer of n elements.
template <class T>
Buffer<T> reuse_or_allocate(Buffer<T>& slot, std::size_t n, WorkspaceState<T>& ws,
                            Reuse rule = Reuse::free_only);

// Whether two forwards have the same sizes (an edit recomputes part of one into the other).
inline bool same_dims(const Dims& a, const Dims& b) {
  return a.N == b.N && a.L == b.L && a.S == b.S && a.S_total == b.S_total && a.E == b.E && a.H == b.H &&
         a.G == b.G && a.d_k == b.d_k && a.kdim == b.kdim && a.vdim == b.vdim && a.batched == b.batched;
}

// An edit in place: whether nothing but `r` and `ws` (the workspace it was computed into) holds a
// buffer of r's trace (each storage's references are the stages of r that point at it and the
// workspace slots that do); then r's buffers, writable: by stage name (null for one r left out),
// and all of them into p's query, key, value and b's stages.
template <class T>
bool held_by_result_alone(const ForwardResult<T>& r, Workspace<T>& ws);
template <class T>
Buffer<T> result_buffer(const ForwardResult<T>& r, const char* name);
template <class T>
void result_buffers(const ForwardResult<T>& r, Problem<T>& p, Buffers<T>& b);

// The forward's steps shared between files: the non-finite count of an input (checks.cpp), the
// input copied batch-first into a workspace buffer (workspace.cpp), the problem pointed at the
// weights (mha.cpp), the trace built on the buffers (trace_assembly.cpp).
template <class T>
std::int64_t count_nonfinite(const Tensor<T>& t);
// Copies a (N, L, F) / (L, N, F) / (L, F) tensor into batch-first (N, L, F), in a buffer of the workspace.
template <class T>
Buffer<T> to_batch_first(const Tensor<T>& t, bool batched, bool batch_first, Buffer<T>& slot,
                         WorkspaceState<T>& ws);
template <class T>
void set_weights(Problem<T>& p, const Config& c, const Weights<T>& w);
// mask_storage: the merged mask's values, in a workspace buffer (unused without a mask): copied
// there from p.mask's values, or already there when those are empty (forward merges into it).
template <class T>
Trace<T> make_trace(const Problem<T>& p, const Buffers<T>& b, Buffer<T> mask_storage);

// softmax over one row of n masked scores, as the reference path computes it:
// weights_j = exp(x_j - max) * (1 / sum_j' exp(x_j' - max)). All keys blocked: max = -inf and
// exp(-inf - -inf) = exp(NaN), so the row is NaN, as in torch — unless `policy` is zero, which gives
// 0s. Returns whether the row was fully masked (NaN/Inf scores make a NaN row, not a masked one).
template <class T>
bool softmax_row(const T* masked, T* weights, std::int64_t n, FullyMasked policy) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T row_max = neg_inf;
  bool row_has_nan = false;
  for (std::int64_t j = 0; j < n; ++j) {
    row_max = std::max(row_max, masked[j]);
    row_has_nan = row_has_nan || std::isnan(masked[j]);
  }
  const bool fully_masked = row_max == neg_inf && !row_has_nan;
  T denom = 0;
  for (std::int64_t j = 0; j < n; ++j) denom += std::exp(masked[j] - row_max);
  const T inv_denom = T(1) / denom;
  for (std::int64_t j = 0; j < n; ++j)
    weights[j] =
        (fully_masked && policy == FullyMasked::zero) ? T(0) : std::exp(masked[j] - row_max) * inv_denom;
  return fully_masked;
}

// RoPE: q = rotate(q_proj) and k = rotate(k_proj), rows [r0, r1) of the (N·L) query rows and then
// of the (N·S) key rows, each head's x·cos[p] + rotate_half(x)·sin[p] (Inputs::rotary). Both paths
// call it: the rotation is the same few multiplies whichever path computes the products.
template <class T>
void rotate_rows(const Problem<T>& p, Buffers<T>& b, std::int64_t r0, std::int64_t r1);

template <class T>
void forward_reference(const Problem<T>& p, Buffers<T>& b);
// threads: as Options::threads; times: null, or filled with the phase times.
template <class T>
void forward_eigen(const Problem<T>& p, Buffers<T>& b, int threads, StageTimes* times,
                   ForwardControl* control = nullptr);
// The Eigen path's scratch (per-thread blocks and the products' packed operands) sized for a forward
// of these sizes with Options::threads `threads`, zero-filled now: the first forward faults in no
// new pages (mha::reserve).
template <class T>
void reserve_eigen_scratch(const Dims& d, Buffers<T>& b, int threads);
// The Eigen path again for the query rows flagged in `rows_changed` ((N·L) flags), into buffers that
// hold a full Eigen forward of the same problem with other masks (forward_mask_edit): it redoes
// those rows, every head (each alone, or a whole block of the fused loop where many of its rows
// changed; split by heads between the threads when there are fewer tasks than threads) and their
// out-projection, so every value equals a full forward's bit for bit. b.q_scaled is not read (the tasks' rows
// are divided here), and b.scores and b.scores_scaled get their rows rewritten with the same values. Returns
// the fully masked rows in those tasks.
// stage_rows into `out` ((rows, S') values, zeros on entry): find_stage computes each (n, h) plane
// straight into the stage's storage.
template <class T>
void stage_rows_into(const ForwardResult<T>& r, const std::string& stage, std::int64_t n, std::int64_t h,
                     std::int64_t i0, std::int64_t rows, T* out);
template <class T>
std::int64_t forward_eigen_rows(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& rows_changed,
                                int threads);
// The Eigen path again after an edit of the weights that leaves some heads alone, into buffers that
// hold a full Eigen forward of the same problem with the old weights: the in-projections (every
// head, as forward_eigen computes them, into b.q and b.q_scaled when `q`, b.k and b.v when `kv`:
// the others are as they were), the fused loop for the
// heads flagged in `heads` ((H) flags) only, the head average summed again from every head's
// weights in the kernel's order (b.weights must be there when b.weights_avg is), and the whole
// out-projection. Every value equals a full forward's bit for bit. No head flagged: the
// out-projection alone (an out_proj edit). Returns the fully masked rows of the heads redone.
template <class T>
std::int64_t forward_eigen_heads(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& heads, bool q,
                                 bool kv, int threads);
// The fully masked rows the flagged heads give with the q, k and v the buffers hold now (counted
// before forward_eigen_heads replaces them); b.q_scaled is overwritten, nothing else is written.
template <class T>
std::int64_t fully_masked_in_heads(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& heads,
                                   int threads);
// The fully masked rows the same tasks give with `mask` (p.mask's layout; only the rows of those
// tasks are read) in place of p.mask: only the scores and the softmax, nothing written to b. A mask
// edit takes them out of the count before forward_eigen_rows adds the new ones.
template <class T>
std::int64_t fully_masked_in_tasks(const Problem<T>& p, Buffers<T>& b, const std::vector<char>& rows_changed,
                                   const T* mask, int threads);

}  // namespace mha::detail
