// The exporter: PNGs decoded with stb_image and checked against the documented layout (size, cell
// colours = colormap(value) ±1, masked colour, labels and colorbar drawn, byte-identical repeats);
// the SVG and PDF of the same drawing (well-formed, each cell a filled path of its colour where the
// layout puts it); CSV and the stage slicing (heads, average, errors); the colours (the Heads view's
// colormap and automatic range, row scaling); the merged mask, difference maps, the reshape figure,
// the RoPE figure,
// the formats' table and its one writer, labels that are not UTF-8, and font files that are not fonts.
#include <stb_image.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "colour_range.hpp"
#include "errors.hpp"
#include "font.hpp"
#include "head_colour.hpp"
#include "io/hf_checkpoint.hpp"
#include "labels.hpp"
#include "masks.hpp"
#include "model/llama.hpp"
#include "model/rope.hpp"
#include "reshape_export.hpp"
#include "rope_export.hpp"
#include "stage_export.hpp"
#include "temp_dir.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::exporter;

namespace {

struct Image {
  int w = 0, h = 0;
  std::vector<std::uint32_t> px;  // R in the low byte, as colormap.hpp packs colours
  std::uint32_t at(int x, int y) const { return px[std::size_t(y) * std::size_t(w) + std::size_t(x)]; }
};

Image decode(const std::vector<std::uint8_t>& png) {
  Image im;
  int n = 0;
  unsigned char* d = stbi_load_from_memory(png.data(), int(png.size()), &im.w, &im.h, &n, 4);
  REQUIRE(d != nullptr);
  im.px.resize(std::size_t(im.w) * std::size_t(im.h));
  std::memcpy(im.px.data(), d, im.px.size() * 4);
  stbi_image_free(d);
  return im;
}

bool near(std::uint32_t a, std::uint32_t b) {
  for (int sh = 0; sh < 32; sh += 8)
    if (std::abs(int((a >> sh) & 0xFF) - int((b >> sh) & 0xFF)) > 1) return false;
  return true;
}

// Pixels in r that differ from the background.
int ink(const Image& im, const Rect& r, std::uint32_t background) {
  int n = 0;
  for (int y = std::max(0, r.y); y < std::min(im.h, r.y + r.h); ++y)
    for (int x = std::max(0, r.x); x < std::min(im.w, r.x + r.w); ++x) n += im.at(x, y) != background;
  return n;
}

// The filled axis-aligned rectangles of a cairo SVG (cells, boxes, the colorbar's ticks), with their
// colour packed as colormap.hpp packs it.
struct SvgRect {
  double x = 0, y = 0, w = 0, h = 0;
  std::uint32_t rgba = 0;
};
std::vector<SvgRect> svg_rects(const std::string& svg) {
  static const std::regex path(
      "fill:rgb\\(([0-9.]+)%,([0-9.]+)%,([0-9.]+)%\\);fill-opacity:1;\" d=\"M ([0-9.]+) ([0-9.]+) L "
      "([0-9.]+) "
      "([0-9.]+) L ([0-9.]+) ([0-9.]+) L ([0-9.]+) ([0-9.]+) Z");
  std::vector<SvgRect> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), path); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    auto num = [&](int i) { return std::stod(m[i].str()); };
    auto byte = [&](int i) { return std::uint32_t(std::lround(num(i) * 2.55)); };
    const double x0 = std::min(num(4), num(8)), x1 = std::max(num(4), num(8));
    const double y0 = std::min(num(5), num(9)), y1 = std::max(num(5), num(9));
    out.push_back({x0, y0, x1 - x0, y1 - y0, 0xFF000000u | byte(3) << 16 | byte(2) << 8 | byte(1)});
  }
  return out;
}
// The colour of the filled rectangle exactly at (x, y, w, h); 0 when there is none.
std::uint32_t svg_fill_at(const std::vector<SvgRect>& rects, int x, int y, int w, int h) {
  for (const SvgRect& r : rects)
    if (r.x == x && r.y == y && r.w == w && r.h == h) return r.rgba;
  return 0;
}

// Every opening tag is closed or self-closing, in order.
bool balanced_tags(const std::string& xml) {
  std::vector<std::string> stack;
  static const std::regex tag("<(/?)([a-zA-Z]+)[^>]*?(/?)>");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::smatch& t = *it;
    if (t[3] == "/") continue;
    if (t[1] != "/") {
      stack.push_back(t[2]);
    } else {
      if (stack.empty() || stack.back() != t[2]) return false;
      stack.pop_back();
    }
  }
  return stack.empty();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::string kFont = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";

// The notebook case (seed 42, N=3, L=4, E=8, H=2, no bias) with a causal mask.
ForwardResult<float> notebook_causal() {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.bias = false;
  SeededCase<float> sc = torch_seeded_case<float>(c, 42, 3, 4, 4);
  sc.inputs.attn_mask = causal_mask<float>(4, 4);
  return forward(c, sc.weights, sc.inputs);
}

}  // namespace

TEST_CASE("export PNG: size, cell colours, masked cells, labels and colorbar, determinism", "[export]") {
  const ForwardResult<float> r = notebook_causal();
  StageSlice sl;
  sl.head = 1;
  sl.query_labels = {"The", "cat", "sat", "down"};
  sl.key_labels = sl.query_labels;
  StageFigure fig = stage_figure(r, sl);
  fig.spec.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  fig.spec.cell_px = 40;
  const Layout lay = layout(fig.spec);
  const std::vector<std::uint8_t> png = render_png(fig.spec);
  const Image im = decode(png);
  CHECK(im.w == lay.width);
  CHECK(im.h == lay.height);
  REQUIRE(lay.grids.size() == 1);
  CHECK(lay.grids[0].w == 4 * 40);
  CHECK(lay.cell == 40);

  const Stage<float>& w = r.trace["attn_weights"];
  auto centre = [&](int row, int col) {
    return im.at(lay.grids[0].x + col * lay.cell + lay.cell / 2,
                 lay.grids[0].y + row * lay.cell + lay.cell / 2);
  };
  for (int row = 0; row < 4; ++row)
    for (int col = 0; col <= row; ++col) {
      const float v = w.at({0, 1, row, col});
      CHECK(near(centre(row, col), render::value_rgba(render::Colormap::viridis, v, 0, 1)));
    }
  CHECK(near(centre(0, 3), render::kMaskedColor));  // causal: query 0 cannot see key 3
  CHECK(near(centre(2, 3), render::kMaskedColor));

  CHECK(ink(im, lay.row_label_areas[0], 0xFFFFFFFFu) > 20);
  CHECK(ink(im, lay.col_label_areas[0], 0xFFFFFFFFu) > 20);
  CHECK(ink(im, lay.colorbar_labels, 0xFFFFFFFFu) > 20);
  CHECK(ink(im, lay.title, 0xFFFFFFFFu) > 20);
  // The colorbar: vmax's colour at the top, vmin's at the bottom.
  const Rect& cb = lay.colorbar;
  CHECK(near(im.at(cb.x + cb.w / 2, cb.y), render::colormap_rgba(render::Colormap::viridis, 1)));
  CHECK(near(im.at(cb.x + cb.w / 2, cb.y + cb.h - 1), render::colormap_rgba(render::Colormap::viridis, 0)));

  CHECK(render_png(fig.spec) == png);  // same spec, same bytes

  fig.spec.transparent = true;
  const Image t = decode(render_png(fig.spec));
  CHECK((t.at(0, 0) >> 24) == 0);
  CHECK(near(centre(0, 0), render::value_rgba(render::Colormap::viridis, w.at({0, 1, 0, 0}), 0, 1)));
}

TEST_CASE("export colours: a random-init head on the Heads view's range, not a fixed 0-1", "[export]") {
  // Untrained weights over 12 keys: every weight is small, so on a fixed 0-1 range the map is one
  // dark colour. The figure takes the view's range, auto_colour_range over every head of the item.
  Config c;
  c.embed_dim = 16;
  c.num_heads = 4;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 7, 2, 12, 12);
  const ForwardResult<float> r = forward(c, sc.weights, sc.inputs);
  const Stage<float>& w = r.trace["attn_weights"];  // (N, H, L, S)
  render::ValueRange seen;  // every head of batch item 1, as the Heads view folds them
  int top_head = 0, top_i = 0, top_j = 0;
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 12; ++i)
      for (int j = 0; j < 12; ++j) {
        const float v = w.at({1, h, i, j});
        if (v > seen.hi) top_head = h, top_i = i, top_j = j;
        seen.add(v);
      }
  REQUIRE(seen.hi < 0.6f);  // the case is what it claims: weights far below 1
  const render::ColourRange screen = render::auto_colour_range(seen, render::Colormap::viridis, true);
  StageSlice sl;
  sl.batch_index = 1;
  sl.head = top_head;
  StageFigure fig = stage_figure(r, sl);
  CHECK(fig.spec.colormap == render::Colormap::viridis);
  CHECK(fig.spec.vmin == 0);
  CHECK(fig.spec.vmax == screen.vmax);
  CHECK(fig.spec.vmax == seen.hi);
  CHECK_FALSE(fig.spec.row_scale);

  // The PNG: each cell its colour on that range, the item's largest weight the top of the map (on
  // 0-1 it was in the map's bottom 60 %).
  fig.spec.font_path = kFont;
  fig.spec.cell_px = 20;
  const Layout lay = layout(fig.spec);
  const Image im = decode(render_png(fig.spec));
  auto centre = [&](int row, int col) {
    return im.at(lay.grids[0].x + col * lay.cell + lay.cell / 2,
                 lay.grids[0].y + row * lay.cell + lay.cell / 2);
  };
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 12; ++j) {
      INFO("query " << i << " key " << j);
      CHECK(near(centre(i, j),
                 render::value_rgba(render::Colormap::viridis, w.at({1, top_head, i, j}), 0, seen.hi)));
    }
  CHECK(near(centre(top_i, top_j), render::colormap_rgba(render::Colormap::viridis, 1)));
  // The colorbar: the top is the range's top colour, and the tick labels are drawn.
  const Rect& cb = lay.colorbar;
  CHECK(near(im.at(cb.x + cb.w / 2, cb.y), render::colormap_rgba(render::Colormap::viridis, 1)));
  CHECK(ink(im, lay.colorbar_labels, 0xFFFFFFFFu) > 20);

  // Every head and the grid on the same range: heads compare at a glance, as on screen.
  sl.head = kAllHeads;
  CHECK(stage_figure(r, sl).spec.vmax == seen.hi);
  sl.head = kHeadAverage;
  CHECK(stage_figure(r, sl).spec.vmax == seen.hi);

  // Scores: diverging whatever map the view chose, symmetric about 0 over every head.
  render::ValueRange scores;
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 12; ++i)
      for (int j = 0; j < 12; ++j) scores.add(r.trace["scores"].at({1, h, i, j}));
  sl.stage = "scores";
  sl.head = 0;
  sl.colormap = render::Colormap::magma;
  const StageFigure sf = stage_figure(r, sl);
  CHECK(sf.spec.colormap == render::Colormap::diverging);
  CHECK(sf.spec.vmax == scores.maxabs);
  CHECK(sf.spec.vmin == -scores.maxabs);
  // Weights are never diverging; context takes the view's map on [lo, hi].
  sl.stage = "attn_weights";
  sl.colormap = render::Colormap::diverging;
  CHECK(stage_figure(r, sl).spec.colormap == render::Colormap::viridis);
  sl.stage = "context";
  sl.colormap = render::Colormap::cividis;
  const StageFigure cf = stage_figure(r, sl);
  render::ValueRange ctx;
  const Stage<float>& context = r.trace["context"];
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 12; ++i)
      for (int k = 0; k < 4; ++k) ctx.add(context.at({1, h, i, k}));
  CHECK(cf.spec.colormap == render::Colormap::cividis);
  CHECK(cf.spec.vmin == ctx.lo);
  CHECK(cf.spec.vmax == ctx.hi);
}

TEST_CASE("export colours: the shared range rule for empty, constant and signed maps", "[export]") {
  using render::auto_colour_range;
  using render::Colormap;
  render::ValueRange none;
  CHECK(none.empty());
  none.add(std::nanf(""));
  none.add(-INFINITY);
  CHECK(none.empty());  // only finite values count
  CHECK(auto_colour_range(none, Colormap::viridis, true).vmax == 1);
  CHECK(auto_colour_range(none, Colormap::diverging, false).vmin == -1);
  render::ValueRange flat;
  flat.add(0.5f);
  CHECK(auto_colour_range(flat, Colormap::magma, false).vmin == 0.5f);
  CHECK(auto_colour_range(flat, Colormap::magma, false).vmax == 1.5f);
  render::ValueRange signed_values;
  signed_values.add(-3);
  signed_values.add(2);
  CHECK(auto_colour_range(signed_values, Colormap::diverging, false).vmin == -3);
  CHECK(auto_colour_range(signed_values, Colormap::diverging, false).vmax == 3);
  CHECK(auto_colour_range(signed_values, Colormap::viridis, false).vmin == -3);
  CHECK(auto_colour_range(signed_values, Colormap::viridis, false).vmax == 2);
  CHECK(auto_colour_range(signed_values, Colormap::viridis, true, true).vmax == 1);  // row scaling
  CHECK(render::stage_colormap("scores_masked", Colormap::viridis) == Colormap::diverging);
  CHECK(render::stage_colormap("attn_weights", Colormap::diverging) == Colormap::viridis);
  CHECK(render::stage_colormap("attn_weights", Colormap::magma) == Colormap::magma);
  CHECK(render::stage_colormap("q_heads", Colormap::diverging) == Colormap::diverging);
}

TEST_CASE("export colours: row scaling colours each row to its own max, blocked keys left out", "[export]") {
  const ForwardResult<float> r = notebook_causal();  // causal: row i sees keys 0..i
  const Stage<float>& w = r.trace["attn_weights"];
  StageSlice sl;
  sl.head = 1;
  sl.row_scale = true;
  StageFigure fig = stage_figure(r, sl);
  CHECK(fig.spec.row_scale);
  CHECK(fig.spec.vmin == 0);
  CHECK(fig.spec.vmax == 1);  // the colorbar: a fraction of each row's max
  CHECK(fig.spec.title.find("each row to its max") != std::string::npos);
  fig.spec.font_path = kFont;
  fig.spec.cell_px = 30;
  const Layout lay = layout(fig.spec);
  const Image im = decode(render_png(fig.spec));
  auto centre = [&](int row, int col) {
    return im.at(lay.grids[0].x + col * lay.cell + lay.cell / 2,
                 lay.grids[0].y + row * lay.cell + lay.cell / 2);
  };
  for (int i = 0; i < 4; ++i) {
    float top = 0;
    int arg = 0;
    for (int j = 0; j <= i; ++j)
      if (w.at({0, 1, i, j}) > top) top = w.at({0, 1, i, j}), arg = j;
    INFO("query " << i);
    CHECK(near(centre(i, arg),
               render::colormap_rgba(render::Colormap::viridis, 1)));  // each row's max: the top
    for (int j = 0; j <= i; ++j)
      CHECK(near(centre(i, j), render::value_rgba(render::Colormap::viridis, w.at({0, 1, i, j}), 0, top)));
    for (int j = i + 1; j < 4; ++j) CHECK(near(centre(i, j), render::kMaskedColor));
  }
  // The same rule as the screen's rows: row_colour_top of the row, blocked keys skipped.
  const float row2[] = {0.1f, 0.3f, 0.9f, NAN};
  CHECK(render::row_colour_top(row2, 4, 1, [](int c) { return c == 2; }) == 0.3f);
  CHECK(render::row_colour_top(row2, 1, 1, [](int) { return true; }) == 1.0f);  // all blocked
  // Row scaling is for weights: another stage keeps its range.
  sl.stage = "scores";
  CHECK_FALSE(stage_figure(r, sl).spec.row_scale);
}

TEST_CASE("export grid: all heads and their average; L = 512 labels thin out", "[export]") {
  const ForwardResult<float> r = notebook_causal();
  StageSlice sl;
  sl.head = kAllHeads;
  sl.batch_index = 2;
  StageFigure fig = stage_figure(r, sl);
  fig.spec.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  REQUIRE(fig.spec.panels.size() == 3);
  CHECK(fig.spec.panels[2].title == "average");
  const Layout lay = layout(fig.spec);
  const Image im = decode(render_png(fig.spec));
  CHECK(im.w == lay.width);
  // The average panel's cell is the mean of the heads' (attn_weights_avg).
  const Stage<float>& avg = r.trace["attn_weights_avg"];
  const Rect& g = lay.grids[2];
  CHECK(near(im.at(g.x + 3 * lay.cell + lay.cell / 2, g.y + 3 * lay.cell + lay.cell / 2),
             render::value_rgba(render::Colormap::viridis, avg.at({2, 3, 3}), 0, 1)));

  // L = 512: one pixel per cell, labels every 16 or so, all drawn inside the figure.
  std::vector<float> big(512 * 512, 0.25f);
  ExportSpec s;
  s.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  Panel p;
  p.values = big.data();
  p.rows = p.cols = 512;
  p.row_stride = 512;
  s.panels.push_back(p);
  const Layout bl = layout(s);
  CHECK(bl.cell == 1);
  CHECK(bl.row_step >= 8);
  CHECK(bl.col_step >= 8);
  CHECK(bl.col_labels_rotated);
}

TEST_CASE("export SVG and PDF: the PNG's drawing as vectors, cells where the layout puts them", "[export]") {
  // A row with every key blocked is NaN (torch): mask query 1 entirely.
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  SeededCase<float> sc = torch_seeded_case<float>(c, 0, 1, 3, 5);
  Mask<float> m;
  m.values = Tensor<float>({3, 5}, std::vector<float>(15, 0.0f));
  for (int j = 0; j < 5; ++j) m.values.data[std::size_t(5 + j)] = 1;
  sc.inputs.attn_mask = m;
  const ForwardResult<float> r = forward(c, sc.weights, sc.inputs);
  StageSlice sl;
  sl.key_labels = {"a<b", "&", "c", "d", "e"};
  StageFigure fig = stage_figure(r, sl);
  fig.spec.font_path = kFont;
  const Layout lay = layout(fig.spec);
  const std::string svg = render_svg(fig.spec);
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("viewBox=\"0 0 " + std::to_string(lay.width) + " " + std::to_string(lay.height) + "\"") !=
        std::string::npos);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  CHECK(balanced_tags(svg));                           // "a<b" and "&" are glyph outlines, never markup
  CHECK(count(svg, "<use xlink:href=\"#glyph") > 40);  // title, labels, ticks, the NaN tag
  // Each cell is a filled path of its colour, exactly on the layout's cell.
  const std::vector<SvgRect> rects = svg_rects(svg);
  const Stage<float>& w = r.trace["attn_weights"];
  const Rect& g = lay.grids[0];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      INFO("query " << i << " key " << j);
      const std::uint32_t want =
          i == 1 ? render::kMaskedColor
                 : render::value_rgba(fig.spec.colormap, w.at({0, 0, i, j}), fig.spec.vmin, fig.spec.vmax);
      CHECK(near(svg_fill_at(rects, g.x + j * lay.cell, g.y + i * lay.cell, lay.cell, lay.cell), want));
    }

  const std::vector<std::uint8_t> pdf = render_pdf(fig.spec);
  const std::string text(pdf.begin(), pdf.end());
  CHECK(text.rfind("%PDF-", 0) == 0);
  CHECK(text.find("%%EOF") != std::string::npos);
  CHECK(count(text, "/Type /Page\n") + count(text, "/Type /Page ") == 1);
  char box[96];  // 96 pixels an inch: the page is the layout at 0.75 pt a pixel
  std::snprintf(box, sizeof box, "/MediaBox [ 0 0 %g %g ]", lay.width * 0.75, lay.height * 0.75);
  CHECK(text.find(box) != std::string::npos);
  CHECK(text.find("/FontFile") != std::string::npos);  // the text is the embedded DejaVu, not outlines
  CHECK(text.find("/CreationDate") == std::string::npos);
  CHECK(render_pdf(fig.spec) == pdf);
}

TEST_CASE("export large maps: cells as one image in every format, the same colours", "[export]") {
  std::vector<float> big(100 * 100);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i % 101) / 100.0f;
  ExportSpec s;
  s.font_path = kFont;
  Panel p;
  p.values = big.data();
  p.rows = p.cols = 100;
  p.row_stride = 100;
  p.blocked = [](int r, int c) { return r == 7 && c == 9; };
  s.panels.push_back(p);
  s.cell_px = 3;
  const Layout lay = layout(s);
  const Image im = decode(render_png(s));
  const Rect& g = lay.grids[0];
  for (int r : {0, 7, 50, 99})
    for (int c : {0, 9, 42, 99}) {
      INFO("row " << r << " col " << c);
      const std::uint32_t want = r == 7 && c == 9
                                     ? render::kMaskedColor
                                     : render::value_rgba(s.colormap, big[std::size_t(r * 100 + c)], 0, 1);
      for (int dy = 0; dy < 3; ++dy)
        for (int dx = 0; dx < 3; ++dx) CHECK(near(im.at(g.x + c * 3 + dx, g.y + r * 3 + dy), want));
    }
  const std::string svg = render_svg(s);
  CHECK(balanced_tags(svg));
  CHECK(count(svg, "<image") == 1);
  CHECK(svg.size() < 200000);  // not ten thousand paths
}

TEST_CASE("export CSV and stage errors", "[export]") {
  const ForwardResult<float> r = notebook_causal();
  StageSlice sl;
  sl.stage = "scores_masked";
  sl.head = kHeadAverage;
  sl.query_labels = {"q0", "q,1", "q2", "q3"};
  StageFigure fig = stage_figure(r, sl);
  CHECK(fig.spec.colormap == render::Colormap::diverging);
  CHECK(fig.spec.vmin == -fig.spec.vmax);
  const std::string csv = render_csv(fig.spec.panels[0]);
  CHECK(csv.rfind(",0,1,2,3\nq0,", 0) == 0);
  CHECK(csv.find("\"q,1\",") != std::string::npos);
  CHECK(csv.find("-inf") != std::string::npos);  // blocked scores

  sl.stage = "nope";
  CHECK_THROWS_WITH(stage_figure(r, sl), Catch::Contains("attn_weights") && Catch::Contains("q_heads"));
  sl.stage = "attn_weights";
  sl.head = 2;
  CHECK_THROWS_WITH(stage_figure(r, sl), Catch::Contains("out of range"));
  sl.head = 0;
  sl.batch_index = 3;
  CHECK_THROWS_AS(stage_figure(r, sl), ConfigError);

  ExportSpec s;
  CHECK_THROWS_AS(render_png(s), ConfigError);
  CHECK_THROWS_AS(write_file("/nonexistent-dir/x.png", "x", 1), FileError);
}

TEST_CASE("export the merged mask: -inf cells hatched in the masked colour, others at 0", "[export]") {
  // Causal attn_mask merged with a key_padding_mask that pads key 2 of batch item 1.
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.bias = false;
  SeededCase<float> sc = torch_seeded_case<float>(c, 42, 3, 4, 4);
  sc.inputs.attn_mask = causal_mask<float>(4, 4);
  Mask<float> kpm;
  kpm.values = Tensor<float>({3, 4}, std::vector<float>(12, 0.0f));
  kpm.values.data[4 + 2] = 1;
  sc.inputs.key_padding_mask = kpm;
  const ForwardResult<float> r = forward(c, sc.weights, sc.inputs);
  StageSlice sl;
  sl.stage = "attn_mask";
  sl.batch_index = 1;
  StageFigure fig = stage_figure(r, sl);
  fig.spec.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  fig.spec.cell_px = 30;
  const Layout lay = layout(fig.spec);
  const Image im = decode(render_png(fig.spec));
  auto centre = [&](int row, int col) {
    return im.at(lay.grids[0].x + col * lay.cell + lay.cell / 2,
                 lay.grids[0].y + row * lay.cell + lay.cell / 2);
  };
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const bool blocked = j > i || j == 2;
      INFO("query " << i << " key " << j);
      if (blocked)
        CHECK(near(centre(i, j), render::kMaskedColor));
      else
        CHECK(near(centre(i, j), render::value_rgba(fig.spec.colormap, 0.0f, fig.spec.vmin, fig.spec.vmax)));
    }
  // Hatching: a blocked cell's corner area has dark lines, an open cell has none.
  const Rect blocked_cell{lay.grids[0].x + 3 * lay.cell + 2, lay.grids[0].y + 2, lay.cell - 4, lay.cell - 4};
  const Rect open_cell{lay.grids[0].x + 2, lay.grids[0].y + 2, lay.cell - 4, lay.cell - 4};
  CHECK(ink(im, blocked_cell, render::kMaskedColor) > 10);
  CHECK(ink(im, open_cell, centre(0, 0)) == 0);
  // In the SVG, one stroked path of hatch lines (#282828, as cairo writes it) for each blocked cell.
  int blocked = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) blocked += j > i || j == 2;
  CHECK(count(render_svg(fig.spec), "stroke:rgb(15.686275%,15.686275%,15.686275%)") == std::size_t(blocked));
}

TEST_CASE("export difference map: head minus head, diverging, symmetric, max |diff| in the title",
          "[export]") {
  const ForwardResult<float> r = notebook_causal();
  StageSlice a;
  a.stage = "attn_weights";
  a.head = 0;
  a.batch_index = 1;
  StageSlice b = a;
  b.head = 1;
  StageFigure fig = difference_figure(r, a, "head 0", r, b, "head 1");
  fig.spec.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  fig.spec.cell_px = 30;
  const Stage<float>& w = r.trace["attn_weights"];
  float m = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) m = std::max(m, std::fabs(w.at({1, 0, i, j}) - w.at({1, 1, i, j})));
  REQUIRE(m > 0);
  CHECK(fig.max_abs_diff == m);
  CHECK(fig.spec.colormap == render::Colormap::diverging);
  CHECK(fig.spec.vmax == m);
  CHECK(fig.spec.vmin == -m);
  char max_text[32];
  std::snprintf(max_text, sizeof max_text, "%.3g", double(m));
  CHECK(fig.spec.title.find("head 0 \u2212 head 1") != std::string::npos);
  CHECK(fig.spec.title.find(std::string("max |diff| = ") + max_text) != std::string::npos);

  const Layout lay = layout(fig.spec);
  const Image im = decode(render_png(fig.spec));
  auto centre = [&](int row, int col) {
    return im.at(lay.grids[0].x + col * lay.cell + lay.cell / 2,
                 lay.grids[0].y + row * lay.cell + lay.cell / 2);
  };
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j)
      CHECK(near(centre(i, j), render::value_rgba(render::Colormap::diverging,
                                                  w.at({1, 0, i, j}) - w.at({1, 1, i, j}), -m, m)));
  CHECK(near(centre(0, 3), render::kMaskedColor));  // blocked in both heads

  // The same head minus itself: all zero, a readable colorbar all the same.
  StageFigure same = difference_figure(r, a, "head 0", r, a, "head 0");
  CHECK(same.max_abs_diff == 0);
  CHECK(same.spec.vmax == 1);
  a.head = kAllHeads;
  CHECK_THROWS_AS(difference_figure(r, a, "all", r, b, "head 1"), ConfigError);
  a.head = 0;
  a.stage = "context";  // (L, d_k) against (L, S): same size here, so make a key-side stage differ
  b.stage = "k_heads";
  CHECK_NOTHROW(difference_figure(r, a, "ctx", r, b, "k"));
  b.stage = "q";
  CHECK_THROWS_WITH(difference_figure(r, a, "ctx", r, b, "q"), Catch::Contains("cannot subtract"));
}

TEST_CASE("export write_figure: formats, CSV needs one panel, unwritable paths throw", "[export]") {
  const ForwardResult<float> r = notebook_causal();
  StageSlice sl;
  sl.head = kAllHeads;
  StageFigure fig = stage_figure(r, sl);
  fig.spec.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  CHECK_THROWS_WITH(write_figure("csv", fig.spec, "/tmp/never-written.csv"),
                    Catch::Contains("one 2-D slice"));
  CHECK_THROWS_AS(write_figure("png", fig.spec, "/nonexistent-dir/x.png"), FileError);
  CHECK_THROWS_WITH(write_figure("bmp", fig.spec, "/tmp/x.bmp"), Catch::Contains("png, svg, pdf, csv"));

  // Each format of the table through the one writer: the file starts as its format does.
  const test::TempDir dir;
  sl.head = 0;
  StageFigure one = stage_figure(r, sl);
  one.spec.font_path = kFont;
  for (const FigureFormat& f : figure_formats()) {
    INFO(f.name);
    const std::string path = dir.file("f" + f.extension);
    write_figure(f.name, one.spec, path);
    std::ifstream in(path, std::ios::binary);
    std::string head(5, '\0');
    in.read(head.data(), 5);
    CHECK(head == (f.name == "png"   ? "\x89PNG\r"
                   : f.name == "svg" ? "<?xml"
                   : f.name == "pdf" ? "%PDF-"
                                     : ",0,1,"));
    CHECK(format_from_extension(path) == f.name);
    CHECK(f.image == (f.drawing != nullptr));  // a free-form drawing goes in the image formats only
    CHECK(render_figure(f.name, one.spec).size() == std::size_t(std::ifstream(path, std::ios::ate).tellg()));
  }
  CHECK(figure_format_names() == std::vector<std::string>{"png", "svg", "pdf", "csv"});
  CHECK(figure_format("pdf").label == "PDF");
  CHECK_THROWS_AS(figure_format("jpeg"), ConfigError);
}

TEST_CASE("export formats by extension: png, svg, pdf, csv in any case, nothing else", "[export]") {
  CHECK(format_from_extension("fig.pdf") == "pdf");
  CHECK(format_from_extension("a/b.c/Fig.PDF") == "pdf");
  CHECK(format_from_extension("x.Svg") == "svg");
  CHECK(format_from_extension("x.png") == "png");
  CHECK(format_from_extension("x.csv") == "csv");
  CHECK(format_from_extension("x.bmp").empty());
  CHECK(format_from_extension("x").empty());
  CHECK(format_from_extension("pdf").empty());
  CHECK(format_from_extension("dir.pdf/x").empty());
}

TEST_CASE("export reshape figure: q, its view and its transpose, cells in their head's hue", "[export]") {
  const ForwardResult<float> r = notebook_causal();  // N=3, L=4, E=8, H=2, d_k=4
  ReshapeSpec rs;
  rs.batch_index = 2;
  rs.tokens = {"The", "cat", "sat", "down"};
  rs.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  const ReshapeFigure fig = reshape_figure(r, rs);
  const Image im = decode(render_png(fig.drawing));
  CHECK(im.w == fig.drawing.width);
  CHECK(im.h == fig.drawing.height);
  const int cw = fig.cell_w, ch = fig.cell_h;
  CHECK(fig.flat.w == 8 * cw);
  CHECK(fig.flat.h == 4 * ch);
  CHECK(fig.split.w == 2 * 4 * cw + fig.gap);
  CHECK(fig.stacked.w == 4 * cw);
  CHECK(fig.stacked.h > 2 * 4 * ch);  // two blocks stacked, with a caption between
  const Stage<float>& q = r.trace["q"];
  auto px = [&](int x, int y) { return im.at(x + cw / 2, y + ch / 2); };
  for (int i = 0; i < 4; ++i)
    for (int e = 0; e < 8; ++e) {
      const int h = e / 4, c = e % 4;
      const std::uint32_t want = render::head_colour(h, 2, q.at({2, i, e}), fig.maxabs);
      INFO("token " << i << " column " << e);
      CHECK(near(px(fig.flat.x + e * cw, fig.flat.y + i * ch), want));
      CHECK(near(px(fig.split.x + h * (4 * cw + fig.gap) + c * cw, fig.split.y + i * ch), want));
    }
  // q_heads: head 1's block is below head 0's.
  CHECK(fig.stacked_cols == 1);
  const int head1_top = fig.stacked.y + fig.pitch_y;
  CHECK(head1_top + 4 * ch == fig.stacked.y + fig.stacked.h);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 4; ++c) {
      CHECK(near(px(fig.stacked.x + c * cw, fig.stacked.y + i * ch),
                 render::head_colour(0, 2, q.at({2, i, c}), fig.maxabs)));
      CHECK(near(px(fig.stacked.x + c * cw, head1_top + i * ch),
                 render::head_colour(1, 2, q.at({2, i, 4 + c}), fig.maxabs)));
    }
  // The two heads' hues differ; the labels and captions are drawn.
  CHECK(render::head_colour(0, 2, 1, 1) != render::head_colour(1, 2, 1, 1));
  CHECK(ink(im, {0, 0, im.w, fig.flat.y - 2}, 0xFFFFFFFFu) > 200);                // title and captions
  CHECK(ink(im, {0, fig.flat.y, fig.flat.x - 1, fig.flat.h}, 0xFFFFFFFFu) > 20);  // token labels
  CHECK(render_png(fig.drawing) == render_png(reshape_figure(r, rs).drawing));    // deterministic

  // The text: token labels and q_heads' caption, from the trace.
  auto has_text = [&](const std::string& t) {
    for (const Drawing::Text& x : fig.drawing.texts)
      if (x.text.find(t) != std::string::npos) return true;
    return false;
  };
  CHECK(has_text("down"));
  CHECK(has_text("not contiguous"));
  // The SVG: the same boxes as vectors, each q value's cell in its head's hue, three times.
  const std::string svg = render_svg(fig.drawing);
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  CHECK(balanced_tags(svg));
  const std::vector<SvgRect> rects = svg_rects(svg);
  CHECK(rects.size() == 3 * 4 * 8);
  for (int i = 0; i < 4; ++i)
    for (int e = 0; e < 8; ++e)
      CHECK(near(svg_fill_at(rects, fig.flat.x + e * cw, fig.flat.y + i * ch, cw, ch),
                 render::head_colour(e / 4, 2, q.at({2, i, e}), fig.maxabs)));
  CHECK(render_pdf(fig.drawing).size() > 1000);

  // 16 heads: the transposed blocks go four to a column, in four columns.
  Config c16;
  c16.embed_dim = 64;
  c16.num_heads = 16;
  SeededCase<float> sc = torch_seeded_case<float>(c16, 3, 1, 5, 5);
  const ForwardResult<float> r16 = forward(c16, sc.weights, sc.inputs);
  rs.batch_index = 0;
  const ReshapeFigure big = reshape_figure(r16, rs);
  CHECK(big.stacked_cols == 4);
  CHECK(big.stacked.h == 4 * 5 * big.cell_h + 3 * (big.pitch_y - 5 * big.cell_h));
  const Image bi = decode(render_png(big.drawing));
  const Stage<float>& q16 = r16.trace["q"];
  for (int h : {0, 5, 13, 15})
    for (int c = 0; c < 4; ++c) {
      INFO("head " << h << " column " << c);
      const int x = big.stacked.x + (h % 4) * big.pitch_x + c * big.cell_w + big.cell_w / 2;
      const int y = big.stacked.y + (h / 4) * big.pitch_y + 4 * big.cell_h + big.cell_h / 2;  // token 4
      CHECK(near(bi.at(x, y), render::head_colour(h, 16, q16.at({0, 4, h * 4 + c}), big.maxabs)));
    }

  rs.batch_index = 3;
  CHECK_THROWS_WITH(reshape_figure(r, rs), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(write_figure("csv", fig.drawing, "/tmp/x.csv"),
                    Catch::Contains("an image: png, svg, pdf, not csv"));
  const test::TempDir dir;
  write_figure("svg", fig.drawing, dir.file("reshape.svg"));
  std::ifstream in(dir.file("reshape.svg"));
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(svg_rects(written).size() == rects.size());  // the same cells (cairo numbers glyphs per document)
}

TEST_CASE(
    "export the RoPE figure: both maps' cells on one symmetric range, masked cells grey, the "
    "distance plot's means",
    "[export][rope]") {
  const LlamaModel m = load_llama(MHA_FIXTURES_DIR "/llama/gqa").model;  // H = 4, G = 2
  const std::vector<std::int32_t> ids = {5, 9, 2, 7, 3, 11, 5, 9};
  const LlamaRun run = llama_forward(m, ids);
  const ForwardResult<float>& f = run.attn[1];
  const Tensor<float> without = scores_without_rope(f);              // (H, T, T)
  const Tensor<float> with = f.trace["scores_scaled"].contiguous();  // (1, H, T, T)
  const Stage<float>& masked = f.trace["scores_masked"];
  const int T = 8, h = 3;
  RopeSpec spec;
  spec.head = h;
  spec.query_labels = {"a", "b", "c", "d", "e", "f", "g", "h"};
  spec.title_prefix = "layer 1  ";
  spec.font_path = kFont;
  const RopeFigure fig = rope_figure(f, spec);
  CHECK(fig.vmin == -fig.vmax);
  CHECK(fig.vmax > 0);
  REQUIRE(fig.cell > 0);
  CHECK(fig.without_map.w == T * fig.cell);
  CHECK(fig.with_map.h == T * fig.cell);
  CHECK(fig.with_map.x > fig.without_map.x + fig.without_map.w);
  // The range covers every unmasked score of the head, before and after the rotation.
  float maxabs = 0;
  for (int i = 0; i < T; ++i)
    for (int j = 0; j <= i; ++j)
      maxabs = std::max({maxabs, std::fabs(without.ptr()[(h * T + i) * T + j]),
                         std::fabs(with.ptr()[(h * T + i) * T + j])});
  CHECK(fig.vmax == maxabs);
  const Image im = decode(render_png(fig.drawing));
  CHECK(im.w == fig.drawing.width);
  CHECK(im.h == fig.drawing.height);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      INFO("query " << i << " key " << j);
      const bool blocked = std::isinf(masked.at({0, h, i, j}));
      CHECK(blocked == (j > i));  // the model's causal mask
      const int cx = fig.cell * j + fig.cell / 2, cy = fig.cell * i + fig.cell / 2;
      const std::uint32_t want0 =
          blocked ? render::kMaskedColor
                  : render::value_rgba(render::Colormap::diverging, without.ptr()[(h * T + i) * T + j],
                                       fig.vmin, fig.vmax);
      const std::uint32_t want1 =
          blocked ? render::kMaskedColor
                  : render::value_rgba(render::Colormap::diverging, with.ptr()[(h * T + i) * T + j], fig.vmin,
                                       fig.vmax);
      CHECK(near(im.at(fig.without_map.x + cx, fig.without_map.y + cy), want0));
      CHECK(near(im.at(fig.with_map.x + cx, fig.with_map.y + cy), want1));
    }
  CHECK(fig.mean_without == mean_score_by_offset(without.ptr() + h * T * T, T, T));
  CHECK(fig.mean_with == mean_score_by_offset(with.ptr() + h * T * T, T, T));
  auto has_text = [&](const std::string& t) {
    for (const Drawing::Text& x : fig.drawing.texts)
      if (x.text == t) return true;
    return false;
  };
  CHECK(has_text("layer 1  head 3: scores without and with RoPE (reads K/V head 1 of 2)"));
  CHECK(has_text("without RoPE"));
  CHECK(has_text("with RoPE (the model's)"));
  CHECK(has_text("e  4"));  // a query row: its token and index
  CHECK(has_text("distance i - j (query i, key j)"));
  // The app passes the scores it already holds: the same figure.
  CHECK(render_png(rope_figure(f, spec, &without).drawing) == render_png(fig.drawing));
  const std::string svg = render_svg(fig.drawing);
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(balanced_tags(svg));
  CHECK(render_pdf(fig.drawing).size() > 1000);
  CHECK_THROWS_WITH(write_figure("csv", fig.drawing, "/tmp/x.csv"), Catch::Contains("not csv"));

  spec.head = 4;
  CHECK_THROWS_WITH(rope_figure(f, spec), Catch::Contains("--head 4") && Catch::Contains("0 to 3"));
  Config c;  // no rotary positions: refused
  c.embed_dim = 8;
  c.num_heads = 2;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 1, 1, 4, 4);
  spec.head = 0;
  CHECK_THROWS_AS(rope_figure(forward(c, sc.weights, sc.inputs), spec), ConfigError);
}

TEST_CASE("export labels that are not UTF-8: U+FFFD in the figure, well-formed SVG and CSV", "[export]") {
  // Stray continuation byte, truncated sequence, overlong '/', surrogate, past U+10FFFF, a lone lead.
  CHECK(render::valid_utf8("ok \xC3\xA9 \xE2\x86\x92 \xF0\x9F\x98\x80") ==
        "ok \xC3\xA9 \xE2\x86\x92 \xF0\x9F\x98\x80");
  CHECK(render::valid_utf8("a\x80z") == "a\xEF\xBF\xBDz");
  CHECK(render::valid_utf8("\xE2\x86") == "\xEF\xBF\xBD");  // one maximal subpart, one U+FFFD
  CHECK(render::valid_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(render::valid_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(render::valid_utf8("\xF4\x90\x80\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(render::valid_utf8("x\xF0") == "x\xEF\xBF\xBD");

  const ForwardResult<float> r = notebook_causal();
  StageSlice sl;
  sl.query_labels = {"The",
                     "c\xFF"
                     "at",
                     "\xE2\x86", "down"};
  sl.key_labels = sl.query_labels;
  StageFigure fig = stage_figure(r, sl);
  fig.spec.font_path = kFont;
  fig.spec.title = "bad \xC0 title";
  CHECK(fig.spec.panels[0].row_labels[1] ==
        "c\xEF\xBF\xBD"
        "at");
  const std::string svg = render_svg(fig.spec);
  CHECK(balanced_tags(svg));
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  CHECK(count(svg, "<use xlink:href=\"#glyph") > 30);  // cairo drew the text, it did not stop at a bad byte
  const std::string csv = render_csv(fig.spec.panels[0]);
  CHECK(render::valid_utf8(csv) == csv);
  CHECK(csv.find("c\xEF\xBF\xBD"
                 "at") != std::string::npos);
  // The PNG draws the same labels as the clean text would take room for.
  const Image im = decode(render_png(fig.spec));
  const Layout lay = layout(fig.spec);
  CHECK(ink(im, lay.row_label_areas[0], 0xFFFFFFFFu) > 20);
  CHECK(ink(im, lay.title, 0xFFFFFFFFu) > 20);
}

TEST_CASE("label thinning: the smallest power of two whose cells hold the text", "[export]") {
  CHECK(render::label_step(48, 15) == 1);
  CHECK(render::label_step(10, 15) == 2);
  CHECK(render::label_step(1, 15) == 16);
  CHECK(render::label_step(1, 16) == 16);
  CHECK(render::label_step(1, 17) == 32);
  CHECK(render::label_step(0, 15) == 1);
}

namespace {

std::vector<unsigned char> font_bytes() {
  std::ifstream in(kFont, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
void put32(std::vector<unsigned char>& b, std::size_t at, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) b[at + std::size_t(k)] = static_cast<unsigned char>(v >> (24 - 8 * k));
}
std::uint32_t get32(const std::vector<unsigned char>& b, std::size_t at) {
  return std::uint32_t(b[at]) << 24 | std::uint32_t(b[at + 1]) << 16 | std::uint32_t(b[at + 2]) << 8 |
         b[at + 3];
}

}  // namespace

TEST_CASE("fonts that are not fonts: a FileError naming the file, never a crash, hang or huge read",
          "[export]") {
  using Catch::Contains;
  const test::TempDir dir;
  const std::vector<unsigned char> good = font_bytes();
  REQUIRE(good.size() > 1000);
  CHECK_NOTHROW(validate_font(good.data(), good.size(), "DejaVuSans.ttf"));
  CHECK_NOTHROW(FontFace(kFont));

  // What a figure does with each: refuse it, naming the file, through the same path the CLI takes.
  auto refused = [&](const std::string& path, const std::string& why) {
    INFO(path);
    CHECK_THROWS_WITH(FontFace(path), Contains(path) && Contains(why));
    ExportSpec s;
    const float v = 0.5f;
    Panel p;
    p.values = &v;
    p.rows = p.cols = 1;
    s.panels.push_back(p);
    s.font_path = path;
    CHECK_THROWS_AS(render_png(s), FileError);
    CHECK_THROWS_AS(TextMeter(path, 13), FileError);
  };
  write_bytes(dir.file("empty.ttf"), {});
  refused(dir.file("empty.ttf"), "empty");
  refused("/dev/null", "not a regular file");
  refused("/dev/zero", "not a regular file");
  refused(dir.path.string(), "Is a directory");
  refused(dir.file("missing.ttf"), "No such file");
  REQUIRE(::mkfifo(dir.file("fifo.ttf").c_str(), 0600) == 0);  // no writer: a read would wait forever
  refused(dir.file("fifo.ttf"), "not a regular file");
  // Larger than any font: refused from its size (a sparse file), before a byte is read.
  {
    std::ofstream(dir.file("huge.ttf")).put('x');
    REQUIRE(::truncate(dir.file("huge.ttf").c_str(), off_t(kMaxFontBytes) + 1) == 0);
  }
  refused(dir.file("huge.ttf"), "MiB");
  write_bytes(dir.file("text.ttf"), {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n', '!'});
  refused(dir.file("text.ttf"), "unknown sfnt version");
  write_bytes(dir.file("short.ttf"), {0, 1, 0, 0, 0, 3});
  refused(dir.file("short.ttf"), "shorter than a font's header");
  // Truncated: the header and table directory whole, the tables cut off.
  write_bytes(dir.file("cut.ttf"), std::vector<unsigned char>(good.begin(), good.begin() + 4000));
  refused(dir.file("cut.ttf"), "lies outside the file");
  // The directory itself cut short.
  write_bytes(dir.file("cut_dir.ttf"), std::vector<unsigned char>(good.begin(), good.begin() + 40));
  refused(dir.file("cut_dir.ttf"), "table directory runs past the end");
  // A table whose offset + length wraps past 2^32: still outside the file.
  std::vector<unsigned char> wrap = good;
  put32(wrap, 12 + 8, 0xFFFFFF00u);
  put32(wrap, 12 + 12, 0x200u);
  write_bytes(dir.file("wrap.ttf"), wrap);
  refused(dir.file("wrap.ttf"), "lies outside the file");
  // A font without the tables text needs (every 'cmap' tag renamed).
  std::vector<unsigned char> no_cmap = good;
  for (std::size_t i = 0, n = std::size_t(no_cmap[4] << 8 | no_cmap[5]); i < n; ++i)
    if (get32(no_cmap, 12 + 16 * i) == 0x636D6170u) put32(no_cmap, 12 + 16 * i, 0x786D6170u);  // "xmap"
  write_bytes(dir.file("no_cmap.ttf"), no_cmap);
  refused(dir.file("no_cmap.ttf"), "no 'cmap' table");
  // A collection (.ttc) of one font is read as that font; one pointing past its end is refused.
  std::vector<unsigned char> ttc = {'t', 't', 'c', 'f', 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 16};
  ttc.insert(ttc.end(), good.begin(), good.end());
  for (std::size_t i = 0, n = std::size_t(good[4] << 8 | good[5]); i < n; ++i)
    put32(ttc, 16 + 12 + 16 * i + 8, get32(ttc, 16 + 12 + 16 * i + 8) + 16);  // offsets from the file start
  write_bytes(dir.file("one.ttc"), ttc);
  CHECK_NOTHROW(FontFace(dir.file("one.ttc")));
  put32(ttc, 12, std::uint32_t(ttc.size()));
  write_bytes(dir.file("bad.ttc"), ttc);
  refused(dir.file("bad.ttc"), "starts past the end");
}
