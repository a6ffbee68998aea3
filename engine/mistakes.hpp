// The course's classic multi-head attention mistakes, in one catalogue: each with a stable id, the
// line that makes it, the torch line that fixes it and the view that explains it, and each computed
// by the engine as a variant forward from a trace, alone or with others. The Reshape view draws what
// a mistaken forward gives next to the right one; `mha check` matches a student's outputs against
// every variant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mha.hpp"
#include "trace.hpp"

namespace mha {

// The catalogue's mistakes. The order is the catalogue's; the ids (mistake_info) are stable.
enum class Mistake : std::uint8_t {
  split_without_transpose,   // q.view(N, H, L, d_k): "heads" are runs of memory, not column blocks
  merge_without_transpose,   // context.contiguous().view(N, L, E) with the heads still in front
  scale_by_d_model,          // scores / √E instead of / √d_k
  no_scale,                  // no division at all
  softmax_over_queries,      // softmax(dim=-2): columns sum to 1, not rows
  no_output_projection,      // the concatenated heads returned without out_proj
  mask_after_softmax,        // softmax first, then blocked weights set to 0 (rows no longer sum to 1)
  mask_fill_zero,            // masked_fill(mask, 0): a blocked score becomes 0, not -inf
  mask_heads_batches_mixed,  // per-batch masks spread over N·H head-major (repeat, not repeat_interleave)
  value_is_key,              // weights @ k: the projected keys used as the values
};
inline constexpr int kMistakeCount = 10;

struct MistakeInfo {
  Mistake mistake;
  const char* id;     // stable: `mha check --json`, scripts, tests
  const char* title;  // a few words
  const char* wrong;  // the line as students write it
  const char* fix;    // the torch line that fixes it
  const char* view;   // where the app shows it, for a "show me" link
};
// Every mistake, in enum order.
const std::vector<MistakeInfo>& mistake_catalogue();
const MistakeInfo& mistake_info(Mistake m);
// The mistake an id names; nullopt for an unknown id.
std::optional<Mistake> mistake_from_id(const std::string& id);

// A set of mistakes made together, as bits (bit m = Mistake m).
struct MistakeSet {
  std::uint32_t bits = 0;
  MistakeSet() = default;
  MistakeSet(std::initializer_list<Mistake> ms) {
    for (Mistake m : ms) bits |= 1u << unsigned(m);
  }
  bool has(Mistake m) const { return bits & (1u << unsigned(m)); }
  bool empty() const { return bits == 0; }
  MistakeSet with(Mistake m) const {
    MistakeSet s = *this;
    s.bits |= 1u << unsigned(m);
    return s;
  }
  std::vector<Mistake> list() const;  // in catalogue order
  bool operator==(const MistakeSet& o) const { return bits == o.bits; }
};
// Whether the mistakes can be made in one forward: two scales (no_scale with scale_by_d_model) or two
// ways of applying the mask (mask_after_softmax with mask_fill_zero) contradict each other.
bool compatible(MistakeSet s);
// Every compatible set of one or two mistakes: the singles first, then the pairs, in catalogue order.
std::vector<MistakeSet> singles_and_pairs();

template <class T>
struct VariantForward {
  std::vector<T> concat;   // (N, L, E): the heads put back side by side (as the variant merges them)
  std::vector<T> weights;  // (N, H, L, S'): the attention weights the variant computes
  std::vector<T> output;   // (N, L, E): concat through out_proj (or concat itself, no_output_projection)
};

// The attention core and out-projection again on the trace's projections q (N, L, E), k and v
// (N, S', G·d_k) and merged attn_mask (N, H, L, S'), with the mistakes in `set` made: the scores in
// torch's order ((q / divisor)·kᵀ + mask; divisor √d_k, or Options::score_divisor when the forward
// had one), the engine's softmax (FullyMasked as the forward was run), weights·v, the heads put back,
// then concat·out_proj_weightᵀ + out_proj_bias from `w` (an absent bias adds nothing). The empty set
// is the forward itself: its concat equals a reference-backend trace's "concat" bit for bit, its
// output the trace's "output" to rounding. Needs the trace stages q, k, v (and attn_mask when the
// forward had one).
template <class T>
VariantForward<T> mistaken_forward(const ForwardResult<T>& f, const Weights<T>& w, MistakeSet set);

// How the projected q, k, v (N, L, E) / (N, S', G·d_k) are split into heads.
enum class HeadSplit {
  // q.view(N, L, H, d_k).transpose(1, 2): head h is columns h·d_k … of every token (torch, right).
  transpose,
  // q.view(N, H, L, d_k) straight away: "head" h is the h-th L·d_k run of q's memory, pieces of
  // several tokens (the mistake); the context is read back with .view(N, L, E) the same way: the
  // pair split_without_transpose + merge_without_transpose.
  view_without_transpose,
};

// The concat (N, L, E) the attention core gives with the heads split as `split` says (see
// mistaken_forward). With HeadSplit::transpose on a reference-backend trace it equals the trace's
// "concat" bit for bit.
template <class T>
std::vector<T> attention_concat(const ForwardResult<T>& f, HeadSplit split);

}  // namespace mha
