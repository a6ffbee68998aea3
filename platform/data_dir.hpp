// Where the programs find their data at run time: next to the executable for an installed copy
// (<prefix>/bin/mha -> <prefix>/share/mha-studio), else the source tree it was built from. No GUI,
// no GL: `mha` and `mha-studio` share it.
#pragma once

#include <string>

namespace mha::platform {

// The project version from CMake ("0.1.0").
const char* version();

// The running executable (/proc/self/exe), "" where it cannot be read.
std::string executable_path();

// The folder holding fonts/, presets/ and models/: $MHA_ASSETS_DIR if set; else
// <exe>/../share/mha-studio (an installed copy); else <exe>/../assets or <exe>/../../assets; else
// the source tree's assets/ this binary was built from, unless MHA_NO_SOURCE_FALLBACK=1 (used by
// the install test, so that an installed copy proves it needs no source tree). "" when none holds
// presets/.
std::string assets_dir();

struct FontLookup {
  std::string path;  // a TTF/OTF file, "" when none was found at all
  std::string note;  // "" for the shipped font, else what was used instead and why
};
// The figure and UI font: <assets>/fonts/DejaVuSans.ttf, else the system's match for
// "DejaVu Sans" through fontconfig (the note names the file used).
FontLookup default_font();

}  // namespace mha::platform
