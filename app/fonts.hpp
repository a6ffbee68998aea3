// The shipped TTF font (assets/fonts, DejaVu Sans) at a pixel size; when the file is missing, the
// system's DejaVu Sans through fontconfig, else ImGui's built-in font, with a message.
#pragma once

#include <string>

namespace mha::app {

// Clears the atlas and loads the UI font at `pixels`. Returns "" or a warning for the status bar.
std::string load_fonts(const std::string& assets_dir, float pixels);
// Where assets/ is: $MHA_ASSETS_DIR, <exe>/../share/mha-studio, or the source tree (data_dir.hpp).
std::string find_assets_dir();

}  // namespace mha::app
