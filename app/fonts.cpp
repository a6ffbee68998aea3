// Font loading and asset lookup.
#include "fonts.hpp"

#include <imgui.h>

#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;

namespace mha::app {

std::string load_fonts(const std::string& assets_dir, float pixels) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  const fs::path ttf = fs::path(assets_dir) / "fonts" / "DejaVuSans.ttf";
  ImFontConfig cfg;
  cfg.OversampleH = 2;
  // Latin-1 plus the symbols the trace's formulas and notes use (…, √, ᵀ, ·, →, ≤, Σ, ′, ≠, ×, ÷).
  static ImVector<ImWchar> ranges;
  if (ranges.empty()) {
    ImFontGlyphRangesBuilder b;
    b.AddRanges(io.Fonts->GetGlyphRangesDefault());
    b.AddText(u8"…√ᵀ·→←≤≥Σσ′≠×÷∞−–—²³⁻¹αβγδθλμπ∈ℝ");
    b.AddText(u8"␣↵⇥");  // token pieces: a leading space, a newline, a tab (tokenizer/bpe.hpp)
    b.BuildRanges(&ranges);
  }
  if (fs::exists(ttf) && io.Fonts->AddFontFromFileTTF(ttf.string().c_str(), pixels, &cfg, ranges.Data)) {
    io.Fonts->Build();
    return "";
  }
  cfg.SizePixels = pixels;
  io.Fonts->AddFontDefault(&cfg);
  io.Fonts->Build();
  return "font " + ttf.string() + " not found: using ImGui's built-in font";
}

std::string find_assets_dir(const char* argv0) {
  if (const char* env = std::getenv("MHA_ASSETS_DIR")) return env;
  std::error_code ec;
  const fs::path exe = fs::canonical(fs::path(argv0), ec);
  if (!ec) {
    for (const fs::path& p : {exe.parent_path() / "assets", exe.parent_path().parent_path() / "assets",
                              exe.parent_path().parent_path() / "share" / "mha-studio" / "assets"})
      if (fs::exists(p / "presets")) return p.string();
  }
  return MHA_SOURCE_ASSETS_DIR;  // the source tree this binary was built from
}

}  // namespace mha::app
