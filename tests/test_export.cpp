// The exporter: PNGs decoded with stb_image and checked against the documented layout (size, cell
// colours = colormap(value) ±1, masked colour, labels and colorbar drawn, byte-identical repeats);
// SVG well-formed with one cell rect per value; CSV and the stage slicing (heads, average, errors);
// the merged mask, difference maps, the reshape figure and the shared file writer.
#include <stb_image.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "errors.hpp"
#include "masks.hpp"
#include "reshape_export.hpp"
#include "stage_export.hpp"
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

TEST_CASE("export SVG: well-formed, one rect per cell, NaN rows marked", "[export]") {
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
  fig.spec.font_path = MHA_ASSETS_DIR "/fonts/DejaVuSans.ttf";
  const std::string svg = render_svg(fig.spec);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  // Balanced tags: every opening tag is closed or self-closing, in order.
  std::vector<std::string> stack;
  const std::regex tag("<(/?)([a-zA-Z]+)[^>]*?(/?)>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::smatch& t = *it;
    if (t[3] == "/") continue;
    if (t[1] == "/") {
      REQUIRE(!stack.empty());
      CHECK(stack.back() == t[2]);
      stack.pop_back();
    } else {
      stack.push_back(t[2]);
    }
  }
  CHECK(stack.empty());
  std::size_t cells = 0;
  for (std::size_t at = svg.find("class=\"cell\""); at != std::string::npos;
       at = svg.find("class=\"cell\"", at + 1))
    ++cells;
  CHECK(cells == 3 * 5);
  CHECK(svg.find("a&lt;b") != std::string::npos);  // labels are escaped
  CHECK(svg.find("class=\"nan\"") != std::string::npos);
  CHECK(svg.find("class=\"hatch\"") != std::string::npos);
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
  const std::string svg = render_svg(fig.spec);
  std::size_t hatches = 0;
  for (std::size_t at = svg.find("class=\"hatch\""); at != std::string::npos;
       at = svg.find("class=\"hatch\"", at + 1))
    ++hatches;
  CHECK(hatches > 0);
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
      CHECK(near(centre(i, j),
                 render::value_rgba(render::Colormap::diverging, w.at({1, 0, i, j}) - w.at({1, 1, i, j}), -m, m)));
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
  CHECK_THROWS_WITH(write_figure(fig, "csv", "/tmp/never-written.csv"), Catch::Contains("one 2-D slice"));
  CHECK_THROWS_AS(write_figure(fig, "png", "/nonexistent-dir/x.png"), FileError);
  CHECK_THROWS_AS(write_figure(fig, "bmp", "/tmp/x.bmp"), ConfigError);
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
      const std::uint32_t want = head_colour(h, 2, q.at({2, i, e}), fig.maxabs);
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
                 head_colour(0, 2, q.at({2, i, c}), fig.maxabs)));
      CHECK(near(px(fig.stacked.x + c * cw, head1_top + i * ch),
                 head_colour(1, 2, q.at({2, i, 4 + c}), fig.maxabs)));
    }
  // The two heads' hues differ; the labels and captions are drawn.
  CHECK(head_colour(0, 2, 1, 1) != head_colour(1, 2, 1, 1));
  CHECK(ink(im, {0, 0, im.w, fig.flat.y - 2}, 0xFFFFFFFFu) > 200);                // title and captions
  CHECK(ink(im, {0, fig.flat.y, fig.flat.x - 1, fig.flat.h}, 0xFFFFFFFFu) > 20);  // token labels
  CHECK(render_png(fig.drawing) == render_png(reshape_figure(r, rs).drawing));    // deterministic

  const std::string svg = render_svg(fig.drawing);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  std::size_t cells = 0;
  for (std::size_t at = svg.find("class=\"cell\""); at != std::string::npos;
       at = svg.find("class=\"cell\"", at + 1))
    ++cells;
  CHECK(cells == 3 * 4 * 8);
  CHECK(svg.find(">down</text>") != std::string::npos);
  CHECK(svg.find("not contiguous") != std::string::npos);  // q_heads' caption, from the trace

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
      CHECK(near(bi.at(x, y), head_colour(h, 16, q16.at({0, 4, h * 4 + c}), big.maxabs)));
    }

  rs.batch_index = 3;
  CHECK_THROWS_WITH(reshape_figure(r, rs), Catch::Contains("out of range"));
  CHECK_THROWS_AS(write_drawing(fig.drawing, "csv", "/tmp/x.csv"), ConfigError);
}
