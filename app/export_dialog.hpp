// The Export button and its dialog: one head, the head average or every head of a stage, as PNG or
// SVG, rendered by the GL-free exporter (export/), so the app's images are `mha export`'s.
#pragma once

#include <string>

#include "app_state.hpp"

namespace mha::app {

// A button that opens the dialog for `stage` of the current result; `head` is the head shown.
void export_button(AppState& state, const std::string& stage, int head);

}  // namespace mha::app
