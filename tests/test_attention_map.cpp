// Tests of attention_map: attention weights computed elsewhere ((T, T) up to (layers, N, H, T, T),
// any float dtype) drawn by the same figure code as a forward's attn_weights, and its refusals and
// warnings naming the file, the size and the first offending row.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <string>

#include "errors.hpp"
#include "stage_export.hpp"
#include "torch_rng.hpp"

using namespace mha;
using Catch::Contains;
using exporter::attention_map;
using exporter::AttentionMap;

namespace {

// A forward's attn_weights (N = 2, H = 2, T = 4) and the figure stage_figure draws from it.
ForwardResult<float> seeded_forward() {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 7, 2, 4, 4);
  return forward(c, sc.weights, sc.inputs, Options{});
}

Array f32_array(const Shape& shape, const std::vector<float>& values) {
  Array a;
  a.shape = shape;
  a.data.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

// Every panel's values and labels, and the title, of two figures are the same.
void check_same_figure(const exporter::StageFigure& a, const exporter::StageFigure& b) {
  CHECK(a.spec.title == b.spec.title);
  REQUIRE(a.spec.panels.size() == b.spec.panels.size());
  for (std::size_t k = 0; k < a.spec.panels.size(); ++k) {
    const exporter::Panel& p = a.spec.panels[k];
    const exporter::Panel& q = b.spec.panels[k];
    REQUIRE(p.rows == q.rows);
    REQUIRE(p.cols == q.cols);
    CHECK(p.title == q.title);
    CHECK(p.row_labels == q.row_labels);
    CHECK(p.col_labels == q.col_labels);
    for (int i = 0; i < p.rows; ++i)
      for (int j = 0; j < p.cols; ++j)
        CHECK(p.values[i * p.row_stride + j * p.col_stride] == q.values[i * q.row_stride + j * q.col_stride]);
  }
}

}  // namespace

TEST_CASE("attention weights from a file draw as the forward's own attn_weights", "[attention_map]") {
  const ForwardResult<float> r = seeded_forward();
  const Tensor<float> w = r.attn_weights(false);  // (2, 2, 4, 4)
  const AttentionMap m = attention_map(to_array(w), std::nullopt, "attn.npy");
  CHECK(m.warnings.empty());
  CHECK(m.layers == 0);
  CHECK(exporter::stage_heads(m.result, "attn_weights") == 2);
  exporter::StageSlice slice;
  slice.query_labels = slice.key_labels = {"the", "cat", "sat", "down"};
  for (int batch : {0, 1})
    for (int head : {0, 1, exporter::kAllHeads, exporter::kHeadAverage}) {
      INFO("batch " << batch << ", head " << head);
      slice.batch_index = batch;
      slice.head = head;
      check_same_figure(exporter::stage_figure(r, slice), exporter::stage_figure(m.result, slice));
    }
  exporter::StageSlice scores;
  scores.stage = "scores";
  CHECK_THROWS_WITH(exporter::stage_figure(m.result, scores), Contains("this trace has: attn_weights"));
  slice.batch_index = 2;
  CHECK_THROWS_WITH(exporter::stage_figure(m.result, slice), Contains("has 2 batch items (0..1)"));
}

TEST_CASE("attention_map reads (T, T) to (layers, N, H, T, T) and picks a layer", "[attention_map]") {
  const Tensor<float> w = seeded_forward().attn_weights(false);  // (2, 2, 4, 4)
  const std::int64_t per_head = 16;

  const AttentionMap one = attention_map(
      to_array(Tensor<float>({4, 4}, std::vector<float>(w.data.begin(), w.data.begin() + per_head))),
      std::nullopt, "tt.npy");
  CHECK(one.result.trace["attn_weights"].shape == Shape{1, 1, 4, 4});
  CHECK(one.result.dims.L == 4);
  CHECK(one.result.dims.S_total == 4);

  const AttentionMap heads = attention_map(
      to_array(Tensor<float>({2, 4, 4}, std::vector<float>(w.data.begin(), w.data.begin() + 2 * per_head))),
      std::nullopt, "htt.npy");
  CHECK(heads.result.trace["attn_weights"].shape == Shape{1, 2, 4, 4});
  CHECK(heads.result.dims.H == 2);

  // Three layers, each w but for layer 2's first row (all ones), so the layer read is told by value.
  std::vector<float> stacked;
  for (int l = 0; l < 3; ++l) stacked.insert(stacked.end(), w.data.begin(), w.data.end());
  for (std::size_t j = 0; j < 4; ++j) stacked[std::size_t(2 * w.numel()) + j] = 1.0f;
  const Array layers = to_array(Tensor<float>({3, 2, 2, 4, 4}, stacked));
  const AttentionMap l0 = attention_map(layers, std::nullopt, "stack.npy");
  const AttentionMap l2 = attention_map(layers, 2, "stack.npy");
  CHECK(l0.layers == 3);
  CHECK(l0.layer == 0);
  CHECK(l2.layer == 2);
  CHECK(l0.result.trace["attn_weights"].shape == Shape{2, 2, 4, 4});
  CHECK(l0.result.trace["attn_weights"].contiguous().data == w.data);
  const std::vector<float> picked = l2.result.trace["attn_weights"].contiguous().data;
  CHECK(std::vector<float>(picked.begin(), picked.begin() + 4) == std::vector<float>{1, 1, 1, 1});
  CHECK(l0.warnings.empty());
  REQUIRE(l2.warnings.size() == 1);  // that row sums to 4
  CHECK(l2.warnings[0] ==
        "stack.npy: 1 row not summing to 1; the first at layer 2, batch 0, head 0, row 0 sums "
        "to 4 (attention weights are a softmax over the keys)");

  // float64 and float16 read too; a half file's rounding is not a warning.
  Tensor<double> wd(w.shape);
  for (std::size_t k = 0; k < w.data.size(); ++k) wd.data[k] = double(w.data[k]);
  CHECK(attention_map(to_array(wd), std::nullopt, "f64.npy").warnings.empty());
  Array half;
  half.dtype = DType::f16;
  half.shape = {2, 2};
  const std::uint16_t halves[4] = {0x3800, 0x3800, 0x3c00, 0x0000};  // 0.5 0.5 / 1 0
  half.data.resize(sizeof halves);
  std::memcpy(half.data.data(), halves, sizeof halves);
  const AttentionMap h = attention_map(half, std::nullopt, "f16.npy");
  CHECK(h.warnings.empty());
  CHECK(h.result.trace["attn_weights"].contiguous().data == std::vector<float>{0.5f, 0.5f, 1.0f, 0.0f});
}

TEST_CASE("attention_map refuses what is not attention, naming the file and the size", "[attention_map]") {
  CHECK_THROWS_AS(attention_map(f32_array({4}, {1, 0, 0, 0}), std::nullopt, "a.npy"), ShapeError);
  CHECK_THROWS_WITH(
      attention_map(f32_array({4}, {1, 0, 0, 0}), std::nullopt, "a.npy"),
      Contains("a.npy: shape (4,); expected (T, T), (H, T, T), (N, H, T, T) or (layers, N, H, T, T)"));
  CHECK_THROWS_WITH(attention_map(f32_array({1, 1, 1, 1, 1, 1}, {1}), std::nullopt, "a.npy"),
                    Contains("shape (1, 1, 1, 1, 1, 1); expected"));
  CHECK_THROWS_WITH(attention_map(f32_array({2, 3}, {1, 0, 0, 0, 1, 0}), std::nullopt, "a.npy"),
                    Contains("a.npy: shape (2, 3) ends in 2 × 3; expected square (T, T) maps"));
  CHECK_THROWS_WITH(attention_map(f32_array({0, 0}, {}), std::nullopt, "a.npy"), Contains("is empty"));

  Array ids;
  ids.dtype = DType::i64;
  ids.shape = {1, 1};
  ids.data.resize(8);
  CHECK_THROWS_AS(attention_map(ids, std::nullopt, "ids.npy"), DtypeError);
  CHECK_THROWS_WITH(attention_map(ids, std::nullopt, "ids.npy"), Contains("ids.npy: dtype int64"));

  const Array stacked = f32_array({2, 1, 1, 1, 1}, {1, 1});
  CHECK_THROWS_AS(attention_map(stacked, 2, "s.npy"), ConfigError);
  CHECK_THROWS_WITH(attention_map(stacked, 2, "s.npy"),
                    Contains("--layer 2 is out of range: s.npy has 2 layers (0..1)"));
  CHECK_THROWS_WITH(attention_map(stacked, -1, "s.npy"), Contains("--layer -1 is out of range"));
  CHECK_THROWS_WITH(attention_map(f32_array({1, 1}, {1}), 0, "t.npy"),
                    Contains("--layer: t.npy has no layer axis (shape (1, 1))"));
}

TEST_CASE("attention_map warns about values that are not a softmax's, naming the first", "[attention_map]") {
  // (H = 2, T = 2): head 1, row 1 holds -0.5 and 1.5 (sums to 1, outside [0, 1]); head 0, row 1 sums to 0.5.
  const AttentionMap m = attention_map(f32_array({2, 2, 2}, {0.5f, 0.5f, 0.25f, 0.25f, 1, 0, -0.5f, 1.5f}),
                                       std::nullopt, "w.npy");
  REQUIRE(m.warnings.size() == 2);
  CHECK(m.warnings[0] ==
        "w.npy: 2 values outside [0, 1]; the first, -0.5, at batch 0, head 1, row 1, column 0");
  CHECK_THAT(m.warnings[1],
             Contains("w.npy: 1 row not summing to 1; the first at batch 0, head 0, row 1 sums "
                      "to 0.5"));
  // A NaN row (every key masked, in torch) is named too.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const AttentionMap n = attention_map(f32_array({2, 2}, {1, 0, nan, nan}), std::nullopt, "n.npy");
  REQUIRE(n.warnings.size() == 2);
  CHECK_THAT(n.warnings[0], Contains("2 values outside [0, 1]; the first, nan, at batch 0, head 0, row 1"));
  CHECK_THAT(n.warnings[1], Contains("row 1 sums to nan"));
}
