// The window layout: menu bar, controls (left), the views as tabs (centre), the inspector (right),
// a status bar. Shared by the app and the headless UI test; it never touches GL.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app_state.hpp"
#include "panels/panels.hpp"
#include "studio_names.hpp"
#include "textures.hpp"

namespace mha::gpu {
class GpuBackend;
}

namespace mha::app {

struct FileUi;  // file_actions.hpp: the chooser, Recent, dropped paths, a model loading

struct UiEnv {
  std::vector<std::string> presets;  // paths of assets/presets/*.json
  std::string scenario_path;         // the file Save writes to ("" = ask)
  bool quit_requested = false;
  int shown_tab = -1;  // the view the tab bar showed last frame (it follows the window's tab)
  // How far the shown view's items reached past its right edge and below its bottom (where it
  // scrolls) last frame, in pixels: a line cut at the right shows as overflow_right > 0.
  float view_overflow_right = 0, view_overflow_bottom = 0;
  // Large L view: its GPU backend on a context of its own (main.cpp; null: none) and its L = S.
  gpu::GpuBackend* large_gpu = nullptr;
  std::int64_t large_len = 1024;
  bool large_causal = false;
  LargeDevice large_device = LargeDevice::automatic;
  // What each panel keeps between frames (panels/panels.hpp).
  Panels panels;
  std::shared_ptr<FileUi> files;  // made on first use
  std::string assets_dir;         // presets, models, lessons (a lesson's `open` paths are relative to it)
};

// Saves to the scenario's file, or asks for one where there is none (presets are read-only).
void save(AppState& state, UiEnv& env);
void draw_ui(AppState& state, Textures& textures, UiEnv& env);
// Dark default theme, or the high-contrast presenter theme (light background, strong text).
void apply_theme(bool presenter);
// Preset files in `dir`, sorted; empty if the folder is missing.
std::vector<std::string> list_presets(const std::string& dir);

}  // namespace mha::app
