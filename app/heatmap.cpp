// The heatmap widget (see heatmap.hpp). Cells are one texture drawn as one quad with nearest
// sampling; labels, hatching, values and the selection are draw-list primitives on top.
#include "heatmap.hpp"

#include <imgui_internal.h>  // SetItemUsingMouseWheel

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <tuple>

#include "clipboard_image.hpp"
#include "clipboard_text.hpp"
#include "colour_range.hpp"
#include "data_dir.hpp"
#include "errors.hpp"
#include "heatmap_export.hpp"
#include "labels.hpp"
#include "scenario.hpp"  // to_string(Colormap)
#include "studio_names.hpp"

namespace mha::app {

namespace {

// Text `size` pixels tall rotated 90° counter-clockwise, reading upwards from `start` (the trick:
// rotate the vertices AddText just wrote). A glyph point at (dx, dy) from the text origin lands at
// (dy, -dx) from start.
void add_text_vertical(ImDrawList* dl, float size, ImVec2 start, ImU32 col, const char* text) {
  const int first = dl->VtxBuffer.Size;
  dl->AddText(ImGui::GetFont(), size, start, col, text);
  for (int i = first; i < dl->VtxBuffer.Size; ++i) {
    ImVec2& p = dl->VtxBuffer[i].pos;
    p = ImVec2(start.x + (p.y - start.y), start.y - (p.x - start.x));
  }
}

float text_width(const char* t, float size) {
  return ImGui::GetFont()->CalcTextSizeA(size, std::numeric_limits<float>::max(), 0.0f, t).x;
}

// `t` drawn `size` pixels tall within `width` pixels: whole, or its first letters and "…".
std::string fit_label(const std::string& t, float size, float width) {
  if (text_width(t.c_str(), size) <= width) return t;
  const std::string ellipsis = "\xE2\x80\xA6";
  std::string out;
  for (const char* p = t.c_str(); *p;) {
    unsigned int c = 0;
    const int n = std::max(1, ImTextCharFromUtf8(&c, p, nullptr));
    const std::string longer = out + std::string(p, std::size_t(n));
    if (!out.empty() && text_width((longer + ellipsis).c_str(), size) > width) break;
    out = longer;
    p += n;
  }
  return out + ellipsis;
}

}  // namespace

AxisLabels plan_axis_labels(float pitch, float text_h, float widest, float max_depth, float min_scale,
                            float gap, int max_lanes) {
  auto plan = [&](float scale, int lanes, int step, float room) {
    AxisLabels a{scale, lanes, step, 0, 0};
    a.lane_depth = std::min(widest * scale, (room - gap * float(lanes - 1)) / float(lanes));
    a.depth = a.lane_depth * float(lanes) + gap * float(lanes - 1);
    return a;
  };
  if (!(pitch > 0) || !(text_h > 0) || pitch >= text_h) return plan(1, 1, 1, max_depth);
  // The fewest lanes (one lane reads best; labels of one lane are lanes·pitch apart) at the largest
  // font that fits them, not below min_scale.
  for (int lanes = 1; lanes <= max_lanes; ++lanes) {
    // The largest font whose labels are lanes·pitch apart, and no larger than the lane's room holds.
    const float largest = std::min(1.0f, float(lanes) * pitch / text_h);
    if (largest < min_scale) continue;
    const float room = (max_depth - gap * float(lanes - 1)) / float(lanes);
    const float scale = widest > 0 ? std::clamp(room / widest, min_scale, largest) : largest;
    const AxisLabels a = plan(scale, lanes, 1, max_depth);
    // Cut short to about four letters (a letter is about half the text's height) at most.
    if (a.lane_depth < std::min(widest * scale, 2.0f * text_h * scale)) continue;
    return a;
  }
  // No room for every label: every step-th, in the room one lane of whole labels takes (the cells
  // need the rest more than thinned labels), at full size or the smallest, on as many lanes as fit:
  // the fewest left out, then the fewest cut short, the larger font, the fewer lanes.
  AxisLabels best = plan(1, 1, render::label_step(pitch, text_h), max_depth);
  auto rank = [&](const AxisLabels& a) {
    return std::make_tuple(a.step, a.lane_depth < widest * a.scale - 0.5f, -a.scale, a.lanes);
  };
  for (const float scale : {1.0f, min_scale})
    for (int lanes = 1; lanes <= max_lanes; ++lanes) {
      AxisLabels a = plan(scale, lanes, 1, std::min(max_depth, widest));
      if (a.lane_depth < std::min(widest * scale, 2.0f * text_h * scale)) continue;
      a.step = render::label_step(float(lanes) * pitch, text_h * scale);
      if (rank(a) < rank(best)) best = a;
    }
  return best;
}

float label_min_scale(float font_px) {
  return font_px > 0 ? std::min(1.0f, std::max(11.0f / font_px, 0.6f)) : 1.0f;
}

namespace {
int g_hover_query = -1, g_hover_key = -1;  // reported this frame (UI thread only)
}  // namespace

void report_hover(int query, int key) {
  g_hover_query = query;
  g_hover_key = key;
}

void report_hover(const HeatmapEvent& ev) {
  if (ev.hovered)
    report_hover(ev.row, ev.col);
  else if (ev.label_row >= 0 || ev.label_col >= 0)
    report_hover(ev.label_row, ev.label_col);
}

void take_hover(ViewState& v) {
  v.hover_query = g_hover_query;
  v.hover_key = g_hover_key;
  g_hover_query = g_hover_key = -1;
}

ImU32 hover_colour(int alpha) {
  return IM_COL32(255, 150, 30, alpha);
}

void finite_range(const float* v, std::int64_t n, float* lo, float* hi) {
  float a = std::numeric_limits<float>::infinity(), b = -a;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(v[i])) {
      a = std::min(a, v[i]);
      b = std::max(b, v[i]);
    }
  if (a > b) a = b = 0;
  *lo = a;
  *hi = b;
}

float row_top(const Heatmap& h, int r) {  // the exporter's rule, so a figure's rows match
  return render::row_colour_top(h.values + std::int64_t(r) * h.row_stride, h.cols, h.col_stride,
                                [&](int c) { return h.blocked && h.blocked(r, c); });
}

namespace {

// A heatmap's zoom: the factor over the fitted cell size and the first row and column on screen
// (fractional). Kept per widget id while its rows and columns stay the same.
struct Zoom {
  int rows = 0, cols = 0;
  float zoom = 1, row0 = 0, col0 = 0;
};

// The heatmap last under the pointer, copied (the view's buffers change with every recompute).
struct Snapshot {
  std::string id;
  std::uint64_t version = 0;
  int rows = 0, cols = 0;
  std::vector<float> values;  // row-major rows x cols
  std::vector<std::string> row_labels, col_labels;
  float vmin = 0, vmax = 1;
  Colormap colormap = Colormap::viridis;
  std::vector<char> blocked;  // rows x cols, empty when nothing is blocked
  // A map with an owner is read when copied, not when kept: its values and blocked test stay here.
  std::shared_ptr<const void> owner;
  const float* source = nullptr;
  std::int64_t row_stride = 0, col_stride = 1;
  std::function<bool(int, int)> source_blocked;
  // values and blocked from the source (a map with an owner); a no-op once done or without one.
  void materialise() {
    if (!owner) return;
    values.resize(std::size_t(rows) * std::size_t(cols));
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        values[std::size_t(r) * std::size_t(cols) + std::size_t(c)] =
            source[std::int64_t(r) * row_stride + std::int64_t(c) * col_stride];
    blocked.clear();
    if (source_blocked) {
      blocked.resize(values.size());
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
          blocked[std::size_t(r) * std::size_t(cols) + std::size_t(c)] = source_blocked(r, c);
    }
    owner.reset();
    source_blocked = nullptr;
  }
};
Snapshot g_current;          // UI thread only
bool g_hovered_one = false;  // until a heatmap has been under the pointer, the view's first one counts
int g_first_frame = -1;      // the frame whose first heatmap was kept
std::string g_copy_message;

void keep_snapshot(const Heatmap& h) {
  Snapshot& s = g_current;
  // Version 0 promises nothing about the content: taken again.
  if (s.id == h.id && s.version == h.version && h.version != 0 && s.rows == h.rows && s.cols == h.cols)
    return;
  s.id = h.id;
  s.version = h.version;
  s.rows = h.rows;
  s.cols = h.cols;
  s.row_labels = h.row_labels ? *h.row_labels : std::vector<std::string>{};
  s.col_labels = h.col_labels ? *h.col_labels : std::vector<std::string>{};
  s.vmin = h.vmin;
  s.vmax = h.vmax;
  s.colormap = h.colormap;
  s.owner = h.owner;
  s.source = h.values;
  s.row_stride = h.row_stride;
  s.col_stride = h.col_stride;
  s.source_blocked = h.owner ? h.blocked : nullptr;
  if (h.owner) return;  // read when copied
  s.values.resize(std::size_t(h.rows) * std::size_t(h.cols));
  for (int r = 0; r < h.rows; ++r)
    for (int c = 0; c < h.cols; ++c)
      s.values[std::size_t(r) * std::size_t(h.cols) + std::size_t(c)] =
          h.values[std::int64_t(r) * h.row_stride + std::int64_t(c) * h.col_stride];
  s.blocked.clear();
  if (h.blocked) {
    s.blocked.resize(s.values.size());
    for (int r = 0; r < h.rows; ++r)
      for (int c = 0; c < h.cols; ++c)
        s.blocked[std::size_t(r) * std::size_t(h.cols) + std::size_t(c)] = h.blocked(r, c);
  }
}

// The visible part of an ImGui id ("weights##h3" -> "weights").
std::string shown_name(const std::string& id) {
  return id.substr(0, id.find("##"));
}

// Right-click without dragging opens the copy menu. A zoomable map pans with a right drag and fits
// with a right double-click, so there the menu waits out the double-click time first.
struct PendingMenu {
  std::string id;
  double at = 0;
};
PendingMenu g_pending_menu;

void open_copy_menu(const Heatmap& h) {
  ImGui::PushID(h.id.c_str());
  ImGui::OpenPopup("heatmap-copy");
  ImGui::PopID();
}

void copy_menu(const Heatmap& h) {
  if (!ImGui::BeginPopup("heatmap-copy")) return;
  ImGui::TextDisabled("%s: %d x %d", shown_name(h.id).c_str(), h.rows, h.cols);
  if (ImGui::MenuItem("Copy values (TSV, for a spreadsheet)", "Ctrl+C")) copy_current_heatmap(CopyAs::tsv);
  if (ImGui::MenuItem("Copy values (numpy array)")) copy_current_heatmap(CopyAs::numpy);
  const std::string no_png = platform::image_clipboard_missing();
  if (ImGui::MenuItem("Copy as PNG image", nullptr, false, no_png.empty())) copy_current_heatmap(CopyAs::png);
  if (!no_png.empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", no_png.c_str());
  ImGui::EndPopup();
}

Zoom& zoom_of(const Heatmap& h) {
  static std::map<std::string, Zoom> zooms;  // UI thread only
  Zoom& z = zooms[h.id];
  if (z.rows != h.rows || z.cols != h.cols || !h.zoomable) z = Zoom{h.rows, h.cols};
  return z;
}

}  // namespace

HeatmapFit fit_heatmap(const Heatmap& h, ImVec2 size) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float font = ImGui::GetFontSize();
  HeatmapFit f;
  // The widest label decides the margins (capped so long words do not eat the map).
  for (int i = 0; h.row_labels && i < h.rows && i < int(h.row_labels->size()); ++i)
    f.widest_row = std::max(f.widest_row, ImGui::CalcTextSize((*h.row_labels)[std::size_t(i)].c_str()).x);
  for (int j = 0; h.col_labels && j < h.cols && j < int(h.col_labels->size()); ++j)
    f.widest_col = std::max(f.widest_col, ImGui::CalcTextSize((*h.col_labels)[std::size_t(j)].c_str()).x);
  const float cap = font * 8, lane_gap = font * 0.4f, min_scale = label_min_scale(font);
  const float nan_w = h.margins ? font * 1.5f : 0.0f;  // right margin for the NaN-row flag
  ImVec2 avail = size;
  if (avail.x <= 0) avail.x = ImGui::GetContentRegionAvail().x;
  if (avail.y <= 0) avail.y = ImGui::GetContentRegionAvail().y;
  auto place = [&](float row_depth, float col_depth) {
    f.row_w = h.margins || h.row_labels ? row_depth + style.ItemSpacing.x : 0.0f;
    f.col_w = h.margins || h.col_labels ? col_depth + style.ItemSpacing.y : 0.0f;
    const float grid_w = std::max(1.0f, avail.x - f.row_w - nan_w),
                grid_h = std::max(1.0f, avail.y - f.col_w);
    // The fitted cell: the grid's footprint on screen. Zoomed, cells grow and the footprint stays.
    f.fit = std::max(std::max(h.min_cell, 1e-3f),
                     std::min({h.max_cell, grid_w / float(h.cols), grid_h / float(h.rows)}));
  };
  // One lane of whole labels first. Labels that do not fit a cell then take lanes side by side, in
  // the deepest room that costs the cells at most a fifth of their size (row labels take width,
  // column labels height) and still holds every label at the cells it leaves; the smaller the room,
  // the smaller the font (plan_axis_labels). Where no room does, they keep one lane's room, thinned.
  const float one_row = h.row_labels ? std::min(f.widest_row, cap) : 0.0f;
  const float one_col = h.col_labels ? std::min(f.widest_col, cap) : 0.0f;
  place(one_row, one_col);
  const float fit0 = f.fit;
  float row_depth = one_row, col_depth = one_col;
  auto widen = [&](float* depth, float widest, float one) {
    const float before = f.fit;
    for (float room = cap; room > one; room *= 0.85f) {
      *depth = std::max(one, plan_axis_labels(fit0, font, widest, room, min_scale, lane_gap).depth);
      place(row_depth, col_depth);
      if (f.fit >= 0.8f * before &&
          plan_axis_labels(f.fit, font, widest, *depth, min_scale, lane_gap).step == 1)
        return;
    }
    *depth = one;
    place(row_depth, col_depth);
    // Thinned labels may be drawn smaller than whole ones: the room they take then, no more.
    *depth = std::min(one, plan_axis_labels(f.fit, font, widest, one, min_scale, lane_gap).depth);
    place(row_depth, col_depth);
  };
  if (h.row_labels && fit0 < font) widen(&row_depth, f.widest_row, one_row);
  if (h.col_labels && fit0 < font && f.widest_col > fit0) widen(&col_depth, f.widest_col, one_col);
  f.vertical = f.widest_col > f.fit;
  f.top = !h.margins && !h.col_labels ? 0.0f : f.vertical ? f.col_w : font + style.ItemSpacing.y;
  return f;
}

HeatmapEvent draw_heatmap(Textures& textures, const Heatmap& h) {
  HeatmapEvent ev;
  if (h.rows <= 0 || h.cols <= 0 || !h.values) return ev;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiStyle& style = ImGui::GetStyle();
  const ImGuiIO& io = ImGui::GetIO();
  const float font = ImGui::GetFontSize();
  const ImU32 text_col = ImGui::GetColorU32(ImGuiCol_Text);
  const ImU32 dim_col = ImGui::GetColorU32(ImGuiCol_TextDisabled);

  const float lane_gap = font * 0.4f, min_scale = label_min_scale(font);
  const float nan_w = h.margins ? font * 1.5f : 0.0f;  // right margin for the NaN-row flag
  const HeatmapFit placed = fit_heatmap(h, h.size);
  const float row_w = placed.row_w, col_w = placed.col_w, fit = placed.fit;
  const float widest_row = placed.widest_row, widest_col = placed.widest_col;
  Zoom& z = zoom_of(h);
  const float cell = fit * z.zoom;
  // Column labels run vertically when they do not fit across a cell.
  const bool vertical = widest_col > cell;
  const float top = !h.margins && !h.col_labels ? 0.0f : vertical ? col_w : font + style.ItemSpacing.y;
  // How the labels are drawn at the cell shown (zoomed in, they may need fewer lanes).
  const AxisLabels row_plan =
      plan_axis_labels(cell, font, widest_row, row_w - style.ItemSpacing.x, min_scale, lane_gap);
  const AxisLabels col_plan =
      vertical ? plan_axis_labels(cell, font, widest_col, col_w - style.ItemSpacing.y, min_scale, lane_gap)
               : AxisLabels{};

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 g0(origin.x + row_w, origin.y + top);
  const ImVec2 g1(g0.x + fit * float(h.cols), g0.y + fit * float(h.rows));
  // Cell (r, c)'s top-left corner on screen; the rows and columns at least partly on screen.
  auto cx = [&](float c) { return g0.x + (c - z.col0) * cell; };
  auto cy = [&](float r) { return g0.y + (r - z.row0) * cell; };
  const int c_lo = std::clamp(int(std::floor(z.col0)), 0, h.cols - 1);
  const int c_hi = std::clamp(int(std::ceil(z.col0 + float(h.cols) / z.zoom)), c_lo + 1, h.cols);
  const int r_lo = std::clamp(int(std::floor(z.row0)), 0, h.rows - 1);
  const int r_hi = std::clamp(int(std::ceil(z.row0 + float(h.rows) / z.zoom)), r_lo + 1, h.rows);
  ev.grid_min = ImVec2(cx(0), cy(0));  // cell (r, c) is at grid_min + cell·(c, r), zoomed or not
  ev.grid_max = g1;
  ev.cell = cell;

  auto at = [&](int r, int c) {
    return h.values[std::int64_t(r) * h.row_stride + std::int64_t(c) * h.col_stride];
  };
  // A grid scrolled or clipped out of view is neither coloured nor uploaded (at L = 2048 each map is
  // 2048 pixels wide and 16 MiB of texture); the cache fills it when it comes into view.
  const bool visible = ImGui::IsRectVisible(g0, g1);
  dl->PushClipRect(g0, g1, true);  // zoomed cells stop at the grid's edge
  if (visible) {
    auto is_blocked = [&](int r, int c) {
      if (h.blocked_mask)
        return h.blocked_mask[std::int64_t(r) * h.blocked_row_stride +
                              std::int64_t(c) * h.blocked_col_stride] ==
               -std::numeric_limits<float>::infinity();
      return h.blocked(r, c);
    };
    const bool any_blocked = h.blocked_mask || h.blocked;
    // Level of detail: where a cell is under half a pixel, one texel shows a block×block patch (a
    // power of two), so a 2048-wide map on 250 pixels colours and uploads 256² texels, not 2048².
    // The texel keeps the patch's most telling value (the largest; on a diverging map the largest in
    // size, sign kept; NaN if any), from its unblocked cells; a patch blocked everywhere is blocked.
    // Per-row colour scales keep every cell.
    int block = 1;
    while (!h.row_scale && cell * float(block * 2) <= 1.0f) block *= 2;
    const int tw = (h.cols + block - 1) / block, th = (h.rows + block - 1) / block;
    // Texel rows [R0, R1) into rgba (its first row is R0).
    auto fill_rows = [&](std::uint32_t* rgba, int R0, int R1) {
      if (block == 1) {
        for (int r = R0; r < R1; ++r) {
          std::uint32_t* out = rgba + std::size_t(r - R0) * std::size_t(h.cols);
          const float* v = h.values + std::int64_t(r) * h.row_stride;
          const float hi = h.row_scale ? row_top(h, r) : h.vmax, lo = h.row_scale ? 0.0f : h.vmin;
          if (any_blocked)
            for (int c = 0; c < h.cols; ++c)
              out[c] = is_blocked(r, c) ? kMaskedColor : value_rgba(h.colormap, v[c * h.col_stride], lo, hi);
          else
            for (int c = 0; c < h.cols; ++c) out[c] = value_rgba(h.colormap, v[c * h.col_stride], lo, hi);
        }
        return;
      }
      const bool diverging = h.colormap == Colormap::diverging;
      std::vector<float> acc(std::size_t(tw), 0.0f);
      std::vector<char> seen(std::size_t(tw), 0);
      for (int R = R0; R < R1; ++R) {
        std::fill(seen.begin(), seen.end(), 0);
        for (int r = R * block; r < std::min(h.rows, (R + 1) * block); ++r) {
          const float* v = h.values + std::int64_t(r) * h.row_stride;
          for (int C = 0; C < tw; ++C) {
            float a = acc[std::size_t(C)];
            char any = seen[std::size_t(C)];
            for (int c = C * block; c < std::min(h.cols, (C + 1) * block); ++c) {
              if (any_blocked && is_blocked(r, c)) continue;
              const float x = v[std::int64_t(c) * h.col_stride];
              if (!any || std::isnan(x))
                a = x;
              else if (!std::isnan(a))
                a = diverging ? (std::fabs(x) > std::fabs(a) ? x : a) : std::max(a, x);
              any = 1;
            }
            acc[std::size_t(C)] = a;
            seen[std::size_t(C)] = any;
          }
        }
        std::uint32_t* out = rgba + std::size_t(R - R0) * std::size_t(tw);
        for (int C = 0; C < tw; ++C)
          out[C] = seen[std::size_t(C)] ? value_rgba(h.colormap, acc[std::size_t(C)], h.vmin, h.vmax)
                                        : kMaskedColor;
      }
    };
    // The texel rows holding a changed row, as ranges.
    std::vector<std::pair<int, int>> dirty;
    if (h.changed_rows && h.changed_since)
      for (int R = 0; R < th; ++R) {
        bool any = false;
        for (int r = R * block; r < std::min(h.rows, (R + 1) * block) && !any; ++r)
          any = h.changed_rows[r] != 0;
        if (!any) continue;
        if (!dirty.empty() && dirty.back().second == R)
          dirty.back().second = R + 1;
        else
          dirty.emplace_back(R, R + 1);
      }
    const std::uint64_t lod = std::uint64_t(block) << 56;
    const ImTextureID tex =
        h.changed_rows && h.changed_since
            ? textures.get_rows(h.id, h.version ^ lod, h.changed_since ^ lod, tw, th, dirty, fill_rows)
            : textures.get(h.id, h.version ^ lod, tw, th, [&](std::uint32_t* rgba) {
                // A whole map of a million cells or more (the Overview's heads at L = 2048: 4M cells
                // each, pooled to patches) on two threads, each half of the texel rows.
                const int half = double(h.rows) * double(h.cols) >= double(1 << 20) ? th / 2 : 0;
                if (half == 0) return fill_rows(rgba, 0, th);
                std::thread other([&] { fill_rows(rgba + std::size_t(half) * std::size_t(tw), half, th); });
                fill_rows(rgba, 0, half);
                other.join();
              });
    const float span_c = float(h.cols) / z.zoom, span_r = float(h.rows) / z.zoom;
    const float tex_c = float(tw * block), tex_r = float(th * block);  // cells the texture covers
    dl->AddImage(tex, g0, g1, ImVec2(z.col0 / tex_c, z.row0 / tex_r),
                 ImVec2((z.col0 + span_c) / tex_c, (z.row0 + span_r) / tex_r));
  }

  // Dear ImGui's draw lists index vertices in 16 bits: a window holds at most 65536 of them. Hatching
  // and values are drawn for a map only when what they add (counted up front) still fits, so many
  // maps in one window (the Heads and Overview grids) degrade to plain cells instead of aborting.
  constexpr int kMaxVertices = 60000;
  const std::int64_t visible_cells = std::int64_t(r_hi - r_lo) * (c_hi - c_lo);
  std::int64_t blocked_cells = 0;
  if (visible && h.blocked && cell >= 6)
    for (int r = r_lo; r < r_hi; ++r)
      for (int c = c_lo; c < c_hi; ++c) blocked_cells += h.blocked(r, c);
  // Blocked cells: hatched, so they never read as "low".
  if (visible && blocked_cells > 0 && dl->VtxBuffer.Size + blocked_cells * 12 < kMaxVertices)
    for (int r = r_lo; r < r_hi; ++r)
      for (int c = c_lo; c < c_hi; ++c)
        if (h.blocked(r, c)) {
          const ImVec2 a(cx(float(c)), cy(float(r)));
          dl->AddLine(ImVec2(a.x, a.y + cell), ImVec2(a.x + cell, a.y), IM_COL32(40, 40, 40, 200), 1.0f);
          dl->AddLine(ImVec2(a.x, a.y + cell * 0.5f), ImVec2(a.x + cell * 0.5f, a.y),
                      IM_COL32(40, 40, 40, 200));
          dl->AddLine(ImVec2(a.x + cell * 0.5f, a.y + cell), ImVec2(a.x + cell, a.y + cell * 0.5f),
                      IM_COL32(40, 40, 40, 200));
        }

  // Cell text wherever it fits (zoom in to make room): the caller's (cell_text), or the value, black
  // or white by background.
  // A value is a few glyphs of 4 vertices each: about 7 on average with its decimals.
  if (visible && cell >= font * 1.05f && (h.cell_text || h.show_values) &&
      dl->VtxBuffer.Size + visible_cells * 28 < kMaxVertices) {
    char buf[32];
    // Decimals follow the map's range, so small differences do not all print as 0.00.
    const float span = std::max(std::fabs(h.vmin), std::fabs(h.vmax));
    const char* fmt = span >= 100 ? "%.0f" : span >= 0.1f ? "%.2f" : span >= 0.01f ? "%.3f" : "%.1e";
    for (int r = r_lo; r < r_hi; ++r)
      for (int c = c_lo; c < c_hi; ++c) {
        const float v = at(r, c);
        const bool blocked = h.blocked && h.blocked(r, c);
        const char* t = buf;
        if (h.cell_text) {
          t = h.cell_text(r, c, cell);
        } else {
          if (blocked) continue;
          std::snprintf(buf, sizeof buf, std::isnan(v) ? "NaN" : fmt, double(v));
        }
        const ImVec2 ts = ImGui::CalcTextSize(t);
        if (!*t || ts.x > cell - 2) continue;
        const std::uint32_t bg = blocked       ? kMaskedColor
                                 : h.row_scale ? value_rgba(h.colormap, v, 0.0f, row_top(h, r))
                                               : value_rgba(h.colormap, v, h.vmin, h.vmax);
        const int lum = int(bg & 0xFF) * 299 + int((bg >> 8) & 0xFF) * 587 + int((bg >> 16) & 0xFF) * 114;
        dl->AddText(ImVec2(cx(float(c) + 0.5f) - ts.x * 0.5f, cy(float(r) + 0.5f) - ts.y * 0.5f),
                    lum > 128000 ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255), t);
      }
  }

  // The linked-hover token's row and column: an outline, so the colours under it stay readable.
  if (h.hover_row >= r_lo && h.hover_row < r_hi) {
    const float y = cy(float(h.hover_row));
    dl->AddRect(ImVec2(g0.x - 1, y - 1), ImVec2(g1.x + 1, y + cell + 1), hover_colour(), 0, 0, 2.0f);
  }
  if (h.hover_col >= c_lo && h.hover_col < c_hi) {
    const float x = cx(float(h.hover_col));
    dl->AddRect(ImVec2(x - 1, g0.y - 1), ImVec2(x + cell + 1, g1.y + 1), hover_colour(), 0, 0, 2.0f);
  }
  if (h.selected_row >= r_lo && h.selected_col >= c_lo && h.selected_row < r_hi && h.selected_col < c_hi) {
    const ImVec2 a(cx(float(h.selected_col)), cy(float(h.selected_row)));
    dl->AddRect(a, ImVec2(a.x + cell, a.y + cell), IM_COL32(255, 255, 255, 255), 0, 0, 2.5f);
    dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(a.x + cell + 1, a.y + cell + 1), IM_COL32(0, 0, 0, 255));
  }
  dl->PopClipRect();

  // Axis labels: queries down the left, keys across the top, as the plans above say (lanes, a smaller
  // font, cut short, or every step-th). The labels that matter are drawn whatever the step, on a
  // plate: the hovered token's (highlighted), the selected cell's, and the marked ones. Where every
  // label fits they keep their own place; thinned, they take the first lane and hide what they cover.
  ev.label_scale = row_plan.scale;
  const ImU32 plate_col = ImGui::GetColorU32(ImGuiCol_WindowBg) | IM_COL32_A_MASK;
  // One axis, in its own terms: along it (label i's centre is at(i)) and across it, from the cells
  // outwards. draw(label, size) puts one label on screen; `drawn` gets the labels drawn.
  struct Placed {
    int i;
    std::string text;
    float size, across0, across1;
    bool must;
  };
  auto draw_axis = [&](const std::vector<std::string>& labels, int lo, int hi, const AxisLabels& plan,
                       std::vector<int> must, float room, const std::function<float(int)>& at,
                       const std::function<void(const Placed&)>& draw, std::vector<int>& drawn) {
    const float size = font * plan.scale;
    hi = std::min(hi, int(labels.size()));
    must.erase(std::remove_if(must.begin(), must.end(), [&](int x) { return x < lo || x >= hi; }),
               must.end());
    std::sort(must.begin(), must.end());
    must.erase(std::unique(must.begin(), must.end()), must.end());
    auto place = [&](int i, bool is_must) {
      const bool own_lane = plan.step == 1 || !is_must;
      const int lane = own_lane ? i / plan.step % plan.lanes : 0;
      const float depth = own_lane ? plan.lane_depth : room;
      const std::string& whole = labels[std::size_t(i)];
      // A marked label too long for its room is drawn smaller, down to the smallest font, before it
      // is cut short.
      float sz = size;
      if (is_must && text_width(whole.c_str(), sz) > depth)
        sz = std::max(font * min_scale, sz * depth / text_width(whole.c_str(), sz));
      Placed p{i, fit_label(whole, sz, depth), sz, 0, 0, is_must};
      p.across0 = float(lane) * (plan.lane_depth + lane_gap);
      p.across1 = p.across0 + text_width(p.text.c_str(), sz);
      return p;
    };
    std::vector<Placed> marks;
    for (const int m : must) marks.push_back(place(m, true));
    for (int i = lo; i < hi; ++i) {
      if (i % plan.step != 0 || std::binary_search(must.begin(), must.end(), i)) continue;
      const Placed p = place(i, false);
      bool covered = false;
      for (const Placed& m : marks)
        covered = covered || (std::fabs(at(i) - at(m.i)) < size * 0.99f && p.across0 < m.across1 &&
                              m.across0 < p.across1);
      if (covered) continue;
      draw(p);
      drawn.push_back(i);
    }
    for (const Placed& m : marks) {
      draw(m);
      drawn.push_back(m.i);
    }
    std::sort(drawn.begin(), drawn.end());
  };
  auto plate = [&](ImVec2 a, ImVec2 b, bool hovered) {
    dl->AddRectFilled(a, b, hovered ? hover_colour() : plate_col);
    if (!hovered) dl->AddRect(a, b, dim_col);
  };
  if (h.row_labels) {
    const float right = g0.x - style.ItemSpacing.x * 0.5f;
    // The clip stops labels running into the grid, and past its rows when zoomed.
    dl->PushClipRect(ImVec2(origin.x, g0.y - font * 0.5f), ImVec2(right, g1.y + font), true);
    std::vector<int> must = h.marked_rows;
    must.push_back(h.hover_row);
    must.push_back(h.selected_row);
    draw_axis(
        *h.row_labels, r_lo, r_hi, row_plan, must, right - origin.x,
        [&](int r) { return cy(float(r) + 0.5f); },
        [&](const Placed& p) {
          const ImVec2 at(right - p.across1, cy(float(p.i) + 0.5f) - p.size * 0.5f);
          const bool hovered = p.i == h.hover_row;
          if (p.must) plate(ImVec2(at.x - 2, at.y), ImVec2(right - p.across0 + 1, at.y + p.size), hovered);
          dl->AddText(ImGui::GetFont(), p.size, at, p.must && hovered ? IM_COL32(0, 0, 0, 255) : text_col,
                      p.text.c_str());
        },
        ev.row_labels_drawn);
    dl->PopClipRect();
  }
  if (h.col_labels) {
    const float bottom = g0.y - style.ItemSpacing.y * 0.5f;
    dl->PushClipRect(ImVec2(g0.x - font * 0.5f, origin.y), ImVec2(g1.x + font * 0.5f, g0.y), true);
    std::vector<int> must = h.marked_cols;
    must.push_back(h.hover_col);
    must.push_back(h.selected_col);
    if (vertical) {
      draw_axis(
          *h.col_labels, c_lo, c_hi, col_plan, must, bottom - origin.y,
          [&](int c) { return cx(float(c) + 0.5f); },
          [&](const Placed& p) {
            const float x = cx(float(p.i) + 0.5f) - p.size * 0.5f;
            const bool hovered = p.i == h.hover_col;
            if (p.must)
              plate(ImVec2(x, bottom - p.across1 - 2), ImVec2(x + p.size, bottom - p.across0 + 1), hovered);
            add_text_vertical(dl, p.size, ImVec2(x, bottom - p.across0),
                              p.must && hovered ? IM_COL32(0, 0, 0, 255) : text_col, p.text.c_str());
          },
          ev.col_labels_drawn);
    } else {  // every label fits across its cell
      for (int c = c_lo; c < c_hi && c < int(h.col_labels->size()); ++c) {
        const char* t = (*h.col_labels)[std::size_t(c)].c_str();
        const float w = text_width(t, font);
        const ImVec2 p(cx(float(c) + 0.5f) - w * 0.5f, bottom - font);
        const bool hovered = c == h.hover_col;
        if (std::find(must.begin(), must.end(), c) != must.end())
          plate(ImVec2(p.x - 2, p.y), ImVec2(p.x + w + 2, p.y + font), hovered);
        dl->AddText(p, hovered ? IM_COL32(0, 0, 0, 255) : text_col, t);
        ev.col_labels_drawn.push_back(c);
      }
    }
    dl->PopClipRect();
  }

  // Rows that are NaN (every key blocked) get a flag at their right end.
  for (int r = r_lo; r < r_hi && h.margins; ++r)
    if (std::isnan(at(r, 0)))
      dl->AddText(ImVec2(g1.x + style.ItemSpacing.x * 0.5f, cy(float(r) + 0.5f) - font * 0.5f),
                  IM_COL32(255, 60, 200, 255), "NaN");
  dl->AddRect(g0, g1, dim_col);

  // The pointer over an axis label names that token (linked hover).
  if (ImGui::IsWindowHovered(ImGuiHoveredFlags_AllowWhenBlockedByActiveItem)) {
    const ImVec2 m = io.MousePos;
    if (h.row_labels && m.x >= origin.x && m.x < g0.x && m.y >= g0.y && m.y < g1.y)
      ev.label_row = std::clamp(int(z.row0 + (m.y - g0.y) / cell), 0, h.rows - 1);
    if (h.col_labels && m.y >= origin.y && m.y < g0.y && m.x >= g0.x && m.x < g1.x)
      ev.label_col = std::clamp(int(z.col0 + (m.x - g0.x) / cell), 0, h.cols - 1);
  }

  // Interaction: one invisible button over the grid.
  ImGui::SetCursorScreenPos(g0);
  ImGui::InvisibleButton(h.id.c_str(), ImVec2(g1.x - g0.x, g1.y - g0.y));
  if (!g_hovered_one && g_first_frame != ImGui::GetFrameCount()) {
    g_first_frame = ImGui::GetFrameCount();
    keep_snapshot(h);
  }
  if (ImGui::IsItemHovered()) {
    g_hovered_one = true;
    keep_snapshot(h);
    const float drag = std::hypot(io.MouseDragMaxDistanceAbs[ImGuiMouseButton_Right].x,
                                  io.MouseDragMaxDistanceAbs[ImGuiMouseButton_Right].y);
    if (ImGui::IsMouseReleased(ImGuiMouseButton_Right) && drag < io.MouseDragThreshold) {
      if (h.zoomable)
        g_pending_menu = {h.id, ImGui::GetTime()};
      else
        open_copy_menu(h);
    }
    if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Right)) g_pending_menu = {};
    const ImVec2 m = io.MousePos;
    // Zoom: Ctrl + wheel about the pointer; pan: drag with the right button; right double-click: fit.
    if (h.zoomable) {
      if (io.KeyCtrl) ImGui::SetItemUsingMouseWheel();  // Ctrl+wheel zooms here instead of scrolling the view
      const float old = z.zoom;
      if (io.KeyCtrl && io.MouseWheel != 0)
        z.zoom = std::clamp(z.zoom * std::pow(1.25f, io.MouseWheel), 1.0f,
                            std::max(1.0f, float(std::max(h.rows, h.cols)) / 2.0f));
      if (z.zoom != old) {  // keep the cell under the pointer where it is
        const float fc = z.col0 + (m.x - g0.x) / (fit * old), fr = z.row0 + (m.y - g0.y) / (fit * old);
        z.col0 = fc - (m.x - g0.x) / (fit * z.zoom);
        z.row0 = fr - (m.y - g0.y) / (fit * z.zoom);
      }
      if (ImGui::IsMouseDragging(ImGuiMouseButton_Right)) {
        z.col0 -= io.MouseDelta.x / cell;
        z.row0 -= io.MouseDelta.y / cell;
      }
      if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Right)) z = Zoom{h.rows, h.cols};
      z.col0 = std::clamp(z.col0, 0.0f, float(h.cols) - float(h.cols) / z.zoom);
      z.row0 = std::clamp(z.row0, 0.0f, float(h.rows) - float(h.rows) / z.zoom);
    }
    ev.col = std::clamp(int(z.col0 + (m.x - g0.x) / (fit * z.zoom)), 0, h.cols - 1);
    ev.row = std::clamp(int(z.row0 + (m.y - g0.y) / (fit * z.zoom)), 0, h.rows - 1);
    ev.hovered = true;
    ev.clicked = ImGui::IsMouseReleased(ImGuiMouseButton_Left);
    ev.dragging = ImGui::IsMouseDown(ImGuiMouseButton_Left);
    const float v = at(ev.row, ev.col);
    ImGui::BeginTooltip();
    const bool blocked = h.blocked && h.blocked(ev.row, ev.col);
    if (h.patch_rows > 1 || h.patch_cols > 1) {
      const std::int64_t i0 = ev.row * h.patch_rows, j0 = ev.col * h.patch_cols;
      const std::int64_t i1 = std::min(h.stage_rows, i0 + h.patch_rows) - 1;
      const std::int64_t j1 = std::min(h.stage_cols, j0 + h.patch_cols) - 1;
      ImGui::Text("queries %lld-%lld  ->  keys %lld-%lld", (long long)i0, (long long)i1, (long long)j0,
                  (long long)j1);
      if (std::isnan(v))
        ImGui::TextWrapped("NaN: a query row of this patch is NaN (every key blocked, or NaN/Inf inputs).");
      else if (blocked)
        ImGui::TextUnformatted("every weight in the patch is 0 (its keys blocked by the mask)");
      else
        ImGui::Text("largest weight in the patch: %.6g", double(v));
      ImGui::EndTooltip();
    } else {
      ImGui::Text(
          "query %d%s%s  ->  key %d%s%s", ev.row, h.row_labels ? " " : "",
          h.row_labels && ev.row < int(h.row_labels->size()) ? (*h.row_labels)[std::size_t(ev.row)].c_str()
                                                             : "",
          ev.col, h.col_labels ? " " : "",
          h.col_labels && ev.col < int(h.col_labels->size()) ? (*h.col_labels)[std::size_t(ev.col)].c_str()
                                                             : "");
      if (blocked)
        ImGui::Text("blocked by the mask (%g)", double(v));
      else if (std::isnan(v))
        ImGui::TextWrapped(
            "NaN: every key of this query is blocked; softmax of all -inf is 0/0. torch gives NaN; "
            "choose \"fully masked -> 0\" in the controls for zeros.");
      else
        ImGui::Text("%.6g", double(v));
      if (h.zoomable && z.zoom > 1)
        ImGui::TextDisabled(
            "zoom %.1fx: Ctrl+wheel; drag with the right button to pan; double right-click: fit",
            double(z.zoom));
      else if (h.zoomable)
        ImGui::TextDisabled("Ctrl+wheel: zoom in (values show once they fit)");
      ImGui::EndTooltip();
    }
  }
  if (g_pending_menu.id == h.id && ImGui::GetTime() - g_pending_menu.at > io.MouseDoubleClickTime) {
    g_pending_menu = {};
    open_copy_menu(h);
  }
  ImGui::PushID(h.id.c_str());
  copy_menu(h);
  ImGui::PopID();
  ImGui::SetCursorScreenPos(ImVec2(origin.x, g1.y + style.ItemSpacing.y));
  ImGui::Dummy(ImVec2(g1.x - origin.x + nan_w, 0));
  return ev;
}

std::string current_heatmap_name() {
  return g_current.id.empty() ? "" : shown_name(g_current.id);
}

void copy_current_heatmap(CopyAs how) {
  g_current.materialise();
  const Snapshot& s = g_current;
  if (s.id.empty()) {
    g_copy_message = "point at a heatmap first";
    return;
  }
  const studio::MatrixView m{s.values.data(), s.rows, s.cols, s.cols, 1};
  const std::string name =
      shown_name(s.id) + " (" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + ")";
  if (how == CopyAs::tsv) {
    ImGui::SetClipboardText(studio::matrix_tsv(m, s.row_labels.empty() ? nullptr : &s.row_labels,
                                               s.col_labels.empty() ? nullptr : &s.col_labels)
                                .c_str());
    g_copy_message = "copied " + name + " as TSV";
  } else if (how == CopyAs::numpy) {
    ImGui::SetClipboardText(studio::matrix_numpy(m).c_str());
    g_copy_message = "copied " + name + " as a numpy array";
  } else {
    try {  // drawn by the figure exporter, as Export... would draw it
      exporter::ExportSpec spec;
      spec.title = shown_name(s.id);
      exporter::Panel p;
      p.values = s.values.data();
      p.rows = s.rows;
      p.cols = s.cols;
      p.row_stride = s.cols;
      p.row_labels = s.row_labels;
      p.col_labels = s.col_labels;
      if (!s.blocked.empty())
        p.blocked = [&s](int r, int c) {
          return s.blocked[std::size_t(r) * std::size_t(s.cols) + std::size_t(c)] != 0;
        };
      spec.panels.push_back(std::move(p));
      spec.vmin = s.vmin;
      spec.vmax = s.vmax;
      spec.colormap = s.colormap;
      spec.font_path = platform::default_font().path;
      platform::copy_png_to_clipboard(exporter::render_png(spec), name);
      g_copy_message = "copying " + name + " as a PNG image...";
    } catch (const Error& e) {
      g_copy_message = std::string("cannot copy the image: ") + e.what();
    }
  }
}

std::string take_copy_message() {
  std::string m = std::move(g_copy_message);
  g_copy_message.clear();
  return m;
}

void draw_colorbar(Textures& textures, Colormap c, float vmin, float vmax, float height) {
  const float font = ImGui::GetFontSize();
  const float width = font * 0.9f;
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImTextureID tex =
      textures.get(std::string("colorbar/") + to_string(c), 1, 1, 256, [&](std::uint32_t* rgba) {
        for (int i = 0; i < 256; ++i) rgba[i] = colormap_rgba(c, 1.0f - float(i) / 255.0f);  // top = max
      });
  dl->AddImage(tex, p, ImVec2(p.x + width, p.y + height));
  dl->AddRect(p, ImVec2(p.x + width, p.y + height), ImGui::GetColorU32(ImGuiCol_TextDisabled));
  char buf[32];
  float label_w = 0;
  for (int k = 0; k <= 4; ++k) {
    const float t = float(k) / 4.0f;
    const float y = p.y + height * (1.0f - t);
    std::snprintf(buf, sizeof buf, "%.3g", double(vmin + (vmax - vmin) * t));
    dl->AddLine(ImVec2(p.x + width, y), ImVec2(p.x + width + 4, y), ImGui::GetColorU32(ImGuiCol_Text));
    const ImVec2 ts = ImGui::CalcTextSize(buf);
    label_w = std::max(label_w, ts.x);
    dl->AddText(ImVec2(p.x + width + 4 + font * 0.35f,
                       std::clamp(y - ts.y * 0.5f, p.y - ts.y * 0.5f, p.y + height - ts.y * 0.5f)),
                ImGui::GetColorU32(ImGuiCol_Text), buf);
  }
  ImGui::Dummy(ImVec2(width + 6 + font * 0.35f + label_w, height));
}

}  // namespace mha::app
