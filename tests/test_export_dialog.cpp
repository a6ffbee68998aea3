// The app's Export dialog: the figure requests the views build (Heads, its RoPE figure, Compare, Mask),
// written by export_choice as the dialog's Export button does, in the Heads view's colours; errors come back
// as messages and the scenario is untouched; the Export... button opens the dialog (headless ImGui, fake
// mouse).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "colour_range.hpp"
#include "data_dir.hpp"
#include "export_dialog.hpp"
#include "reshape_export.hpp"
#include "temp_dir.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::TempDir;

namespace {

std::string head_of(const std::string& path, std::size_t n) {
  std::ifstream f(path, std::ios::binary);
  std::string s(n, '\0');
  f.read(&s[0], std::streamsize(n));
  return s.substr(0, std::size_t(f.gcount()));
}

void load_preset(AppState& state, const std::string& name) {
  state.start(load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/" + name + ".json"));
  state.recompute();
  for (int i = 0; i < 2000 && !state.result.valid(); ++i) state.tick(double(i));
}

}  // namespace

TEST_CASE("export dialog: every choice of the Heads request writes PNG, SVG, PDF and CSV", "[ui][export]") {
  mha::test::HeadlessUi ui;  // an ImGui context: the panels' requests are built inside frames
  AppState state;
  load_preset(state, "cat_sat_mat");
  REQUIRE(state.result.valid());
  const FigureRequest req = stage_request(state, "attn_weights", 1);
  REQUIRE(req.choices.size() == 3);
  CHECK(req.disabled_reason.empty());
  TempDir dir;
  for (const FigureChoice& c : req.choices) {
    INFO(c.label);
    const std::string png = dir.file(c.file_stem + ".png"), svg = dir.file(c.file_stem + ".svg");
    CHECK(export_choice(c, {"png", false, false}, png).empty());
    CHECK(head_of(png, 4) == "\x89PNG");
    CHECK(export_choice(c, {"svg", true, true}, svg).empty());
    CHECK(head_of(svg, 5) == "<?xml");
    CHECK(export_choice(c, {"pdf", false, false}, dir.file(c.file_stem + ".pdf")).empty());
    CHECK(head_of(dir.file(c.file_stem + ".pdf"), 5) == "%PDF-");
  }
  // CSV: one slice, labelled with the sentence; the grid is refused with a message.
  const std::string csv = dir.file("w.csv");
  CHECK(export_choice(req.choices[0], {"csv", false, false}, csv).empty());
  CHECK(head_of(csv, 12) == ",the,cat,sat");
  CHECK_THAT(export_choice(req.choices[2], {"csv", false, false}, dir.file("grid.csv")),
             Catch::Contains("one 2-D slice"));
}

TEST_CASE("export dialog: an unwritable folder or no name is a message, the app state is kept",
          "[ui][export]") {
  mha::test::HeadlessUi ui;
  AppState state;
  load_preset(state, "padded_batch");
  const std::string before = to_json(state.scenario());
  const FigureRequest req = stage_request(state, "attn_weights", 0);
  const std::string msg = export_choice(req.choices[0], {}, "/nonexistent-folder/x.png");
  CHECK_THAT(msg, Catch::Contains("/nonexistent-folder/x.png") && Catch::Contains("No such file"));
  CHECK_THAT(export_choice(req.choices[0], {}, ""), Catch::Contains("no file name"));
  CHECK(to_json(state.scenario()) == before);
  CHECK(state.result.valid());
  // The merged mask of the padded batch (what the Mask view exports): hatched cells in the SVG.
  mha::exporter::StageSlice sl;
  sl.stage = "attn_mask";
  sl.batch_index = 1;
  auto fwd = state.result.forward;
  const FigureChoice mask{"mask", "mask", [fwd, sl] { return mha::exporter::stage_figure(*fwd, sl); }};
  TempDir dir;
  CHECK(export_choice(mask, {"svg", false, false}, dir.file("mask.svg")).empty());
  std::ifstream f(dir.file("mask.svg"));
  const std::string svg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(svg.find("stroke:rgb(15.686275%,15.686275%,15.686275%)") != std::string::npos);  // hatching, #282828
}

TEST_CASE("export dialog: the Export... button opens the dialog, a disabled one does not", "[ui][export]") {
  mha::test::HeadlessUi ui;
  AppState state;
  load_preset(state, "course_notebook");
  FigureRequest req = stage_request(state, "attn_weights", 0);
  FigureRequest off;
  off.id = "off";
  off.disabled_reason = "no result to export yet";
  auto frame = [&](const FigureRequest& r, bool down) {
    ImGuiIO& io = ImGui::GetIO();
    io.DeltaTime = 1.0f / 60.0f;
    io.MousePos = ImVec2(20, 16);  // on the button: the window's first item
    io.MouseDown[0] = down;
    ImGui::NewFrame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(600, 400));
    ImGui::Begin("test", nullptr, ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoMove);
    export_button(state, r);
    ImGui::PushID(r.id.c_str());
    const bool open = ImGui::IsPopupOpen("Export figure");
    ImGui::PopID();
    ImGui::End();
    ImGui::Render();
    return open;
  };
  CHECK_FALSE(frame(off, false));
  CHECK_FALSE(frame(off, true));
  CHECK_FALSE(frame(off, false));
  CHECK_FALSE(frame(req, false));
  frame(req, true);
  frame(req, false);  // released on the button: clicked
  CHECK(frame(req, false));
}

TEST_CASE("export dialog: a drawing choice (the reshape figure) writes PNG, SVG and PDF, refuses CSV",
          "[ui][export]") {
  mha::test::HeadlessUi ui;
  AppState state;
  load_preset(state, "gqa");
  REQUIRE(state.result.valid());
  auto fwd = state.result.forward;
  FigureChoice c;
  c.label = "reshape";
  c.drawing = [fwd](bool transparent) {
    mha::exporter::ReshapeSpec rs;
    rs.transparent = transparent;
    rs.font_path = MHA_DEFAULT_FONT;
    return mha::exporter::reshape_figure(*fwd, rs).drawing;
  };
  TempDir dir;
  CHECK(export_choice(c, {"png", false, true}, dir.file("r.png")).empty());
  CHECK(head_of(dir.file("r.png"), 4) == "\x89PNG");
  CHECK(export_choice(c, {"svg", false, false}, dir.file("r.svg")).empty());
  CHECK(head_of(dir.file("r.svg"), 5) == "<?xml");
  CHECK(export_choice(c, {"pdf", false, false}, dir.file("r.pdf")).empty());
  CHECK(head_of(dir.file("r.pdf"), 5) == "%PDF-");
  CHECK_THAT(export_choice(c, {"csv", false, false}, dir.file("r.csv")),
             Catch::Contains("an image: png, svg, pdf, not csv"));
}

TEST_CASE("export dialog: the Heads view's scores without RoPE export the RoPE figure",
          "[ui][export][rope]") {
  mha::test::HeadlessUi ui;
  AppState state;
  load_preset(state, "model_gqa_rope");                      // the Llama-style model, layer 1, on that choice
  for (int i = 0; i < 4000 && !state.result.valid(); ++i) {  // a model's forward takes longer
    state.tick(double(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(state.result.valid());
  REQUIRE(state.result.model);
  REQUIRE(state.result.model->scores_without_rope);
  CHECK(state.scenario().view.stage == mha::exporter::kRopeStage);
  const FigureRequest req = stage_request(state, mha::exporter::kRopeStage, 5);
  CHECK(req.disabled_reason.empty());
  REQUIRE(req.choices.size() == 1);
  const FigureChoice& c = req.choices[0];
  REQUIRE(c.drawing);
  CHECK(c.file_stem == "mha-rope-layer1-head5");
  TempDir dir;
  for (const char* format : {"png", "svg", "pdf"}) {
    INFO(format);
    const std::string path = dir.file(c.file_stem + "." + format);
    CHECK(export_choice(c, {format, false, false}, path).empty());
    CHECK(head_of(path, 4) == (std::string(format) == "png" ? "\x89PNG"
                               : format[0] == 's'           ? "<?xm"
                                                            : "%PDF"));
  }
  CHECK_THAT(export_choice(c, {"csv", false, false}, dir.file("r.csv")), Catch::Contains("not csv"));
  // The figure of the scores the app holds is the exporter's own from the trace (what `mha export
  // --figure rope` draws).
  mha::exporter::RopeSpec spec;
  spec.head = 5;
  spec.query_labels = state.result.query_tokens;
  spec.title_prefix = "layer 1  ";
  spec.font_path = mha::platform::default_font().path;
  CHECK(mha::exporter::render_png(c.drawing(false)) ==
        mha::exporter::render_png(mha::exporter::rope_figure(*state.result.forward, spec).drawing));
  // Without rotary positions there is nothing to draw: the button says why.
  AppState plain;
  load_preset(plain, "cat_sat_mat");
  REQUIRE(plain.result.valid());
  const FigureRequest off = stage_request(plain, mha::exporter::kRopeStage, 0);
  CHECK(off.choices.empty());
  CHECK_THAT(off.disabled_reason, Catch::Contains("rotary"));
}

TEST_CASE("export dialog: the Heads request draws in the view's colours, range and row scaling",
          "[ui][export]") {
  mha::test::HeadlessUi ui;
  AppState state;
  load_preset(state, "course_notebook");  // nn.MultiheadAttention at its random init
  REQUIRE(state.result.valid());
  const mha::Stage<float>& w = state.result.forward->trace["attn_weights"];  // (N, H, L, S)
  const int b = state.view().batch_index;
  // The range the Heads view colours this batch item's weights on: every head's finite values.
  mha::render::ValueRange seen;
  for (std::int64_t h = 0; h < w.shape[1]; ++h)
    for (std::int64_t i = 0; i < w.shape[2]; ++i)
      for (std::int64_t j = 0; j < w.shape[3]; ++j) seen.add(w.at({b, h, i, j}));
  REQUIRE(seen.hi < 0.9f);  // random-init weights: on a fixed 0-1 range the figure is one colour

  state.apply(mha::studio::set_control("colormap", "magma"));
  state.view().weights_row_scale = false;
  FigureRequest req = stage_request(state, "attn_weights", 1);
  for (const FigureChoice& c : req.choices) {
    INFO(c.label);
    const mha::exporter::StageFigure fig = c.make();
    const mha::render::ColourRange screen =
        mha::render::auto_colour_range(seen, mha::render::Colormap::magma, true, false);
    CHECK(fig.spec.colormap == mha::render::Colormap::magma);
    CHECK(fig.spec.vmin == screen.vmin);
    CHECK(fig.spec.vmax == screen.vmax);
    CHECK_FALSE(fig.spec.row_scale);
  }
  // Row scaling on: the figure's rows too, the colorbar 0 to 1.
  state.view().weights_row_scale = true;
  req = stage_request(state, "attn_weights", 1);
  const mha::exporter::StageFigure rows = req.choices[0].make();
  CHECK(rows.spec.row_scale);
  CHECK(rows.spec.vmax == 1);
  // The diverging map the view may hold is not the weights' (viridis on screen), but is the scores'.
  state.apply(mha::studio::set_control("colormap", "diverging"));
  CHECK(stage_request(state, "attn_weights", 0).choices[0].make().spec.colormap ==
        mha::render::Colormap::viridis);
  state.apply(mha::studio::set_control("colormap", "cividis"));
  const mha::exporter::StageFigure scores = stage_request(state, "scores", 0).choices[0].make();
  CHECK(scores.spec.colormap == mha::render::Colormap::diverging);
  CHECK(scores.spec.vmin == -scores.spec.vmax);
  CHECK_FALSE(scores.spec.row_scale);

  // Written through the dialog's writer, the PNG is the figure's, byte for byte.
  TempDir dir;
  state.view().weights_row_scale = false;
  state.apply(mha::studio::set_control("colormap", "viridis"));
  req = stage_request(state, "attn_weights", 0);
  REQUIRE(export_choice(req.choices[0], {"png", false, false}, dir.file("h0.png")).empty());
  mha::exporter::StageFigure fig = req.choices[0].make();
  fig.spec.font_path = mha::platform::default_font().path;
  const std::vector<std::uint8_t> png = mha::exporter::render_figure("png", fig.spec);
  CHECK(head_of(dir.file("h0.png"), png.size() + 1) == std::string(png.begin(), png.end()));
}
