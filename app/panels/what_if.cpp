// The what-if controls: softmax temperature and the ÷√d_k scale on or off. They change the computation
// away from torch's (Scenario::what_if), so they say so wherever they are not at torch's values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "panel_util.hpp"
#include "panels.hpp"

namespace mha::app {

namespace {
const ImVec4 kWhatIfColour(1.0f, 0.55f, 0.1f, 1.0f);
}

bool what_if_banner(const AppState& state) {
  const WhatIf& w = state.scenario().what_if;
  if (!w.active()) return false;
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "WHAT-IF, not torch's computation: scores %s, softmax temperature %.3g. Reset in the Heads view.",
      w.scale_by_sqrt_dk ? "divided by sqrt(d_k)" : "NOT divided by sqrt(d_k)", double(w.temperature));
  ImGui::PushStyleColor(ImGuiCol_Text, kWhatIfColour);
  ImGui::TextWrapped("%s", buf);
  ImGui::PopStyleColor();
  return true;
}

// What the what-if controls keep between frames.
struct WhatIfPanel {
  std::uint64_t temperature_gesture = 0;  // the temperature drag in progress: one undo step
  void draw(AppState& state);
};

void draw_what_if(Panels& panels, AppState& state) {
  panel::made(panels.what_if).draw(state);
}

void WhatIfPanel::draw(AppState& state) {
  const WhatIf w = state.scenario().what_if;
  const float font = ImGui::GetFontSize();
  // A short view: "back to torch" on the header line (the header cut short to leave it room) and a
  // narrower slider, so that open it takes three lines.
  const bool compact = panel::compact_view();
  const std::string header = w.active() ? "What-if ON: not torch's computation"
                                        : "What-if: temperature, scale (not torch's computation)";
  const float button_w = ImGui::CalcTextSize("back to torch").x + ImGui::GetStyle().FramePadding.x * 2;
  const float room = ImGui::GetContentRegionAvail().x - ImGui::GetTreeNodeToLabelSpacing() -
                     (w.active() ? button_w + ImGui::GetStyle().ItemSpacing.x : 0);
  const std::string shown = compact ? panel::fit_line(header, room) : header;
  if (w.active()) ImGui::PushStyleColor(ImGuiCol_Text, kWhatIfColour);
  const bool open =
      ImGui::TreeNodeEx("what_if", w.active() ? ImGuiTreeNodeFlags_DefaultOpen : 0, "%s", shown.c_str());
  if (w.active()) ImGui::PopStyleColor();
  if (shown != header && ImGui::IsItemHovered()) panel::text_tooltip(header);
  auto back_to_torch = [&] {
    if (!ImGui::SmallButton("back to torch")) return;
    Action a;
    a.what = "what-if: back to torch";
    a.slot = "what_if";
    a.change = [](Scenario& s) { s.what_if = WhatIf{}; };
    state.apply(a);
  };
  if (compact && w.active()) {
    ImGui::SameLine();
    back_to_torch();
  }
  if (!open) return;
  // A short view (a presenter font beside the lesson panel) gets the explanation on one line, whole
  // on hover, so the controls stay in sight above the maps.
  panel::long_text(
      "torch computes softmax(q.k / sqrt(d_k) + mask). Here: softmax(q.k / (s * T) + mask) with s = "
      "sqrt(d_k) or 1. Without the scale, scores grow like sqrt(d_k) and the softmax saturates to one key "
      "per row: raise E/H to see it.",
      compact, true);
  // Both controls send the actions `set` sends (studio/actions.cpp), so a script reaches them too.
  bool scale = w.scale_by_sqrt_dk;
  if (ImGui::Checkbox("divide by sqrt(d_k)", &scale))
    state.apply(set_control("scale_by_sqrt_dk", scale ? "true" : "false"));
  const float slider_w = font * (compact ? 3 : 9);
  panel::same_line_if_fits(panel::labelled("temperature T", slider_w));
  float t = w.temperature;
  ImGui::SetNextItemWidth(slider_w);
  const bool changed =
      ImGui::SliderFloat("temperature T", &t, 0.1f, 10.0f, "%.2f", ImGuiSliderFlags_Logarithmic);
  if (ImGui::IsItemActivated()) temperature_gesture = new_gesture();  // a drag is one undo step
  if (changed && std::isfinite(t)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", double(std::clamp(t, 0.1f, 10.0f)));
    Action a = set_control("temperature", text);
    a.gesture = temperature_gesture;
    state.apply(a);
  }
  if (!compact && w.active()) {
    panel::same_line_if_fits(button_w);
    back_to_torch();
  }
  auto it = state.errors.find("what_if");
  if (it != state.errors.end()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(ImVec4(1, 0.35f, 0.35f, 1), "%s", it->second.c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::TreePop();
}

}  // namespace mha::app
