// The Overview and Token lines views, linked hover, the what-if controls' computation and the tab
// names in scenario files, driven headless through the real UI code (tests/ui_harness.hpp).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "errors.hpp"
#include "heatmap.hpp"
#include "panels/panels.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::HeadlessUi;

namespace {

// A fresh state computed for `s`, shown on `tab`.
void open(HeadlessUi& ui, AppState& state, const Scenario& s, ViewTab tab) {
  state.load(s, "test");
  state.apply(show_view(tab));
  ui.settle(state);
  REQUIRE(state.errors.empty());
  REQUIRE(state.result.valid());
  ui.frame(state);  // the view's second frame: sizes of the first are known
}

Scenario sized(std::int64_t L, std::int64_t H, std::int64_t E) {
  Scenario s;
  s.batch = 1;
  s.tgt_len = L;
  s.num_heads = H;
  s.embed_dim = E;
  s.mask.preset = MaskPreset::causal;
  apply_mask_preset(s);
  return s;
}

// A click: press, then release, at `p`.
void click(HeadlessUi& ui, AppState& state, ImVec2 p) {
  ui.frame(state, p, false);
  ui.frame(state, p, true);
  ui.frame(state, p, false);
}

float softmax_weight(const float* row, std::int64_t S, std::int64_t j) {
  float m = -INFINITY;
  for (std::int64_t k = 0; k < S; ++k) m = std::max(m, row[k]);
  double sum = 0;
  for (std::int64_t k = 0; k < S; ++k) sum += std::isinf(row[k]) ? 0.0 : std::exp(double(row[k] - m));
  return std::isinf(row[j]) ? 0.0f : float(std::exp(double(row[j] - m)) / sum);
}

}  // namespace

TEST_CASE("the Overview fits every head without scrolling up to H = 16 and L = 64", "[ui][views]") {
  for (const auto& [w, h] : {std::pair<float, float>{1280, 720}, {1920, 1080}}) {
    HeadlessUi ui(w, h);
    for (const std::int64_t H : {2, 8, 16})
      for (const std::int64_t L : {4, 32, 64}) {
        INFO(w << "x" << h << " H=" << H << " L=" << L);
        AppState state;
        open(ui, state, sized(L, H, H * 4), ViewTab::overview);
        const OverviewInfo& info = overview_info(ui.env.panels);
        CHECK(info.heads == H);
        CHECK(int(info.tiles.size()) == H);
        CHECK(info.cols * info.rows >= H);
        CHECK(info.fits);
        CHECK(info.cell >= 1.0f);
        if (L == 4 && H <= 8) CHECK(info.labels);  // 4 × 4 maps have room for their tokens
      }
  }
}

TEST_CASE("a click on an Overview tile opens that head in the Heads view", "[ui][views]") {
  HeadlessUi ui;
  AppState state;
  open(ui, state, sized(8, 4, 16), ViewTab::overview);
  const ImVec4 t = overview_info(ui.env.panels).tiles.at(2);  // head 2
  // The cell (row 5, column 3) of head 2's map.
  const float cell = (t.z - t.x) / 8.0f;
  click(ui, state, ImVec2(t.x + cell * 3.5f, t.y + cell * 5.5f));
  for (int f = 0; f < 3; ++f) ui.frame(state);  // the tab bar switches on the frame after it is asked
  CHECK(state.scenario().view.sel_head == 2);
  CHECK(state.scenario().view.sel_query == 5);
  CHECK(state.scenario().view.sel_key == 3);
  CHECK(state.window().tab == ViewTab::heads);
  CHECK(ui.env.shown_tab == int(ViewTab::heads));
}

TEST_CASE("the Overview of a model of several layers is a layers x heads grid with role tags", "[ui][views]") {
  HeadlessUi ui;
  AppState state;
  Scenario s = load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/model_induction.json");
  s.view.overview_layers = true;
  open(ui, state, s, ViewTab::overview);
  REQUIRE(state.result.model);
  const ModelResult& m = *state.result.model;
  REQUIRE(m.layers.size() == std::size_t(m.n_layer));
  CHECK(m.layers[std::size_t(m.layer)] == state.result.forward);
  const OverviewInfo& info = overview_info(ui.env.panels);
  CHECK(info.layers == m.n_layer);
  CHECK(int(info.tiles.size()) == m.n_layer * state.result.forward->dims.H);
  CHECK(info.fits);
  // The tags on screen are the role table's.
  int tagged = 0;
  for (std::int64_t l = 0; l < m.n_layer; ++l)
    for (std::int64_t h = 0; h < state.result.forward->dims.H; ++h) tagged += !head_role_label(m, l, h).empty();
  CHECK(tagged > 0);
  CHECK(info.tagged == tagged);

  // A tile of the other layer opens that layer's head.
  const int other = m.layer == 0 ? 1 : 0;
  const int H = int(state.result.forward->dims.H);
  const ImVec4 t = info.tiles.at(std::size_t(other * H + 1));
  click(ui, state, ImVec2((t.x + t.z) * 0.5f, (t.y + t.w) * 0.5f));
  ui.settle(state);
  CHECK(state.scenario().layer == other);
  CHECK(state.scenario().view.sel_head == 1);
  CHECK(state.window().tab == ViewTab::heads);

  // Off: the current layer's heads only.
  state.view().overview_layers = false;
  state.apply(show_view(ViewTab::overview));
  ui.settle(state);
  // The tab bar shows the view from the next frame, and the view draws once its weights are there
  // (computed beside the frames): a loaded machine may take a few frames more.
  for (int f = 0; f < 200 && overview_info(ui.env.panels).layers != 1; ++f) {
    ui.frame(state);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(overview_info(ui.env.panels).layers == 1);
  CHECK(int(overview_info(ui.env.panels).tiles.size()) == H);
}

TEST_CASE("Token lines: one line per visible weight, heads toggled, a hovered token keeps its lines",
          "[ui][views]") {
  HeadlessUi ui;
  AppState state;
  const std::int64_t L = 6, H = 2;
  open(ui, state, sized(L, H, 8), ViewTab::token_lines);
  const mha::Stage<float>& w = state.result.forward->trace["attn_weights"];
  auto expected_lines = [&](int only_q, std::vector<int> heads) {
    int n = 0;
    for (int h : heads)
      for (int i = 0; i < L; ++i)
        for (int j = 0; j < L; ++j)
          if ((only_q < 0 || i == only_q) && w.at({0, h, i, j}) >= 0.01f) ++n;
    return n;
  };
  const TokenLinesInfo& info = token_lines_info(ui.env.panels);
  CHECK(info.only_query == -1);
  CHECK(info.lines == expected_lines(-1, {0, 1}));
  CHECK(info.heads_drawn == std::vector<int>{0, 1});

  // Head 0 off: only head 1's lines.
  state.view().hidden_heads = {0};
  ui.frame(state);
  CHECK(info.heads_drawn == std::vector<int>{1});
  CHECK(info.lines == expected_lines(-1, {1}));
  state.view().hidden_heads.clear();

  // The pointer on query token 3 (left column): its lines only, and every view hears of it.
  const ImVec2 p(info.left_x + 2, info.top + info.row_h * 3.5f);
  ui.frame(state, p);
  ui.frame(state, p);
  CHECK(state.scenario().view.hover_query == 3);
  CHECK(token_lines_info(ui.env.panels).only_query == 3);
  CHECK(token_lines_info(ui.env.panels).queries_drawn == std::vector<int>{3});
  CHECK(token_lines_info(ui.env.panels).lines == expected_lines(3, {0, 1}));
  // The pointer leaves: all lines again.
  ui.frame(state);
  ui.frame(state);
  CHECK(state.scenario().view.hover_query == -1);
  CHECK(token_lines_info(ui.env.panels).lines == expected_lines(-1, {0, 1}));
}

TEST_CASE("linked hover: a Heads cell under the pointer marks its query and key everywhere", "[ui][views]") {
  HeadlessUi ui;
  AppState state;
  open(ui, state, sized(6, 2, 8), ViewTab::heads);
  // Sweep the pointer until it lands on a heatmap cell of the Heads view.
  bool found = false;
  for (float y = 120; y < 700 && !found; y += 9)
    for (float x = 320; x < 1000 && !found; x += 9) {
      ui.frame(state, ImVec2(x, y));
      ui.frame(state, ImVec2(x, y));
      found = state.scenario().view.hover_query >= 0 && state.scenario().view.hover_key >= 0;
    }
  REQUIRE(found);
  const int q = state.scenario().view.hover_query;
  // The Token lines view, drawn with that hover, keeps only query q's lines.
  state.apply(show_view(ViewTab::token_lines));
  state.view().hover_query = q;
  ui.frame(state);  // take_hover clears what no view reports; the test reports it as a view would
  report_hover(q, -1);
  ui.frame(state);
  CHECK(token_lines_info(ui.env.panels).only_query == q);
}

TEST_CASE("what-if: temperature and the scale change the scores as documented, and say so", "[ui][views]") {
  HeadlessUi ui;
  AppState state;
  Scenario s = sized(5, 2, 16);  // d_k = 8
  open(ui, state, s, ViewTab::heads);
  const auto torch = state.result.forward;
  const std::int64_t dk = torch->dims.d_k, S = torch->dims.S_total;

  for (const auto& [T, scale] : {std::pair<float, bool>{2.0f, true}, {1.0f, false}, {0.5f, false}}) {
    INFO("T=" << T << " scale " << scale);
    Action a;
    a.what = "what-if T=" + std::to_string(T) + (scale ? " scaled" : " unscaled");  // one undo step each
    a.slot = "what_if";
    a.change = [T = T, scale = scale](Scenario& x) {
      x.what_if.temperature = T;
      x.what_if.scale_by_sqrt_dk = scale;
    };
    REQUIRE(state.apply(a));
    ui.settle(state);
    REQUIRE(state.errors.empty());
    const mha::ForwardResult<float>& f = *state.result.forward;
    const double divisor = (scale ? std::sqrt(double(dk)) : 1.0) * T;
    const mha::Stage<float>& raw = f.trace["scores"];
    const mha::Stage<float>& scaled = f.trace["scores_scaled"];
    const mha::Stage<float>& masked = f.trace["scores_masked"];
    const mha::Stage<float>& wts = f.trace["attn_weights"];
    CHECK(scaled.formula.find("math.sqrt") == std::string::npos);
    CHECK(scaled.note.find("WHAT-IF") != std::string::npos);
    // Raw scores are untouched by the what-if; the scaled ones are raw / divisor.
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 5; ++i) {
        std::vector<float> row(static_cast<std::size_t>(S), 0.0f);
        for (std::int64_t j = 0; j < S; ++j) {
          CHECK(raw.at({0, h, i, j}) == Approx(torch->trace["scores"].at({0, h, i, j})).margin(1e-6));
          CHECK(scaled.at({0, h, i, j}) == Approx(raw.at({0, h, i, j}) / divisor).margin(1e-5));
          row[std::size_t(j)] = masked.at({0, h, i, j});
        }
        for (std::int64_t j = 0; j < S; ++j)
          CHECK(wts.at({0, h, i, j}) == Approx(softmax_weight(row.data(), S, j)).margin(1e-6));
      }
    // It round-trips through the file format, and the default is not written.
    const Scenario back = scenario_from_json(to_json(state.scenario()), "round trip");
    CHECK(back.what_if.temperature == T);
    CHECK(back.what_if.scale_by_sqrt_dk == scale);
  }
  // Lower temperature sharpens the rows: the largest weight of row 4 grows as T falls.
  auto top_weight = [&]() {
    float m = 0;
    for (std::int64_t j = 0; j < S; ++j)
      m = std::max(m, state.result.forward->trace["attn_weights"].at({0, 0, 4, j}));
    return m;
  };
  const float sharp = top_weight();  // T = 0.5, no scale
  state.undo();
  ui.settle(state);
  const float middle = top_weight();  // T = 1, no scale
  CHECK(sharp > middle);
  state.undo();
  state.undo();
  ui.settle(state);
  CHECK(!state.scenario().what_if.active());
  CHECK(to_json(state.scenario()).find("what_if") == std::string::npos);
  // torch's numbers are back.
  CHECK(state.result.forward->trace["attn_weights"].at({0, 1, 3, 2}) ==
        torch->trace["attn_weights"].at({0, 1, 3, 2}));
}

TEST_CASE("what-if with a model applies at its layer, and a bad temperature is a file error", "[views]") {
  Scenario s = load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/model_previous_token.json");
  const Built torch = build_forward(s);
  s.what_if.temperature = 2;
  const Built b = build_forward(s);  // the layer as one module: its what-if with it
  const std::int64_t dk = b.config.embed_dim / b.config.num_heads;
  CHECK(b.options.score_divisor == Approx(2 * std::sqrt(double(dk))));
  CHECK(b.inputs.query.identical(torch.inputs.query));  // the layers before it are torch's
  const mha::ForwardResult<float> f = mha::forward(b.config, b.weights, b.inputs, b.options);
  const mha::ForwardResult<float> t = mha::forward(torch.config, torch.weights, torch.inputs, torch.options);
  for (std::int64_t j = 0; j < 3; ++j)
    CHECK(f.trace["scores_scaled"].at({0, 0, 3, j}) ==
          Approx(t.trace["scores_scaled"].at({0, 0, 3, j}) / 2).margin(1e-6));
  CHECK_THROWS_AS(
      scenario_from_json(R"({"format": "mha-studio-scenario", "version": 1, "what_if": {"temperature": 0}})",
                         "t"),
      mha::FileError);
}

TEST_CASE("a file's view is saved by name, read by name in any case or by its old number", "[views]") {
  for (const ViewInfo& v : views()) {
    Scenario s;
    const std::string text = to_json(s, v.id);
    CHECK(text.find(std::string("\"") + v.file_name + "\"") != std::string::npos);
    CHECK(scenario_from_json(text, "t").suggested_tab == v.id);
    CHECK(find_view(v.name) == &v);
  }
  CHECK(scenario_from_json(R"({"format": "mha-studio-scenario", "version": 1, "view": {"tab": 3}})", "t")
            .suggested_tab == ViewTab::mask);
  CHECK(scenario_from_json(
            R"({"format": "mha-studio-scenario", "version": 1, "view": {"tab": "token_lines"}})", "t")
            .suggested_tab == ViewTab::token_lines);
  CHECK(scenario_from_json(
            R"({"format": "mha-studio-scenario", "version": 1, "view": {"tab": "Token Lines"}})", "t")
            .suggested_tab == ViewTab::token_lines);
  CHECK_FALSE(scenario_from_json(R"({"format": "mha-studio-scenario", "version": 1})", "t").suggested_tab);
  CHECK_THROWS_AS(scenario_from_json(
                      R"({"format": "mha-studio-scenario", "version": 1, "view": {"tab": "bertviz"}})", "t"),
                  mha::FileError);
  // Every view id is in the table once.
  std::vector<int> ids;
  for (const ViewInfo& v : views()) ids.push_back(int(v.id));
  std::sort(ids.begin(), ids.end());
  for (std::size_t t = 0; t < ids.size(); ++t) CHECK(ids[t] == int(t));
  CHECK(find_view("heads") == find_view("HEADS"));
  CHECK(find_view("large-l") == &view_info(ViewTab::large_l));
  CHECK(find_view("bertviz") == nullptr);
}

TEST_CASE("the padded_batch preset opens on a batch item that has padding", "[views]") {
  const Scenario s = load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/padded_batch.json");
  REQUIRE(s.mask.key_padding_shape.size() == 2);
  const std::int64_t S = s.mask.key_padding_shape[1], n = s.view.batch_index;
  REQUIRE(n >= 0);
  REQUIRE(n < s.mask.key_padding_shape[0]);
  int padded = 0;
  for (std::int64_t j = 0; j < S; ++j) padded += s.mask.key_padding[std::size_t(n * S + j)];
  CHECK(padded > 0);
  CHECK(s.suggested_tab == ViewTab::heads);
}

TEST_CASE("heatmap zoom: Ctrl+wheel grows the cells about the pointer, values appear, a right drag pans",
          "[ui][views]") {
  HeadlessUi ui;
  const int n = 40;
  std::vector<float> values(std::size_t(n * n));
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = float(k % 97) / 97.0f;
  Heatmap hm;
  hm.id = "zoom-test";
  hm.values = values.data();
  hm.rows = hm.cols = n;
  hm.row_stride = n;
  hm.zoomable = true;
  hm.size = ImVec2(400, 400);
  auto frame = [&](ImVec2 mouse, float wheel, bool ctrl, bool right) {
    ImGuiIO& io = ImGui::GetIO();
    io.DeltaTime = 1.0f / 60.0f;
    io.MousePos = mouse;
    io.MouseWheel = wheel;
    io.KeyCtrl = ctrl;
    io.MouseDown[1] = right;
    ImGui::NewFrame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(600, 600));
    ImGui::Begin("zoom", nullptr, ImGuiWindowFlags_NoDecoration);
    const HeatmapEvent ev = draw_heatmap(ui.textures, hm);
    const int text_vertices = ImGui::GetWindowDrawList()->VtxBuffer.Size;
    ImGui::End();
    ImGui::Render();
    return std::make_pair(ev, text_vertices);
  };
  auto [fit, fit_vtx] = frame(ImVec2(-1, -1), 0, false, false);
  const float cell0 = fit.cell;
  REQUIRE(cell0 < ImGui::GetFontSize());  // too small for values at first
  // The pointer on cell (row 20, column 10).
  const ImVec2 p(fit.grid_min.x + cell0 * 10.5f, fit.grid_min.y + cell0 * 20.5f);
  auto [before, v0] = frame(p, 0, false, false);
  CHECK(before.row == 20);
  CHECK(before.col == 10);
  HeatmapEvent ev = before;
  for (int k = 0; k < 12; ++k) ev = frame(p, 1, true, false).first;
  CHECK(ev.cell > cell0 * 8);
  CHECK(ev.row == 20);  // the cell under the pointer stays under it
  CHECK(ev.col == 10);
  const auto [zoomed, zoomed_vtx] = frame(p, 0, false, false);
  hm.show_values = false;
  const int no_values_vtx = frame(p, 0, false, false).second;
  hm.show_values = true;
  CHECK(zoomed_vtx > no_values_vtx + 4 * 4 * 4);  // at least four values of four glyphs are drawn now
  (void)fit_vtx;
  // Without Ctrl the wheel does not zoom (it scrolls the view).
  CHECK(frame(p, 1, false, false).first.cell == Approx(zoomed.cell));
  // A right-button drag to the right shows columns further left; the cell under the pointer follows it.
  const float dx = zoomed.cell * 1.5f;
  frame(p, 0, false, true);
  frame(ImVec2(p.x + dx, p.y), 0, false, true);
  const HeatmapEvent panned = frame(ImVec2(p.x + dx, p.y), 0, false, false).first;
  CHECK(panned.col == 10);
  CHECK(panned.row == 20);
  CHECK(panned.grid_min.x == Approx(zoomed.grid_min.x + dx).margin(1.0));
}

TEST_CASE("the Large L view computes with the scenario's mask preset made at its own L", "[views][large]") {
  Scenario s;
  s.batch = 2;
  s.tgt_len = 6;
  s.embed_dim = 8;
  s.num_heads = 2;
  s.mask.preset = MaskPreset::sliding_window;
  s.mask.window = 3;
  apply_mask_preset(s);
  const std::int64_t len = 40;
  const Built b = large_view_problem(s, len, false);
  REQUIRE(b.inputs.attn_mask);
  REQUIRE(b.inputs.attn_mask->values.shape == mha::Shape{len, len});
  Scenario at_len = s;
  at_len.tgt_len = at_len.src_len = len;
  at_len.mask.scope = MaskScope::shared;
  apply_mask_preset(at_len);
  const Built want = build_forward(at_len);
  REQUIRE(want.inputs.attn_mask);
  CHECK(b.inputs.attn_mask->values.data == want.inputs.attn_mask->values.data);
  // The window is there: key i - 3 is blocked for query i, keys i - 2 .. i are not.
  const auto blocked = [&](std::int64_t i, std::int64_t j) {
    const float v = b.inputs.attn_mask->values.data[std::size_t(i * len + j)];
    return v != 0;  // torch bool (True = blocked) or -inf
  };
  CHECK(blocked(20, 17));
  CHECK_FALSE(blocked(20, 18));
  CHECK_FALSE(blocked(20, 20));
  CHECK(blocked(20, 21));
  // Causal ticked: causal instead; a hand-drawn mask does not scale: none.
  const Built causal = large_view_problem(s, len, true);
  REQUIRE(causal.inputs.attn_mask);
  CHECK(causal.inputs.attn_mask->values.data[std::size_t(20 * len + 17)] == 0);
  s.mask.preset = MaskPreset::custom;
  CHECK_FALSE(large_view_problem(s, len, false).inputs.attn_mask);
  // The padding preset scales too, as a key_padding_mask.
  s.mask.preset = MaskPreset::padding;
  apply_mask_preset(s);
  const Built padded = large_view_problem(s, len, false);
  REQUIRE(padded.inputs.key_padding_mask);
  CHECK(padded.inputs.key_padding_mask->values.shape == mha::Shape{2, len});
}

TEST_CASE("every preset draws the Overview and Token lines with the pointer sweeping them", "[ui][views]") {
  HeadlessUi ui;
  for (const std::string& path : ui.env.presets) {
    INFO("preset " << path);
    AppState state;
    open(ui, state, load_scenario(path), ViewTab::overview);
    for (const ViewTab tab : {ViewTab::overview, ViewTab::token_lines, ViewTab::heads}) {
      state.apply(show_view(tab));
      for (int f = 0; f < 16; ++f) {
        const ImVec2 mouse(360.0f + float((f * 131) % 560), 90.0f + float((f * 71) % 560));
        REQUIRE(ui.frame(state, mouse, f % 5 == 2) > 0);
      }
    }
    // A hover, wherever it came from, stays inside the result's sizes.
    const ViewState& v = state.scenario().view;
    CHECK(v.hover_query < state.result.forward->dims.L);
    CHECK(v.hover_key < state.result.forward->dims.S_total);
  }
}
