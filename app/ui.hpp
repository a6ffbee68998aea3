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
  int select_tab = -1;  // set to force a tab this frame (command line, tests)
  int shown_tab = -1;   // the tab the tab bar showed last frame: a panel that sets view.tab opens it
  // Large L view: its GPU backend on a context of its own (main.cpp; null: none) and its L = S.
  gpu::GpuBackend* large_gpu = nullptr;
  std::int64_t large_len = 1024;
  bool large_causal = false;
  LargeDevice large_device = LargeDevice::automatic;
  // Layout: the side panels shown or collapsed, focus mode (the view alone), the keys overlay.
  // Until the user shows or hides a panel, the layout follows the window: a side panel is shown
  // only where the view keeps room beside it at the current font size (a projector at 2x font
  // opens on the view alone; [ and ] bring the panels back).
  bool show_controls = true, show_inspector = true, focus = false, show_keys = false;
  bool layout_chosen = false;
  // What each panel keeps between frames (panels/panels.hpp).
  Panels panels;
  std::shared_ptr<FileUi> files;  // made on first use
};

// The keys the app answers to, as the `?` overlay lists them: {key, what it does}.
const std::vector<std::pair<const char*, const char*>>& key_help();

// Tabs by ViewTab number (studio/scenario.hpp); kTabOrder is the order the tab bar shows them in.
constexpr int kTabCount = kViewTabCount;
constexpr int kAttentionFileTab = int(ViewTab::attention_file);  // a saved attention tensor, read-only
// "Pipeline", "Reshape", "Heads", "Mask", "Compare", "Complexity", "Large L", "Attention file",
// "Overview", "Token lines"
extern const char* const kTabNames[kTabCount];
extern const int kTabOrder[kTabCount];

void draw_ui(AppState& state, Textures& textures, UiEnv& env);
// Dark default theme, or the high-contrast presenter theme (light background, strong text).
void apply_theme(bool presenter);
// Preset files in `dir`, sorted; empty if the folder is missing.
std::vector<std::string> list_presets(const std::string& dir);

}  // namespace mha::app
