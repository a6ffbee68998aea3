// Data lookup relative to the executable, with the source tree as the development fallback, and
// the fontconfig fallback for the font.
#include "data_dir.hpp"

#include <fontconfig/fontconfig.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace mha::platform {

namespace {

bool holds_assets(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_directory(dir / "presets", ec);
}

bool source_fallback_allowed() {
  const char* off = std::getenv("MHA_NO_SOURCE_FALLBACK");
  return !(off && std::strcmp(off, "1") == 0);
}

// fontconfig's best match for `pattern`, "" when it offers no file.
std::string fontconfig_match(const char* pattern) {
  if (!FcInit()) return "";
  std::string path;
  FcPattern* pat = FcNameParse(reinterpret_cast<const FcChar8*>(pattern));
  if (!pat) return "";
  FcConfigSubstitute(nullptr, pat, FcMatchPattern);
  FcDefaultSubstitute(pat);
  FcResult result = FcResultNoMatch;
  if (FcPattern* match = FcFontMatch(nullptr, pat, &result)) {
    FcChar8* file = nullptr;
    if (FcPatternGetString(match, FC_FILE, 0, &file) == FcResultMatch && file)
      path = reinterpret_cast<const char*>(file);
    FcPatternDestroy(match);
  }
  FcPatternDestroy(pat);
  return path;
}

}  // namespace

const char* version() {
  return MHA_VERSION;
}

std::string executable_path() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.string();
}

std::string assets_dir() {
  if (const char* env = std::getenv("MHA_ASSETS_DIR"); env && *env) return env;
  const fs::path exe = executable_path();
  if (!exe.empty()) {
    const fs::path bin = exe.parent_path();
    // MHA_DATA_FROM_BIN: the install's data folder relative to its bin folder (../share/mha-studio).
    for (const fs::path& p :
         {bin / MHA_DATA_FROM_BIN, bin.parent_path() / "assets", bin.parent_path().parent_path() / "assets"})
      if (holds_assets(p)) return p.lexically_normal().string();
  }
  if (source_fallback_allowed() && holds_assets(MHA_SOURCE_ASSETS_DIR)) return MHA_SOURCE_ASSETS_DIR;
  return "";
}

FontLookup default_font() {
  const std::string assets = assets_dir();
  const fs::path shipped = assets.empty() ? fs::path() : fs::path(assets) / "fonts" / "DejaVuSans.ttf";
  std::error_code ec;
  if (!shipped.empty() && fs::is_regular_file(shipped, ec)) return {shipped.string(), ""};
  const std::string missing = shipped.empty() ? "no assets folder found" : shipped.string() + " not found";
  const std::string system = fontconfig_match("DejaVu Sans:style=Book");
  if (system.empty()) return {"", missing + " and fontconfig offers no font"};
  return {system, missing + "; using the system font " + system + " (fontconfig)"};
}

}  // namespace mha::platform
