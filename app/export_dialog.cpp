// Export dialog (see export_dialog.hpp): one per view id, remembering its choice, format and file;
// it reports the saved path in the status line, or the error inside the dialog, without touching the
// scenario.
#include "export_dialog.hpp"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "clipboard_image.hpp"
#include "colour_range.hpp"
#include "data_dir.hpp"
#include "errors.hpp"
#include "file_chooser.hpp"

namespace mha::app {

namespace {

struct DialogState {
  int choice = 0, format = 0;  // format: a row of exporter::figure_formats()
  bool values = false, transparent = false;
  std::string path, suggested, error;
};

// The choice's heatmap with the dialog's look: the font, cell values, the background.
exporter::StageFigure styled(const FigureChoice& choice, const ExportOptions& options) {
  exporter::StageFigure fig = choice.make();
  fig.spec.font_path = platform::default_font().path;
  fig.spec.show_values = options.values;
  fig.spec.transparent = options.transparent;
  return fig;
}

}  // namespace

std::string export_choice(const FigureChoice& choice, const ExportOptions& options, const std::string& path) {
  try {
    if (path.empty()) throw FileError("file", "no file name given");
    if (choice.drawing) {
      exporter::write_figure(options.format, choice.drawing(options.transparent), path);
      return "";
    }
    const exporter::StageFigure fig = styled(choice, options);  // the spec points into its buffers
    exporter::write_figure(options.format, fig.spec, path);
    return "";
  } catch (const Error& e) {
    return e.what();
  } catch (const std::bad_alloc&) {
    return "out of memory while rendering this figure; nothing was written";
  }
}

FigureRequest rope_request(const AppState& state, int head) {
  FigureRequest req;
  req.id = "heads";
  req.caption = "scores without and with RoPE, head " + std::to_string(head) + ", and their mean by distance";
  const std::optional<studio::ModelResult>& model = state.result.model;
  if (!state.result.valid() || !model || !model->scores_without_rope) {
    req.disabled_reason = "no result with rotary positions (a Llama-family model) to export yet";
    return req;
  }
  const std::shared_ptr<const ForwardResult<float>> fwd = state.result.forward;
  const std::shared_ptr<const Tensor<float>> without = model->scores_without_rope;  // (H, L, S)
  exporter::RopeSpec spec;
  spec.head = head;
  spec.query_labels = state.result.query_tokens;
  spec.title_prefix = "layer " + std::to_string(model->layer) + "  ";
  spec.font_path = platform::default_font().path;
  const std::string stem = "mha-rope-layer" + std::to_string(model->layer) + "-head" + std::to_string(head);
  FigureChoice c{"head " + std::to_string(head), stem, nullptr};
  c.drawing = [fwd, without, spec](bool transparent) {
    exporter::RopeSpec s = spec;
    s.transparent = transparent;
    return exporter::rope_figure(*fwd, s, without.get()).drawing;
  };
  req.choices.push_back(std::move(c));
  return req;
}

FigureRequest stage_request(const AppState& state, const std::string& stage, int head) {
  if (stage == exporter::kRopeStage) return rope_request(state, head);
  FigureRequest req;
  req.id = "heads";
  const int n = state.scenario().view.batch_index;
  req.caption = stage + ", batch item " + std::to_string(n);
  if (!state.result.valid()) {
    req.disabled_reason = "no result to export yet";
    return req;
  }
  const std::shared_ptr<const ForwardResult<float>> fwd = state.result.forward;
  exporter::StageSlice slice;
  slice.stage = stage;
  slice.batch_index = n;
  // The view's look: its colormap (made the stage's as on screen) and row scaling; the range is the
  // one the view computes, render::auto_colour_range over every head of the item.
  const ViewState& view = state.scenario().view;
  slice.colormap = render::stage_colormap(stage, state.window().colormap);
  slice.row_scale = view.weights_row_scale;
  slice.query_labels = state.result.query_tokens;
  slice.key_labels = state.result.key_tokens;
  const std::string stem = "mha-" + stage + "-batch" + std::to_string(n);
  auto add = [&](const std::string& label, const std::string& suffix, int h) {
    exporter::StageSlice s = slice;
    s.head = h;
    req.choices.push_back({label, stem + suffix, [fwd, s] { return exporter::stage_figure(*fwd, s); }});
  };
  add("head " + std::to_string(head), "-head" + std::to_string(head), head);
  add("head average", "-avg", exporter::kHeadAverage);
  add("all heads + average", "-all", exporter::kAllHeads);
  return req;
}

void export_button(AppState& state, const FigureRequest& req) {
  static std::map<std::string, DialogState> dialogs;
  DialogState& d = dialogs[req.id];
  ImGui::PushID(req.id.c_str());
  ImGui::BeginDisabled(!req.disabled_reason.empty() || req.choices.empty());
  if (ImGui::Button("Export...")) {
    d.error.clear();
    ImGui::OpenPopup("Export figure");
  }
  ImGui::EndDisabled();
  if (!req.disabled_reason.empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", req.disabled_reason.c_str());
  if (!ImGui::BeginPopupModal("Export figure", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::PopID();
    return;
  }
  ImGui::TextUnformatted(req.caption.c_str());
  if (d.choice >= int(req.choices.size())) d.choice = 0;
  for (int k = 0; k < int(req.choices.size()); ++k) {
    if (k > 0) ImGui::SameLine();
    ImGui::RadioButton(req.choices[std::size_t(k)].label.c_str(), &d.choice, k);
  }
  const std::vector<exporter::FigureFormat>& formats = exporter::figure_formats();
  for (int k = 0; k < int(formats.size()); ++k) {
    if (k > 0) ImGui::SameLine();
    ImGui::RadioButton(formats[std::size_t(k)].label.c_str(), &d.format, k);
  }
  ImGui::Checkbox("cell values", &d.values);
  ImGui::SameLine();
  ImGui::Checkbox("transparent background", &d.transparent);
  if (d.format < 0 || d.format >= int(formats.size())) d.format = 0;
  const std::string suggested =
      (req.choices.empty() ? std::string("mha-figure") : req.choices[std::size_t(d.choice)].file_stem) +
      formats[std::size_t(d.format)].extension;
  // Follow the suggestion until the user types a name of their own.
  if (ImGui::IsWindowAppearing() || d.path.empty() || d.path == d.suggested) d.path = suggested;
  d.suggested = suggested;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 28);
  ImGui::InputText("file", &d.path);
  // Browse...: the desktop's chooser (none installed: the typed name above is the way).
  static platform::FileChooser chooser;
  ImGui::SameLine();
  ImGui::BeginDisabled(chooser.busy() || platform::chooser_tool().empty());
  if (ImGui::Button("Browse...")) {
    platform::ChooserRequest r;
    r.kind = platform::ChooserRequest::Kind::save_file;
    r.title = "Export the figure as";
    r.start = d.path;
    chooser.start(r, req.id);
  }
  ImGui::EndDisabled();
  if (platform::chooser_tool().empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("no file chooser installed (zenity or kdialog): type the file name");
  if (auto answer = chooser.poll();
      answer && answer->second.status == platform::ChooserResult::Status::chosen) {
    DialogState& asked = dialogs[answer->first];
    asked.path = answer->second.path;
    const std::string f = exporter::format_from_extension(asked.path);  // the chosen name's format
    for (int k = 0; k < int(formats.size()); ++k)
      if (f == formats[std::size_t(k)].name) asked.format = k;
    asked.suggested =
        (req.choices.empty() ? std::string("mha-figure") : req.choices[std::size_t(asked.choice)].file_stem) +
        formats[std::size_t(asked.format)].extension;
  } else if (answer && answer->second.status != platform::ChooserResult::Status::cancelled) {
    d.error = answer->second.message;
  }
  if (ImGui::Button("Export") && !req.choices.empty()) {
    d.error = export_choice(req.choices[std::size_t(d.choice)],
                            {formats[std::size_t(d.format)].name, d.values, d.transparent}, d.path);
    // On failure the dialog stays open with the reason; nothing else changes.
    if (d.error.empty()) {
      std::error_code ec;  // the full path, so the user can find the file
      const std::filesystem::path full = std::filesystem::absolute(d.path, ec);
      state.status = "exported " + (ec ? d.path : full.string());
      ImGui::CloseCurrentPopup();
    }
  }
  // The figure as a PNG on the clipboard, where the session has wl-copy or xclip.
  ImGui::SameLine();
  const std::string no_png = platform::image_clipboard_missing();
  ImGui::BeginDisabled(!no_png.empty() || req.choices.empty());
  if (ImGui::Button("Copy PNG")) {
    const FigureChoice& c = req.choices[std::size_t(d.choice)];
    try {
      std::vector<std::uint8_t> png;
      if (c.drawing)
        png = exporter::render_figure("png", c.drawing(d.transparent));
      else
        png = exporter::render_figure("png", styled(c, {"png", d.values, d.transparent}).spec);
      platform::copy_png_to_clipboard(std::move(png), c.label);
      ImGui::CloseCurrentPopup();
    } catch (const Error& e) {
      d.error = e.what();
    }
  }
  ImGui::EndDisabled();
  if (!no_png.empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", no_png.c_str());
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
  if (!d.error.empty()) {
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 28);
    ImGui::TextColored(ImVec4(1, 0.38f, 0.38f, 1), "%s", d.error.c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::EndPopup();
  ImGui::PopID();
}

}  // namespace mha::app
