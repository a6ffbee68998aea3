// A GPT-2 in the app: the fixture model (tests/fixtures/gpt2/f32) chosen as a user chooses it, every
// panel drawn on its layers, a painted what-if that moves the next-token prediction, and the trained
// heads against the untrained ones in Compare.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "io/npy.hpp"
#include "masks.hpp"
#include "model_cache.hpp"
#include "panels/panels.hpp"
#include "temp_dir.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::HeadlessUi;

namespace {

const std::string kModel = std::string(MHA_FIXTURES_DIR) + "/gpt2/f32";

Scenario model_scenario(std::int64_t layer) {
  Scenario s;
  s.name = "fixture model";
  s.layer = layer;
  s.sentence = "the cat sat on the mat, then the cat ran";
  set_model(s, kModel);
  return s;
}

// The scenario opened as the app opens one, and its result landed.
void open_scenario(HeadlessUi& ui, AppState& state, Scenario s) {
  state.start(std::move(s));
  state.recompute();
  ui.settle(state);
}

}  // namespace

TEST_CASE("a GPT-2 folder as the scenario's model: sizes, tokens and every panel", "[ui][model]") {
  HeadlessUi ui;
  for (std::int64_t layer : {0, 2}) {
    AppState state;
    open_scenario(ui, state, model_scenario(layer));
    REQUIRE(state.errors.empty());
    REQUIRE(state.result.valid());
    REQUIRE(state.result.model);
    const auto& d = state.result.forward->dims;
    CHECK(d.N == 1);
    CHECK(d.E == 32);
    CHECK(d.H == 4);
    CHECK(d.L == 15);  // the model's tokenizer, not whitespace
    CHECK(state.scenario().embed_dim == 32);
    CHECK(state.result.query_tokens[1] ==
          "\xE2\x90\xA3"
          "cat");  // "␣cat"
    CHECK(state.result.model->layer == layer);
    CHECK(state.result.model->top_k.size() == 5);
    CHECK(state.result.model->untrained);
    for (const ViewInfo& view : views()) {
      state.apply(show_view(view.id));
      for (int f = 0; f < 4; ++f) REQUIRE(ui.frame(state, ImVec2(300.0f + 40 * f, 200.0f), f == 2) > 0);
    }
  }
}

TEST_CASE("a what-if mask at one layer moves the prediction; undo brings it back", "[ui][model]") {
  HeadlessUi ui;
  AppState state;
  open_scenario(ui, state, model_scenario(1));
  REQUIRE(state.result.model);
  const auto before = state.result.model->top_k;
  const std::vector<float> weights0 = state.result.forward->trace["attn_weights"].contiguous().data;

  // Block key 1 ("␣cat") for every query after it, at layer 1, as painting the mask does.
  const int T = int(state.scenario().L());
  Cells column;
  for (int i = 2; i < T; ++i) column.push_back({i, 1});
  REQUIRE(state.apply(paint_mask_cells(column, true)));
  ui.settle(state);
  REQUIRE(state.result.model);
  const auto after = state.result.model->top_k;
  bool moved = false;
  for (std::size_t k = 0; k < before.size(); ++k)
    moved = moved || before[k].id != after[k].id || before[k].probability != after[k].probability;
  CHECK(moved);
  CHECK(state.result.forward->trace["attn_weights"].at({0, 0, 5, 1}) == 0.0f);

  state.undo();
  ui.settle(state);
  CHECK(state.result.forward->trace["attn_weights"].contiguous().data == weights0);
  CHECK(state.result.model->top_k[0].id == before[0].id);
  CHECK(state.result.model->top_k[0].probability == before[0].probability);
}

namespace {

// The largest |weight − softmax(scores_masked)| over every row of a (1, H, T, T) result, in double.
double softmax_error(const mha::ForwardResult<float>& f) {
  const mha::Stage<float>& x = f.trace["scores_masked"];
  const mha::Stage<float>& w = f.trace["attn_weights"];
  const std::int64_t H = x.shape[1], T = x.shape[2];
  double worst = 0;
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < T; ++i) {
      double top = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j < T; ++j) top = std::max(top, double(x.at({0, h, i, j})));
      for (std::int64_t j = 0; j < T; ++j) sum += std::exp(double(x.at({0, h, i, j})) - top);
      for (std::int64_t j = 0; j < T; ++j)
        worst = std::max(
            worst, std::abs(double(w.at({0, h, i, j})) - std::exp(double(x.at({0, h, i, j})) - top) / sum));
    }
  return worst;
}

std::vector<float> weights_of(const mha::ForwardResult<float>& f) {
  return f.trace["attn_weights"].contiguous().data;
}

}  // namespace

TEST_CASE("temperature and the scale switch on a trained model: the chosen layer, the layers after it",
          "[ui][model]") {
  HeadlessUi ui;
  AppState state;
  open_scenario(ui, state, load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/model_induction.json"));
  REQUIRE(state.errors.empty());
  REQUIRE(state.result.model);
  REQUIRE(state.result.model->n_layer == 4);
  const ModelResult torch = *state.result.model;
  const std::int64_t dk = state.result.forward->dims.d_k;

  for (std::int64_t layer : {1, 0}) {
    INFO("layer " << layer);
    if (state.scenario().layer != layer) REQUIRE(state.apply(choose_layer(layer)));
    ui.settle(state);
    for (const auto& [id, value] :
         {std::pair<const char*, const char*>{"temperature", "3"}, {"scale_by_sqrt_dk", "false"}}) {
      INFO(id << " = " << value);
      REQUIRE(state.apply(set_control(id, value)));
      ui.settle(state);
      REQUIRE(state.errors.empty());
      REQUIRE(state.result.model);
      const ModelResult& now = *state.result.model;
      const mha::ForwardResult<float>& at = *now.layers[std::size_t(layer)];
      CHECK(state.result.forward == now.layers[std::size_t(layer)]);  // the views show the layer
      // The layer's scores are torch's divided by 3 (T = 3), then by √d_k less (scale off too).
      const double temperature = std::string(id) == "temperature" ? 3 : 3 / std::sqrt(double(dk));
      CHECK(at.score_divisor == Approx(std::sqrt(double(dk)) * temperature));
      const mha::Stage<float>& was = torch.layers[std::size_t(layer)]->trace["scores_scaled"];
      const mha::Stage<float>& scaled = at.trace["scores_scaled"];
      for (std::int64_t j = 0; j < 6; ++j)
        CHECK(scaled.at({0, 1, 9, j}) == Approx(was.at({0, 1, 9, j}) / temperature).margin(1e-5));
      CHECK(softmax_error(at) < 1e-6);
      CHECK(weights_of(at) != weights_of(*torch.layers[std::size_t(layer)]));  // the heatmaps change
      // The layers before it are torch's; those after it and the prediction follow.
      for (std::int64_t l = 0; l < now.n_layer; ++l)
        CHECK((weights_of(*now.layers[std::size_t(l)]) == weights_of(*torch.layers[std::size_t(l)])) ==
              (l < layer));
      CHECK(now.top_k[0].probability != torch.top_k[0].probability);
      // The untrained comparison gets the same what-if.
      CHECK(now.untrained->score_divisor == at.score_divisor);
    }
    state.undo();
    state.undo();
    ui.settle(state);
    CHECK(!state.scenario().what_if.active());
    CHECK(weights_of(*state.result.forward) == weights_of(*torch.layers[std::size_t(layer)]));
    CHECK(state.result.model->top_k[0].probability == torch.top_k[0].probability);
  }
  // Every panel draws a model's what-if.
  REQUIRE(state.apply(set_control("temperature", "0.5")));
  ui.settle(state);
  for (const ViewInfo& view : views()) {
    state.apply(show_view(view.id));
    for (int f = 0; f < 3; ++f) REQUIRE(ui.frame(state) > 0);
  }
  CHECK(state.errors.empty());
}

TEST_CASE("back to random init keeps the course's single module", "[ui][model]") {
  HeadlessUi ui;
  AppState state;
  open_scenario(ui, state, model_scenario(0));
  REQUIRE(state.apply(choose_model("")));
  ui.settle(state);
  REQUIRE(state.result.valid());
  CHECK(!state.result.model);
  // A scenario file with a model loads with the model's sizes whatever its own say.
  Scenario s = model_scenario(2);
  s.embed_dim = 8;
  const Scenario back = scenario_from_json(to_json(s), "test");
  CHECK(back.model == kModel);
  CHECK(back.layer == 2);
  CHECK(back.embed_dim == 32);
}

TEST_CASE("attention weights saved elsewhere open read-only in the Attention file view", "[ui][model]") {
  HeadlessUi ui;
  AppState state;
  open_scenario(ui, state, model_scenario(0));
  // (layers, N, H, T, T) = (2, 1, 4, 5, 5): causal rows, uniform over the visible keys.
  mha::Tensor<float> w({2, 1, 4, 5, 5});
  for (std::int64_t m = 0; m < 2 * 4; ++m)
    for (std::int64_t i = 0; i < 5; ++i)
      for (std::int64_t j = 0; j <= i; ++j) w.data[std::size_t((m * 5 + i) * 5 + j)] = 1.0f / float(i + 1);
  mha::test::TempDir tmp("mha_attention_");
  const std::string path = tmp.file("attention.npy");
  mha::write_npy(path, mha::to_array(w));
  const Scenario before = state.scenario();
  open_attention_file(ui.env.panels, path);
  AttentionFileInfo info = attention_file_info(ui.env.panels);
  CHECK(info.error.empty());
  CHECK(info.layers == 2);
  CHECK(info.H == 4);
  CHECK(info.T == 5);
  CHECK(info.warnings.empty());
  state.apply(show_view(ViewTab::attention_file));
  for (int f = 0; f < 4; ++f) REQUIRE(ui.frame(state, ImVec2(400, 300), f == 1) > 0);
  // A file that is not attention: the reason, and the file on screen stays.
  mha::write_npy(tmp.file("bad.npy"), mha::to_array(mha::Tensor<float>({2, 3})));
  open_attention_file(ui.env.panels, tmp.file("bad.npy"));
  info = attention_file_info(ui.env.panels);
  CHECK_THAT(info.error, Catch::Contains("bad.npy"));
  CHECK(info.T == 5);
  Scenario after = state.scenario();
  after.view = before.view;  // the tab shown is view state; nothing else of the scenario moves
  CHECK(mha::studio::to_json(after) == mha::studio::to_json(before));
}

// The presets on the shipped model that copies: what the induction heads do shows in the prediction,
// and taking them away (a blocked key, a knock-out) takes the copy away.
TEST_CASE("the induction preset predicts the copied word, and blocking its source or knocking out the heads stops it",
          "[ui][model]") {
  HeadlessUi ui;
  AppState state;
  auto top = [&](const char* preset) {
    open_scenario(ui, state, load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/" + preset + ".json"));
    REQUIRE(state.errors.empty());
    REQUIRE(state.result.model);
    const ModelResult& m = *state.result.model;
    REQUIRE(m.top_k.size() >= 2);
    return m;
  };
  const std::string dog = "\xE2\x90\xA3"
                          "dog";
  const ModelResult copy = top("model_induction");
  INFO("induction preset's top-1: " << copy.top_k_labels[0] << " " << copy.top_k[0].probability);
  CHECK(copy.top_k_labels[0] == dog);
  CHECK(copy.top_k[0].probability > 2 * copy.top_k[1].probability);  // a clear margin
  // Layer 1 may not see the first "dog": the copy's probability falls.
  const ModelResult blocked = top("model_what_if");
  double p_blocked = 0;
  for (std::size_t k = 0; k < blocked.top_k.size(); ++k)
    if (blocked.top_k_labels[k] == dog) p_blocked = blocked.top_k[k].probability;
  CHECK(p_blocked < copy.top_k[0].probability / 2);
  // The induction heads of layer 1 knocked out: "dog" is no longer the guess.
  const ModelResult knocked = top("model_knockout");
  CHECK(knocked.top_k_labels[0] != dog);
}
