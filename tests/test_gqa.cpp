// Grouped-query attention (not in torch 1.13): G key/value heads each serving H/G query heads must
// equal plain MHA whose K/V weights repeat each kv head's rows for its group — at every stage.
#include <catch2/catch.hpp>

#include "fixtures.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {

// Repeats rows [g·d_k, (g+1)·d_k) of a (G·d_k, ·) block for each of the H/G heads of group g.
template <class T>
std::vector<T> repeat_kv_rows(const T* src, std::int64_t G, std::int64_t group, std::int64_t d_k,
                              std::int64_t cols) {
  std::vector<T> out;
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t r = 0; r < group; ++r)
      out.insert(out.end(), src + g * d_k * cols, src + (g + 1) * d_k * cols);
  return out;
}

template <class T>
void check_gqa(std::int64_t H, std::int64_t G, Backend backend) {
  const std::int64_t E = 16, d_k = E / H, N = 2, L = 5, S = 6, group = H / G;
  Config gqa;
  gqa.embed_dim = E;
  gqa.num_heads = H;
  gqa.num_kv_heads = G;
  TorchGenerator gen(17);
  Weights<T> w;
  w.in_proj_weight = gen.rand<T>({E + 2 * G * d_k, E});
  w.in_proj_bias = gen.rand<T>({E + 2 * G * d_k});
  w.out_proj_weight = gen.rand<T>({E, E});
  w.out_proj_bias = gen.rand<T>({E});
  Inputs<T> in;
  in.query = gen.rand<T>({N, L, E});
  in.key = gen.rand<T>({N, S, E});
  in.value = gen.rand<T>({N, S, E});
  in.attn_mask = causal_mask<T>(L, S);

  // The equivalent MHA: packed (3E, E) with each kv head's rows repeated for its group.
  Config mha_cfg = gqa;
  mha_cfg.num_kv_heads = 0;
  Weights<T> rep = w;
  const T* W = w.in_proj_weight.ptr();
  const T* B = w.in_proj_bias.ptr();
  std::vector<T> packed(W, W + E * E), bias(B, B + E);
  for (int part = 0; part < 2; ++part) {
    const std::int64_t row0 = E + part * G * d_k;
    auto rw = repeat_kv_rows(W + row0 * E, G, group, d_k, E);
    auto rb = repeat_kv_rows(B + row0, G, group, d_k, 1);
    packed.insert(packed.end(), rw.begin(), rw.end());
    bias.insert(bias.end(), rb.begin(), rb.end());
  }
  rep.in_proj_weight = Tensor<T>({3 * E, E}, packed);
  rep.in_proj_bias = Tensor<T>({3 * E}, bias);

  Options o;
  o.backend = backend;
  const ForwardResult<T> a = forward(gqa, w, in, o);
  const ForwardResult<T> b = forward(mha_cfg, rep, in, o);
  CHECK(a.trace["k"].shape == Shape{N, S, G * d_k});
  CHECK(a.trace["k_heads"].shape == Shape{N, G, S, d_k});
  // The reference computes each head's numbers by the same loops either way: exactly equal. The
  // Eigen GEMMs block differently for the two weight shapes, so they agree to rounding.
  const double tol = backend == Backend::reference ? 0.0 : sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (const char* stage : {"q", "scores", "scores_scaled", "scores_masked", "attn_weights", "context",
                            "concat", "output", "attn_weights_avg"}) {
    INFO("H=" << H << " G=" << G << " stage " << stage);
    CHECK(mismatch(a.trace[stage].contiguous(), b.trace[stage].contiguous(), tol, tol) == "");
  }
}

}  // namespace

TEST_CASE("GQA equals MHA with repeated K/V weights", "[gqa]") {
  for (Backend b : {Backend::reference, Backend::eigen}) {
    check_gqa<float>(4, 2, b);
    check_gqa<float>(4, 1, b);  // MQA
    check_gqa<double>(8, 2, b);
    check_gqa<double>(4, 4, b);  // G = H is plain MHA
  }
}
