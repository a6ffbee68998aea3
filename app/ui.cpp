// Layout and menus. Panels are in app/panels/, one per file; this file only places them.
#include "ui.hpp"

#include <imgui.h>

#include <algorithm>
#include <filesystem>

#include "clipboard_image.hpp"
#include "errors.hpp"
#include "file_actions.hpp"
#include "heatmap.hpp"
#include "model_cache.hpp"
#include "panels/panels.hpp"

namespace mha::app {

const char* const kTabNames[kTabCount] = {"Pipeline", "Reshape",    "Heads",   "Mask",
                                          "Compare",  "Complexity", "Large L", "Attention file",
                                          "Overview", "Token lines"};
const int kTabOrder[kTabCount] = {
    int(ViewTab::pipeline),    int(ViewTab::reshape),       int(ViewTab::heads),   int(ViewTab::overview),
    int(ViewTab::token_lines), int(ViewTab::mask),          int(ViewTab::compare), int(ViewTab::complexity),
    int(ViewTab::large_l),     int(ViewTab::attention_file)};

std::vector<std::string> list_presets(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

void apply_theme(bool presenter) {
  if (!presenter) {
    ImGui::StyleColorsDark();
    ImGui::GetStyle().FrameRounding = 3;
    return;
  }
  // High contrast for projectors: white background, black text, strong borders.
  ImGui::StyleColorsLight();
  ImGuiStyle& s = ImGui::GetStyle();
  s.FrameRounding = 3;
  s.FrameBorderSize = 1;
  s.Colors[ImGuiCol_Text] = ImVec4(0, 0, 0, 1);
  s.Colors[ImGuiCol_WindowBg] = ImVec4(1, 1, 1, 1);
  s.Colors[ImGuiCol_ChildBg] = ImVec4(1, 1, 1, 1);
  s.Colors[ImGuiCol_Border] = ImVec4(0, 0, 0, 0.8f);
  s.Colors[ImGuiCol_FrameBg] = ImVec4(0.92f, 0.92f, 0.92f, 1);
  s.Colors[ImGuiCol_TextDisabled] = ImVec4(0.25f, 0.25f, 0.25f, 1);
}

namespace {

// Save to the current file, or ask for one when there is none (presets are read-only).
void save(AppState& state, UiEnv& env) {
  if (env.scenario_path.empty()) {
    ask_save(state, env);
    return;
  }
  try {
    save_scenario(env.scenario_path, state.scenario());
    state.status = "saved " + env.scenario_path;
  } catch (const Error& e) {
    state.errors["file"] = e.what();
  }
}

void file_menu(AppState& state, UiEnv& env) {
  if (!ImGui::BeginMenu("File")) return;
  if (ImGui::BeginMenu("Open preset")) {
    for (const std::string& p : env.presets) {
      const std::string name = std::filesystem::path(p).stem().string();
      if (ImGui::MenuItem(name.c_str())) {
        try {
          state.load(load_scenario(p), "open preset " + name);
          env.scenario_path.clear();  // presets are read-only: Save asks for a path
          state.status = "opened preset " + name;
        } catch (const Error& e) {
          state.errors["file"] = e.what();
        }
      }
    }
    ImGui::EndMenu();
  }
  if (ImGui::MenuItem("Open...", "Ctrl+O")) ask_open(state, env);
  if (ImGui::MenuItem("Open model folder...")) ask_open_folder(state, env);
  recent_menu(state, env);
  if (ImGui::MenuItem("Save", "Ctrl+S")) save(state, env);
  if (ImGui::MenuItem("Save as...")) ask_save(state, env);
  ImGui::Separator();
  if (ImGui::MenuItem("Quit", "Ctrl+Q")) env.quit_requested = true;
  ImGui::EndMenu();
}

// Edit > Copy: the values of the heatmap last under the pointer, as text or as a PNG image.
void copy_menu_items() {
  const std::string shown = current_heatmap_name();
  const bool any = !shown.empty();
  ImGui::Separator();
  if (ImGui::MenuItem("Copy heatmap values (TSV)", "Ctrl+C", false, any)) copy_current_heatmap(CopyAs::tsv);
  if (ImGui::MenuItem("Copy heatmap values (numpy)", nullptr, false, any))
    copy_current_heatmap(CopyAs::numpy);
  const std::string no_png = platform::image_clipboard_missing();
  if (ImGui::MenuItem("Copy heatmap as PNG image", nullptr, false, any && no_png.empty()))
    copy_current_heatmap(CopyAs::png);
  if (!no_png.empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", no_png.c_str());
  if (any) {
    ImGui::TextDisabled("  the heatmap last under the pointer: %s", shown.c_str());
  } else {
    ImGui::TextDisabled("  point at a heatmap first (or right-click one)");
  }
}

void status_bar(AppState& state) {
  const Result& r = state.result;
  if (const ModelLoadProgress load = model_load_progress(); load.loading) {  // a load on the worker
    ImGui::Text("loading model %s: %.0f%%", load.model.c_str(), 100.0 * load.fraction);
    ImGui::SameLine();
    if (ImGui::SmallButton("Cancel")) cancel_model_load();
    state.animating = true;
  } else if (state.computer.busy()) {
    const char spin[] = "|/-\\";
    const double done = state.computer.progress();
    if (done > 0)
      ImGui::Text("%c computing... %.0f%%  (showing the last result, marked stale)",
                  spin[int(ImGui::GetTime() * 8) % 4], 100.0 * done);
    else
      ImGui::Text("%c computing...  (showing the last result, marked stale)",
                  spin[int(ImGui::GetTime() * 8) % 4]);
  } else if (state.stale && !state.errors.empty()) {
    ImGui::TextColored(ImVec4(1, 0.55f, 0.2f, 1),
                       "stale: the inputs are invalid; showing the last valid result");
  } else if (r.valid()) {
    const Dims& d = r.forward->dims;
    ImGui::Text("N=%lld L=%lld S=%lld E=%lld H=%lld d_k=%lld  |  %s path, %.2f ms%s", (long long)d.N,
                (long long)d.L, (long long)d.S, (long long)d.E, (long long)d.H, (long long)d.d_k,
                backend_name(r.forward->backend), r.compute_ms,
                r.mask_rows_only       ? ", edited rows only"
                : r.heads_only         ? ", edited heads only"
                : r.projections_reused ? ", q k v kept"
                                       : "");
    if ((r.mask_rows_only || r.heads_only || r.projections_reused) && ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "%s", r.mask_rows_only
                    ? "A mask edit: only the query rows whose mask changed were recomputed (every "
                      "head).\nThe values equal a full forward's, bit for bit."
                : r.heads_only ? "A weights edit: only the heads whose weights changed were recomputed (then "
                                 "the head\naverage and the output). The values equal a full forward's, bit "
                                 "for bit."
                               : "q, k and v were kept from the last result: only the tokens whose inputs "
                                 "changed were\nprojected again, then every head and the output. The values "
                                 "equal a full forward's, bit for bit.");
  } else {
    ImGui::TextUnformatted("no result yet");
  }
  if (r.valid() && !r.forward->fallback_reason.empty()) {  // the GPU was asked for and not used: why
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(1, 0.55f, 0.2f, 1), "  |  GPU not used: computed on the CPU (hover for why)");
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
      ImGui::TextUnformatted(r.forward->fallback_reason.c_str());
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
  }
  if (r.valid() && r.forward->nonfinite_inputs > 0) {  // computed as torch does, but said out loud
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(1.0f, 0.25f, 0.8f, 1.0f), "  |  %lld NaN/Inf values in the inputs or weights",
                       (long long)r.forward->nonfinite_inputs);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("torch propagates them: NaN rows here come from the inputs, not only from masking");
  }
  if (!state.status.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("  |  %s", state.status.c_str());
  }
}

}  // namespace

const std::vector<std::pair<const char*, const char*>>& key_help() {
  static const std::vector<std::pair<const char*, const char*>> keys = {
      {"1 - 9, 0", "the views, in the tab bar's order (0: the tenth)"},
      {"Left / Right", "the stage shown: q, k, v, scores ... attn_weights, context, output"},
      {"Up / Down", "the head"},
      {"PgUp / PgDn", "the model's layer"},
      {"F", "focus: the view alone (Esc leaves)"},
      {"[  ]", "the controls / the inspector panel"},
      {"P", "presenter mode"},
      {"Ctrl+Z / Ctrl+Y", "undo / redo"},
      {"Ctrl+O / Ctrl+S", "open / save a scenario (or drop a file on the window)"},
      {"Ctrl+C", "copy the heatmap under the pointer as TSV (right-click: more)"},
      {"Ctrl+Q", "quit"},
      {"?", "this list"},
  };
  return keys;
}

void draw_ui(AppState& state, Textures& textures, UiEnv& env) {
  ImGuiIO& io = ImGui::GetIO();
  // Keyboard: Ctrl+Z / Ctrl+Y (and Ctrl+Shift+Z) undo/redo, unless a text field has focus.
  // ImGui 1.86 indexes keys by the backend's codes: GetKeyIndex maps its named keys, and GLFW's
  // letter codes are their ASCII capitals ('O', 'Q').
  const bool ctrl = io.KeyCtrl && !io.WantTextInput;
  if (ctrl) {
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Z))) io.KeyShift ? state.redo() : state.undo();
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Y))) state.redo();
    if (ImGui::IsKeyPressed('Q')) env.quit_requested = true;
  }
  // PgUp / PgDn: the model's layer shown in every view.
  if (!io.WantTextInput && state.scenario().has_model()) {
    const int step = ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_PageDown)) ? 1
                     : ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_PageUp)) ? -1
                                                                                : 0;
    if (step) state.apply(choose_layer(std::max<std::int64_t>(0, state.scenario().layer + step)));
  }

  // Presenting: 1-9 and 0 tabs, arrows step through stages and heads, F focus, P presenter, [ and ] the
  // side panels, ? the list of keys. Plain keys only when no text field has focus.
  if (!io.WantTextInput && !io.KeyCtrl) {
    ViewState& v = state.view();
    for (int k = 0; k < 10 && k < kTabCount; ++k)
      if (ImGui::IsKeyPressed(k < 9 ? '1' + k : '0')) env.select_tab = kTabOrder[k];
    if (ImGui::IsKeyPressed('F')) env.focus = !env.focus;
    if (ImGui::IsKeyPressed('P')) v.presenter = !v.presenter;
    if (ImGui::IsKeyPressed('[')) env.show_controls = !env.show_controls, env.layout_chosen = true;
    if (ImGui::IsKeyPressed(']')) env.show_inspector = !env.show_inspector, env.layout_chosen = true;
    if (ImGui::IsKeyPressed('/') && io.KeyShift) env.show_keys = !env.show_keys;
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape))) env.show_keys = env.focus = false;
    if (state.result.valid()) {
      const int H = int(state.result.forward->dims.H);
      if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_UpArrow))) v.sel_head = std::max(0, v.sel_head - 1);
      if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_DownArrow)))
        v.sel_head = std::min(H - 1, v.sel_head + 1);
    }
    static const char* const kStepStages[] = {
        "q", "k", "v", "scores", "scores_scaled", "scores_masked", "attn_weights", "context", "output"};
    const int step = ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))  ? 1
                     : ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow)) ? -1
                                                                                   : 0;
    if (step) {
      const int n = int(sizeof kStepStages / sizeof kStepStages[0]);
      int at = 6;  // attn_weights when the current stage is not in the list
      for (int k = 0; k < n; ++k)
        if (v.stage == kStepStages[k]) at = k;
      v.stage = kStepStages[std::clamp(at + step, 0, n - 1)];
    }
  }

  take_hover(state.view());  // what the pointer was over last frame, for every view to mark
  // A tab asked for (command line, tests, the menu) is the view's at once; a panel that opened another
  // tab (the Overview's tiles open the Heads view) set view.tab, and the tab bar follows.
  if (env.select_tab >= 0)
    state.view().tab = env.select_tab;
  else if (env.shown_tab >= 0 && state.view().tab != env.shown_tab)
    env.select_tab = state.view().tab;

  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  // No background: the frame is cleared to WindowBg (main.cpp) instead, which saves a software
  // rasterizer (llvmpipe) a blended pass over every pixel of the window.
  ImGui::Begin("MHA Studio", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_MenuBar | ImGuiWindowFlags_NoBackground |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoSavedSettings);
  if (ImGui::BeginMenuBar()) {
    file_menu(state, env);
    if (ImGui::BeginMenu("Edit")) {
      if (ImGui::MenuItem("Undo", "Ctrl+Z", false, state.history.can_undo())) state.undo();
      if (ImGui::MenuItem("Redo", "Ctrl+Y", false, state.history.can_redo())) state.redo();
      copy_menu_items();
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("View")) {
      char key[8];
      int n = 0;
      for (const int i : kTabOrder) {
        std::snprintf(key, sizeof key, "%d", ++n);
        if (ImGui::MenuItem(kTabNames[i], n <= 9 ? key : nullptr, state.scenario().view.tab == i))
          env.select_tab = i;
      }
      ImGui::Separator();
      if (ImGui::MenuItem("Controls panel", "[", &env.show_controls)) env.layout_chosen = true;
      if (ImGui::MenuItem("Inspector panel", "]", &env.show_inspector)) env.layout_chosen = true;
      ImGui::MenuItem("Focus: the view alone", "F", &env.focus);
      ImGui::MenuItem("Presenter mode", "P", &state.view().presenter);
      ImGui::MenuItem("Keys", "?", &env.show_keys);
      ImGui::EndMenu();
    }
    ImGui::EndMenuBar();
  }
  if (ctrl && ImGui::IsKeyPressed('O')) ask_open(state, env);
  if (ctrl && ImGui::IsKeyPressed('S')) save(state, env);
  draw_file_ui(state, env);
  if (const std::optional<std::string> m = platform::take_image_clipboard_message()) state.status = *m;
  if (const std::string m = take_copy_message(); !m.empty()) state.status = m;

  const float font = ImGui::GetFontSize();
  const float status_h = ImGui::GetFrameHeightWithSpacing();
  const float h = ImGui::GetContentRegionAvail().y - status_h;
  const float left_w = std::min(font * 19, io.DisplaySize.x * 0.26f);
  const float right_w = std::min(font * 22, io.DisplaySize.x * 0.26f);

  if (!env.layout_chosen) {  // widths in font sizes: the panels' own plus a view that stays readable
    env.show_controls = io.DisplaySize.x >= font * 44;
    env.show_inspector = io.DisplaySize.x >= font * 68;
  }
  const bool left = env.show_controls && !env.focus, right = env.show_inspector && !env.focus;
  if (left) {
    ImGui::BeginChild("controls", ImVec2(left_w, h), true);
    if (draw_controls(env.panels, state)) ask_open_folder(state, env);  // loads in the background
    ImGui::EndChild();
    ImGui::SameLine();
  }
  const float centre_w =
      right ? ImGui::GetContentRegionAvail().x - right_w - ImGui::GetStyle().ItemSpacing.x : 0.0f;
  ImGui::BeginChild("views", ImVec2(centre_w, h), true);
  // Tabs keep their full names; when they do not fit, the bar scrolls (arrows at its end).
  if (ImGui::BeginTabBar("views-tabs", ImGuiTabBarFlags_FittingPolicyScroll)) {
    for (const int i : kTabOrder) {
      const ImGuiTabItemFlags flags = env.select_tab == i ? ImGuiTabItemFlags_SetSelected : 0;
      if (ImGui::BeginTabItem(kTabNames[i], nullptr, flags)) {
        if (env.select_tab < 0 || env.select_tab == i) state.view().tab = i;
        env.shown_tab = i;
        ImGui::BeginChild("view-body");
        if (i == 6) {  // Large L needs no CPU trace: it computes its own rows on the GPU
          draw_large(env.panels, state, textures, env.large_gpu, &env.large_len, &env.large_causal,
                     &env.large_device);
        } else if (i == kAttentionFileTab) {  // a file's weights, independent of the scenario
          draw_attention_file(env.panels, textures);
        } else if (!state.result.valid()) {
          ImGui::TextWrapped("No result to show yet. The controls on the left say what is wrong.");
        } else {
          switch (i) {
            case 0: draw_pipeline(env.panels, state, textures); break;
            case 1: draw_reshape(env.panels, state, textures); break;
            case 2: draw_heads(env.panels, state, textures); break;
            case 3: draw_mask_editor(env.panels, state, textures); break;
            case 4: draw_compare(env.panels, state, textures); break;
            case 5: draw_complexity(state); break;
            case int(ViewTab::overview): draw_overview(env.panels, state, textures); break;
            case int(ViewTab::token_lines): draw_token_lines(env.panels, state); break;
          }
        }
        ImGui::EndChild();
        ImGui::EndTabItem();
      }
    }
    ImGui::EndTabBar();
  }
  env.select_tab = -1;
  ImGui::EndChild();
  if (right) {
    ImGui::SameLine();
    ImGui::BeginChild("inspector", ImVec2(0, h), true);
    draw_inspector(state);
    ImGui::EndChild();
  }
  status_bar(state);
  if (!left || !right) {  // a collapsed panel says how to bring it back, shorter where the line is full
    ImGui::SameLine();
    char hint[64];
    std::snprintf(hint, sizeof hint, "  |  %s%s? keys", left ? "" : "[ controls  ",
                  right ? "" : "] inspector  ");
    if (ImGui::CalcTextSize(hint).x > ImGui::GetContentRegionAvail().x)
      std::snprintf(hint, sizeof hint, "  |  %s%s? keys", left ? "" : "[ ", right ? "" : "] ");
    ImGui::TextDisabled("%s", hint);
  }
  if (env.show_keys) {  // the keys overlay, over the views
    ImGui::SetNextWindowPos(ImVec2(io.DisplaySize.x * 0.5f, io.DisplaySize.y * 0.5f), ImGuiCond_Always,
                            ImVec2(0.5f, 0.5f));
    ImGui::SetNextWindowBgAlpha(0.95f);
    if (ImGui::Begin("Keys", &env.show_keys,
                     ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse |
                         ImGuiWindowFlags_NoSavedSettings) &&
        ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg)) {
      for (const auto& [k, what] : key_help()) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(k);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(what);
      }
      ImGui::EndTable();
    }
    ImGui::End();
  }
  ImGui::End();
}

}  // namespace mha::app
