// Font loading and asset lookup. Every font file is read with a size cap and its table directory
// checked (export/font.hpp) before ImGui's stb_truetype sees it: a bad one falls back with the reason.
#include "fonts.hpp"

#include <imgui.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "data_dir.hpp"
#include "errors.hpp"
#include "font.hpp"

namespace fs = std::filesystem;

namespace mha::app {

namespace {

// Adds the font at `path` after validating it; "" when added, else why not.
std::string add_checked_font(const std::string& path, float pixels, const ImFontConfig& cfg,
                             const ImWchar* ranges) {
  std::vector<unsigned char> bytes;
  try {
    bytes = exporter::read_font_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  // The atlas owns (and frees) a copy made with ImGui's allocator.
  void* data = IM_ALLOC(bytes.size());
  std::memcpy(data, bytes.data(), bytes.size());
  if (ImGui::GetIO().Fonts->AddFontFromMemoryTTF(data, int(bytes.size()), pixels, &cfg, ranges)) return "";
  return path + ": ImGui could not load it";
}

}  // namespace

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
  const std::string why = fs::exists(ttf) ? add_checked_font(ttf.string(), pixels, cfg, ranges.Data)
                                          : "font " + ttf.string() + " not found";
  if (why.empty()) {
    io.Fonts->Build();
    return "";
  }
  // The system's DejaVu Sans (or its nearest) through fontconfig, else ImGui's built-in font.
  const platform::FontLookup system = platform::default_font();
  std::string system_why = system.path.empty() ? "no system font (fontconfig)" : "";
  if (system_why.empty()) system_why = add_checked_font(system.path, pixels, cfg, ranges.Data);
  if (system_why.empty()) {
    io.Fonts->Build();
    return why + ": using " + system.path + " (fontconfig)";
  }
  cfg.SizePixels = pixels;
  io.Fonts->AddFontDefault(&cfg);
  io.Fonts->Build();
  return why + "; " + system_why + ": using ImGui's built-in font";
}

std::string find_assets_dir() {
  return platform::assets_dir();
}

}  // namespace mha::app
