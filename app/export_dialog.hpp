// The Export button and its dialog, for any heatmap view: the view says what can be exported (a
// FigureRequest of named choices, each building an exporter::StageFigure); the dialog picks a choice,
// a format (exporter::figure_formats()) and a file, and writes it with the GL-free exporter's
// write_figure (export/), so the app's images are `mha export`'s. A failure (unwritable folder,
// full disk, bad name) is shown; the scenario is kept.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "app_state.hpp"
#include "heatmap_export.hpp"
#include "rope_export.hpp"
#include "stage_export.hpp"
#include "studio_names.hpp"

namespace mha::app {

struct FigureChoice {
  std::string label;                            // radio button: "head 3", "all heads + average"
  std::string file_stem;                        // suggested file name, without the extension
  std::function<exporter::StageFigure()> make;  // builds the figure; may throw mha::Error
  // A free-form figure instead (the reshape figure: an image format only); `make` is then unused.
  std::function<exporter::Drawing(bool transparent)> drawing = nullptr;
};

struct FigureRequest {
  std::string id;       // unique per view ("heads", "compare"): the button's and the popup's ImGui id
  std::string caption;  // the dialog's first line: what is exported
  std::vector<FigureChoice> choices;
  std::string disabled_reason;  // non-empty: the button is disabled and this says why on hover
};

// What the dialog adds to a figure: the format and the look.
struct ExportOptions {
  std::string format = "png";  // a name of exporter::figure_formats()
  bool values = false, transparent = false;
};

// Builds `choice`'s figure and writes it to `path`. Returns "" on success, else the message to show
// (a bad stage, an unwritable folder, a full disk, CSV of a grid); it never throws and changes no
// app state. The dialog's Export button.
std::string export_choice(const FigureChoice& choice, const ExportOptions& options, const std::string& path);

// A button that opens the dialog for `request`.
void export_button(AppState& state, const FigureRequest& request);

// The RoPE figure (export/rope_export.hpp) of head `head` of the layer shown: its scores without and
// with the rotation and their mean by distance, an image format only. Disabled without a model
// with rotary positions.
FigureRequest rope_request(const AppState& state, int head);

// Heads-style request for a per-head stage of the current result: head `head`, the head average, or
// every head with the average as a grid, in the Heads view's colours (its colormap for the stage,
// its row scaling, its colour range). exporter::kRopeStage gives rope_request's.
FigureRequest stage_request(const AppState& state, const std::string& stage, int head);
inline void export_button(AppState& state, const std::string& stage, int head) {
  export_button(state, stage_request(state, stage, head));
}

}  // namespace mha::app
