// The exporter (see heatmap_export.hpp): one layout computed from font metrics, then drawn twice —
// into an RGBA canvas with stb_truetype glyphs for the PNG, and as SVG elements at the same positions.
// Glyphs sit on whole pixels and blending is integer arithmetic, so the PNG bytes depend only on the spec.
#include "heatmap_export.hpp"

#include <stb_image_write.h>
#include <stb_truetype.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "errors.hpp"
#include "io/npy.hpp"

namespace mha::exporter {

namespace {

constexpr int kPad = 8;
constexpr int kColorbarWidth = 14;
constexpr int kTicks = 5;
constexpr std::uint32_t kText = 0xFF202020;    // RGBA packed R in the low byte, as colormap.hpp
constexpr std::uint32_t kBorder = 0xFF909090;  // grid and colorbar outlines
constexpr std::uint32_t kHatch = 0xFF282828;   // lines over masked cells
constexpr std::uint32_t kWhite = 0xFFFFFFFF;

std::vector<std::uint32_t> utf8_codepoints(const std::string& s) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    std::uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n && i + std::size_t(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + std::size_t(k)]) & 0x3F);
    out.push_back(cp);
    i += std::size_t(n);
  }
  return out;
}

// A TrueType font at one pixel height, with the glyph bitmaps it has rendered kept for reuse
// (an L = 512 grid draws the same ten digits hundreds of times).
class Font {
 public:
  Font(const std::vector<unsigned char>& file, float px) : file_(file) {
    if (!stbtt_InitFont(&info_, file_.data(), stbtt_GetFontOffsetForIndex(file_.data(), 0)))
      throw FileError("font", "not a TrueType font");
    scale_ = stbtt_ScaleForPixelHeight(&info_, px);
    int asc = 0, desc = 0, gap = 0;
    stbtt_GetFontVMetrics(&info_, &asc, &desc, &gap);
    ascent_ = int(std::ceil(float(asc) * scale_));
    line_ = ascent_ + int(std::ceil(float(-desc) * scale_));
  }
  int ascent() const { return ascent_; }
  int line() const { return line_; }  // ascent + descent: the height a line of text needs

  struct Glyph {
    int advance = 0, x0 = 0, y0 = 0, w = 0, h = 0;  // box relative to the pen on the baseline
    std::vector<unsigned char> alpha;
  };
  const Glyph& glyph(std::uint32_t cp) {
    auto it = glyphs_.find(cp);
    if (it != glyphs_.end()) return it->second;
    Glyph g;
    int adv = 0, lsb = 0, x1 = 0, y1 = 0;
    stbtt_GetCodepointHMetrics(&info_, int(cp), &adv, &lsb);
    g.advance = int(std::lround(float(adv) * scale_));
    stbtt_GetCodepointBitmapBox(&info_, int(cp), scale_, scale_, &g.x0, &g.y0, &x1, &y1);
    g.w = std::max(0, x1 - g.x0);
    g.h = std::max(0, y1 - g.y0);
    g.alpha.assign(std::size_t(g.w) * std::size_t(g.h), 0);
    if (g.w > 0 && g.h > 0)
      stbtt_MakeCodepointBitmap(&info_, g.alpha.data(), g.w, g.h, g.w, scale_, scale_, int(cp));
    return glyphs_.emplace(cp, std::move(g)).first->second;
  }
  int width(const std::string& s) {
    int w = 0;
    for (std::uint32_t cp : utf8_codepoints(s)) w += glyph(cp).advance;
    return w;
  }
  // `s` shortened with an ellipsis to at most `max_w` pixels.
  std::string fit(const std::string& s, int max_w) {
    if (width(s) <= max_w) return s;
    std::vector<std::uint32_t> cps = utf8_codepoints(s);
    const std::string ellipsis = "\xE2\x80\xA6";
    std::string out;
    int w = width(ellipsis);
    for (std::uint32_t cp : cps) {
      const int a = glyph(cp).advance;
      if (w + a > max_w) break;
      w += a;
      char buf[4];
      int n = 0;
      if (cp < 0x80) {
        buf[n++] = char(cp);
      } else if (cp < 0x800) {
        buf[n++] = char(0xC0 | (cp >> 6));
        buf[n++] = char(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        buf[n++] = char(0xE0 | (cp >> 12));
        buf[n++] = char(0x80 | ((cp >> 6) & 0x3F));
        buf[n++] = char(0x80 | (cp & 0x3F));
      } else {
        buf[n++] = char(0xF0 | (cp >> 18));
        buf[n++] = char(0x80 | ((cp >> 12) & 0x3F));
        buf[n++] = char(0x80 | ((cp >> 6) & 0x3F));
        buf[n++] = char(0x80 | (cp & 0x3F));
      }
      out.append(buf, std::size_t(n));
    }
    return out + ellipsis;
  }

 private:
  const std::vector<unsigned char>& file_;
  stbtt_fontinfo info_{};
  float scale_ = 1;
  int ascent_ = 0, line_ = 0;
  std::map<std::uint32_t, Glyph> glyphs_;
};

std::vector<unsigned char> read_font(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FileError("font", "cannot read the font " + path + ": " + std::strerror(errno));
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Labels every `step` cells: powers of two, so ticks land on 0, 16, 32, … at L = 512.
int label_step(int cell, int text_extent) {
  int step = 1;
  while (step * cell < text_extent) step *= 2;
  return step;
}

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

// The layout and the fonts it was measured with; the drawing passes reuse both.
struct Plan {
  Layout lay;
  std::vector<unsigned char> font_file;
  std::unique_ptr<Font> font, title_font;
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
  pl.font_file = read_font(s.font_path);
  pl.font = std::make_unique<Font>(pl.font_file, s.font_px);
  pl.title_font = std::make_unique<Font>(pl.font_file, std::round(s.font_px * 1.3f));
  Font& f = *pl.font;
  Layout& L = pl.lay;
  const int n = int(s.panels.size()), rows = p0.rows, cols = p0.cols;
  const int line = f.line();

  const int target = n > 1 ? 320 : 480;  // automatic cells: a panel about this many pixels across
  L.cell = s.cell_px > 0 ? s.cell_px : std::clamp(target / std::max(rows, cols), 1, 48);
  const int cell = L.cell;
  const int max_label = int(s.font_px * 8);  // long tokens are cut with an ellipsis

  // Labels: which are drawn and how wide the widest is.
  L.row_step = label_step(cell, line);
  int row_w = 0, col_w = 0;
  pl.row_text.resize(std::size_t(n));
  pl.col_text.resize(std::size_t(n));
  for (int k = 0; k < n; ++k) {
    const Panel& p = s.panels[std::size_t(k)];
    for (int c = 0; c < cols; ++c) {
      pl.col_text[std::size_t(k)].push_back(f.fit(col_label(p, c), max_label));
      col_w = std::max(col_w, f.width(pl.col_text[std::size_t(k)].back()));
    }
    for (int r = 0; r < rows; ++r) {
      pl.row_text[std::size_t(k)].push_back(r % L.row_step ? "" : f.fit(row_label(p, r), max_label));
      row_w = std::max(row_w, f.width(pl.row_text[std::size_t(k)].back()));
    }
  }
  L.col_labels_rotated = col_w > cell - 2;
  L.col_step = L.col_labels_rotated ? label_step(cell, line) : 1;
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
  for (const Panel& p : s.panels) any_panel_title = any_panel_title || !p.title.empty();
  pl.panel_title_h = any_panel_title ? line + kPad / 2 : 0;
  pl.title_h = s.title.empty() ? 0 : pl.title_font->line() + kPad;

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
  if (!s.title.empty()) {
    const int tw = pl.title_font->width(s.title);
    L.title = {kPad, kPad, tw, pl.title_font->line()};
    L.width = std::max(L.width, tw + 2 * kPad);
  }
  return pl;
}

// --- PNG ---

class Canvas {
 public:
  Canvas(int w, int h, std::uint32_t background)
      : w_(w), h_(h), px_(std::size_t(w) * std::size_t(h), background) {}
  void fill(int x, int y, int w, int h, std::uint32_t c) {
    const int xa = std::max(0, x), ya = std::max(0, y), xb = std::min(w_, x + w), yb = std::min(h_, y + h);
    for (int yy = ya; yy < yb; ++yy)
      std::fill(&px_[idx(xa, yy)], &px_[idx(xa, yy)] + std::max(0, xb - xa), c);
  }
  void outline(const Rect& r, std::uint32_t c) {  // one pixel outside r, so r's own pixels stay
    fill(r.x - 1, r.y - 1, r.w + 2, 1, c);
    fill(r.x - 1, r.y + r.h, r.w + 2, 1, c);
    fill(r.x - 1, r.y, 1, r.h, c);
    fill(r.x + r.w, r.y, 1, r.h, c);
  }
  void set(int x, int y, std::uint32_t c) {
    if (x >= 0 && y >= 0 && x < w_ && y < h_) px_[idx(x, y)] = c;
  }
  // Straight-alpha "over" with coverage a (0..255), in integers so every build gives the same bytes.
  void blend(int x, int y, std::uint32_t c, int a) {
    if (a <= 0 || x < 0 || y < 0 || x >= w_ || y >= h_) return;
    std::uint32_t& d = px_[idx(x, y)];
    const int da = int(d >> 24), oa = a * 255 + da * (255 - a);  // ×255
    if (oa == 0) return;
    std::uint32_t out = std::uint32_t((oa + 127) / 255) << 24;
    for (int sh = 0; sh < 24; sh += 8) {
      const int sc = int((c >> sh) & 0xFF), dc = int((d >> sh) & 0xFF);
      out |= std::uint32_t((sc * a * 255 + dc * da * (255 - a) + oa / 2) / oa) << sh;
    }
    d = out;
  }
  // Text from a pen at (x, baseline); rotated: reading upwards, the pen moving towards smaller y.
  void text(Font& f, int x, int baseline, const std::string& s, std::uint32_t c, bool rotated = false) {
    int pen = 0;
    for (std::uint32_t cp : utf8_codepoints(s)) {
      const Font::Glyph& g = f.glyph(cp);
      for (int gy = 0; gy < g.h; ++gy)
        for (int gx = 0; gx < g.w; ++gx) {
          const int a = g.alpha[std::size_t(gy) * std::size_t(g.w) + std::size_t(gx)];
          const int dx = pen + g.x0 + gx, dy = g.y0 + gy;  // from the pen, y down
          if (rotated)
            blend(x + dy, baseline - dx, c, a);
          else
            blend(x + dx, baseline + dy, c, a);
        }
      pen += g.advance;
    }
  }
  const std::uint32_t* data() const { return px_.data(); }

 private:
  std::size_t idx(int x, int y) const { return std::size_t(y) * std::size_t(w_) + std::size_t(x); }
  int w_, h_;
  std::vector<std::uint32_t> px_;  // R in the low byte: little-endian memory order R, G, B, A
};

void write_to_vector(void* ctx, void* data, int size) {
  auto* out = static_cast<std::vector<std::uint8_t>*>(ctx);
  const auto* b = static_cast<const std::uint8_t*>(data);
  out->insert(out->end(), b, b + size);
}

// --- SVG ---

std::string hex(std::uint32_t rgba) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgba & 0xFF, (rgba >> 8) & 0xFF, (rgba >> 16) & 0xFF);
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  return out;
}

}  // namespace

Layout layout(const ExportSpec& spec) {
  return plan(spec).lay;
}

std::vector<std::uint8_t> render_png(const ExportSpec& s) {
  Plan pl = plan(s);
  const Layout& L = pl.lay;
  Font& f = *pl.font;
  Canvas cv(L.width, L.height, s.transparent ? 0x00FFFFFFu : kWhite);
  const int cell = L.cell, line = f.line();

  if (!s.title.empty())
    cv.text(*pl.title_font, L.title.x, L.title.y + pl.title_font->ascent(), s.title, kText);
  for (std::size_t k = 0; k < s.panels.size(); ++k) {
    const Panel& p = s.panels[k];
    const Rect& g = L.grids[k];
    for (int r = 0; r < p.rows; ++r)
      for (int c = 0; c < p.cols; ++c) {
        const bool blocked = p.blocked && p.blocked(r, c);
        const std::uint32_t col =
            blocked ? render::kMaskedColor : render::value_rgba(s.colormap, value_at(p, r, c), s.vmin, s.vmax);
        const int x = g.x + c * cell, y = g.y + r * cell;
        cv.fill(x, y, cell, cell, col);
        // Two hatch lines (x + y = cell/2 and 3·cell/2) keep masked cells from reading as "low"
        // and leave the centre pixel plain.
        if (blocked && cell >= 6)
          for (int i = 0; i < cell; ++i) {
            const int j1 = cell / 2 - i, j2 = 3 * cell / 2 - i;
            if (j1 >= 0 && j1 < cell) cv.set(x + i, y + j1, kHatch);
            if (j2 >= 0 && j2 < cell) cv.set(x + i, y + j2, kHatch);
          }
        if (pl.values_fit && !blocked) {
          const std::string t = format_value(value_at(p, r, c), s.vmin, s.vmax);
          const int tw = f.width(t);
          cv.text(f, x + (cell - tw) / 2, y + (cell - line) / 2 + f.ascent(), t, dark(col) ? kWhite : kText);
        }
      }
    cv.outline(g, kBorder);
    if (!p.title.empty())
      cv.text(f, L.col_label_areas[k].x, L.col_label_areas[k].y - pl.panel_title_h + f.ascent(), p.title,
              kText);
    for (int r = 0; r < p.rows; ++r) {
      const std::string& t = pl.row_text[k][std::size_t(r)];
      if (t.empty()) continue;
      const Rect& a = L.row_label_areas[k];
      cv.text(f, a.x + a.w - f.width(t), g.y + r * cell + cell / 2 - line / 2 + f.ascent(), t, kText);
    }
    for (int c = 0; c < p.cols; ++c) {
      const std::string& t = pl.col_text[k][std::size_t(c)];
      if (t.empty()) continue;
      const Rect& a = L.col_label_areas[k];
      if (L.col_labels_rotated)  // the glyphs lie left of the upright baseline: centre them on the cell
        cv.text(f, g.x + c * cell + cell / 2 + f.ascent() - line / 2, a.y + a.h, t, kText, true);
      else
        cv.text(f, g.x + c * cell + (cell - f.width(t)) / 2, a.y + a.h - line + f.ascent(), t, kText);
    }
    // NaN rows (every key blocked, torch's 0/0): a magenta tag right of the row.
    for (int r = 0; r < p.rows; ++r)
      if (pl.nan_rows[k][std::size_t(r)]) {
        const int x = g.x + g.w + 3;
        if (cell >= line)
          cv.text(f, x, g.y + r * cell + cell / 2 - line / 2 + f.ascent(), "NaN", render::kNanColor);
        else
          cv.fill(x, g.y + r * cell, kPad / 2, cell, render::kNanColor);
      }
  }

  // Colorbar: the top row is exactly vmax's colour and the bottom row vmin's, like the tick lines.
  const Rect& cb = L.colorbar;
  for (int y = 0; y < cb.h; ++y)
    cv.fill(cb.x, cb.y + y, cb.w, 1, render::colormap_rgba(s.colormap, 1.0f - float(y) / float(cb.h - 1)));
  cv.outline(cb, kBorder);
  for (int t = 0; t < kTicks; ++t) {
    const float frac = float(t) / (kTicks - 1);
    const int y = cb.y + int(std::lround((1.0f - frac) * float(cb.h - 1)));
    cv.fill(cb.x + cb.w, y, 4, 1, kText);
    cv.text(f, L.colorbar_labels.x, y - line / 2 + f.ascent(), tick_label(s.vmin + (s.vmax - s.vmin) * frac),
            kText);
  }

  std::vector<std::uint8_t> png;
  if (!stbi_write_png_to_func(write_to_vector, &png, L.width, L.height, 4, cv.data(), L.width * 4))
    throw FileError("export", "PNG encoding failed");
  return png;
}

std::string render_svg(const ExportSpec& s) {
  Plan pl = plan(s);
  const Layout& L = pl.lay;
  Font& f = *pl.font;
  const int cell = L.cell, line = f.line();
  const float fs = s.font_px;
  std::string o;
  char buf[512];
  auto put = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    o += buf;
  };
  put("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"DejaVu Sans, Verdana, sans-serif\" font-size=\"%g\" fill=\"%s\">\n",
      L.width, L.height, L.width, L.height, double(fs), hex(kText).c_str());
  put("<defs><pattern id=\"hatch\" width=\"%g\" height=\"%g\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"%g\" stroke=\"%s\" "
      "stroke-width=\"1\"/></pattern></defs>\n",
      cell * 0.5, cell * 0.5, cell * 0.5, hex(kHatch).c_str());
  if (!s.transparent) o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  if (!s.title.empty())
    put("<text class=\"title\" x=\"%d\" y=\"%d\" font-size=\"%g\">%s</text>\n", L.title.x,
        L.title.y + pl.title_font->ascent(), std::round(double(fs) * 1.3), xml_escape(s.title).c_str());
  for (std::size_t k = 0; k < s.panels.size(); ++k) {
    const Panel& p = s.panels[k];
    const Rect& g = L.grids[k];
    o += "<g class=\"panel\">\n";
    if (!p.title.empty())
      put("<text class=\"panel-title\" x=\"%d\" y=\"%d\">%s</text>\n", L.col_label_areas[k].x,
          L.col_label_areas[k].y - pl.panel_title_h + f.ascent(), xml_escape(p.title).c_str());
    // crispEdges: no hairline seams between neighbouring cells in viewers that antialias.
    o += "<g shape-rendering=\"crispEdges\">\n";
    std::string hatches, values;
    for (int r = 0; r < p.rows; ++r)
      for (int c = 0; c < p.cols; ++c) {
        const bool blocked = p.blocked && p.blocked(r, c);
        const float v = value_at(p, r, c);
        const std::uint32_t col =
            blocked ? render::kMaskedColor : render::value_rgba(s.colormap, v, s.vmin, s.vmax);
        const int x = g.x + c * cell, y = g.y + r * cell;
        put("<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", x, y, cell,
            cell, hex(col).c_str());
        if (blocked) {
          std::snprintf(
              buf, sizeof buf,
              "<rect class=\"hatch\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"url(#hatch)\"/>\n",
              x, y, cell, cell);
          hatches += buf;
        }
        if (pl.values_fit && !blocked) {
          std::snprintf(buf, sizeof buf,
                        "<text x=\"%g\" y=\"%d\" text-anchor=\"middle\" fill=\"%s\">%s</text>\n",
                        x + cell * 0.5, y + (cell - line) / 2 + f.ascent(),
                        hex(dark(col) ? kWhite : kText).c_str(), format_value(v, s.vmin, s.vmax).c_str());
          values += buf;
        }
      }
    o += hatches;
    o += "</g>\n";
    o += values;
    put("<rect x=\"%g\" y=\"%g\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"%s\"/>\n", g.x - 0.5,
        g.y - 0.5, g.w + 1, g.h + 1, hex(kBorder).c_str());
    for (int r = 0; r < p.rows; ++r) {
      const std::string& t = pl.row_text[k][std::size_t(r)];
      if (t.empty()) continue;
      const Rect& a = L.row_label_areas[k];
      put("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", a.x + a.w,
          g.y + r * cell + cell / 2 - line / 2 + f.ascent(), xml_escape(t).c_str());
    }
    for (int c = 0; c < p.cols; ++c) {
      const std::string& t = pl.col_text[k][std::size_t(c)];
      if (t.empty()) continue;
      const Rect& a = L.col_label_areas[k];
      if (L.col_labels_rotated) {
        const int x = g.x + c * cell + cell / 2 + f.ascent() - line / 2, y = a.y + a.h;
        put("<text x=\"%d\" y=\"%d\" transform=\"rotate(-90 %d %d)\">%s</text>\n", x, y, x, y,
            xml_escape(t).c_str());
      } else {
        put("<text x=\"%g\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", g.x + (c + 0.5) * cell,
            a.y + a.h - line + f.ascent(), xml_escape(t).c_str());
      }
    }
    for (int r = 0; r < p.rows; ++r)
      if (pl.nan_rows[k][std::size_t(r)]) {
        if (cell >= line)
          put("<text class=\"nan\" x=\"%d\" y=\"%d\" fill=\"%s\">NaN</text>\n", g.x + g.w + 3,
              g.y + r * cell + cell / 2 - line / 2 + f.ascent(), hex(render::kNanColor).c_str());
        else
          put("<rect class=\"nan\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n",
              g.x + g.w + 3, g.y + r * cell, kPad / 2, cell, hex(render::kNanColor).c_str());
      }
    o += "</g>\n";
  }
  // Colorbar: 64 stripes, top = vmax; enough that neighbours differ by less than a level or two.
  const Rect& cb = L.colorbar;
  constexpr int kStripes = 64;
  o += "<g class=\"colorbar\" shape-rendering=\"crispEdges\">\n";
  for (int i = 0; i < kStripes; ++i) {
    const double y0 = cb.y + cb.h * double(i) / kStripes, y1 = cb.y + cb.h * double(i + 1) / kStripes;
    put("<rect x=\"%d\" y=\"%g\" width=\"%d\" height=\"%g\" fill=\"%s\"/>\n", cb.x, y0, cb.w, y1 - y0,
        hex(render::colormap_rgba(s.colormap, 1.0f - (float(i) + 0.5f) / kStripes)).c_str());
  }
  put("<rect x=\"%g\" y=\"%g\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"%s\"/>\n", cb.x - 0.5,
      cb.y - 0.5, cb.w + 1, cb.h + 1, hex(kBorder).c_str());
  for (int t = 0; t < kTicks; ++t) {
    const float frac = float(t) / (kTicks - 1);
    const int y = cb.y + int(std::lround((1.0f - frac) * float(cb.h - 1)));
    put("<rect x=\"%d\" y=\"%d\" width=\"4\" height=\"1\"/>\n", cb.x + cb.w, y);
    put("<text x=\"%d\" y=\"%d\">%s</text>\n", L.colorbar_labels.x, y - line / 2 + f.ascent(),
        tick_label(s.vmin + (s.vmax - s.vmin) * frac).c_str());
  }
  o += "</g>\n</svg>\n";
  return o;
}

std::string render_csv(const Panel& p) {
  auto field = [](const std::string& s) {  // RFC 4180 quoting when a token holds , " or a newline
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  std::string o;
  for (int c = 0; c < p.cols; ++c) o += "," + field(col_label(p, c));
  o += "\n";
  char buf[32];
  for (int r = 0; r < p.rows; ++r) {
    o += field(row_label(p, r));
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
  std::vector<unsigned char> file;
  std::unique_ptr<Font> font, title;
};

TextMeter::TextMeter(const std::string& font_path, float px) : fonts_(std::make_unique<Fonts>()) {
  fonts_->file = read_font(font_path);
  fonts_->font = std::make_unique<Font>(fonts_->file, px);
  fonts_->title = std::make_unique<Font>(fonts_->file, std::round(px * 1.3f));
}
TextMeter::~TextMeter() = default;
int TextMeter::width(const std::string& s, bool title) {
  return (title ? fonts_->title : fonts_->font)->width(s);
}
int TextMeter::line(bool title) const {
  return (title ? fonts_->title : fonts_->font)->line();
}

namespace {
void check_drawing(const Drawing& d) {
  if (d.width <= 0 || d.height <= 0 || d.width > 32768 || d.height > 32768)
    throw ConfigError("export", "drawing size " + std::to_string(d.width) + "×" + std::to_string(d.height) +
                                    " is empty or too large");
}
}  // namespace

std::vector<std::uint8_t> render_png(const Drawing& d) {
  check_drawing(d);
  TextMeter meter(d.font_path, d.font_px);
  Canvas cv(d.width, d.height, d.transparent ? 0x00FFFFFFu : kWhite);
  for (const Drawing::Box& b : d.boxes) {
    cv.fill(b.x, b.y, b.w, b.h, b.fill);
    if (b.outline) cv.outline({b.x, b.y, b.w, b.h}, b.outline);
  }
  for (const Drawing::Text& t : d.texts) {
    Font& f = t.title ? *meter.fonts_->title : *meter.fonts_->font;
    cv.text(f, t.x, t.y + f.ascent(), t.text, t.color);
  }
  std::vector<std::uint8_t> png;
  if (!stbi_write_png_to_func(write_to_vector, &png, d.width, d.height, 4, cv.data(), d.width * 4))
    throw FileError("export", "PNG encoding failed");
  return png;
}

std::string render_svg(const Drawing& d) {
  check_drawing(d);
  TextMeter meter(d.font_path, d.font_px);
  std::string o;
  char buf[512];
  auto put = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    o += buf;
  };
  put("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"DejaVu Sans, Verdana, sans-serif\" font-size=\"%g\" fill=\"%s\">\n",
      d.width, d.height, d.width, d.height, double(d.font_px), hex(kText).c_str());
  if (!d.transparent) o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  for (const Drawing::Box& b : d.boxes) {
    if (b.outline)
      put("<rect x=\"%g\" y=\"%g\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"%s\"/>\n", b.x - 0.5,
          b.y - 0.5, b.w + 1, b.h + 1, hex(b.outline).c_str());
    put("<rect class=\"%s\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", b.svg_class, b.x,
        b.y, b.w, b.h, hex(b.fill).c_str());
  }
  for (const Drawing::Text& t : d.texts) {
    const int ascent = (t.title ? meter.fonts_->title : meter.fonts_->font)->ascent();
    o += "<text x=\"" + std::to_string(t.x) + "\" y=\"" + std::to_string(t.y + ascent) + "\"" +
         (t.title ? " font-size=\"" + std::to_string(int(std::round(d.font_px * 1.3f))) + "\""
                  : std::string()) +
         (t.color != kText ? " fill=\"" + hex(t.color) + "\"" : std::string()) + ">" + xml_escape(t.text) +
         "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

void write_file(const std::string& path, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  write_file_atomic(path, std::vector<unsigned char>(bytes, bytes + size));
}

}  // namespace mha::exporter
