// The √d_k view: why attention divides the scores by √d_k, as a plot of each row's largest weight
// and its entropy against d_k, softmax with and without the scale, on random q and k
// (engine/saturation.hpp). The figure is the handout's (export/saturation_export.hpp), laid out
// with ImGui's font and drawn with ImDrawList; the d_k of the work shown is marked on it.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "errors.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "saturation_export.hpp"

namespace mha::app {

namespace {

// The curves for S keys, computed once per S (a few hundredths of a second each).
const SaturationCurves& curves_for(int keys) {
  static std::map<int, SaturationCurves> cache;
  const int k = std::clamp(keys, 2, 64);
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, exporter::lesson_saturation_curves(k)).first;
  return it->second;
}

// A Drawing with ImDrawList at `origin`: the font is ImGui's (the layout was measured with it).
void draw_with_imgui(const exporter::Drawing& d, ImVec2 origin, float font) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  auto at = [&](float x, float y) { return ImVec2(origin.x + x, origin.y + y); };
  dl->AddRectFilled(at(0, 0), at(float(d.width), float(d.height)), IM_COL32(255, 255, 255, 255), 4);
  for (const exporter::Drawing::Box& b : d.boxes)  // RGBA with R in the low byte: ImU32's packing
    dl->AddRectFilled(at(float(b.x), float(b.y)), at(float(b.x + b.w), float(b.y + b.h)), b.fill);
  for (const exporter::Drawing::Line& l : d.lines) {
    for (std::size_t i = 1; i < l.points.size(); ++i) {
      const ImVec2 a = at(l.points[i - 1].first, l.points[i - 1].second);
      const ImVec2 b = at(l.points[i].first, l.points[i].second);
      if (!l.dashed) {
        dl->AddLine(a, b, l.color, l.width);
        continue;
      }
      const float dx = b.x - a.x, dy = b.y - a.y, len = std::sqrt(dx * dx + dy * dy);
      const float on = 4 * l.width, off = 2.5f * l.width;
      for (float t = 0; t < len; t += on + off) {
        const float t1 = std::min(len, t + on);
        dl->AddLine(ImVec2(a.x + dx * t / len, a.y + dy * t / len),
                    ImVec2(a.x + dx * t1 / len, a.y + dy * t1 / len), l.color, l.width);
      }
    }
  }
  for (const exporter::Drawing::Text& t : d.texts)
    dl->AddText(ImGui::GetFont(), t.title ? font * 1.3f : font, at(float(t.x), float(t.y)), t.color,
                t.text.c_str());
}

}  // namespace

void draw_sqrt_dk(AppState& state) {
  const float font = ImGui::GetFontSize();
  int keys = 6, d_k = 0;
  if (state.result.valid()) {
    keys = int(state.result.forward->dims.S_total);
    d_k = int(state.result.forward->dims.d_k);
  }
  const bool scaled = state.scenario().what_if.scale_by_sqrt_dk;

  const SaturationCurves& c = curves_for(keys);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // The text under the plot.
  const std::string why =
      "A score q\xC2\xB7k is a sum of d_k products: with entries of size about 1 its spread grows like "
      "\xE2\x88\x9A"
      "d_k, and softmax turns a wide spread into one weight near 1. Dividing by \xE2\x88\x9A"
      "d_k keeps the spread about 1 at every d_k.";
  std::string work;
  if (d_k > 0)
    work = "The work shown: d_k = " + std::to_string(d_k) + ", S = " + std::to_string(keys) +
           " keys, scores " +
           (scaled ? "divided by \xE2\x88\x9A"
                     "d_k"
                   : "not divided (what-if)") +
           " (the green line).";
  // The figure's text: the view's font where it fits, smaller in a narrow view at presenter size
  // (two panels of nine ticks need about 40 characters across).
  const float fig_font = std::min(font, std::max(12.0f, avail.x / 40));
  const float spacing = ImGui::GetStyle().ItemSpacing.y, line = ImGui::GetTextLineHeightWithSpacing();
  auto wrapped_h = [&](const std::string& s) {
    return s.empty() ? 0.0f : ImGui::CalcTextSize(s.c_str(), nullptr, false, avail.x).y + spacing;
  };
  // The plot leaves room for the text wrapped (three lines at least); where that would squeeze it
  // under 16 of its lines (a short view), the text folds to a line each, whole on hover.
  const float text_h = std::max(3 * line, wrapped_h(why) + wrapped_h(work));
  const bool fold = avail.y - 2 - text_h < fig_font * 16;
  const float below = fold ? 2 * line : text_h;
  const float fig_min = fold ? fig_font * 12 : fig_font * 16;
  exporter::SaturationSpec spec;
  spec.width = int(std::max(avail.x - 2, fig_font * 30));
  spec.height = int(std::clamp(avail.y - 2 - below, fig_min, std::max(fig_min, spec.width * 0.62f)));
  spec.mark_d_k = d_k;
  spec.mark_scaled = scaled;
  exporter::TextMetrics m;
  m.width = [fig_font](const std::string& s, bool title) {
    return int(
        std::ceil(ImGui::GetFont()->CalcTextSizeA(title ? fig_font * 1.3f : fig_font, 1e9f, 0, s.c_str()).x));
  };
  m.line = int(std::ceil(fig_font)) + 2;
  m.title_line = int(std::ceil(fig_font * 1.3f)) + 2;
  exporter::Drawing d;
  try {
    d = exporter::saturation_figure(c, spec, m);
  } catch (const Error& e) {
    ImGui::TextWrapped("%s", e.what());
    return;
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  draw_with_imgui(d, origin, fig_font);
  ImGui::Dummy(ImVec2(float(d.width), float(d.height)));
  panel::long_text(why, fold);
  if (!work.empty()) panel::long_text(work, fold, true);
}

}  // namespace mha::app
