// File > Export lesson...: a lesson as a handout, an A4 PDF or a folder of Markdown and PNG figures,
// written by the same code as `mha lesson-export` (handout/lesson_handout.hpp). The lesson is walked
// on a state of its own off the UI thread, so the work on screen is not touched; a failure (an
// unknown or broken lesson, an unwritable path, a full disk) is shown in the dialog and nothing is
// lost.
#pragma once

#include <string>

#include "app_state.hpp"
#include "studio_names.hpp"
#include "ui.hpp"

namespace mha::app {

// Writes the handout of the lesson NAME (assets/lessons) or a lesson file's path to `out`: a .pdf
// file, or a folder (a path ending in '/', or `markdown`). Returns "" or the message to show; it
// never throws and changes no app state. The dialog's Export button and a script's lesson-export.
std::string export_lesson(const std::string& assets_dir, const std::string& name_or_path,
                          const std::string& out, bool markdown, std::string* summary = nullptr);

// Opens the dialog at the next frame, on the open lesson (else the first).
void ask_export_lesson(AppState& state);
// Once a frame: the dialog, while it is open.
void draw_lesson_export_dialog(AppState& state, UiEnv& env);

}  // namespace mha::app
