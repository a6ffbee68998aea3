// Token lines, BertViz's "head view": the query tokens in a column on the left, the key tokens on the
// right, one line per weight from query i to key j, as wide and as opaque as the weight and coloured
// by head. Heads are toggled on and off; hovering a token (here or in any other view) keeps only its
// lines, and hovering a line names the weight.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "head_colour.hpp"
#include "heatmap.hpp"
#include "panel_util.hpp"
#include "panels.hpp"

namespace mha::app {

namespace {

using namespace panel;

// Lines below this weight are not drawn (they would be invisible at this opacity anyway).
constexpr float kMinWeight = 0.01f;
// More candidate lines than this (heads shown × L × S') and no token hovered: only the selected
// query's lines are drawn, so a frame stays cheap at large L.
constexpr double kMaxLines = 40000;

ImU32 head_rgb(int h, std::int64_t H, int alpha) {
  const std::uint32_t c = render::head_colour(h, H, 1.0f, 1.0f);  // full saturation and brightness
  return (c & 0x00FFFFFFu) | (std::uint32_t(std::clamp(alpha, 0, 255)) << 24);
}

float distance_to_segment(ImVec2 p, ImVec2 a, ImVec2 b) {
  const float dx = b.x - a.x, dy = b.y - a.y;
  const float len2 = dx * dx + dy * dy;
  const float t = len2 > 0 ? std::clamp(((p.x - a.x) * dx + (p.y - a.y) * dy) / len2, 0.0f, 1.0f) : 0.0f;
  const float ex = a.x + t * dx - p.x, ey = a.y + t * dy - p.y;
  return std::sqrt(ex * ex + ey * ey);
}

bool hidden(const ViewState& v, int h) {
  return std::find(v.hidden_heads.begin(), v.hidden_heads.end(), h) != v.hidden_heads.end();
}

void set_hidden(ViewState& v, int h, bool hide) {
  auto it = std::find(v.hidden_heads.begin(), v.hidden_heads.end(), h);
  if (hide && it == v.hidden_heads.end()) v.hidden_heads.push_back(h);
  if (!hide && it != v.hidden_heads.end()) v.hidden_heads.erase(it);
  std::sort(v.hidden_heads.begin(), v.hidden_heads.end());
}

}  // namespace

struct TokenLinesPanel {
  TokenLinesInfo info;  // what the last frame drew
  void draw(AppState& state);
};

const TokenLinesInfo& token_lines_info(const Panels& panels) {
  static const TokenLinesInfo none;  // the view has not drawn yet
  return panels.token_lines ? panels.token_lines->info : none;
}

void draw_token_lines(Panels& panels, AppState& state) {
  panel::made(panels.token_lines).draw(state);
}

void TokenLinesPanel::draw(AppState& state) {
  info = TokenLinesInfo{};
  if (!state.result.valid()) {
    ImGui::TextWrapped("No result yet: the lines appear once the inputs give a valid forward.");
    return;
  }
  ViewState& view = state.view();
  const Result& result = state.result;
  const ForwardResult<float>& f = *result.forward;
  const Dims& d = f.dims;
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  const int N = int(d.N), H = int(d.H), L = int(d.L), S = int(d.S_total);
  const int b = std::clamp(view.batch_index, 0, N - 1);
  // At the largest sizes a result keeps no attn_weights: computed once per result off the UI thread,
  // unless they would not fit in memory.
  if (!panel::stages_ready(state.stages, {result.forward}, {"attn_weights"})) return;
  const Stage<float>* weights = find_stage(f, "attn_weights");
  if (!weights) {
    ImGui::TextWrapped(
        "attn_weights (%d x %d x %d values a batch item) do not fit in memory here; the Heads view shows "
        "every "
        "head zoomed out.",
        H, L, S);
    return;
  }
  const Stage<float>& w = *weights;  // (N, H, L, S')

  what_if_banner(state);
  // Controls: batch item, then one coloured toggle per head.
  if (N > 1) {
    int pick = b;
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::SliderInt("batch item", &pick, 0, N - 1)) view.batch_index = pick;
    ImGui::SameLine(0, font * 1.5f);  // apart, so "batch item" does not read as the heads' label
  }
  ImGui::TextUnformatted("heads:");
  for (int h = 0; h < H; ++h) {
    const std::string label = std::to_string(h);
    same_line_if_fits(ImGui::GetFrameHeight() + style.ItemInnerSpacing.x +
                      ImGui::CalcTextSize(label.c_str()).x);
    bool on = !hidden(view, h);
    ImGui::PushID(h);
    ImGui::PushStyleColor(ImGuiCol_FrameBg, ImGui::ColorConvertU32ToFloat4(head_rgb(h, H, 110)));
    ImGui::PushStyleColor(ImGuiCol_FrameBgHovered, ImGui::ColorConvertU32ToFloat4(head_rgb(h, H, 170)));
    ImGui::PushStyleColor(ImGuiCol_CheckMark, ImGui::ColorConvertU32ToFloat4(head_rgb(h, H, 255)));
    if (ImGui::Checkbox(label.c_str(), &on)) set_hidden(view, h, !on);
    ImGui::PopStyleColor(3);
    ImGui::PopID();
  }
  same_line_if_fits(ImGui::CalcTextSize("all").x + ImGui::CalcTextSize("none").x + font * 2);
  if (ImGui::SmallButton("all")) view.hidden_heads.clear();
  ImGui::SameLine();
  if (ImGui::SmallButton("none")) {
    view.hidden_heads.clear();
    for (int h = 0; h < H; ++h) view.hidden_heads.push_back(h);
  }

  std::vector<int> heads;
  for (int h = 0; h < H; ++h)
    if (!hidden(view, h)) heads.push_back(h);

  // Which lines: a hovered token's (here or in another view), else all of them while that is cheap,
  // else the selected query's.
  const int hq = view.hover_query >= 0 && view.hover_query < L ? view.hover_query : -1;
  const int hk = view.hover_key >= 0 && view.hover_key < S ? view.hover_key : -1;
  int only_q = hq, only_k = hk;
  const bool too_many = double(heads.size()) * L * S > kMaxLines;
  if (too_many && only_q < 0 && only_k < 0) only_q = std::clamp(view.sel_query, 0, L - 1);
  {
    char buf[256];
    if (hq >= 0 || hk >= 0)
      std::snprintf(buf, sizeof buf, "showing the lines of the hovered token");
    else if (too_many)
      std::snprintf(buf, sizeof buf,
                    "%zu heads x %d x %d lines are too many to read: query %d's lines (hover a token)",
                    heads.size(), L, S, only_q);
    else
      std::snprintf(buf, sizeof buf, "hover a token to keep only its lines; width and opacity: the weight");
    ImGui::PushTextWrapPos(0);
    ImGui::TextDisabled("%s", buf);
    ImGui::PopTextWrapPos();
  }

  // Padded keys of this batch item (key_padding_mask True): labelled, their lines are 0 anyway.
  const MaskSpec& mask = state.scenario().mask;
  auto padded = [&](int j) {
    return j < int(d.S) && mask.key_padding_shape.size() == 2 && mask.key_padding_shape[0] == d.N &&
           mask.key_padding_shape[1] == d.S &&
           mask.key_padding[std::size_t(b) * std::size_t(d.S) + std::size_t(j)] != 0;
  };
  auto key_label = [&](int j) {
    std::string t = j < int(result.key_tokens.size()) ? result.key_tokens[std::size_t(j)] : std::to_string(j);
    if (padded(j)) t += " (pad)";
    return t;
  };
  auto query_label = [&](int i) {
    return i < int(result.query_tokens.size()) ? result.query_tokens[std::size_t(i)] : std::to_string(i);
  };

  // Geometry: two text columns and the lines between them.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  float qw = 0, kw = 0;
  for (int i = 0; i < L; ++i) qw = std::max(qw, ImGui::CalcTextSize(query_label(i).c_str()).x);
  for (int j = 0; j < S; ++j) kw = std::max(kw, ImGui::CalcTextSize(key_label(j).c_str()).x);
  qw = std::min(qw, std::max(font * 4, avail.x * 0.25f)) + style.ItemSpacing.x;
  kw = std::min(kw, std::max(font * 4, avail.x * 0.25f)) + style.ItemSpacing.x;
  const float line_h = ImGui::GetTextLineHeight();
  const float area_h = std::max(font * 4, avail.y - style.ItemSpacing.y - ImGui::GetTextLineHeight());
  // Short sequences get room between their tokens (the lines' slopes read better), up to 3 lines.
  const float row_h = std::min(line_h * (std::max(L, S) <= 12 ? 3.0f : 1.4f), area_h / float(std::max(L, S)));
  // Half a text line above the first token, so its label is not cut when rows are shorter than text.
  const ImVec2 o(ImGui::GetCursorScreenPos().x,
                 ImGui::GetCursorScreenPos().y + std::max(0.0f, (line_h - row_h) * 0.5f));
  // The lines take the rest of the panel's width: the key column sits at its right edge.
  const float gap = std::max(font * 4, avail.x - qw - kw);
  const float x0 = o.x + qw, x1 = x0 + gap;
  auto yq = [&](int i) { return o.y + row_h * (float(i) + 0.5f); };
  auto yk = [&](int j) { return o.y + row_h * (float(j) + 0.5f); };
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text), dim = ImGui::GetColorU32(ImGuiCol_TextDisabled);

  // Lines, weakest first so strong ones stay on top; per head in turn (a head's colour reads as one).
  info.only_query = only_q;
  info.only_key = only_k;
  info.left_x = o.x;
  info.right_x = x1 + style.ItemSpacing.x;
  info.view_x0 = ImGui::GetWindowPos().x;
  info.view_x1 = info.view_x0 + ImGui::GetWindowWidth();
  info.top = o.y;
  info.row_h = row_h;
  std::vector<char> query_has_line(std::size_t(L), 0);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const bool mouse_in = ImGui::IsWindowHovered() && mouse.x > x0 && mouse.x < x1 && mouse.y >= o.y &&
                        mouse.y < o.y + row_h * float(std::max(L, S));
  float best = font * 0.35f;
  int best_h = -1, best_i = -1, best_j = -1;
  dl->PushClipRect(ImVec2(x0, o.y), ImVec2(x1, o.y + area_h), true);
  // Each head's lines end a little apart around the token's line, so heads do not blend into one colour.
  const float spread = std::min(row_h * 0.5f, font * 0.6f);
  const float step_y = heads.size() > 1 ? spread / float(heads.size() - 1) : 0.0f;
  for (std::size_t hi = 0; hi < heads.size(); ++hi) {
    const int h = heads[hi];
    const float dy = heads.size() > 1 ? float(hi) * step_y - spread * 0.5f : 0.0f;
    for (int i = 0; i < L; ++i) {
      if (only_q >= 0 && i != only_q) continue;
      for (int j = 0; j < S; ++j) {
        if (only_k >= 0 && j != only_k) continue;
        const float v = w.at({b, h, i, j});
        if (!(v >= kMinWeight)) continue;  // NaN rows and blocked keys draw nothing
        const ImVec2 a(x0 + 2, yq(i) + dy), c(x1 - 2, yk(j) + dy);
        // Opacity by √weight: a row spread over T keys (~1/T each) still shows, 1 is opaque.
        const float x = std::min(v, 1.0f);
        dl->AddLine(a, c, head_rgb(h, H, int(50 + 205 * std::sqrt(x))), 0.75f + 5.0f * x);
        ++info.lines;
        query_has_line[std::size_t(i)] = 1;
        if (info.heads_drawn.empty() || info.heads_drawn.back() != h) info.heads_drawn.push_back(h);
        if (mouse_in) {
          const float dist = distance_to_segment(mouse, a, c);
          if (dist < best) best = dist, best_h = h, best_i = i, best_j = j;
        }
      }
    }
  }
  dl->PopClipRect();
  for (int i = 0; i < L; ++i)
    if (query_has_line[std::size_t(i)]) info.queries_drawn.push_back(i);

  // Token columns; every k-th label when rows are shorter than a text line, the hovered ones always.
  const int step = std::max(1, int(std::ceil(line_h / std::max(row_h, 1e-3f))));
  const int mark_q = best_i >= 0 ? best_i : hq, mark_k = best_j >= 0 ? best_j : hk;
  dl->PushClipRect(ImVec2(o.x, o.y - line_h), ImVec2(o.x + qw + gap + kw, o.y + area_h + line_h), true);
  // A marked label is drawn over its rows: the thinned labels it would touch make way for it.
  auto near_mark = [&](int i, int mark) {
    return mark >= 0 && i != mark && std::fabs(float(i - mark)) * row_h < line_h;
  };
  for (int i = 0; i < L; ++i) {
    if ((i % step != 0 && i != mark_q) || near_mark(i, mark_q)) continue;
    const std::string t = query_label(i);
    const ImVec2 ts = ImGui::CalcTextSize(t.c_str());
    const ImVec2 p(x0 - style.ItemSpacing.x - ts.x, yq(i) - ts.y * 0.5f);
    if (i == mark_q) dl->AddRectFilled(ImVec2(p.x - 2, p.y), ImVec2(x0 - 2, p.y + ts.y), hover_colour());
    dl->AddText(p, i == mark_q ? IM_COL32(0, 0, 0, 255) : text, t.c_str());
  }
  for (int j = 0; j < S; ++j) {
    if ((j % step != 0 && j != mark_k) || near_mark(j, mark_k)) continue;
    const std::string t = key_label(j);
    const ImVec2 ts = ImGui::CalcTextSize(t.c_str());
    const ImVec2 p(x1 + style.ItemSpacing.x, yk(j) - ts.y * 0.5f);
    if (j == mark_k)
      dl->AddRectFilled(ImVec2(x1 + 2, p.y), ImVec2(p.x + ts.x + 2, p.y + ts.y), hover_colour());
    dl->AddText(p, j == mark_k ? IM_COL32(0, 0, 0, 255) : padded(j) ? dim : text, t.c_str());
  }
  dl->PopClipRect();

  // The pointer: a token on either side, or the nearest line.
  if (ImGui::IsWindowHovered() && mouse.y >= o.y && mouse.y < o.y + row_h * float(std::max(L, S))) {
    if (mouse.x >= o.x && mouse.x <= x0) {
      const int i = int((mouse.y - o.y) / row_h);
      if (i < L) report_hover(i, -1);
    } else if (mouse.x >= x1 && mouse.x <= x1 + kw) {
      const int j = int((mouse.y - o.y) / row_h);
      if (j < S) report_hover(-1, j);
    } else if (best_h >= 0) {
      report_hover(best_i, best_j);
      ImGui::SetTooltip("head %d: %s -> %s  %.4f", best_h, query_label(best_i).c_str(),
                        key_label(best_j).c_str(), double(w.at({b, best_h, best_i, best_j})));
    }
  }
  ImGui::Dummy(ImVec2(qw + gap + kw, row_h * float(std::max(L, S))));
  if (heads.empty()) ImGui::TextDisabled("every head is off: tick one above");
}

}  // namespace mha::app
