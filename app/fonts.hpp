// The shipped TTF font (assets/fonts, DejaVu Sans) at a pixel size; falls back to ImGui's built-in
// font with a message when the file is missing.
#pragma once

#include <string>

namespace mha::app {

// Clears the atlas and loads the UI font at `pixels`. Returns "" or a warning for the status bar.
std::string load_fonts(const std::string& assets_dir, float pixels);
// Where assets/ is: $MHA_ASSETS_DIR, next to the executable's ../share, or the source tree.
std::string find_assets_dir(const char* argv0);

}  // namespace mha::app
