// Drives the real UI code without a window: an ImGui context with DisplaySize set and the fonts
// built, NullTextures for textures, and a fake mouse. Shared by the headless UI tests.
#pragma once

#include <imgui.h>

#include <chrono>
#include <functional>
#include <thread>

#include "app_state.hpp"
#include "fonts.hpp"
#include "ui.hpp"

namespace mha::test {

struct HeadlessUi {
  mha::app::NullTextures textures;
  mha::app::UiEnv env;
  double time = 0;

  explicit HeadlessUi(float w = 1280, float h = 720) {
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    io.DisplaySize = ImVec2(w, h);
    mha::app::load_fonts(MHA_ASSETS_DIR, 17);
    unsigned char* px;
    int tw, th;
    io.Fonts->GetTexDataAsRGBA32(&px, &tw, &th);  // the atlas must exist before NewFrame
    env.presets = mha::app::list_presets(std::string(MHA_ASSETS_DIR) + "/presets");
    env.assets_dir = MHA_ASSETS_DIR;
  }
  ~HeadlessUi() { ImGui::DestroyContext(); }
  HeadlessUi(const HeadlessUi&) = delete;
  HeadlessUi& operator=(const HeadlessUi&) = delete;

  // One frame; `mouse` places the pointer (and presses it when `down`). Returns vertices drawn.
  int frame(mha::studio::AppState& state, ImVec2 mouse = ImVec2(-1, -1), bool down = false) {
    ImGuiIO& io = ImGui::GetIO();
    io.DeltaTime = 1.0f / 60.0f;
    time += io.DeltaTime;
    io.MousePos = mouse;
    io.MouseDown[0] = down;
    ImGui::NewFrame();
    state.tick(time);
    mha::app::draw_ui(state, textures, env);
    ImGui::Render();
    return ImGui::GetDrawData()->TotalVtxCount;
  }

  // Frames until the background compute (if any) has landed.
  void settle(mha::studio::AppState& state) {
    for (int i = 0; i < 2000 && (state.computer.busy() || state.stale) && state.errors.empty(); ++i) {
      frame(state);
      if (state.computer.busy()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    frame(state);
  }
};

}  // namespace mha::test
