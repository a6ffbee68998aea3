// Export dialog: picks what and where, renders with mha_export, reports the saved path or the error
// (an unwritable folder, a full disk, a bad name) without touching the scenario.
#include "export_dialog.hpp"

#include <imgui.h>
#include <imgui_stdlib.h>

#include "errors.hpp"
#include "stage_export.hpp"

namespace mha::app {

void export_button(AppState& state, const std::string& stage, int head) {
  static int what = 0;  // 0 this head, 1 average, 2 all heads + average
  static int format = 0;
  static bool values = false, transparent = false;
  static std::string path, error;
  const ViewState& v = state.scenario.view;
  if (ImGui::Button("Export...")) {
    error.clear();
    ImGui::OpenPopup("Export figure");
  }
  if (!ImGui::BeginPopupModal("Export figure", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  ImGui::Text("%s, batch item %d", stage.c_str(), v.batch_index);
  ImGui::RadioButton(("head " + std::to_string(head)).c_str(), &what, 0);
  ImGui::SameLine();
  ImGui::RadioButton("head average", &what, 1);
  ImGui::SameLine();
  ImGui::RadioButton("all heads + average", &what, 2);
  ImGui::RadioButton("PNG", &format, 0);
  ImGui::SameLine();
  ImGui::RadioButton("SVG (vector)", &format, 1);
  ImGui::Checkbox("cell values", &values);
  ImGui::SameLine();
  ImGui::Checkbox("transparent background", &transparent);
  const char* ext = format == 0 ? ".png" : ".svg";
  const std::string suggested = "mha-" + stage + "-batch" + std::to_string(v.batch_index) +
                                (what == 0   ? "-head" + std::to_string(head)
                                 : what == 1 ? "-avg"
                                             : "-all") +
                                ext;
  if (ImGui::IsWindowAppearing() || path.empty()) path = suggested;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 28);
  ImGui::InputText("file", &path);
  if (ImGui::Button("Export") && state.result.valid()) {
    try {
      exporter::StageSlice slice;
      slice.stage = stage;
      slice.batch_index = v.batch_index;
      slice.head = what == 0 ? head : what == 1 ? exporter::kHeadAverage : exporter::kAllHeads;
      slice.colormap = v.colormap;
      slice.query_labels = state.result.query_tokens;
      slice.key_labels = state.result.key_tokens;
      exporter::StageFigure fig = exporter::stage_figure(*state.result.forward, slice);
      fig.spec.font_path = MHA_DEFAULT_FONT;
      fig.spec.show_values = values;
      fig.spec.transparent = transparent;
      if (format == 0) {
        const std::vector<std::uint8_t> png = exporter::render_png(fig.spec);
        exporter::write_file(path, png.data(), png.size());
      } else {
        const std::string svg = exporter::render_svg(fig.spec);
        exporter::write_file(path, svg.data(), svg.size());
      }
      state.status = "exported " + path;
      ImGui::CloseCurrentPopup();
    } catch (const Error& e) {
      error = e.what();  // the dialog stays open with the reason; nothing else changes
    }
  }
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
  if (!error.empty()) {
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 28);
    ImGui::TextColored(ImVec4(1, 0.38f, 0.38f, 1), "%s", error.c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::EndPopup();
}

}  // namespace mha::app
