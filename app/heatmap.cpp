// The heatmap widget (see heatmap.hpp). Cells are one texture drawn as one quad with nearest
// sampling; labels, hatching, values and the selection are draw-list primitives on top.
#include "heatmap.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "scenario.hpp"  // to_string(Colormap)
#include "studio_names.hpp"

namespace mha::app {

namespace {

// Text rotated 90° counter-clockwise, reading upwards from `start` (the trick: rotate the vertices
// AddText just wrote). A glyph point at (dx, dy) from the text origin lands at (dy, -dx) from start.
void add_text_vertical(ImDrawList* dl, ImVec2 start, ImU32 col, const char* text) {
  const int first = dl->VtxBuffer.Size;
  dl->AddText(start, col, text);
  for (int i = first; i < dl->VtxBuffer.Size; ++i) {
    ImVec2& p = dl->VtxBuffer[i].pos;
    p = ImVec2(start.x + (p.y - start.y), start.y - (p.x - start.x));
  }
}

int label_step(float cell, float text_extent) {
  if (cell <= 0) return 1;
  return std::max(1, int(std::ceil(text_extent / cell)));
}

}  // namespace

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

float row_top(const Heatmap& h, int r) {
  float top = 0;
  const float* v = h.values + std::int64_t(r) * h.row_stride;
  for (int c = 0; c < h.cols; ++c) {
    const float x = v[c * h.col_stride];
    if (std::isfinite(x) && x > top && !(h.blocked && h.blocked(r, c))) top = x;
  }
  return top > 0 ? top : 1.0f;  // an all-zero or all-blocked row: any range draws it
}

HeatmapEvent draw_heatmap(Textures& textures, const Heatmap& h) {
  HeatmapEvent ev;
  if (h.rows <= 0 || h.cols <= 0 || !h.values) return ev;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiStyle& style = ImGui::GetStyle();
  const float font = ImGui::GetFontSize();
  const ImU32 text_col = ImGui::GetColorU32(ImGuiCol_Text);
  const ImU32 dim_col = ImGui::GetColorU32(ImGuiCol_TextDisabled);

  // Label extents: the widest label decides the margins (capped so long words do not eat the map).
  float row_w = 0, col_w = 0;
  for (int i = 0; h.row_labels && i < h.rows && i < int(h.row_labels->size()); ++i)
    row_w = std::max(row_w, ImGui::CalcTextSize((*h.row_labels)[std::size_t(i)].c_str()).x);
  for (int j = 0; h.col_labels && j < h.cols && j < int(h.col_labels->size()); ++j)
    col_w = std::max(col_w, ImGui::CalcTextSize((*h.col_labels)[std::size_t(j)].c_str()).x);
  row_w = std::min(row_w, font * 8) + style.ItemSpacing.x;
  col_w = std::min(col_w, font * 8) + style.ItemSpacing.y;
  const float nan_w = font * 1.5f;  // right margin for the NaN-row flag

  ImVec2 avail = h.size;
  if (avail.x <= 0) avail.x = ImGui::GetContentRegionAvail().x;
  if (avail.y <= 0) avail.y = ImGui::GetContentRegionAvail().y;
  const float grid_w = std::max(1.0f, avail.x - row_w - nan_w), grid_h = std::max(1.0f, avail.y - col_w);
  const float cell = std::max(1.0f, std::min({h.max_cell, grid_w / float(h.cols), grid_h / float(h.rows)}));
  // Column labels run vertically when they do not fit across a cell.
  const bool vertical = col_w - style.ItemSpacing.y > cell;
  const float top = vertical ? col_w : font + style.ItemSpacing.y;

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 g0(origin.x + row_w, origin.y + top);
  const ImVec2 g1(g0.x + cell * float(h.cols), g0.y + cell * float(h.rows));
  ev.grid_min = g0;
  ev.cell = cell;

  auto at = [&](int r, int c) {
    return h.values[std::int64_t(r) * h.row_stride + std::int64_t(c) * h.col_stride];
  };
  // A grid scrolled or clipped out of view is neither coloured nor uploaded (at L = 2048 each map is
  // 2048 pixels wide and 16 MiB of texture); the cache fills it when it comes into view.
  const bool visible = ImGui::IsRectVisible(g0, g1);
  if (visible) {
    const ImTextureID tex = textures.get(h.id, h.version, h.cols, h.rows, [&](std::uint32_t* rgba) {
      for (int r = 0; r < h.rows; ++r) {
        std::uint32_t* out = rgba + std::size_t(r) * std::size_t(h.cols);
        const float* v = h.values + std::int64_t(r) * h.row_stride;
        const float hi = h.row_scale ? row_top(h, r) : h.vmax, lo = h.row_scale ? 0.0f : h.vmin;
        if (h.blocked)
          for (int c = 0; c < h.cols; ++c)
            out[c] = h.blocked(r, c) ? kMaskedColor : value_rgba(h.colormap, v[c * h.col_stride], lo, hi);
        else
          for (int c = 0; c < h.cols; ++c) out[c] = value_rgba(h.colormap, v[c * h.col_stride], lo, hi);
      }
    });
    dl->AddImage(tex, g0, g1);
  }

  // Blocked cells: hatched, so they never read as "low".
  if (visible && h.blocked && cell >= 6)
    for (int r = 0; r < h.rows; ++r)
      for (int c = 0; c < h.cols; ++c)
        if (h.blocked(r, c)) {
          const ImVec2 a(g0.x + cell * float(c), g0.y + cell * float(r));
          dl->AddLine(ImVec2(a.x, a.y + cell), ImVec2(a.x + cell, a.y), IM_COL32(40, 40, 40, 200), 1.0f);
          dl->AddLine(ImVec2(a.x, a.y + cell * 0.5f), ImVec2(a.x + cell * 0.5f, a.y),
                      IM_COL32(40, 40, 40, 200));
          dl->AddLine(ImVec2(a.x + cell * 0.5f, a.y + cell), ImVec2(a.x + cell, a.y + cell * 0.5f),
                      IM_COL32(40, 40, 40, 200));
        }

  // Cell text when it fits: the caller's (cell_text), or the value, black or white by background.
  if (visible &&
      ((h.cell_text && cell >= font * 1.05f) || (h.show_values && !h.cell_text && cell >= font * 2.4f))) {
    char buf[32];
    // Decimals follow the map's range, so small differences do not all print as 0.00.
    const float span = std::max(std::fabs(h.vmin), std::fabs(h.vmax));
    const char* fmt = span >= 100 ? "%.0f" : span >= 0.1f ? "%.2f" : span >= 0.01f ? "%.3f" : "%.1e";
    for (int r = 0; r < h.rows; ++r)
      for (int c = 0; c < h.cols; ++c) {
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
        dl->AddText(ImVec2(g0.x + cell * (float(c) + 0.5f) - ts.x * 0.5f,
                           g0.y + cell * (float(r) + 0.5f) - ts.y * 0.5f),
                    lum > 128000 ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255), t);
      }
  }

  // Axis labels: queries down the left, keys across the top; every k-th when cells are small.
  if (h.row_labels) {
    const int step = label_step(cell, font);
    for (int r = 0; r < h.rows && r < int(h.row_labels->size()); r += step) {
      const char* t = (*h.row_labels)[std::size_t(r)].c_str();
      const ImVec2 ts = ImGui::CalcTextSize(t);
      // The clip stops labels running into the grid, not past its last row (a label is taller than a small
      // cell).
      dl->PushClipRect(origin, ImVec2(g0.x - style.ItemSpacing.x * 0.5f, g1.y + font), true);
      dl->AddText(
          ImVec2(g0.x - style.ItemSpacing.x * 0.5f - ts.x, g0.y + cell * (float(r) + 0.5f) - ts.y * 0.5f),
          text_col, t);
      dl->PopClipRect();
    }
  }
  if (h.col_labels) {
    const int step = vertical ? label_step(cell, font) : 1;
    for (int c = 0; c < h.cols && c < int(h.col_labels->size()); c += step) {
      const char* t = (*h.col_labels)[std::size_t(c)].c_str();
      const ImVec2 ts = ImGui::CalcTextSize(t);
      if (vertical)
        add_text_vertical(
            dl, ImVec2(g0.x + cell * (float(c) + 0.5f) - ts.y * 0.5f, g0.y - style.ItemSpacing.y * 0.5f),
            text_col, t);
      else
        dl->AddText(
            ImVec2(g0.x + cell * (float(c) + 0.5f) - ts.x * 0.5f, g0.y - ts.y - style.ItemSpacing.y * 0.5f),
            text_col, t);
    }
  }

  // Rows that are NaN (every key blocked) get a flag at their right end.
  std::vector<int> nan_rows;
  for (int r = 0; r < h.rows; ++r)
    if (std::isnan(at(r, 0))) nan_rows.push_back(r);
  for (int r : nan_rows)
    dl->AddText(ImVec2(g1.x + style.ItemSpacing.x * 0.5f, g0.y + cell * (float(r) + 0.5f) - font * 0.5f),
                IM_COL32(255, 60, 200, 255), "NaN");

  if (h.selected_row >= 0 && h.selected_col >= 0 && h.selected_row < h.rows && h.selected_col < h.cols) {
    const ImVec2 a(g0.x + cell * float(h.selected_col), g0.y + cell * float(h.selected_row));
    dl->AddRect(a, ImVec2(a.x + cell, a.y + cell), IM_COL32(255, 255, 255, 255), 0, 0, 2.5f);
    dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(a.x + cell + 1, a.y + cell + 1), IM_COL32(0, 0, 0, 255));
  }
  dl->AddRect(g0, g1, dim_col);

  // Interaction: one invisible button over the grid.
  ImGui::SetCursorScreenPos(g0);
  ImGui::InvisibleButton(h.id.c_str(), ImVec2(g1.x - g0.x, g1.y - g0.y));
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    ev.col = std::clamp(int((m.x - g0.x) / cell), 0, h.cols - 1);
    ev.row = std::clamp(int((m.y - g0.y) / cell), 0, h.rows - 1);
    ev.hovered = true;
    ev.clicked = ImGui::IsMouseReleased(ImGuiMouseButton_Left);
    ev.dragging = ImGui::IsMouseDown(ImGuiMouseButton_Left);
    const float v = at(ev.row, ev.col);
    ImGui::BeginTooltip();
    const bool blocked = h.blocked && h.blocked(ev.row, ev.col);
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
    ImGui::EndTooltip();
  }
  ImGui::SetCursorScreenPos(ImVec2(origin.x, g1.y + style.ItemSpacing.y));
  ImGui::Dummy(ImVec2(g1.x - origin.x + nan_w, 0));
  return ev;
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
