// Every panel drawn for many frames with no window and no GL, at the teaching sizes, at L=128 with
// H=8, with each mask preset, for every preset scenario; the pointer sweeps the views so hover and
// click paths run too.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "ui_harness.hpp"

using namespace mha::app;
using mha::test::HeadlessUi;

namespace {

// Draws every tab for `frames` frames each, moving the mouse over a grid of points.
void sweep_tabs(HeadlessUi& ui, AppState& state, int frames) {
  for (int tab = 0; tab < kTabCount; ++tab) {
    ui.env.select_tab = tab;
    for (int f = 0; f < frames; ++f) {
      const ImVec2 mouse(200.0f + float((f * 97) % 900), 80.0f + float((f * 53) % 600));
      const int vertices = ui.frame(state, mouse, f % 7 == 3);
      INFO("tab " << kTabNames[tab] << " frame " << f);
      REQUIRE(vertices > 0);
    }
  }
}

}  // namespace

TEST_CASE("every preset scenario draws every panel", "[ui]") {
  HeadlessUi ui;
  REQUIRE(ui.env.presets.size() >= 6);
  for (const std::string& path : ui.env.presets) {
    INFO("preset " << path);
    AppState state;
    state.scenario = load_scenario(path);
    state.committed = state.scenario;
    state.recompute();
    ui.settle(state);
    REQUIRE(state.errors.empty());
    REQUIRE(state.result.valid());
    sweep_tabs(ui, state, 12);
    CHECK(ui.textures.uploads() > 0);
  }
}

TEST_CASE("teaching and large sizes with every mask preset", "[ui]") {
  HeadlessUi ui;
  struct Size {
    std::int64_t N, L, E, H;
  };
  for (const Size sz : {Size{3, 4, 8, 2}, Size{1, 128, 64, 8}}) {
    for (int p = 0; p <= int(MaskPreset::random); ++p) {
      INFO("N=" << sz.N << " L=" << sz.L << " E=" << sz.E << " H=" << sz.H << " preset "
                << to_string(MaskPreset(p)));
      AppState state;
      Scenario& s = state.scenario;
      s.batch = sz.N;
      s.tgt_len = sz.L;
      s.embed_dim = sz.E;
      s.num_heads = sz.H;
      s.mask.preset = MaskPreset(p);
      apply_mask_preset(s);
      state.committed = s;
      state.recompute();
      ui.settle(state);
      REQUIRE(state.errors.empty());
      REQUIRE(state.result.valid());
      CHECK(state.result.forward->dims.L == sz.L);
      sweep_tabs(ui, state, sz.L > 32 ? 4 : 8);
    }
  }
}

TEST_CASE("an invalid size is shown inline and the last result stays", "[ui]") {
  HeadlessUi ui;
  AppState state;
  state.committed = state.scenario;
  state.recompute();
  ui.settle(state);
  REQUIRE(state.result.valid());
  const auto before = state.result.forward;
  state.scenario.num_heads = 3;  // 8 % 3 != 0
  state.edited("H num_heads");
  ui.frame(state);
  REQUIRE(state.errors.count("num_heads") == 1);
  CHECK_THAT(state.errors["num_heads"], Catch::Contains("embed_dim 8 not divisible by num_heads 3"));
  CHECK(state.result.forward == before);  // still on screen
  CHECK(state.stale);
  sweep_tabs(ui, state, 3);  // every view still draws from the last valid result
  state.undo();
  ui.frame(state);
  CHECK(state.errors.empty());
  CHECK(state.scenario.num_heads == 2);
}
