// The window's settings and the keys, driven headless through the real UI code: presenter mode,
// the font, the colormap and the view shown survive undo, redo, open and a model switch; each key
// does in each view what `?` says there; the presenter strip carries the prediction, the what-ifs
// and the errors that the collapsed Controls panel would hold.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "panels/panels.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::HeadlessUi;

namespace {

std::string preset(const char* name) {
  return std::string(MHA_ASSETS_DIR) + "/presets/" + name + ".json";
}

// GLFW's codes for the named keys, as the app's backend maps them (the headless harness has none).
void map_keys() {
  ImGuiIO& io = ImGui::GetIO();
  io.KeyMap[ImGuiKey_LeftArrow] = 263;
  io.KeyMap[ImGuiKey_RightArrow] = 262;
  io.KeyMap[ImGuiKey_UpArrow] = 265;
  io.KeyMap[ImGuiKey_DownArrow] = 264;
  io.KeyMap[ImGuiKey_PageUp] = 266;
  io.KeyMap[ImGuiKey_PageDown] = 267;
  io.KeyMap[ImGuiKey_Escape] = 256;
}

// One press of `key` (a GLFW code: ASCII capitals for letters), as a hand would: down a frame, up a frame.
void press(HeadlessUi& ui, AppState& state, int key, bool ctrl = false, bool shift = false) {
  ImGuiIO& io = ImGui::GetIO();
  io.KeysDown[key] = true;
  io.KeyCtrl = ctrl;
  io.KeyShift = shift;
  ui.frame(state);
  io.KeysDown[key] = false;
  io.KeyCtrl = io.KeyShift = false;
  ui.frame(state);
}

void require_teacher_window(const AppState& state, ViewTab tab) {
  const WindowState& w = state.window();
  CHECK(w.presenter);
  CHECK(w.font_scale == 2.0f);
  CHECK(w.colormap == Colormap::magma);
  CHECK(w.tab == tab);
}

}  // namespace

TEST_CASE("presenter mode, the font, the colormap and the view survive undo, redo, open and a model switch",
          "[ui][window]") {
  HeadlessUi ui;
  map_keys();
  AppState state;
  state.start(load_scenario(preset("cat_sat_mat")));
  state.recompute();
  ui.settle(state);
  REQUIRE(state.apply(set_control("presenter", "true")));
  REQUIRE(state.apply(set_control("font_scale", "2")));
  REQUIRE(state.apply(set_control("colormap", "magma")));
  REQUIRE(state.apply(show_view(ViewTab::mask)));
  CHECK_FALSE(state.history.can_undo());  // view changes are not undo steps
  REQUIRE(state.apply(set_mask_preset("causal")));
  ui.settle(state);
  press(ui, state, 'Z', true);  // Ctrl+Z
  CHECK(state.scenario().mask.preset != MaskPreset::causal);
  require_teacher_window(state, ViewTab::mask);
  press(ui, state, 'Y', true);  // Ctrl+Y
  CHECK(state.scenario().mask.preset == MaskPreset::causal);
  require_teacher_window(state, ViewTab::mask);
  // A preset that names another view opens on the view shown.
  const Scenario heads_preset = load_scenario(preset("padded_batch"));
  REQUIRE(heads_preset.suggested_tab == ViewTab::heads);
  state.load(heads_preset, "open preset padded_batch");
  ui.settle(state);
  require_teacher_window(state, ViewTab::mask);
  // A model switch and back.
  state.load(load_scenario(preset("model_induction")), "open preset model_induction");
  ui.settle(state);
  REQUIRE(state.scenario().has_model());
  require_teacher_window(state, ViewTab::mask);
  REQUIRE(state.apply(choose_model("")));
  ui.settle(state);
  require_teacher_window(state, ViewTab::mask);
  state.undo();
  ui.settle(state);
  require_teacher_window(state, ViewTab::mask);
  // The command line and a lesson take the file's view.
  AppState fresh;
  fresh.start(load_scenario(preset("padded_batch")), true);
  CHECK(fresh.window().tab == ViewTab::heads);
}

TEST_CASE("Left / Right step the Pipeline's own stage there, the stage elsewhere, the step in Reshape",
          "[ui][window]") {
  HeadlessUi ui;
  map_keys();
  AppState state;
  state.start(load_scenario(preset("cat_sat_mat")));
  state.recompute();
  ui.settle(state);
  state.apply(show_view(ViewTab::pipeline));
  ui.frame(state);
  const std::string heads_stage = state.view().stage;
  REQUIRE(state.view().pipeline_stage == "attn_weights");
  for (int k = 0; k < 3; ++k) press(ui, state, 263);  // Left
  CHECK(state.view().pipeline_stage != "attn_weights");
  CHECK(state.view().stage == heads_stage);  // the Heads view's stage is its own
  press(ui, state, 262);
  const std::string after_right = state.view().pipeline_stage;
  CHECK(after_right != "attn_weights");
  state.apply(show_view(ViewTab::heads));
  ui.frame(state);
  press(ui, state, 262);  // Right: attn_weights -> context
  CHECK(state.view().stage == "context");
  CHECK(state.view().pipeline_stage == after_right);
  state.apply(show_view(ViewTab::reshape));
  ui.frame(state);
  const int step = state.view().reshape_step;
  press(ui, state, 262);
  CHECK(state.view().reshape_step == std::min(step + 1, 5));
  // Up / Down: the head; they stop at the ends.
  press(ui, state, 264);
  press(ui, state, 264);
  press(ui, state, 264);
  CHECK(state.view().sel_head == int(state.result.forward->dims.H) - 1);
}

TEST_CASE("? lists, for the view shown, what each key does there", "[ui][window]") {
  AppState state;
  auto find = [&](ViewTab v, const std::string& keys) -> std::string {
    for (const auto& [k, what] : key_help(state, v))
      if (k == keys) return what;
    return "";
  };
  CHECK(find(ViewTab::pipeline, "Left / Right") == "the stage shown below the graph");
  CHECK(find(ViewTab::reshape, "Left / Right") == "the reshape step");
  CHECK(find(ViewTab::heads, "Left / Right") ==
        "the stage shown: q, k, v, scores ... attn_weights, context, output");
  CHECK(find(ViewTab::complexity, "Left / Right").empty());  // does nothing there: not listed
  CHECK(find(ViewTab::heads, "PgUp / PgDn").empty());        // no model: no layers
  CHECK_FALSE(find(ViewTab::complexity, "F").empty());
  for (const ViewInfo& v : views()) CHECK_FALSE(find(v.id, "1 - 9, 0").empty());
}

TEST_CASE("F gives the view the whole window in every view; Esc leaves", "[ui][window]") {
  HeadlessUi ui;
  map_keys();
  AppState state;
  state.recompute();
  ui.settle(state);
  for (const ViewInfo& v : views()) {
    INFO(v.name);
    state.apply(show_view(v.id));
    ui.frame(state);
    press(ui, state, 'F');
    REQUIRE(state.window().focus);
    const PanelsShown p = panels_shown(state.window(), 1280, ImGui::GetFontSize());
    CHECK_FALSE(p.controls);
    CHECK_FALSE(p.inspector);
    press(ui, state, 256);  // Esc
    CHECK_FALSE(state.window().focus);
  }
}

TEST_CASE("the presenter strip carries the prediction, the what-ifs and every error", "[ui][window]") {
  HeadlessUi ui;
  AppState state;
  state.start(load_scenario(preset("model_induction")));
  state.recompute();
  ui.settle(state);
  state.apply(set_control("presenter", "true"));
  std::vector<StripLine> strip = presenter_strip(state);
  REQUIRE_FALSE(strip.empty());
  CHECK(strip.front().kind == StripLine::prediction);
  CHECK(strip.front().text.rfind("Next token:", 0) == 0);
  // A refused edit's reason is in the strip, where presenter mode hides the Controls panel.
  state.load(load_scenario(preset("cat_sat_mat")), "open");
  ui.settle(state);
  state.apply(set_control("num_heads", "3"));  // E = 8 does not split into 3 heads
  ui.settle(state);
  REQUIRE_FALSE(state.errors.empty());
  strip = presenter_strip(state);
  CHECK(std::any_of(strip.begin(), strip.end(), [&](const StripLine& l) {
    return l.kind == StripLine::error && l.text == state.errors.begin()->second;
  }));
  for (int f = 0; f < 3; ++f) REQUIRE(ui.frame(state) > 0);
}
