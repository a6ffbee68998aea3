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
    std::string line = "Next token:";
    for (std::size_t i = 0; i < r.model->top_k.size(); ++i) {
      char part[160];
      std::snprintf(part, sizeof part, "%s  %s %.1f%%", i ? "," : "", r.model->top_k_labels[i].c_str(),
                    100 * r.model->top_k[i].probability);
      line += part;
    }
    lines.push_back({StripLine::prediction, line});
  }
  if (s.has_model() && s.mask.preset != MaskPreset::causal)
    lines.push_back({StripLine::what_if, "What-if: layer " + std::to_string(s.layer) +
                                             "'s mask is edited; the layers after it and the prediction follow."});
  if (s.what_if.active()) {
    char line[256];
    std::snprintf(line, sizeof line, "What-if, not torch: scores %s, softmax temperature %.3g%s.",
                  s.what_if.scale_by_sqrt_dk ? "divided by sqrt(d_k)" : "NOT divided by sqrt(d_k)",
                  double(s.what_if.temperature),
                  s.has_model() ? (" at layer " + std::to_string(s.layer) + ", the layers after it following").c_str()
                                : "");
    lines.push_back({StripLine::what_if, line});
  }
  for (const auto& error : state.errors) lines.push_back({StripLine::error, error.second});  // each names its subject
  return lines;
}

void draw_presenter_strip(const std::vector<StripLine>& lines, bool light_theme) {
  // Readable on both themes: dark colours on the presenter's white, light ones on the dark theme.
  const ImVec4 error_colour = light_theme ? ImVec4(0.75f, 0.0f, 0.0f, 1) : ImVec4(1.0f, 0.38f, 0.38f, 1);
  const ImVec4 what_if_colour = light_theme ? ImVec4(0.65f, 0.3f, 0.0f, 1) : ImVec4(1.0f, 0.55f, 0.1f, 1);
  for (const StripLine& l : lines) {
    const bool coloured = l.kind != StripLine::prediction;
    if (coloured) ImGui::PushStyleColor(ImGuiCol_Text, l.kind == StripLine::error ? error_colour : what_if_colour);
    ImGui::TextWrapped("%s", l.text.c_str());
    if (coloured) ImGui::PopStyleColor();
  }
}

}  // namespace mha::app
