// The trace as a student reads it: stage order, shapes and strides of the views (what
// view/transpose/contiguous do), shared storage, the broadcast mask, and the course-shaped API.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "fixtures.hpp"
#include "masks.hpp"
#include "stage_table.hpp"
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

namespace {

// A forward whose trace the stage table must describe: N = 2, L = 4, S = 5, causal mask or none,
// RoPE on tables of 8 positions (angles p·10000^(-2c/d_k), as Llama's) or none; `stages` as
// Options::stages (the Eigen path leaves the others out, their rows kept in Trace::left_out).
ForwardResult<float> table_forward(const Config& c, bool mask, bool rope,
                                   std::vector<std::string> stages = {}) {
  const std::int64_t N = 2, L = 4, S = 5, P = 8, dk = c.head_dim();
  Config seeded = c;  // the generator does not draw bias_k and bias_v: they are set below
  seeded.add_bias_kv = false;
  SeededCase<float> sc = torch_seeded_case<float>(seeded, 7, N, L, S);
  if (c.add_bias_kv) {
    sc.weights.bias_k =
        Tensor<float>({1, 1, c.kv_embed_dim()}, std::vector<float>(std::size_t(c.kv_embed_dim()), 0.25f));
    sc.weights.bias_v =
        Tensor<float>({1, 1, c.kv_embed_dim()}, std::vector<float>(std::size_t(c.kv_embed_dim()), -0.5f));
  }
  if (mask) sc.inputs.attn_mask = causal_mask<float>(L, S);
  if (rope) {
    Rotary<float> r{Tensor<float>({P, dk}), Tensor<float>({P, dk})};
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t j = 0; j < dk; ++j) {
        const double angle = double(p) * std::pow(10000.0, -2.0 * double(j % (dk / 2)) / double(dk));
        r.cos.data[std::size_t(p * dk + j)] = float(std::cos(angle));
        r.sin.data[std::size_t(p * dk + j)] = float(std::sin(angle));
      }
    sc.inputs.rotary = std::move(r);
  }
  Options o;
  o.backend = Backend::eigen;
  o.stages = std::move(stages);
  return forward(c, sc.weights, sc.inputs, o);
}

}  // namespace

TEST_CASE("the stage table describes every stage a forward traces, and every stage it offers is traced",
          "[trace]") {
  Config plain;
  plain.embed_dim = 8;
  plain.num_heads = 2;
  Config gqa = plain;
  gqa.num_heads = 4;
  gqa.num_kv_heads = 2;
  Config bias_kv = plain;
  bias_kv.add_bias_kv = true;
  bias_kv.add_zero_attn = true;
  const std::vector<std::pair<std::string, ForwardResult<float>>> forwards = {
      {"plain", table_forward(plain, false, false)},
      {"plain, masked", table_forward(plain, true, false)},
      {"GQA, masked", table_forward(gqa, true, false)},
      {"bias_k and a zero row, masked", table_forward(bias_kv, true, false)},
      {"RoPE under GQA, masked", table_forward(gqa, true, true)},
      {"RoPE, only the output kept", table_forward(plain, true, true, {stage_name::output})},
  };
  std::set<std::string> traced;
  std::set<cost::Stage> charged;
  for (const auto& [what, r] : forwards) {
    INFO(what);
    const Dims& d = r.dims;
    std::vector<std::string> names;  // in trace order, the left-out stages among them
    for (const Stage<float>* s : trace_order(r.trace)) {
      INFO(s->name);
      const StageInfo* info = stage_info(s->name);
      REQUIRE(info);
      names.push_back(s->name);
      traced.insert(s->name);
      if (info->cost) charged.insert(*info->cost);
      // A view runs along the lane of the tensor it views (q_heads views q_rot under RoPE).
      if (!s->view_of.empty()) {
        REQUIRE(stage_info(s->view_of));
        CHECK(int(stage_info(s->view_of)->lane) == int(info->lane));
      }
    }
    // The trace's order is the table's.
    std::vector<std::string> table_order;
    for (const StageInfo& s : stage_table())
      if (std::find(names.begin(), names.end(), s.name) != names.end()) table_order.push_back(s.name);
    CHECK(names == table_order);
    CHECK(r.trace.stages.size() + r.trace.left_out.size() == names.size());
    // What the Heads and Compare views offer is in every trace, as one plane per (item, head).
    for (const StageInfo* s : head_stages()) {
      INFO(s->name);
      REQUIRE(std::find(names.begin(), names.end(), s->name) != names.end());
      const Stage<float>* st = find_stage(r, s->name);
      REQUIRE(st);
      REQUIRE(st->shape.size() == 4);
      CHECK(st->shape[0] == d.N);
      CHECK(st->shape[1] == d.H);
      CHECK(st->shape[2] == d.L);
      CHECK((st->shape[3] == d.S_total || st->shape[3] == d.d_k));
    }
    for (const std::string& s : arrow_key_stages()) {
      INFO(s);
      CHECK(std::find(names.begin(), names.end(), s) != names.end());
    }
    CHECK(r.trace.has(stage_name::q_rot) == (what.find("RoPE") != std::string::npos));
  }
  // Every row of the table comes out of some forward, and every row of the cost model is charged to
  // a stage.
  for (const StageInfo& s : stage_table()) {
    INFO(s.name);
    CHECK(traced.count(s.name) == 1);
  }
  CHECK(charged.size() == cost::kStageCount);
  CHECK(stage_names().size() == stage_table().size());
}

TEST_CASE("the stage table gives the views' lists: the Heads stages, the arrow keys' stages, lanes",
          "[trace]") {
  std::vector<std::string> heads;
  for (const StageInfo* s : head_stages()) heads.push_back(s->name);
  CHECK(heads ==
        std::vector<std::string>{"scores", "scores_scaled", "scores_masked", "attn_weights", "context"});
  CHECK(arrow_key_stages() == std::vector<std::string>{"q", "k", "v", "scores", "scores_scaled",
                                                       "scores_masked", "attn_weights", "context", "output"});
  CHECK(stage_info(stage_name::q_rot)->lane == StageLane::query);
  CHECK(stage_info(stage_name::k_rot)->lane == StageLane::key);
  CHECK(std::string(stage_info(stage_name::q_rot)->op) == "RoPE");
  CHECK(stage_info("bias_k") == nullptr);  // appended rows are part of k and v, not stages
}
