// The views at a projector's 1280×720 with presenter mode's 2× font, and at 1920×1080: whole heads on
// screen, the Pipeline's graph zoomed to fit, Reshape's RuntimeError in view, every token label
// drawn where there is room (and the ones that matter always), the head average's entropy maximum,
// the Pipeline's pickers and Token lines' width. Driven headless through the real UI code.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "heatmap.hpp"
#include "panels/panels.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::HeadlessUi;

namespace {

// A window of w × h; `font_scale` 2 is presenter mode at 2× (the app rebuilds its atlas at 34 px).
struct Screen {
  float w, h, font_scale;
};
constexpr Screen kProjector{1280, 720, 2}, kFullHd{1920, 1080, 1};

struct Session {
  HeadlessUi ui;
  AppState state;
  explicit Session(const Screen& s) : ui(s.w, s.h) {
    if (s.font_scale != 1) {
      load_fonts(MHA_ASSETS_DIR, 17.0f * s.font_scale);
      unsigned char* px;
      int tw, th;
      ImGui::GetIO().Fonts->GetTexDataAsRGBA32(&px, &tw, &th);
    }
  }
  // A shipped preset opened as File > Open does, shown on `tab`, its result landed and drawn twice.
  void open(const std::string& preset, ViewTab tab, const Screen& s) {
    open(preset_scenario(preset), tab, s);
  }
  static Scenario preset_scenario(const std::string& preset) {
    return load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/" + preset + ".json");
  }
  void open(Scenario scenario, ViewTab tab, const Screen& s) {
    state.start(std::move(scenario));
    state.recompute();
    ui.settle(state);
    REQUIRE(state.errors.empty());
    REQUIRE(state.result.valid());
    state.apply(set_control("presenter", s.font_scale != 1 ? "true" : "false"));
    state.apply(set_control("font_scale", std::to_string(s.font_scale)));
    show(tab);
  }
  void show(ViewTab tab) {
    state.apply(show_view(tab));
    ui.settle(state);
    ui.frame(state);  // the view's second frame: sizes of the first are known
  }
};

bool inside(const ImVec4& r, const ImVec4& region, float slack = 1.0f) {
  return r.x >= region.x - slack && r.y >= region.y - slack && r.z <= region.z + slack &&
         r.w <= region.w + slack;
}

std::string str(const ImVec4& r) {
  return "(" + std::to_string(r.x) + ", " + std::to_string(r.y) + ")-(" + std::to_string(r.z) + ", " +
         std::to_string(r.w) + ")";
}

}  // namespace

TEST_CASE("axis labels: lanes, then a smaller font, then cut short, before any is left out", "[ui][layout]") {
  // Cells a text line tall or more: every label, whole, on one lane.
  AxisLabels a = plan_axis_labels(20, 17, 50, 136, 0.65f, 7);
  CHECK(a.lanes == 1);
  CHECK(a.step == 1);
  CHECK(a.scale == 1.0f);
  CHECK(a.lane_depth == 50.0f);
  // Half a line: two lanes at full size, twice as deep.
  a = plan_axis_labels(8.5f, 17, 50, 136, 0.65f, 7);
  CHECK(a.lanes == 2);
  CHECK(a.step == 1);
  CHECK(a.scale == 1.0f);
  CHECK(a.depth == 107.0f);
  // Nearly a line: one lane at a slightly smaller font reads better than two.
  a = plan_axis_labels(15, 17, 50, 136, 0.65f, 7);
  CHECK(a.lanes == 1);
  CHECK_THAT(a.scale, Catch::Matchers::WithinRel(15.0f / 17.0f, 1e-6f));
  // Long words on three lanes are cut to the room, never past the depth allowed.
  a = plan_axis_labels(5, 17, 200, 136, 0.65f, 7);
  CHECK(a.lanes == 3);
  CHECK(a.step == 1);
  CHECK(a.depth <= 136.0f);
  CHECK(a.lane_depth < 200 * a.scale);
  // No room at a readable size: every step-th label at the smallest font, on as many lanes as the
  // room of one lane of whole labels holds: two lanes of 0.6 × 150 px in 150 + a gap of 14 (every 8th:
  // 2 lanes × 8 cells × 2 px hold a line of 0.6 × 34 px).
  a = plan_axis_labels(2, 34, 150, 272, 0.6f, 14);
  CHECK(a.step == 8);
  CHECK(a.lanes == 2);
  CHECK(a.scale == 0.6f);
  a = plan_axis_labels(2, 34, 60, 272, 0.6f, 14);  // short words: one lane, every 16th
  CHECK(a.step == 16);
  CHECK(a.lanes == 1);
  CHECK(a.scale == 0.6f);
  // ... and with no depth for lanes, on one lane at full size.
  a = plan_axis_labels(2, 34, 60, 30, 0.6f, 14);
  CHECK(a.step == 32);
  CHECK(a.lanes == 1);
  CHECK(a.scale == 1.0f);
  CHECK_THAT(label_min_scale(17), Catch::Matchers::WithinRel(11.0f / 17.0f, 1e-6f));
  CHECK_THAT(label_min_scale(34), Catch::Matchers::WithinRel(0.6f, 1e-6f));
}

TEST_CASE("at 1280x720 with a 2x font the Heads view shows whole heads: every query row on screen",
          "[ui][layout]") {
  const char* preset = GENERATE("model_induction", "model_what_if", "course_notebook", "gqa", "cat_sat_mat");
  Session s(kProjector);
  s.open(preset, ViewTab::heads, kProjector);
  const HeadsInfo& info = heads_info(s.ui.env.panels);
  REQUIRE(info.maps.size() == std::size_t(s.state.result.forward->dims.H + 1));
  INFO(preset << ": view " << str(info.view) << ", cell " << info.cell);
  // The first row of maps lies inside the view, every row of every map in it.
  const float top_y = info.maps[0].grid_min.y;
  int whole = 0;
  for (const HeatmapEvent& ev : info.maps) {
    if (ev.grid_min.y != top_y) continue;
    const ImVec4 g(ev.grid_min.x, ev.grid_min.y, ev.grid_max.x, ev.grid_max.y);
    INFO("map " << str(g));
    CHECK(inside(g, info.view));
    ++whole;
  }
  CHECK(whole >= 1);
  CHECK(info.cell >= 3.0f);
}

TEST_CASE("at 1920x1080 every one of model_induction's 26 tokens is labelled on both axes", "[ui][layout]") {
  Session s(kFullHd);
  s.open("model_induction", ViewTab::heads, kFullHd);
  const HeadsInfo& info = heads_info(s.ui.env.panels);
  REQUIRE(info.maps.size() == 9);  // eight heads and their average
  for (const HeatmapEvent& ev : info.maps) {
    INFO("cell " << ev.cell << ", label scale " << ev.label_scale);
    CHECK(ev.row_labels_drawn.size() == 26);
    CHECK(ev.col_labels_drawn.size() == 26);
    CHECK(ev.label_scale >= label_min_scale(ImGui::GetFontSize()));
  }
}

TEST_CASE("an 8-token sentence at 2x is labelled in full, and a hovered token is labelled at any size",
          "[ui][layout]") {
  for (const Screen& screen : {kProjector, kFullHd}) {
    Session s(screen);
    s.open("cat_sat_mat", ViewTab::heads, screen);
    const HeadsInfo& info = heads_info(s.ui.env.panels);
    const int L = int(s.state.result.forward->dims.L);
    REQUIRE(!info.maps.empty());
    for (const HeatmapEvent& ev : info.maps) {
      CHECK(int(ev.row_labels_drawn.size()) == L);
      CHECK(int(ev.col_labels_drawn.size()) == L);
    }
  }
  // model_induction at 2x: too little room for 26 labels, but the hovered query and key are drawn.
  Session s(kProjector);
  s.open("model_induction", ViewTab::heads, kProjector);
  // The pointer over cell (21, 13) of the first map: the next frame marks that token in every map.
  const HeatmapEvent first = heads_info(s.ui.env.panels).maps.at(0);
  const ImVec2 p(first.grid_min.x + first.cell * 13.5f, first.grid_min.y + first.cell * 21.5f);
  s.ui.frame(s.state, p);
  s.ui.frame(s.state, p);
  REQUIRE(s.state.view().hover_query == 21);
  REQUIRE(s.state.view().hover_key == 13);
  const HeadsInfo& info = heads_info(s.ui.env.panels);
  REQUIRE(!info.maps.empty());
  for (const HeatmapEvent& ev : info.maps) {
    CHECK(std::count(ev.row_labels_drawn.begin(), ev.row_labels_drawn.end(), 21) == 1);
    CHECK(std::count(ev.col_labels_drawn.begin(), ev.col_labels_drawn.end(), 13) == 1);
  }
}

TEST_CASE("the key a mask edit blocks keeps its label on every map (model_what_if's dog)", "[ui][layout]") {
  for (const Screen& screen : {kProjector, kFullHd}) {
    Session s(screen);
    s.open("model_what_if", ViewTab::heads, screen);
    const std::vector<std::string>& keys = s.state.result.key_tokens;
    // The preset blocks the first "dog" (and only it) beyond the causal mask.
    int dog = -1;
    for (int j = 0; j < int(keys.size()) && dog < 0; ++j)
      if (keys[std::size_t(j)].find("dog") != std::string::npos) dog = j;
    REQUIRE(dog >= 0);
    const HeadsInfo& info = heads_info(s.ui.env.panels);
    REQUIRE(!info.maps.empty());
    for (const HeatmapEvent& ev : info.maps) {
      INFO(screen.w << "x" << screen.h << " cell " << ev.cell);
      CHECK(std::count(ev.col_labels_drawn.begin(), ev.col_labels_drawn.end(), dog) == 1);
    }
  }
}

TEST_CASE("the head average's entropy maximum counts the keys a row may see", "[ui][layout]") {
  Session s(kFullHd);
  Scenario causal = Session::preset_scenario("cat_sat_mat");
  causal.mask.preset = MaskPreset::causal;
  apply_mask_preset(causal);
  s.open(causal, ViewTab::heads, kFullHd);
  const HeadsInfo& info = heads_info(s.ui.env.panels);
  const auto& d = s.state.result.forward->dims;
  REQUIRE(info.entropy_max.size() == std::size_t(d.H + 1));
  // Causal: row i sees i + 1 keys, so every map's maximum is the mean of log2(i + 1).
  double expected = 0;
  for (int i = 0; i < int(d.L); ++i) expected += std::log2(double(i + 1));
  expected /= double(d.L);
  for (const double m : info.entropy_max) CHECK_THAT(m, Catch::Matchers::WithinAbs(expected, 1e-9));
}

TEST_CASE("at 1280x720 with a 2x font the Pipeline zooms its graph to fit its height", "[ui][layout]") {
  // A short view: the graph's rows fit its height, and it scrolls sideways to the chosen stage.
  for (const char* preset : {"course_notebook", "model_induction", "gqa"}) {
    INFO(preset);
    Session s(kProjector);
    s.open(preset, ViewTab::pipeline, kProjector);
    const PipelineInfo& info = pipeline_info(s.ui.env.panels);
    INFO("graph " << str(info.graph) << " in " << str(info.graph_view) << ", zoom " << info.zoom
                  << ", chosen " << str(info.selected_box));
    CHECK(info.graph.y >= info.graph_view.y);
    CHECK(info.graph.w <= info.graph_view.w);
    CHECK(inside(info.selected_box, info.graph_view));
    CHECK(inside(info.graph_view, info.view));
    CHECK(info.zoom < 1.0f);
    CHECK(info.label_px >= 11.0f);
    CHECK(info.label_px >= 0.45f * ImGui::GetFontSize());
  }
  Session s(kFullHd);  // room enough: no zoom
  s.open("course_notebook", ViewTab::pipeline, kFullHd);
  CHECK(pipeline_info(s.ui.env.panels).zoom == 1.0f);
}

TEST_CASE("the Pipeline's head picker is labelled by its own label, before it", "[ui][layout]") {
  Session s(kFullHd);
  s.open("course_notebook", ViewTab::pipeline, kFullHd);
  const PipelineInfo& info = pipeline_info(s.ui.env.panels);
  INFO("label " << str(info.head_label) << ", slider " << str(info.head_slider));
  REQUIRE(info.head_slider.z > info.head_slider.x);
  CHECK(info.head_label.z <= info.head_slider.x);
  CHECK(info.head_slider.x - info.head_label.z < ImGui::GetFontSize());
  CHECK(std::fabs(info.head_label.y - info.head_slider.y) < ImGui::GetFontSize());
}

TEST_CASE("at 1280x720 with a 2x font Reshape's mistake 2 shows its RuntimeError on screen", "[ui][layout]") {
  for (const char* preset : {"course_notebook", "model_induction", "cat_sat_mat"}) {
    INFO(preset);
    Session s(kProjector);
    s.open(preset, ViewTab::reshape, kProjector);
    s.state.view().mistake = 2;
    s.state.view().reshape_step = 5;
    s.ui.frame(s.state);
    s.ui.frame(s.state);
    const ReshapeInfo& info = reshape_info(s.ui.env.panels);
    INFO("message " << str(info.message) << " in " << str(info.view));
    REQUIRE(info.message.w > info.message.y);
    CHECK(inside(info.message, info.view));
  }
}

TEST_CASE("Token lines use the panel's width", "[ui][layout]") {
  for (const Screen& screen : {kProjector, kFullHd}) {
    Session s(screen);
    s.open("cat_sat_mat", ViewTab::token_lines, screen);
    const TokenLinesInfo& info = token_lines_info(s.ui.env.panels);
    const float width = info.view_x1 - info.view_x0;
    INFO(screen.w << "x" << screen.h << ": lines from " << info.left_x << " to " << info.right_x << " in "
                  << info.view_x0 << "-" << info.view_x1);
    REQUIRE(width > 0);
    CHECK(info.right_x - info.left_x >= 0.8f * width);
  }
}

TEST_CASE("the shipped Llama-style model: RoPE's two maps fit side by side at 1280x720 2x and 1920x1080",
          "[ui][layout][llama]") {
  {
    const Screen screen = GENERATE(kProjector, kFullHd);
    Session s(screen);
    s.open("model_gqa_rope", ViewTab::heads, screen);
    REQUIRE(s.state.result.model);
    const ModelResult& m = *s.state.result.model;
    CHECK(m.sizes.n_kv_head < m.sizes.n_head);  // grouped-query attention
    REQUIRE(m.scores_without_rope);
    const HeadsInfo& info = heads_info(s.ui.env.panels);
    REQUIRE(info.maps.size() == 2);  // without RoPE, with RoPE
    for (const HeatmapEvent& ev : info.maps) {
      const ImVec4 g(ev.grid_min.x, ev.grid_min.y, ev.grid_max.x, ev.grid_max.y);
      INFO("map " << str(g) << " in " << str(info.view));
      CHECK(inside(g, info.view));
      CHECK(ev.cell >= 3.0f);
    }
    CHECK(info.maps[0].grid_max.x <= info.maps[1].grid_min.x);  // side by side
    // The stage is a view choice like any other: back to the weights, every head's map again.
    s.state.apply(set_control("stage", "attn_weights"));
    s.ui.settle(s.state);
    s.ui.frame(s.state);
    CHECK(heads_info(s.ui.env.panels).maps.size() == std::size_t(m.sizes.n_head + 1));
  }
}
