// The reference forward: explicit loops over (batch, head, query, key), one formula per line, so
// anyone can check it by hand. Slow on purpose; every fast path is tested against it stage by stage.
// Sums run in index order and round as torch's CPU kernels do at teaching sizes: F.linear goes to
// BLAS sgemm, which accumulates with fused multiply-add (acc = fma(x, w, acc)); the per-head bmm of
// small heads uses torch's plain loop (acc += a * b); softmax multiplies by 1 / sum. With that, the
// course notebook's float32 projections and scores equal torch's bit for bit (tests/test_cases.cpp).
#include <cmath>
#include <limits>

#include "forward_detail.hpp"

namespace mha::detail {

namespace {

// y[r, o] = sum_i x[r, i] * W[o, i] + b[o]: torch's F.linear with W of shape (out, in).
template <class T>
void linear(const T* x, std::int64_t rows, std::int64_t in, const T* W, const T* b, std::int64_t out, T* y,
            std::int64_t y_row_stride) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      T acc = 0;
      for (std::int64_t i = 0; i < in; ++i) acc = std::fma(x[r * in + i], W[o * in + i], acc);
      y[r * y_row_stride + o] = acc + (b ? b[o] : T(0));
    }
}

}  // namespace

template <class T>
void rotate_rows(const Problem<T>& p, Buffers<T>& b, std::int64_t r0, std::int64_t r1) {
  const Dims& d = p.d;
  const std::int64_t dk = d.d_k, half = dk / 2, query_rows = d.N * d.L;
  for (std::int64_t r = r0; r < r1; ++r) {
    const bool is_query = r < query_rows;
    const std::int64_t row = is_query ? r : r - query_rows;
    const std::int64_t position = is_query ? row % d.L : row % d.S;  // k has no appended rows with RoPE
    const std::int64_t width = is_query ? d.qdim() : d.G * dk;
    const T* x = (is_query ? b.q_proj : b.k_proj)->data() + row * width;
    T* y = (is_query ? b.q : b.k)->data() + row * width;
    const T* cos = p.rope_cos + position * dk;
    const T* sin = p.rope_sin + position * dk;
    for (std::int64_t h = 0; h < width / dk; ++h) {
      const T* xh = x + h * dk;
      T* yh = y + h * dk;
      // torch: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1): two products, one sum
      for (std::int64_t c = 0; c < half; ++c) yh[c] = xh[c] * cos[c] + (-xh[c + half]) * sin[c];
      for (std::int64_t c = half; c < dk; ++c) yh[c] = xh[c] * cos[c] + xh[c - half] * sin[c];
    }
  }
}

template <class T>
void forward_reference(const Problem<T>& p, Buffers<T>& b) {
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, E = d.E, H = d.H, dk = d.d_k;
  const std::int64_t Q = d.qdim(), kv = d.G * dk;  // Q = H·d_k: E unless the heads have an explicit width
  T* q = b.q->data();
  T* k = b.k->data();
  T* v = b.v->data();
  // With RoPE the projections go to q_proj and k_proj, and q and k are their rotations (1b).
  T* q_proj = p.rope_cos ? b.q_proj->data() : q;
  T* k_proj = p.rope_cos ? b.k_proj->data() : k;

  // 1. In-projections. Keys/values get bias_k/bias_v as row S and a zero row last, as torch cats them.
  linear(p.query->data(), N * L, E, p.w_q, p.b_q, Q, q_proj, Q);
  for (std::int64_t n = 0; n < N; ++n) {
    linear(p.key->data() + n * S * d.kdim, S, d.kdim, p.w_k, p.b_k, kv, k_proj + n * Sp * kv, kv);
    linear(p.value->data() + n * S * d.vdim, S, d.vdim, p.w_v, p.b_v, kv, v + n * Sp * kv, kv);
    std::int64_t row = S;
    if (p.bias_k) {
      for (std::int64_t c = 0; c < kv; ++c) {
        k[(n * Sp + row) * kv + c] = p.bias_k[c];
        v[(n * Sp + row) * kv + c] = p.bias_v[c];
      }
      ++row;
    }
    if (p.add_zero_attn)
      for (std::int64_t c = 0; c < kv; ++c) k[(n * Sp + row) * kv + c] = v[(n * Sp + row) * kv + c] = 0;
  }
  // 1b. RoPE: every query row, then every key row.
  if (p.rope_cos) rotate_rows(p, b, 0, N * L + N * S);

  // 2. Per head: scores, scale, mask, softmax, context. Head h of q is columns h·d_k … of q.
  const T scale = p.scale();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = p.kv_head(h);
      for (std::int64_t i = 0; i < L; ++i) {
        const T* qi = q + (n * L + i) * Q + h * dk;
        const std::int64_t row = ((n * H + h) * L + i) * Sp;
        for (std::int64_t j = 0; j < Sp; ++j) {
          const T* kj = k + (n * Sp + j) * kv + g * dk;
          T raw = 0, scaled = 0;
          for (std::int64_t c = 0; c < dk; ++c) {
            raw += qi[c] * kj[c];
            scaled += (qi[c] / scale) * kj[c];  // torch divides q by √d_k before the product
          }
          (*b.scores)[row + j] = raw;
          (*b.scores_scaled)[row + j] = scaled;
          (*b.scores_masked)[row + j] = scaled + (p.mask ? p.mask->values[p.mask_index(n, h, i, j)] : T(0));
        }
        b.fully_masked_rows +=
            softmax_row(b.scores_masked->data() + row, b.weights->data() + row, Sp, p.fully_masked);
        for (std::int64_t c = 0; c < dk; ++c) {
          T acc = 0;
          for (std::int64_t j = 0; j < Sp; ++j)
            acc += (*b.weights)[row + j] * v[(n * Sp + j) * kv + g * dk + c];
          (*b.context)[((n * H + h) * L + i) * dk + c] = acc;
        }
      }
    }

  // 3. Concat: context (N, H, L, d_k) -> (N, L, H·d_k), i.e. transpose(1, 2).contiguous().view.
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t c = 0; c < dk; ++c)
          (*b.concat)[(n * L + i) * Q + h * dk + c] = (*b.context)[((n * H + h) * L + i) * dk + c];

  // 4. Out-projection, and the head-averaged weights (torch: sum over heads, then / num_heads).
  linear(b.concat->data(), N * L, Q, p.w_o, p.b_o, E, b.output->data(), E);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t j = 0; j < Sp; ++j) {
        T sum = 0;
        for (std::int64_t h = 0; h < H; ++h) sum += (*b.weights)[((n * H + h) * L + i) * Sp + j];
        (*b.weights_avg)[(n * L + i) * Sp + j] = sum / T(H);
      }
}

template void rotate_rows<float>(const Problem<float>&, Buffers<float>&, std::int64_t, std::int64_t);
template void rotate_rows<double>(const Problem<double>&, Buffers<double>&, std::int64_t, std::int64_t);
template void forward_reference<float>(const Problem<float>&, Buffers<float>&);
template void forward_reference<double>(const Problem<double>&, Buffers<double>&);

}  // namespace mha::detail
