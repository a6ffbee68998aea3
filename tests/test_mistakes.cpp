// The engine's mistaken head split (attention_concat with HeadSplit::view_without_transpose) against
// an explicit loop that reads the projections' memory in order; the right split against the trace.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "fixtures.hpp"
#include "masks.hpp"
#include "mistakes.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {

template <class T>
ForwardResult<T> run(std::int64_t H, std::int64_t G, bool masked, FullyMasked policy) {
  const std::int64_t E = 12, d_k = E / H, N = 2, L = 4, S = 5;
  Config c;
  c.embed_dim = E;
  c.num_heads = H;
  c.num_kv_heads = G;
  const std::int64_t kv = (G > 0 ? G : H) * d_k;
  TorchGenerator gen(5);
  Weights<T> w;
  w.in_proj_weight = gen.rand<T>({E + 2 * kv, E});
  w.in_proj_bias = gen.rand<T>({E + 2 * kv});
  w.out_proj_weight = gen.rand<T>({E, E});
  w.out_proj_bias = gen.rand<T>({E});
  Inputs<T> in;
  in.query = gen.rand<T>({N, L, E});
  in.key = gen.rand<T>({N, S, E});
  in.value = gen.rand<T>({N, S, E});
  if (masked) {
    in.attn_mask = causal_mask<T>(L, S);
    in.key_padding_mask = key_padding_from_lengths<T>({S, 0}, S);  // batch item 1: every key padding
  }
  Options o;
  o.backend = Backend::reference;
  o.fully_masked = policy;
  return forward(c, w, in, o);
}

// The mistake written out: q (N, L, E) read as .view(N, H, L, d_k), k and v (N, S', G·d_k) as
// .view(N, G, S', d_k), softmax(q_h k_hᵀ / √d_k + mask) v_h, read back with .view(N, L, E).
template <class T>
std::vector<T> explicit_view_mistake(const ForwardResult<T>& f) {
  const Dims& d = f.dims;
  const std::int64_t N = d.N, L = d.L, Sp = d.S_total, E = d.E, H = d.H, dk = d.d_k, kv = d.G * dk;
  const std::vector<T> q = f.trace["q"].contiguous().data, k = f.trace["k"].contiguous().data,
                       v = f.trace["v"].contiguous().data;
  const Stage<T>* m = f.trace.find("attn_mask");
  std::vector<T> out(static_cast<std::size_t>(N * L * E));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / (H / d.G);
      const T* qh = q.data() + n * L * E + h * L * dk;  // the h-th L·d_k run of batch item n
      const T* kh = k.data() + n * Sp * kv + g * Sp * dk;
      const T* vh = v.data() + n * Sp * kv + g * Sp * dk;
      for (std::int64_t i = 0; i < L; ++i) {
        std::vector<T> x(static_cast<std::size_t>(Sp));
        T mx = -std::numeric_limits<T>::infinity();
        for (std::int64_t j = 0; j < Sp; ++j) {
          T s = 0;
          for (std::int64_t c = 0; c < dk; ++c) s += (qh[i * dk + c] / std::sqrt(T(dk))) * kh[j * dk + c];
          x[std::size_t(j)] = s + (m ? m->at({n, h, i, j}) : T(0));
          mx = std::max(mx, x[std::size_t(j)]);
        }
        T sum = 0;
        for (T& e : x) sum += (e = std::exp(e - mx));
        for (std::int64_t c = 0; c < dk; ++c) {
          T acc = 0;
          const bool zero = std::isinf(mx) && f.fully_masked == FullyMasked::zero;
          for (std::int64_t j = 0; j < Sp; ++j)
            acc += (zero ? T(0) : x[std::size_t(j)] / sum) * vh[j * dk + c];
          out[std::size_t(n * L * E + (h * L + i) * dk + c)] = acc;
        }
      }
    }
  return out;
}

template <class T>
void check(std::int64_t H, std::int64_t G, bool masked, FullyMasked policy) {
  INFO("H=" << H << " G=" << G << " masked=" << masked << " zero=" << (policy == FullyMasked::zero));
  const ForwardResult<T> f = run<T>(H, G, masked, policy);
  // The right split is the forward itself: the reference path's concat, bit for bit.
  const std::vector<T> right = attention_concat(f, HeadSplit::transpose);
  CHECK(mismatch(Tensor<T>(f.trace["concat"].shape, right), f.trace["concat"].contiguous(), 0, 0) == "");
  const std::vector<T> wrong = attention_concat(f, HeadSplit::view_without_transpose);
  const std::vector<T> loop = explicit_view_mistake(f);
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  CHECK(mismatch(Tensor<T>(f.trace["concat"].shape, wrong), Tensor<T>(f.trace["concat"].shape, loop), tol,
                 tol) == "");
  // With H >= 2 and L >= 2 the mistake scrambles tokens across heads: it is not the right result.
  CHECK(mismatch(Tensor<T>(f.trace["concat"].shape, wrong), f.trace["concat"].contiguous(), tol, tol) != "");
}

}  // namespace

TEST_CASE("the no-transpose head split: engine against an explicit loop", "[mistakes]") {
  for (FullyMasked policy : {FullyMasked::nan, FullyMasked::zero}) {
    check<float>(3, 0, true, policy);
    check<double>(4, 2, true, policy);  // GQA: key/value heads read the same way
  }
  check<float>(2, 0, false, FullyMasked::nan);
  check<double>(6, 0, false, FullyMasked::nan);
}
