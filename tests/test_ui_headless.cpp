// Every panel drawn for many frames with no window and no GL, at the teaching sizes, at L=128 with
// H=8, with each mask preset, for every preset scenario; the pointer sweeps the views so hover and
// click paths run too.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <thread>
#include <vector>

#include "colormap.hpp"
#include "heatmap.hpp"
#include "panels/row_check.hpp"
#include "textures.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::HeadlessUi;

namespace {

// Draws every tab for `frames` frames each, moving the mouse over a grid of points.
void sweep_tabs(HeadlessUi& ui, AppState& state, int frames) {
  for (const ViewInfo& view : views()) {
    state.apply(show_view(view.id));
    for (int f = 0; f < frames; ++f) {
      const ImVec2 mouse(200.0f + float((f * 97) % 900), 80.0f + float((f * 53) % 600));
      const int vertices = ui.frame(state, mouse, f % 7 == 3);
      INFO("tab " << view.name << " frame " << f);
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
    state.start(load_scenario(path));
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
      Scenario s;
      s.batch = sz.N;
      s.tgt_len = sz.L;
      s.embed_dim = sz.E;
      s.num_heads = sz.H;
      s.mask.preset = MaskPreset(p);
      apply_mask_preset(s);
      state.start(s);
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
  state.recompute();
  ui.settle(state);
  REQUIRE(state.result.valid());
  const auto before = state.result.forward;
  state.apply(set_control("H num_heads", "3"));  // 8 % 3 != 0
  ui.frame(state);
  REQUIRE(state.errors.count("num_heads") == 1);
  CHECK_THAT(state.errors["num_heads"], Catch::Contains("embed_dim 8 not divisible by num_heads 3"));
  CHECK(state.result.forward == before);  // still on screen
  CHECK(state.stale);
  sweep_tabs(ui, state, 3);  // every view still draws from the last valid result
  state.undo();
  ui.frame(state);
  CHECK(state.errors.empty());
  CHECK(state.scenario().num_heads == 2);
}

namespace {

// Keeps the last pixels filled for each texture id (NullTextures drops them).
class CapturingTextures : public Textures {
 public:
  std::map<std::uintptr_t, std::vector<std::uint32_t>> pixels;

 protected:
  ImTextureID create(int w, int h, const std::uint32_t* rgba) override {
    const std::uintptr_t id = ++next_;
    pixels[id].assign(rgba, rgba + std::size_t(w) * std::size_t(h));
    return ImTextureID(id);
  }
  void update(ImTextureID id, int w, int h, const std::uint32_t* rgba) override {
    pixels[std::uintptr_t(id)].assign(rgba, rgba + std::size_t(w) * std::size_t(h));
  }
  void update_rows(ImTextureID id, int w, int y, int rows, const std::uint32_t* rgba) override {
    std::copy(rgba, rgba + std::size_t(w) * std::size_t(rows),
              pixels[std::uintptr_t(id)].begin() + std::ptrdiff_t(y) * w);
  }

 private:
  std::uintptr_t next_ = 0;
};

}  // namespace

TEST_CASE("weights coloured per row: each row from 0 to its largest unblocked weight", "[ui]") {
  HeadlessUi ui;
  // Row 0 spreads thin (its top is 0.25), row 1 holds a 1; the 0.9 at (0, 3) is blocked.
  const std::vector<float> w = {0.25f, 0.125f, 0.0625f, 0.9f, 1.0f, 0.0f, 0.0f, 0.0f};
  for (const bool row_scale : {false, true}) {
    CapturingTextures tex;
    Heatmap hm;
    hm.id = "row-scale";
    hm.values = w.data();
    hm.rows = 2;
    hm.cols = 4;
    hm.row_stride = 4;
    hm.vmin = 0;
    hm.vmax = 1;
    hm.row_scale = row_scale;
    hm.blocked = [](int i, int j) { return i == 0 && j == 3; };
    hm.size = ImVec2(400, 200);
    ImGui::NewFrame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(600, 400));
    ImGui::Begin("heatmap");
    draw_heatmap(tex, hm);
    ImGui::End();
    ImGui::Render();
    REQUIRE(tex.pixels.size() == 1);
    const std::vector<std::uint32_t>& px = tex.pixels.begin()->second;
    REQUIRE(px.size() == 8);
    CHECK(row_top(hm, 0) == 0.25f);  // the blocked 0.9 does not count
    const float top0 = row_scale ? 0.25f : 1.0f;
    CHECK(px[0] == value_rgba(Colormap::viridis, 0.25f, 0, top0));
    CHECK(px[1] == value_rgba(Colormap::viridis, 0.125f, 0, top0));
    CHECK(px[3] == kMaskedColor);
    CHECK(px[4] == value_rgba(Colormap::viridis, 1.0f, 0, 1));
    // With the per-row range, row 0's top is as bright as row 1's 1.0.
    CHECK((px[0] == px[4]) == row_scale);
  }
  // A row with nothing above 0 (or all blocked) keeps a usable range.
  Heatmap none;
  const std::vector<float> zeros = {0, 0};
  none.values = zeros.data();
  none.rows = 1;
  none.cols = 2;
  none.row_stride = 2;
  CHECK(row_top(none, 0) == 1.0f);
}

TEST_CASE("a map redraws only the rows an edit changed, to the texture a full redraw gives", "[ui]") {
  HeadlessUi ui;
  const int n = 64;
  std::vector<float> v(std::size_t(n * n));
  for (std::size_t x = 0; x < v.size(); ++x) v[x] = float((x * 37) % 101) / 100.0f;
  auto draw = [&](Textures& tex, const Heatmap& hm) {
    ImGui::NewFrame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(600, 600));
    ImGui::Begin("heatmap");
    draw_heatmap(tex, hm);
    ImGui::End();
    ImGui::Render();
  };
  // 400 px: a texel a cell; 20 px: each texel a block of cells (level of detail).
  for (const float px : {400.0f, 20.0f}) {
    INFO("map of " << px << " px");
    CapturingTextures tex;
    Heatmap hm;
    hm.id = "rows";
    hm.values = v.data();
    hm.rows = hm.cols = n;
    hm.row_stride = n;
    hm.show_values = false;
    hm.size = ImVec2(px, px);
    hm.version = 1;
    draw(tex, hm);
    REQUIRE(tex.uploads() == 1);
    // Rows 5 and 40 change; the result says so.
    std::vector<char> changed(std::size_t(n), 0);
    for (const int r : {5, 40}) {
      changed[std::size_t(r)] = 1;
      for (int c = 0; c < n; ++c) v[std::size_t(r * n + c)] = 1.0f - v[std::size_t(r * n + c)];
    }
    hm.version = 2;
    hm.changed_since = 1;
    hm.changed_rows = changed.data();
    draw(tex, hm);
    CHECK(tex.uploads() == 1);
    CHECK(tex.row_uploads() == 1);
    CapturingTextures fresh;
    Heatmap full = hm;
    full.changed_since = 0;
    full.changed_rows = nullptr;
    draw(fresh, full);
    REQUIRE(tex.pixels.size() == 1);
    REQUIRE(fresh.pixels.size() == 1);
    CHECK(tex.pixels.begin()->second == fresh.pixels.begin()->second);
    // Rows said to change since a version the texture does not hold: the whole map again.
    hm.version = 3;
    hm.changed_since = 7;
    draw(tex, hm);
    CHECK(tex.uploads() == 2);
    CHECK(tex.row_uploads() == 1);
  }
}

TEST_CASE("a map of a million cells zoomed out: each texel its patch's largest value, on two threads",
          "[ui]") {
  HeadlessUi ui;
  const int n = 1024;  // 2^20 cells: the texture is filled on two threads, each half of its rows
  std::vector<float> v(std::size_t(n) * std::size_t(n));
  for (std::size_t x = 0; x < v.size(); ++x) v[x] = float((x * 7919) % 1000) / 1000.0f;
  v[std::size_t(700 * n + 3)] = std::nanf("");  // NaN wins its patch
  CapturingTextures tex;
  Heatmap hm;
  hm.id = "million";
  hm.values = v.data();
  hm.rows = hm.cols = n;
  hm.row_stride = n;
  hm.show_values = false;
  hm.margins = false;
  hm.min_cell = 0;
  hm.size = ImVec2(100, 100);  // about 0.1 px a cell: a texel is an 8 × 8 patch
  hm.version = 1;
  ImGui::NewFrame();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(300, 300));
  ImGui::Begin("million");
  draw_heatmap(tex, hm);
  ImGui::End();
  ImGui::Render();
  REQUIRE(tex.pixels.size() == 1);
  const std::vector<std::uint32_t>& px = tex.pixels.begin()->second;
  const int block = 8, t = n / block;
  REQUIRE(px.size() == std::size_t(t) * std::size_t(t));
  int wrong = 0;
  for (int R = 0; R < t; ++R)
    for (int C = 0; C < t; ++C) {
      float top = 0;
      bool nan = false;
      for (int r = R * block; r < (R + 1) * block; ++r)
        for (int c = C * block; c < (C + 1) * block; ++c) {
          const float x = v[std::size_t(r) * std::size_t(n) + std::size_t(c)];
          nan = nan || std::isnan(x);
          top = std::max(top, x);
        }
      const std::uint32_t want = mha::render::value_rgba(hm.colormap, nan ? std::nanf("") : top, 0, 1);
      wrong += px[std::size_t(R) * std::size_t(t) + std::size_t(C)] != want;
    }
  CHECK(wrong == 0);
}

TEST_CASE("the Heads view's vectorised row check agrees with its plain loop", "[heads]") {
  // The same rows twice: contiguous (the vectorised path) and every other float (cs = 2: the loop).
  using mha::app::heads::Plane;
  using mha::app::heads::RowPart;
  const int C = 77;  // not a multiple of 8: the tails are covered
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows, masks;
  std::uint32_t state = 7;
  auto uniform = [&state] { return float((state = state * 1664525u + 1013904223u) >> 8) / float(1 << 24); };
  for (int kind = 0; kind < 5; ++kind) {
    std::vector<float> w(C), m(C, 0.0f);
    float total = 0;
    for (int j = 0; j < C; ++j) {
      m[j] = (kind >= 1 && j % 3 == 0) ? -inf : 0.0f;  // rows 1..: a third of the keys blocked
      w[j] = m[j] == 0.0f ? uniform() + (j == 5 ? 40.0f : 0.0f) : 0.0f;
      total += w[j];
    }
    for (float& x : w) x /= total;
    if (kind == 2) w[10] = 1e-40f;                       // a denormal weight
    if (kind == 3) std::fill(w.begin(), w.end(), 0.0f);  // every key blocked, fully_masked = zero
    if (kind == 4) w[3] = std::numeric_limits<float>::quiet_NaN();
    rows.push_back(w);
    masks.push_back(m);
  }
  for (std::size_t r = 0; r < rows.size(); ++r) {
    INFO("row kind " << r);
    std::vector<float> w2(2 * C), m2(2 * C);
    for (int j = 0; j < C; ++j) w2[2 * j] = rows[r][j], m2[2 * j] = masks[r][j];
    const Plane fast{rows[r].data(), C, 1, 1, C}, plain{w2.data(), 2 * C, 2, 1, C};
    const Plane fast_mask{masks[r].data(), C, 1, 1, C}, plain_mask{m2.data(), 2 * C, 2, 1, C};
    for (bool with_mask : {false, true}) {
      const RowPart a = mha::app::heads::check_row(fast, with_mask ? &fast_mask : nullptr, 0);
      const RowPart b = mha::app::heads::check_row(plain, with_mask ? &plain_mask : nullptr, 0);
      CHECK(int(a.kind) == int(b.kind));
      CHECK(a.ent_max == b.ent_max);
      if (b.kind != RowPart::ordinary) continue;
      CHECK(a.ent == Approx(b.ent).epsilon(1e-5));
      CHECK(std::fabs(a.err - b.err) < 1e-12);  // both sums in double
    }
  }
  // The kinds themselves: an ordinary row sums to 1 and has entropy under log2(visible keys).
  const RowPart ordinary = mha::app::heads::check_row(Plane{rows[1].data(), C, 1, 1, C}, nullptr, 0);
  CHECK(ordinary.kind == RowPart::ordinary);
  CHECK(ordinary.err < 1e-5);
  CHECK(ordinary.ent > 0);
  CHECK(ordinary.ent < std::log2(double(C)));
  CHECK(mha::app::heads::check_row(Plane{rows[3].data(), C, 1, 1, C}, nullptr, 0).kind == RowPart::zero);
  CHECK(mha::app::heads::check_row(Plane{rows[4].data(), C, 1, 1, C}, nullptr, 0).kind == RowPart::nan);
}

TEST_CASE("the Reshape view draws each common mistake on a masked batch", "[ui]") {
  HeadlessUi ui;
  for (int mistake = 0; mistake <= 3; ++mistake) {
    INFO("mistake " << mistake);
    AppState state;
    Scenario s;
    s.batch = 2;
    s.tgt_len = 4;
    s.embed_dim = 8;
    s.num_heads = 2;
    s.mask.preset = MaskPreset::causal;
    apply_mask_preset(s);
    s.view.mistake = mistake;
    state.start(s);
    state.recompute();
    ui.settle(state);
    REQUIRE(state.result.valid());
    state.apply(show_view(ViewTab::reshape));
    for (int f = 0; f < 6; ++f)
      REQUIRE(ui.frame(state, ImVec2(300.0f + 40.0f * float(f), 200.0f), false) > 0);
  }
}
