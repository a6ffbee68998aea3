// Internal to the engine: the checked, normalised problem both forward paths consume, and the
// buffers they fill. Everything here is batch-first and contiguous; views are made in mha.cpp.
#pragma once

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
  // Projection weights, row-major, torch's (out_features, in_features).
  const T* w_q = nullptr;             // (E, E)
  const T* w_k = nullptr;             // (G·d_k, kdim)
  const T* w_v = nullptr;             // (G·d_k, vdim)
  const T* b_q = nullptr;             // (E,) or nullptr when bias=False
  const T* b_k = nullptr;             // (G·d_k,)
  const T* b_v = nullptr;             // (G·d_k,)
  const T* w_o = nullptr;             // (E, E)
  const T* b_o = nullptr;             // (E,)
  const T* bias_k = nullptr;          // (G·d_k,) appended as key row S when add_bias_kv
  const T* bias_v = nullptr;          // (G·d_k,)
  bool add_zero_attn = false;         // zero row appended last
  std::optional<MergedMask<T>> mask;  // additive, broadcast over (N, H, L, S_total)

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
  Buffer<T> q;              // (N, L, E)
  Buffer<T> k, v;           // (N, S', G·d_k)
  Buffer<T> scores;         // (N, H, L, S')  q·kᵀ per head
  Buffer<T> scores_scaled;  // (N, H, L, S')  (q / √d_k)·kᵀ, torch's order
  Buffer<T> scores_masked;  // (N, H, L, S')  + merged mask
  Buffer<T> weights;        // (N, H, L, S')  softmax over keys
  Buffer<T> context;        // (N, H, L, d_k) weights·v
  Buffer<T> concat;         // (N, L, E)      heads side by side
  Buffer<T> output;         // (N, L, E)      out projection
  Buffer<T> weights_avg;    // (N, L, S')     sum over heads / H
  std::int64_t fully_masked_rows = 0;
};

template <class T>
Buffers<T> allocate_buffers(const Dims& d);

template <class T>
void forward_reference(const Problem<T>& p, Buffers<T>& b);
template <class T>
void forward_eigen(const Problem<T>& p, Buffers<T>& b);

}  // namespace mha::detail
