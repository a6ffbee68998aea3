// The presenter strip: what a class must see and the Controls panel would otherwise hold (presenter
// mode collapses it): the model's next-token guess, the what-ifs in force, and every error, one line
// each, wrapped, above the view.
#include <cstdio>
#include <string>

#include "panel_util.hpp"
#include "panels.hpp"

namespace mha::app {

std::vector<StripLine> presenter_strip(const AppState& state) {
  const Result& r = state.result;
  const Scenario& s = state.scenario();
  std::vector<StripLine> lines;
  if (r.model && !r.model->top_k.empty()) {
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < r.model->top_k.size(); ++i) {
      char part[160];
      std::snprintf(part, sizeof part, "%s %.1f%%", r.model->top_k_labels[i].c_str(),
                    100 * r.model->top_k[i].probability);
      parts.push_back(part);
    }
    std::string line = "Next token:";
    for (std::size_t i = 0; i < parts.size(); ++i) line += (i ? ",  " : "  ") + parts[i];
    lines.push_back({StripLine::prediction, line, parts});
  }
  if (s.has_model() && s.mask.preset != MaskPreset::causal)
    lines.push_back({StripLine::what_if,
                     "What-if: layer " + std::to_string(s.layer) + "'s mask edited",
                     {"Layer " + std::to_string(s.layer) +
                      "'s mask is edited (not the model's computation); the layers after it and the "
                      "prediction follow."}});
  if (s.what_if.active()) {
    char line[96], detail[256];
    std::snprintf(line, sizeof line, "What-if: T = %.3g%s%s", double(s.what_if.temperature),
                  s.what_if.scale_by_sqrt_dk ? "" : ", no /sqrt(d_k)",
                  s.has_model() ? (" at layer " + std::to_string(s.layer)).c_str() : "");
    std::snprintf(detail, sizeof detail, "Not torch's computation: scores %s, softmax temperature %.3g%s.",
                  s.what_if.scale_by_sqrt_dk ? "divided by sqrt(d_k)" : "NOT divided by sqrt(d_k)",
                  double(s.what_if.temperature),
                  s.has_model()
                      ? (" at layer " + std::to_string(s.layer) + ", the layers after it following").c_str()
                      : "");
    lines.push_back({StripLine::what_if, line, {detail}});
  }
  for (const auto& error : state.errors)
    lines.push_back({StripLine::error, error.second, {}});  // each names its subject
  return lines;
}

namespace {

// `text` cut to `width` pixels with "..." (whole UTF-8 characters).
std::string elided(const std::string& text, float width) {
  if (ImGui::CalcTextSize(text.c_str()).x <= width) return text;
  std::size_t n = text.size();
  while (n > 0) {
    do --n;
    while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80);
    const std::string cut = text.substr(0, n) + "...";
    if (ImGui::CalcTextSize(cut.c_str()).x <= width) return cut;
  }
  return "...";
}

}  // namespace

void draw_presenter_strip(const std::vector<StripLine>& lines, bool light_theme) {
  // One line each, so the view keeps its height on a projector: the prediction drops its least
  // likely tokens to fit, a longer line ends in "..." and shows in full under the pointer. Readable
  // on both themes: dark colours on the presenter's white, light ones on the dark theme.
  const ImVec4 error_colour = light_theme ? ImVec4(0.75f, 0.0f, 0.0f, 1) : ImVec4(1.0f, 0.38f, 0.38f, 1);
  const ImVec4 what_if_colour = light_theme ? ImVec4(0.65f, 0.3f, 0.0f, 1) : ImVec4(1.0f, 0.55f, 0.1f, 1);
  const float width = ImGui::GetContentRegionAvail().x;
  for (const StripLine& l : lines) {
    std::string shown = l.text;
    if (l.kind == StripLine::prediction) {
      for (std::size_t k = l.parts.size(); k > 1 && ImGui::CalcTextSize(shown.c_str()).x > width; --k) {
        shown = "Next token:";
        for (std::size_t i = 0; i + 1 < k; ++i) shown += (i ? ",  " : "  ") + l.parts[i];
      }
    }
    shown = elided(shown, width);
    const bool coloured = l.kind != StripLine::prediction;
    if (coloured)
      ImGui::PushStyleColor(ImGuiCol_Text, l.kind == StripLine::error ? error_colour : what_if_colour);
    ImGui::TextUnformatted(shown.c_str());
    if (coloured) ImGui::PopStyleColor();
    if (shown != l.text && ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
      ImGui::TextUnformatted(l.text.c_str());
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
  }
}

}  // namespace mha::app
