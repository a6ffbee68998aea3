// The exporter (see heatmap_export.hpp): one layout computed from the font's metrics, one drawing
// function per figure kind taking a cairo context, and three cairo surfaces (image → PNG, SVG, PDF)
// it is drawn on. Text is measured unhinted, so the layout is the same in every format.
#include "heatmap_export.hpp"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <new>

#include "colour_range.hpp"
#include "errors.hpp"
#include "font.hpp"
#include "io/npy.hpp"
#include "labels.hpp"

namespace mha::exporter {

namespace {

constexpr int kPad = 8;
constexpr int kColorbarWidth = 14;
constexpr int kTicks = 5;
constexpr int kMaxSide = 32767;                // cairo's largest image surface
constexpr int kMaxVectorCells = 64 * 64;       // a panel's cells as paths up to this many; an image above
constexpr double kPointsPerPixel = 0.75;       // PDF: 96 pixels an inch, as SVG's user units
constexpr std::uint32_t kText = 0xFF202020;    // RGBA packed R in the low byte, as colormap.hpp
constexpr std::uint32_t kBorder = 0xFF909090;  // grid and colorbar outlines
constexpr std::uint32_t kHatch = 0xFF282828;   // lines over masked cells
constexpr std::uint32_t kWhite = 0xFFFFFFFF;

void set_colour(cairo_t* cr, std::uint32_t rgba) {
  cairo_set_source_rgba(cr, (rgba & 0xFF) / 255.0, ((rgba >> 8) & 0xFF) / 255.0,
                        ((rgba >> 16) & 0xFF) / 255.0, (rgba >> 24) / 255.0);
}

void fill_rect(cairo_t* cr, double x, double y, double w, double h, std::uint32_t rgba) {
  set_colour(cr, rgba);
  cairo_rectangle(cr, x, y, w, h);
  cairo_fill(cr);
}

// A one-pixel line just outside r, so r's own pixels keep their colour.
void outline(cairo_t* cr, const Rect& r, std::uint32_t rgba) {
  set_colour(cr, rgba);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, r.x - 0.5, r.y - 0.5, r.w + 1, r.h + 1);
  cairo_stroke(cr);
}

// Byte length of the UTF-8 character starting with lead byte b (the text is valid UTF-8).
std::size_t char_length(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// The font at one pixel height (ascent + descent), as cairo draws it. Hinting off: advances and
// shapes come from the font alone, the same for PNG, SVG and PDF and on every machine.
class Font {
 public:
  Font(const FontFace& face, double px) {
    cairo_matrix_t font_matrix, ctm;
    const double em = face.em_for_line(px);
    cairo_matrix_init_scale(&font_matrix, em, em);
    cairo_matrix_init_identity(&ctm);
    cairo_font_options_t* o = cairo_font_options_create();
    cairo_font_options_set_antialias(o, CAIRO_ANTIALIAS_GRAY);
    cairo_font_options_set_hint_style(o, CAIRO_HINT_STYLE_NONE);
    cairo_font_options_set_hint_metrics(o, CAIRO_HINT_METRICS_OFF);
    font_ = cairo_scaled_font_create(face.cairo(), &font_matrix, &ctm, o);
    cairo_font_options_destroy(o);
    if (cairo_scaled_font_status(font_) != CAIRO_STATUS_SUCCESS) {
      cairo_scaled_font_destroy(font_);
      throw FileError("font", "cairo cannot size the font");
    }
    cairo_font_extents_t fe;
    cairo_scaled_font_extents(font_, &fe);
    ascent_ = int(std::ceil(fe.ascent));
    line_ = ascent_ + int(std::ceil(fe.descent));
  }
  ~Font() { cairo_scaled_font_destroy(font_); }
  Font(const Font&) = delete;
  Font& operator=(const Font&) = delete;

  int ascent() const { return ascent_; }
  int line() const { return line_; }  // ascent + descent: the height a line of text needs
  double advance(const std::string& utf8) const {
    cairo_text_extents_t te;
    cairo_scaled_font_text_extents(font_, utf8.c_str(), &te);
    return te.x_advance;
  }
  int width(const std::string& utf8) const { return int(std::ceil(advance(utf8))); }
  // `s` (valid UTF-8) shortened with an ellipsis to at most `max_w` pixels.
  std::string fit(const std::string& s, int max_w) const {
    if (width(s) <= max_w) return s;
    const std::string ellipsis = "\xE2\x80\xA6";
    std::size_t keep = 0;
    for (std::size_t end = 0; end < s.size();) {
      end += char_length(static_cast<unsigned char>(s[end]));
      if (width(s.substr(0, end) + ellipsis) > max_w) break;
      keep = end;
    }
    return s.substr(0, keep) + ellipsis;
  }
  // Text (valid UTF-8) from a pen at (x, baseline); rotated: reading upwards from the pen.
  void draw(cairo_t* cr, double x, double baseline, const std::string& s, std::uint32_t rgba,
            bool rotated = false) const {
    cairo_save(cr);
    set_colour(cr, rgba);
    cairo_translate(cr, x, baseline);
    if (rotated) cairo_rotate(cr, -M_PI / 2);
    cairo_set_scaled_font(cr, font_);
    cairo_move_to(cr, 0, 0);
    cairo_show_text(cr, s.c_str());
    cairo_restore(cr);
  }

 private:
  cairo_scaled_font_t* font_ = nullptr;
  int ascent_ = 0, line_ = 0;
};

float value_at(const Panel& p, int r, int c) {
  return p.values[std::int64_t(r) * p.row_stride + std::int64_t(c) * p.col_stride];
}

bool nan_row(const Panel& p, int r) {
  for (int c = 0; c < p.cols; ++c)
    if (!std::isnan(value_at(p, r, c))) return false;
  return true;
}

std::string row_label(const Panel& p, int r) {
  return r < int(p.row_labels.size()) ? p.row_labels[std::size_t(r)] : std::to_string(r);
}
std::string col_label(const Panel& p, int c) {
  return c < int(p.col_labels.size()) ? p.col_labels[std::size_t(c)] : std::to_string(c);
}

std::string format_value(float v, float vmin, float vmax) {
  // Decimals follow the range, as in the app's heatmap, so small differences do not all read 0.00.
  const float span = std::max(std::fabs(vmin), std::fabs(vmax));
  const char* fmt = span >= 100 ? "%.0f" : span >= 0.1f ? "%.2f" : span >= 0.01f ? "%.3f" : "%.1e";
  char buf[32];
  std::snprintf(buf, sizeof buf, std::isnan(v) ? "NaN" : fmt, double(v));
  return buf;
}

std::string tick_label(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", double(v));
  return buf;
}

bool dark(std::uint32_t rgba) {  // black or white text on this background
  const int lum = int(rgba & 0xFF) * 299 + int((rgba >> 8) & 0xFF) * 587 + int((rgba >> 16) & 0xFF) * 114;
  return lum <= 128000;
}

void check_size(int w, int h) {
  if (w <= 0 || h <= 0 || w > kMaxSide || h > kMaxSide)
    throw ConfigError("export", "a figure of " + std::to_string(w) + "×" + std::to_string(h) +
                                    " pixels is empty or larger than " + std::to_string(kMaxSide) +
                                    " on a side: choose a smaller --scale");
}

// The layout and the fonts it was measured with; the drawing reuses both.
struct Plan {
  Layout lay;
  std::unique_ptr<FontFace> face;
  std::unique_ptr<Font> font, title_font;
  std::string title;                                         // valid UTF-8
  std::vector<std::string> panel_titles;                     // valid UTF-8
  std::vector<std::vector<std::string>> row_text, col_text;  // per panel, fitted, "" = skipped
  std::vector<std::vector<bool>> nan_rows;                   // per panel
  int title_h = 0, panel_title_h = 0, nan_w = 0;
  bool values_fit = false;
};

Plan plan(const ExportSpec& s) {
  if (s.panels.empty()) throw ConfigError("export", "nothing to export: no panels");
  const Panel& p0 = s.panels.front();
  for (const Panel& p : s.panels) {
    if (!p.values || p.rows <= 0 || p.cols <= 0)
      throw ConfigError("export", "a panel has no values or a non-positive size");
    if (p.rows != p0.rows || p.cols != p0.cols)
      throw ConfigError("export", "all panels of a grid must have the same rows and columns");
  }
  Plan pl;
  pl.face = std::make_unique<FontFace>(s.font_path);
  pl.font = std::make_unique<Font>(*pl.face, s.font_px);
  pl.title_font = std::make_unique<Font>(*pl.face, std::round(s.font_px * 1.3f));
  const Font& f = *pl.font;
  Layout& L = pl.lay;
  const int n = int(s.panels.size()), rows = p0.rows, cols = p0.cols;
  const int line = f.line();

  const int target = n > 1 ? 320 : 480;  // automatic cells: a panel about this many pixels across
  L.cell = s.cell_px > 0 ? s.cell_px : std::clamp(target / std::max(rows, cols), 1, 48);
  const int cell = L.cell;
  if (std::int64_t(cell) * std::max(rows, cols) > kMaxSide)
    throw ConfigError("export", std::to_string(std::max(rows, cols)) + " cells of " + std::to_string(cell) +
                                    " pixels are more than " + std::to_string(kMaxSide) +
                                    " pixels across: choose a smaller --scale");
  const int max_label = int(s.font_px * 8);  // long tokens are cut with an ellipsis

  // Labels: which are drawn and how wide the widest is. Labels come from files and tokenizers:
  // anything that is not UTF-8 is replaced before it reaches the drawing.
  L.row_step = render::label_step(float(cell), float(line));
  int row_w = 0, col_w = 0;
  pl.row_text.resize(std::size_t(n));
  pl.col_text.resize(std::size_t(n));
  for (int k = 0; k < n; ++k) {
    const Panel& p = s.panels[std::size_t(k)];
    for (int c = 0; c < cols; ++c) {
      pl.col_text[std::size_t(k)].push_back(f.fit(render::valid_utf8(col_label(p, c)), max_label));
      col_w = std::max(col_w, f.width(pl.col_text[std::size_t(k)].back()));
    }
    for (int r = 0; r < rows; ++r) {
      pl.row_text[std::size_t(k)].push_back(
          r % L.row_step ? "" : f.fit(render::valid_utf8(row_label(p, r)), max_label));
      row_w = std::max(row_w, f.width(pl.row_text[std::size_t(k)].back()));
    }
  }
  L.col_labels_rotated = col_w > cell - 2;
  L.col_step = L.col_labels_rotated ? render::label_step(float(cell), float(line)) : 1;
  for (auto& t : pl.col_text)
    for (int c = 0; c < cols; ++c)
      if (c % L.col_step) t[std::size_t(c)].clear();
  const int top_h = (L.col_labels_rotated ? col_w : line) + kPad / 2;
  const int left_w = row_w + kPad / 2;

  pl.nan_rows.resize(std::size_t(n));
  bool any_nan = false;
  for (int k = 0; k < n; ++k)
    for (int r = 0; r < rows; ++r) {
      pl.nan_rows[std::size_t(k)].push_back(nan_row(s.panels[std::size_t(k)], r));
      any_nan = any_nan || pl.nan_rows[std::size_t(k)].back();
    }
  pl.nan_w = any_nan ? f.width("NaN") + kPad : 0;

  bool any_panel_title = false;
  for (const Panel& p : s.panels) {
    pl.panel_titles.push_back(render::valid_utf8(p.title));
    any_panel_title = any_panel_title || !p.title.empty();
  }
  pl.panel_title_h = any_panel_title ? line + kPad / 2 : 0;
  pl.title = render::valid_utf8(s.title);
  pl.title_h = pl.title.empty() ? 0 : pl.title_font->line() + kPad;

  if (s.show_values) {
    const int w = std::max(f.width(format_value(s.vmin, s.vmin, s.vmax)),
                           f.width(format_value(s.vmax, s.vmin, s.vmax)));
    pl.values_fit = w <= cell - 4 && line <= cell;
  }

  // The grid of panels, then the colorbar to the right of it.
  const int ncol = s.columns > 0 ? std::min(s.columns, n) : n <= 4 ? n : int(std::ceil(std::sqrt(double(n))));
  const int nrow = (n + ncol - 1) / ncol;
  const int grid_w = cols * cell, grid_h = rows * cell;
  const int pw = left_w + grid_w + pl.nan_w, ph = pl.panel_title_h + top_h + grid_h;
  const int gap = 2 * kPad;
  const int x0 = kPad, y0 = kPad + pl.title_h;
  for (int k = 0; k < n; ++k) {
    const int px = x0 + (k % ncol) * (pw + gap), py = y0 + (k / ncol) * (ph + gap);
    const Rect g{px + left_w, py + pl.panel_title_h + top_h, grid_w, grid_h};
    L.grids.push_back(g);
    L.row_label_areas.push_back({px, g.y, left_w - kPad / 2, grid_h});
    L.col_label_areas.push_back({g.x, py + pl.panel_title_h, grid_w, top_h - kPad / 2});
  }
  const int panels_right = x0 + ncol * pw + (ncol - 1) * gap;
  const int cbar_h = std::max(grid_h, 120);
  L.colorbar = {panels_right + gap, L.grids[0].y, kColorbarWidth, cbar_h};
  int tick_w = 0;
  for (int t = 0; t < kTicks; ++t)
    tick_w = std::max(tick_w, f.width(tick_label(s.vmin + (s.vmax - s.vmin) * float(t) / (kTicks - 1))));
  L.colorbar_labels = {L.colorbar.x + kColorbarWidth + 4 + kPad / 2, L.colorbar.y - line / 2, tick_w,
                       cbar_h + line};
  L.width = L.colorbar_labels.x + tick_w + kPad;
  L.height = std::max(y0 + nrow * ph + (nrow - 1) * gap, L.colorbar_labels.y + L.colorbar_labels.h) + kPad;
  if (!pl.title.empty()) {
    const int tw = pl.title_font->width(pl.title);
    L.title = {kPad, kPad, tw, pl.title_font->line()};
    L.width = std::max(L.width, tw + 2 * kPad);
  }
  check_size(L.width, L.height);
  return pl;
}

// Each row's colour top when rows are coloured on their own (ExportSpec::row_scale); else empty.
std::vector<float> row_tops(const ExportSpec& s, const Panel& p) {
  std::vector<float> tops;
  if (!s.row_scale) return tops;
  for (int r = 0; r < p.rows; ++r)
    tops.push_back(render::row_colour_top(p.values + std::int64_t(r) * p.row_stride, p.cols, p.col_stride,
                                          [&](int c) { return p.blocked && p.blocked(r, c); }));
  return tops;
}

// A cell's colour on the figure's range, or on [0, its row's top] with row_scale.
std::uint32_t cell_rgba(const ExportSpec& s, const Panel& p, const std::vector<float>& tops, int r, int c) {
  const float v = value_at(p, r, c);
  return tops.empty() ? render::value_rgba(s.colormap, v, s.vmin, s.vmax)
                      : render::value_rgba(s.colormap, v, 0.0f, tops[std::size_t(r)]);
}

// A panel's cells. Small maps: one filled rectangle a cell, real vectors in SVG and PDF. Large ones:
// one image of the grid's pixels (a cell is `cell` pixels of its colour), so an L = 512 map is not a
// quarter of a million paths.
void draw_cells(cairo_t* cr, const ExportSpec& s, const Panel& p, const Rect& g, int cell) {
  const std::vector<float> tops = row_tops(s, p);
  auto colour = [&](int r, int c) {
    return p.blocked && p.blocked(r, c) ? render::kMaskedColor : cell_rgba(s, p, tops, r, c);
  };
  if (std::int64_t(p.rows) * p.cols <= kMaxVectorCells) {
    for (int r = 0; r < p.rows; ++r)
      for (int c = 0; c < p.cols; ++c)
        fill_rect(cr, g.x + c * cell, g.y + r * cell, cell, cell, colour(r, c));
    return;
  }
  cairo_surface_t* img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, g.w, g.h);
  if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(img);
    throw std::bad_alloc();
  }
  cairo_surface_flush(img);
  unsigned char* data = cairo_image_surface_get_data(img);
  const int stride = cairo_image_surface_get_stride(img);
  for (int r = 0; r < p.rows; ++r) {
    auto* row =
        reinterpret_cast<std::uint32_t*>(data + std::size_t(r) * std::size_t(cell) * std::size_t(stride));
    for (int c = 0; c < p.cols; ++c) {
      const std::uint32_t v = colour(r, c);  // R in the low byte → cairo's native 0xAARRGGBB
      const std::uint32_t px = 0xFF000000u | (v & 0xFF) << 16 | (v & 0xFF00) | (v >> 16 & 0xFF);
      std::fill(row + std::size_t(c) * std::size_t(cell), row + std::size_t(c + 1) * std::size_t(cell), px);
    }
    for (int k = 1; k < cell; ++k)
      std::copy(row, row + g.w,
                reinterpret_cast<std::uint32_t*>(reinterpret_cast<unsigned char*>(row) +
                                                 std::size_t(k) * std::size_t(stride)));
  }
  cairo_surface_mark_dirty(img);
  cairo_save(cr);
  cairo_set_source_surface(cr, img, g.x, g.y);
  cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
  cairo_rectangle(cr, g.x, g.y, g.w, g.h);
  cairo_fill(cr);
  cairo_restore(cr);
  cairo_surface_destroy(img);
}

void draw_heatmap(cairo_t* cr, const ExportSpec& s, const Plan& pl) {
  const Layout& L = pl.lay;
  const Font& f = *pl.font;
  const int cell = L.cell, line = f.line();

  if (!s.transparent) fill_rect(cr, 0, 0, L.width, L.height, kWhite);
  if (!pl.title.empty())
    pl.title_font->draw(cr, L.title.x, L.title.y + pl.title_font->ascent(), pl.title, kText);
  for (std::size_t k = 0; k < s.panels.size(); ++k) {
    const Panel& p = s.panels[k];
    const Rect& g = L.grids[k];
    draw_cells(cr, s, p, g, cell);
    // Masked cells: two hatch lines (x + y = cell/2 and 3·cell/2 within the cell) keep them from
    // reading as "low" and leave the centre pixel plain.
    if (p.blocked && cell >= 6) {
      cairo_save(cr);
      set_colour(cr, kHatch);
      cairo_set_line_width(cr, 1);
      for (int r = 0; r < p.rows; ++r)
        for (int c = 0; c < p.cols; ++c) {
          if (!p.blocked(r, c)) continue;
          const double x = g.x + c * cell, y = g.y + r * cell, h = cell / 2.0;
          cairo_save(cr);
          cairo_rectangle(cr, x, y, cell, cell);
          cairo_clip(cr);
          cairo_move_to(cr, x, y + h);
          cairo_line_to(cr, x + h, y);
          cairo_move_to(cr, x, y + 3 * h);
          cairo_line_to(cr, x + 3 * h, y);
          cairo_stroke(cr);
          cairo_restore(cr);
        }
      cairo_restore(cr);
    }
    const std::vector<float> tops = pl.values_fit ? row_tops(s, p) : std::vector<float>();
    if (pl.values_fit)
      for (int r = 0; r < p.rows; ++r)
        for (int c = 0; c < p.cols; ++c) {
          if (p.blocked && p.blocked(r, c)) continue;
          const float v = value_at(p, r, c);
          const std::string t = format_value(v, s.vmin, s.vmax);
          const int x = g.x + c * cell, y = g.y + r * cell;
          f.draw(cr, x + (cell - f.advance(t)) / 2, y + (cell - line) / 2 + f.ascent(), t,
                 dark(cell_rgba(s, p, tops, r, c)) ? kWhite : kText);
        }
    outline(cr, g, kBorder);
    if (!pl.panel_titles[k].empty())
      f.draw(cr, L.col_label_areas[k].x, L.col_label_areas[k].y - pl.panel_title_h + f.ascent(),
             pl.panel_titles[k], kText);
    for (int r = 0; r < p.rows; ++r) {
      const std::string& t = pl.row_text[k][std::size_t(r)];
      if (t.empty()) continue;
      const Rect& a = L.row_label_areas[k];
      f.draw(cr, a.x + a.w - f.advance(t), g.y + r * cell + cell / 2 - line / 2 + f.ascent(), t, kText);
    }
    for (int c = 0; c < p.cols; ++c) {
      const std::string& t = pl.col_text[k][std::size_t(c)];
      if (t.empty()) continue;
      const Rect& a = L.col_label_areas[k];
      if (L.col_labels_rotated)  // the glyphs lie left of the upright baseline: centre them on the cell
        f.draw(cr, g.x + c * cell + cell / 2 + f.ascent() - line / 2, a.y + a.h, t, kText, true);
      else
        f.draw(cr, g.x + c * cell + (cell - f.advance(t)) / 2, a.y + a.h - line + f.ascent(), t, kText);
    }
    // NaN rows (every key blocked, torch's 0/0): a magenta tag right of the row.
    for (int r = 0; r < p.rows; ++r)
      if (pl.nan_rows[k][std::size_t(r)]) {
        const int x = g.x + g.w + 3;
        if (cell >= line)
          f.draw(cr, x, g.y + r * cell + cell / 2 - line / 2 + f.ascent(), "NaN", render::kNanColor);
        else
          fill_rect(cr, x, g.y + r * cell, kPad / 2, cell, render::kNanColor);
      }
  }

  // Colorbar: a gradient through the map's anchors (the map is linear between them), vmax's colour
  // at the centre of the top pixel row and vmin's at the bottom one, where the end ticks point.
  const Rect& cb = L.colorbar;
  cairo_pattern_t* grad = cairo_pattern_create_linear(0, cb.y + 0.5, 0, cb.y + cb.h - 0.5);
  constexpr int kStops = 32;
  for (int i = 0; i <= kStops; ++i) {
    const double t = double(i) / kStops;
    const std::uint32_t c = render::colormap_rgba(s.colormap, float(1 - t));
    cairo_pattern_add_color_stop_rgb(grad, t, (c & 0xFF) / 255.0, ((c >> 8) & 0xFF) / 255.0,
                                     ((c >> 16) & 0xFF) / 255.0);
  }
  cairo_set_source(cr, grad);
  cairo_rectangle(cr, cb.x, cb.y, cb.w, cb.h);
  cairo_fill(cr);
  cairo_pattern_destroy(grad);
  outline(cr, cb, kBorder);
  for (int t = 0; t < kTicks; ++t) {
    const float frac = float(t) / (kTicks - 1);
    const int y = cb.y + int(std::lround((1.0f - frac) * float(cb.h - 1)));
    fill_rect(cr, cb.x + cb.w, y, 4, 1, kText);
    f.draw(cr, L.colorbar_labels.x, y - line / 2 + f.ascent(), tick_label(s.vmin + (s.vmax - s.vmin) * frac),
           kText);
  }
}

// --- surfaces: the same drawing into PNG, SVG or PDF bytes ---

cairo_status_t append(void* out, const unsigned char* data, unsigned int size) {
  try {
    static_cast<std::vector<std::uint8_t>*>(out)->insert(static_cast<std::vector<std::uint8_t>*>(out)->end(),
                                                         data, data + size);
    return CAIRO_STATUS_SUCCESS;
  } catch (const std::bad_alloc&) {
    return CAIRO_STATUS_NO_MEMORY;
  }
}

enum class Kind { png, svg, pdf };

template <class Draw>
std::vector<std::uint8_t> render_bytes(Kind kind, int w, int h, const Draw& draw) {
  check_size(w, h);
  std::vector<std::uint8_t> out;
  cairo_surface_t* surface = nullptr;
  switch (kind) {
    case Kind::png: surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h); break;
    case Kind::svg:
      surface = cairo_svg_surface_create_for_stream(append, &out, w, h);
      cairo_svg_surface_set_document_unit(surface, CAIRO_SVG_UNIT_PX);
      break;
    case Kind::pdf:
      surface = cairo_pdf_surface_create_for_stream(append, &out, w * kPointsPerPixel, h * kPointsPerPixel);
      cairo_pdf_surface_set_metadata(surface, CAIRO_PDF_METADATA_CREATOR, "MHA Studio");
      // No creation date: the same figure gives the same bytes, as the PNG and SVG do.
      cairo_pdf_surface_set_metadata(surface, CAIRO_PDF_METADATA_CREATE_DATE, "");
      break;
  }
  cairo_t* cr = cairo_create(surface);
  if (kind == Kind::pdf) cairo_scale(cr, kPointsPerPixel, kPointsPerPixel);
  cairo_status_t status = cairo_status(cr);
  if (status == CAIRO_STATUS_SUCCESS) {
    try {
      draw(cr);
    } catch (...) {
      cairo_destroy(cr);
      cairo_surface_destroy(surface);
      throw;
    }
    status = cairo_status(cr);
  }
  cairo_destroy(cr);
  if (status == CAIRO_STATUS_SUCCESS && kind == Kind::png)
    status = cairo_surface_write_to_png_stream(surface, append, &out);
  cairo_surface_finish(surface);  // SVG and PDF write their last bytes here
  if (status == CAIRO_STATUS_SUCCESS) status = cairo_surface_status(surface);
  cairo_surface_destroy(surface);
  if (status == CAIRO_STATUS_NO_MEMORY) throw std::bad_alloc();
  if (status != CAIRO_STATUS_SUCCESS)
    throw ConfigError("export", std::string("drawing the figure failed: ") + cairo_status_to_string(status));
  return out;
}

std::vector<std::uint8_t> render_spec(Kind kind, const ExportSpec& s) {
  const Plan pl = plan(s);
  return render_bytes(kind, pl.lay.width, pl.lay.height, [&](cairo_t* cr) { draw_heatmap(cr, s, pl); });
}

}  // namespace

Layout layout(const ExportSpec& spec) {
  return plan(spec).lay;
}

std::vector<std::uint8_t> render_png(const ExportSpec& s) {
  return render_spec(Kind::png, s);
}

std::string render_svg(const ExportSpec& s) {
  const std::vector<std::uint8_t> b = render_spec(Kind::svg, s);
  return std::string(b.begin(), b.end());
}

std::vector<std::uint8_t> render_pdf(const ExportSpec& s) {
  return render_spec(Kind::pdf, s);
}

std::string render_csv(const Panel& p) {
  auto field = [](const std::string& s) {  // RFC 4180 quoting when a token holds , " or a newline
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  std::string o;
  for (int c = 0; c < p.cols; ++c) o += "," + field(render::valid_utf8(col_label(p, c)));
  o += "\n";
  char buf[32];
  for (int r = 0; r < p.rows; ++r) {
    o += field(render::valid_utf8(row_label(p, r)));
    for (int c = 0; c < p.cols; ++c) {
      const float v = value_at(p, r, c);
      // %.9g round-trips a float; NaN and ±inf spelled as numpy/pandas read them.
      if (std::isnan(v))
        std::snprintf(buf, sizeof buf, ",nan");
      else if (std::isinf(v))
        std::snprintf(buf, sizeof buf, v > 0 ? ",inf" : ",-inf");
      else
        std::snprintf(buf, sizeof buf, ",%.9g", double(v));
      o += buf;
    }
    o += "\n";
  }
  return o;
}

// --- free-form drawings ---

struct TextMeter::Fonts {
  FontFace face;
  Font font, title;
  Fonts(const std::string& path, float px) : face(path), font(face, px), title(face, std::round(px * 1.3f)) {}
};

TextMeter::TextMeter(const std::string& font_path, float px)
    : fonts_(std::make_unique<Fonts>(font_path, px)) {}
TextMeter::~TextMeter() = default;
int TextMeter::width(const std::string& s, bool title) {
  return (title ? fonts_->title : fonts_->font).width(render::valid_utf8(s));
}
int TextMeter::line(bool title) const {
  return (title ? fonts_->title : fonts_->font).line();
}
int TextMeter::ascent(bool title) const {
  return (title ? fonts_->title : fonts_->font).ascent();
}

namespace {

void draw_drawing(cairo_t* cr, const Drawing& d, TextMeter& meter);

std::vector<std::uint8_t> render_drawing(Kind kind, const Drawing& d) {
  check_size(d.width, d.height);
  TextMeter meter(d.font_path, d.font_px);
  return render_bytes(kind, d.width, d.height, [&](cairo_t* cr) { draw_drawing(cr, d, meter); });
}

// The drawing of render_drawing, on any cairo context.
void draw_drawing(cairo_t* cr, const Drawing& d, TextMeter& meter) {
  if (!d.transparent) fill_rect(cr, 0, 0, d.width, d.height, kWhite);
  for (const Drawing::Box& b : d.boxes) {
    fill_rect(cr, b.x, b.y, b.w, b.h, b.fill);
    if (b.outline) outline(cr, {b.x, b.y, b.w, b.h}, b.outline);
  }
  for (const Drawing::Line& l : d.lines) {
    if (l.points.size() < 2) continue;
    set_colour(cr, l.color);
    cairo_set_line_width(cr, l.width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    const double dash[] = {4.0 * l.width, 2.5 * l.width};
    cairo_set_dash(cr, dash, l.dashed ? 2 : 0, 0);
    cairo_move_to(cr, l.points[0].first, l.points[0].second);
    for (std::size_t i = 1; i < l.points.size(); ++i)
      cairo_line_to(cr, l.points[i].first, l.points[i].second);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
  }
  for (const Drawing::Text& t : d.texts) {
    const Font& f = t.title ? meter.fonts().title : meter.fonts().font;
    f.draw(cr, t.x, t.y + f.ascent(), render::valid_utf8(t.text), t.color);
  }
}

}  // namespace

void draw_figure(cairo_t* cr, const ExportSpec& spec) {
  const Plan pl = plan(spec);
  draw_heatmap(cr, spec, pl);
}

void draw_figure(cairo_t* cr, const Drawing& d) {
  check_size(d.width, d.height);
  TextMeter meter(d.font_path, d.font_px);
  draw_drawing(cr, d, meter);
}

std::vector<std::uint8_t> render_png(const Drawing& d) {
  return render_drawing(Kind::png, d);
}

std::string render_svg(const Drawing& d) {
  const std::vector<std::uint8_t> b = render_drawing(Kind::svg, d);
  return std::string(b.begin(), b.end());
}

std::vector<std::uint8_t> render_pdf(const Drawing& d) {
  return render_drawing(Kind::pdf, d);
}

// --- the formats and the one writer ---

namespace {

std::vector<std::uint8_t> csv_bytes(const ExportSpec& s) {
  if (s.panels.size() != 1)
    throw ConfigError("--format", "CSV holds one 2-D slice: pick one head or the average, not all heads");
  const std::string csv = render_csv(s.panels[0]);
  return std::vector<std::uint8_t>(csv.begin(), csv.end());
}

template <class Figure>
std::vector<std::uint8_t> svg_bytes(const Figure& f) {
  const std::string svg = render_svg(f);
  return std::vector<std::uint8_t>(svg.begin(), svg.end());
}

}  // namespace

const std::vector<FigureFormat>& figure_formats() {
  using SpecBytes = std::vector<std::uint8_t> (*)(const ExportSpec&);
  using DrawingBytes = std::vector<std::uint8_t> (*)(const Drawing&);
  static const std::vector<FigureFormat> table = {
      {"png", ".png", "PNG", true, SpecBytes(render_png), DrawingBytes(render_png)},
      {"svg", ".svg", "SVG", true, svg_bytes<ExportSpec>, svg_bytes<Drawing>},
      {"pdf", ".pdf", "PDF", true, SpecBytes(render_pdf), DrawingBytes(render_pdf)},
      {"csv", ".csv", "CSV (values)", false, csv_bytes, nullptr},
  };
  return table;
}

std::vector<std::string> figure_format_names() {
  std::vector<std::string> names;
  for (const FigureFormat& f : figure_formats()) names.push_back(f.name);
  return names;
}

const FigureFormat& figure_format(const std::string& name) {
  std::string names;
  for (const FigureFormat& f : figure_formats()) {
    if (f.name == name) return f;
    names += (names.empty() ? "" : ", ") + f.name;
  }
  throw ConfigError("--format", "format " + name + ": expected " + names);
}

std::string format_from_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  for (const FigureFormat& f : figure_formats())
    if (ext == f.extension) return f.name;
  return "";
}

std::vector<std::uint8_t> render_figure(const std::string& format, const ExportSpec& spec) {
  return figure_format(format).heatmap(spec);
}

std::vector<std::uint8_t> render_figure(const std::string& format, const Drawing& d) {
  const FigureFormat& f = figure_format(format);
  if (!f.drawing) {
    std::string images;
    for (const FigureFormat& g : figure_formats())
      if (g.drawing) images += (images.empty() ? "" : ", ") + g.name;
    throw ConfigError("--format", "this figure is an image: " + images + ", not " + format);
  }
  return f.drawing(d);
}

void write_figure(const std::string& format, const ExportSpec& spec, const std::string& path) {
  const std::vector<std::uint8_t> bytes = render_figure(format, spec);
  write_file(path, bytes.data(), bytes.size());
}

void write_figure(const std::string& format, const Drawing& d, const std::string& path) {
  const std::vector<std::uint8_t> bytes = render_figure(format, d);
  write_file(path, bytes.data(), bytes.size());
}

void write_file(const std::string& path, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  write_file_atomic(path, std::vector<unsigned char>(bytes, bytes + size));
}

}  // namespace mha::exporter
