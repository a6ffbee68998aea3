// The course's common head-split mistakes, computed by the engine from a forward's trace, so a view
// can put what a mistaken forward gives next to the right one.
#pragma once

#include <vector>

#include "mha.hpp"
#include "trace.hpp"

namespace mha {

// How the projected q, k, v (N, L, E) / (N, S', G·d_k) are split into heads.
enum class HeadSplit {
  // q.view(N, L, H, d_k).transpose(1, 2): head h is columns h·d_k … of every token (torch, right).
  transpose,
  // q.view(N, H, L, d_k) straight away: "head" h is the h-th L·d_k run of q's memory, pieces of
  // several tokens (the mistake); the context is read back with .view(N, L, E) the same way.
  view_without_transpose,
};

// The concat (N, L, E) the attention core gives on the trace's q, k, v and merged attn_mask with the
// heads split as `split` says: scores in torch's order ((q / √d_k)·kᵀ, √d_k as torch divides), + mask,
// the engine's softmax
// (FullyMasked as the forward was run), weights·v, heads put back side by side. With
// HeadSplit::transpose on a reference-backend trace it equals the trace's "concat" bit for bit.
// Needs the trace stages q, k, v (and attn_mask when the forward had one).
template <class T>
std::vector<T> attention_concat(const ForwardResult<T>& f, HeadSplit split);

}  // namespace mha
