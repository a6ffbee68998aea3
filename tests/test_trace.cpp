// The trace as a student reads it: stage order, shapes and strides of the views (what
// view/transpose/contiguous do), shared storage, the broadcast mask, and the course-shaped API.
#include <catch2/catch.hpp>

#include "fixtures.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {
ForwardResult<float> notebook_forward(std::optional<Mask<float>> mask = std::nullopt) {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.bias = false;
  SeededCase<float> sc = torch_seeded_case<float>(c, 42, 3, 4, 4);
  sc.inputs.attn_mask = std::move(mask);
  return forward(c, sc.weights, sc.inputs);
}
}  // namespace

TEST_CASE("stages come in the order a student meets them", "[trace]") {
  const ForwardResult<float> r = notebook_forward(causal_mask<float>(4, 4));
  std::vector<std::string> names;
  for (const auto& s : r.trace.stages) names.push_back(s.name);
  std::vector<std::string> without_rope;  // q_rot and k_rot come only with Inputs::rotary
  for (const std::string& n : stage_names())
    if (n != "q_rot" && n != "k_rot") without_rope.push_back(n);
  CHECK(names == without_rope);
}

TEST_CASE("view keeps q's storage; transpose makes it non-contiguous", "[trace]") {
  const ForwardResult<float> r = notebook_forward();  // N=3, L=4, E=8, H=2, d_k=4
  const Stage<float>& q = r.trace["q"];
  const Stage<float>& view = r.trace["q_view"];
  const Stage<float>& heads = r.trace["q_heads"];
  CHECK(view.shape == Shape{3, 4, 2, 4});
  CHECK(view.strides == Shape{32, 8, 4, 1});
  CHECK(view.is_contiguous());
  CHECK(heads.shape == Shape{3, 2, 4, 4});
  CHECK(heads.strides == Shape{32, 4, 8, 1});
  CHECK_FALSE(heads.is_contiguous());
  CHECK(view.storage == q.storage);
  CHECK(heads.storage == q.storage);
  CHECK(heads.view_of == "q");
  // q_heads[n, h, i, c] is q[n, i, h·d_k + c]
  CHECK(heads.at({1, 1, 2, 3}) == q.at({1, 2, 7}));
  const Stage<float>& ct = r.trace["context_transposed"];
  CHECK_FALSE(ct.is_contiguous());
  const Tensor<float> concat = r.trace["concat"].contiguous();
  CHECK(ct.contiguous().data == concat.data);  // .contiguous().view(N, L, E) is a reshape of the copy
}

TEST_CASE("contiguity follows torch: size-1 dimensions may have any stride", "[trace]") {
  CHECK(is_contiguous({3, 2, 4, 4}, {32, 16, 4, 1}));
  CHECK_FALSE(is_contiguous({3, 2, 4, 4}, {32, 4, 8, 1}));  // q_heads
  CHECK(is_contiguous({3, 2, 1, 4}, {8, 4, 8, 1}));         // q_heads at L = 1: torch says contiguous
  CHECK(is_contiguous({1, 5}, {0, 1}));
}

TEST_CASE("a 2-D mask is one buffer broadcast over batch and heads", "[trace]") {
  const ForwardResult<float> r = notebook_forward(causal_mask<float>(4, 4));
  const Stage<float>& m = r.trace["attn_mask"];
  CHECK(m.shape == Shape{3, 2, 4, 4});
  CHECK(m.strides == Shape{0, 0, 4, 1});
  CHECK(m.storage->size() == 16);
  CHECK(m.at({2, 1, 0, 3}) == -std::numeric_limits<float>::infinity());
  CHECK(m.at({2, 1, 3, 0}) == 0.0f);
  // Weights above the diagonal are exactly zero, and each row sums to one.
  const Stage<float>& w = r.trace["attn_weights"];
  for (std::int64_t i = 0; i < 4; ++i) {
    float sum = 0;
    for (std::int64_t j = 0; j < 4; ++j) {
      if (j > i) CHECK(w.at({1, 0, i, j}) == 0.0f);
      sum += w.at({1, 0, i, j});
    }
    CHECK(sum == Approx(1.0f).epsilon(1e-6));
  }
}

TEST_CASE("the course API: MultiHeadAttention and multi_head_attention", "[trace]") {
  MultiHeadAttention<float> m(8, 2, /*bias=*/false, /*seed=*/42);
  TorchGenerator gen(3);
  const Tensor<float> x = gen.rand<float>({2, 5, 8});
  const Tensor<float> self = m.forward(x);
  const Tensor<float> qkv = m.forward(x, x, x);
  CHECK(self.shape == Shape{2, 5, 8});
  CHECK(self.data == qkv.data);
  CHECK(m.last().trace.has("q_heads"));
  const Tensor<float> free = multi_head_attention(x, x, x, 2, 8, m.weights());
  CHECK(free.data == self.data);
  // The course's causal mask through the seed API, in the "keep" convention converted explicitly.
  Tensor<float> keep({5, 5});
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j <= i; ++j) keep.data[std::size_t(i * 5 + j)] = 1;  // torch.tril(ones)
  const Mask<float> blocked = mask_from_keep(keep);
  CHECK(blocked.values.data == causal_mask<float>(5, 5).values.data);
  const Tensor<float> causal = m.forward(x, blocked);
  CHECK(mismatch(causal, m.forward(x, causal_mask<float>(5, 5)), 0, 0) == "");
  CHECK(causal.data != self.data);
}

TEST_CASE("the zero policy changes only fully masked rows and is recorded", "[trace]") {
  Mask<float> m = causal_mask<float>(4, 4);
  m.values.data[0] = 1;  // query 0 may see nothing
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  SeededCase<float> sc = torch_seeded_case<float>(c, 1, 1, 4, 4);
  sc.inputs.attn_mask = m;
  Options o;
  const ForwardResult<float> nan = forward(c, sc.weights, sc.inputs, o);
  o.fully_masked = FullyMasked::zero;
  const ForwardResult<float> zero = forward(c, sc.weights, sc.inputs, o);
  CHECK(nan.fully_masked_rows == 2);  // one row in each of the 2 heads
  CHECK(std::isnan(nan.trace["attn_weights"].at({0, 0, 0, 0})));
  CHECK(zero.trace["attn_weights"].at({0, 0, 0, 0}) == 0.0f);
  CHECK(zero.fully_masked == FullyMasked::zero);
  CHECK(zero.trace["attn_weights"].at({0, 1, 2, 1}) == nan.trace["attn_weights"].at({0, 1, 2, 1}));
}

TEST_CASE("NaN and Inf inputs are computed and counted", "[trace]") {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  SeededCase<float> sc = torch_seeded_case<float>(c, 1, 2, 3, 3);
  sc.inputs.query.data[0] = std::numeric_limits<float>::quiet_NaN();
  sc.inputs.key.data[5] = std::numeric_limits<float>::infinity();
  const ForwardResult<float> r = forward(c, sc.weights, sc.inputs);
  CHECK(r.nonfinite_inputs == 2);
  CHECK(std::isnan(r.trace["output"].at({0, 0, 0})));     // query row 0 of batch 0 is NaN
  CHECK(std::isfinite(r.trace["output"].at({1, 0, 0})));  // batch 1 is untouched
}
