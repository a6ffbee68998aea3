// Font loading and asset lookup.
#include "fonts.hpp"

#include <imgui.h>

#include <filesystem>

#include "data_dir.hpp"

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
  // The system's DejaVu Sans (or its nearest) through fontconfig, else ImGui's built-in font.
  const platform::FontLookup system = platform::default_font();
  if (!system.path.empty() && io.Fonts->AddFontFromFileTTF(system.path.c_str(), pixels, &cfg, ranges.Data)) {
    io.Fonts->Build();
    return "font " + ttf.string() + " not found: using " + system.path + " (fontconfig)";
  }
  cfg.SizePixels = pixels;
  io.Fonts->AddFontDefault(&cfg);
  io.Fonts->Build();
  return "font " + ttf.string() + " not found: using ImGui's built-in font";
}

std::string find_assets_dir() {
  return platform::assets_dir();
}

}  // namespace mha::app
