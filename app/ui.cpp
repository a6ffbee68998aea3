// Layout and menus. Panels are in app/panels/, one per file; this file only places them.
#include "ui.hpp"

#include <imgui.h>
#include <imgui_internal.h>

#include <algorithm>
#include <cfloat>
#include <filesystem>

#include "clipboard_image.hpp"
#include "commands.hpp"
#include "errors.hpp"
#include "file_actions.hpp"
#include "heatmap.hpp"
#include "lesson_export_dialog.hpp"
#include "lessons.hpp"
#include "model_cache.hpp"
#include "panels/panels.hpp"

namespace mha::app {

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

void save(AppState& state, UiEnv& env) {
  if (env.scenario_path.empty()) {
    ask_save(state, env);
    return;
  }
  try {
    save_scenario(env.scenario_path, state.scenario(), state.window().tab);
    state.status = "saved " + env.scenario_path;
  } catch (const Error& e) {
    state.errors["file"] = e.what();
  }
}

namespace {

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
  if (ImGui::MenuItem("Check my implementation...")) ask_check(state, env);
  if (ImGui::MenuItem("Export lesson...")) ask_export_lesson(state);
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

// One part of the status line: shown while the line has room, the least important dropped first.
struct StatusPart {
  StatusPart(std::string t, ImVec4 c, int r, std::string tip = "", std::vector<std::string> s = {})
      : text(std::move(t)), colour(c), rank(r), tooltip(std::move(tip)), shrink(std::move(s)) {}
  std::string text;
  ImVec4 colour;
  int rank;                         // 0: always shown; larger: dropped sooner
  std::string tooltip;              // "" for none
  std::vector<std::string> shrink;  // a prediction's tokens: it drops its least likely ones to fit
};

std::vector<StatusPart> status_parts(AppState& state) {
  const Result& r = state.result;
  const ImVec4 normal = ImGui::GetStyle().Colors[ImGuiCol_Text];
  const ImVec4 dim = ImGui::GetStyle().Colors[ImGuiCol_TextDisabled];
  const ImVec4 warn(1, 0.55f, 0.2f, 1);
  char buf[256];
  std::vector<StatusPart> parts;
  if (state.computer.busy()) {
    const char spin[] = "|/-\\";
    const double done = state.computer.progress();
    if (done > 0)
      std::snprintf(buf, sizeof buf, "%c computing... %.0f%%", spin[int(ImGui::GetTime() * 8) % 4],
                    100.0 * done);
    else
      std::snprintf(buf, sizeof buf, "%c computing...", spin[int(ImGui::GetTime() * 8) % 4]);
    parts.push_back({buf, normal, 0, ""});
    parts.push_back({"(showing the last result, marked stale)", dim, 3, ""});
  } else if (state.stale && !state.errors.empty()) {
    parts.push_back({"stale: the inputs are invalid; showing the last valid result", warn, 0, ""});
  } else if (r.valid()) {
    const Dims& d = r.forward->dims;
    std::snprintf(buf, sizeof buf, "N=%lld L=%lld S=%lld E=%lld H=%lld d_k=%lld", (long long)d.N,
                  (long long)d.L, (long long)d.S, (long long)d.E, (long long)d.H, (long long)d.d_k);
    parts.push_back({buf, normal, 0, ""});
    std::snprintf(buf, sizeof buf, "%s path, %.2f ms%s", backend_name(r.forward->backend), r.compute_ms,
                  r.mask_rows_only       ? ", edited rows only"
                  : r.heads_only         ? ", edited heads only"
                  : r.projections_reused ? ", q k v kept"
                                         : "");
    parts.push_back(
        {buf, normal, 2,
         r.mask_rows_only ? "A mask edit: only the query rows whose mask changed were recomputed (every "
                            "head).\nThe values equal a full forward's, bit for bit."
         : r.heads_only   ? "A weights edit: only the heads whose weights changed were recomputed (then "
                            "the head\naverage and the output). The values equal a full forward's, bit "
                            "for bit."
         : r.projections_reused ? "q, k and v were kept from the last result: only the tokens whose inputs "
                                  "changed were\nprojected again, then every head and the output. The values "
                                  "equal a full forward's, bit for bit."
                                : ""});
  } else {
    parts.push_back({"no result yet", normal, 0, ""});
  }
  if (r.valid() && !r.forward->fallback_reason.empty())  // the GPU was asked for and not used: why
    parts.push_back(
        {"GPU not used: computed on the CPU (hover for why)", warn, 1, r.forward->fallback_reason});
  if (r.valid() && r.forward->nonfinite_inputs > 0) {  // computed as torch does, but said out loud
    std::snprintf(buf, sizeof buf, "%lld NaN/Inf values in the inputs or weights",
                  (long long)r.forward->nonfinite_inputs);
    parts.push_back({buf, ImVec4(1.0f, 0.25f, 0.8f, 1.0f), 1,
                     "torch propagates them: NaN rows here come from the inputs, not only from masking"});
  }
  if (!state.status.empty()) parts.push_back({state.status, dim, 4, ""});
  return parts;
}

// The status line: its parts in order, each while the line has room; those that do not fit are
// dropped, the least important (the highest rank) first, so the line never runs off the window.
void status_bar(AppState& state, const std::string& hint, const std::vector<StripLine>& strip, bool light) {
  if (const ModelLoadProgress load = model_load_progress(); load.loading) {  // a load on the worker
    ImGui::Text("loading model %s: %.0f%%", load.model.c_str(), 100.0 * load.fraction);
    ImGui::SameLine();
    if (ImGui::SmallButton("Cancel")) cancel_model_load();
    state.animating = true;
    return;
  }
  std::vector<StatusPart> parts = status_parts(state);
  // The presenter strip's prediction and what-ifs lead the line (the sizes and the path are dropped
  // first); its errors, a line each, were drawn above it.
  std::vector<StatusPart> lead;
  for (const StripLine& l : strip) {
    if (l.kind == StripLine::prediction)
      lead.push_back({l.text, ImGui::GetStyle().Colors[ImGuiCol_Text], 0, l.text, l.parts});
    else if (l.kind == StripLine::what_if)
      lead.push_back({l.text, light ? ImVec4(0.65f, 0.3f, 0.0f, 1) : ImVec4(1.0f, 0.55f, 0.1f, 1), 1,
                      l.parts.empty() ? "" : l.parts.front()});
  }
  if (!lead.empty()) {
    for (StatusPart& p : parts) p.rank = std::max(p.rank, 2);
    parts.insert(parts.begin(), lead.begin(), lead.end());
  }
  if (!hint.empty()) parts.push_back({hint, ImGui::GetStyle().Colors[ImGuiCol_TextDisabled], 5, ""});
  const char* const sep = "  |  ";
  const float sep_w = ImGui::CalcTextSize(sep).x, avail = ImGui::GetContentRegionAvail().x;
  auto width = [&](const std::vector<StatusPart>& ps) {
    float w = 0;
    for (std::size_t i = 0; i < ps.size(); ++i)
      w += (i ? sep_w : 0) + ImGui::CalcTextSize(ps[i].text.c_str()).x;
    return w;
  };
  // What goes when the line is full: the least important parts (rank 2 and up) first, then the
  // prediction's least likely tokens down to three, then the what-ifs, then more tokens.
  auto shrink = [&](std::size_t keep) {
    for (StatusPart& p : parts)
      if (p.shrink.size() > keep) {
        p.shrink.pop_back();
        p.text = "Next token:";
        for (std::size_t i = 0; i < p.shrink.size(); ++i) p.text += (i ? ",  " : "  ") + p.shrink[i];
        return true;
      }
    return false;
  };
  auto drop = [&](int min_rank) {
    auto worst = std::max_element(parts.begin(), parts.end(),
                                  [](const StatusPart& a, const StatusPart& b) { return a.rank <= b.rank; });
    if (worst == parts.end() || worst->rank < min_rank) return false;
    parts.erase(worst);
    return true;
  };
  while (width(parts) > avail && (drop(2) || shrink(3) || drop(1) || shrink(1))) {
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) {
      ImGui::SameLine(0, 0);
      ImGui::TextDisabled("%s", sep);
      ImGui::SameLine(0, 0);
    }
    ImGui::PushStyleColor(ImGuiCol_Text, parts[i].colour);
    ImGui::TextUnformatted(parts[i].text.c_str());
    ImGui::PopStyleColor();
    if (!parts[i].tooltip.empty() && ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
      ImGui::TextUnformatted(parts[i].tooltip.c_str());
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
  }
}

// What the view drawn in the current child window reached beyond its edges (UiEnv::view_overflow_*).
void record_view_fit(UiEnv& env) {
  const ImGuiWindow* w = ImGui::GetCurrentWindow();
  env.view_overflow_right = std::max(0.0f, w->DC.CursorMaxPos.x - w->WorkRect.Max.x);
  env.view_overflow_bottom = std::max(0.0f, w->DC.CursorMaxPos.y - w->InnerRect.Max.y);
}

// The view's body: what its descriptor says it reads, drawn by its panel.
void draw_view(ViewTab id, AppState& state, Textures& textures, UiEnv& env) {
  if (view_info(id).reads != ViewReads::own && !state.result.valid()) {
    ImGui::TextWrapped("No result to show yet. The controls on the left say what is wrong.");
    return;
  }
  switch (id) {
    case ViewTab::pipeline: draw_pipeline(env.panels, state, textures); break;
    case ViewTab::reshape: draw_reshape(env.panels, state, textures); break;
    case ViewTab::heads: draw_heads(env.panels, state, textures); break;
    case ViewTab::mask: draw_mask_editor(env.panels, state, textures); break;
    case ViewTab::compare: draw_compare(env.panels, state, textures); break;
    case ViewTab::complexity: draw_complexity(state); break;
    case ViewTab::overview: draw_overview(env.panels, state, textures); break;
    case ViewTab::token_lines: draw_token_lines(env.panels, state); break;
    case ViewTab::large_l:  // needs no CPU trace: it computes its own rows on the GPU
      draw_large(env.panels, state, textures, env.large_gpu, &env.large_len, &env.large_causal,
                 &env.large_device);
      break;
    case ViewTab::attention_file: draw_attention_file(env.panels, textures); break;  // a file's, read-only
    case ViewTab::check: draw_check(env.panels, state, textures); break;             // a student's file
    case ViewTab::sqrt_dk: draw_sqrt_dk(state); break;  // random q, k: needs no result
  }
}

void view_menu(AppState& state) {
  if (!ImGui::BeginMenu("View")) return;
  const WindowState& w = state.window();
  char key[8];
  int n = 0;
  for (const ViewInfo& v : views()) {
    std::snprintf(key, sizeof key, "%d", ++n % 10);
    if (ImGui::MenuItem(v.name, n <= 10 ? key : nullptr, w.tab == v.id)) state.apply(show_view(v.id));
  }
  ImGui::Separator();
  const PanelsShown p = panels_shown(w, ImGui::GetIO().DisplaySize.x, ImGui::GetFontSize());
  if (ImGui::MenuItem("Controls panel", "[", p.controls)) state.apply(show_panels(!p.controls, p.inspector));
  if (ImGui::MenuItem("Inspector panel", "]", p.inspector))
    state.apply(show_panels(p.controls, !p.inspector));
  if (ImGui::MenuItem("Focus: the view alone", "F", w.focus)) state.apply(toggle_focus());
  if (ImGui::MenuItem("Presenter mode", "P", w.presenter)) state.apply(toggle_presenter());
  if (ImGui::MenuItem("Keys", "?", w.show_keys)) state.apply(set_keys_overlay(!w.show_keys));
  ImGui::EndMenu();
}

void keys_overlay(AppState& state) {
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(io.DisplaySize.x * 0.5f, io.DisplaySize.y * 0.5f), ImGuiCond_Always,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowBgAlpha(0.95f);
  ImGui::SetNextWindowSizeConstraints(ImVec2(0, 0),
                                      ImVec2(io.DisplaySize.x * 0.95f, io.DisplaySize.y * 0.9f));
  bool open = true;
  const ViewTab v = state.window().tab;
  const std::string title = std::string("Keys in ") + view_info(v).name + "###keys";
  if (ImGui::Begin(title.c_str(), &open,
                   ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse |
                       ImGuiWindowFlags_NoSavedSettings) &&
      ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg)) {
    for (const auto& [k, what] : key_help(state, v)) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(k.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(what.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::End();
  if (!open) state.apply(set_keys_overlay(false));
}

}  // namespace

void draw_ui(AppState& state, Textures& textures, UiEnv& env) {
  ImGuiIO& io = ImGui::GetIO();
  handle_keys(state, env);   // every key, as the command table binds it
  take_hover(state.view());  // what the pointer was over last frame, for every view to mark

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
    view_menu(state);
    lessons_menu(state, env);
    ImGui::EndMenuBar();
  }
  draw_file_ui(state, env);
  draw_lesson_export_dialog(state, env);
  if (const std::optional<std::string> m = platform::take_image_clipboard_message()) state.status = *m;
  if (const std::string m = take_copy_message(); !m.empty()) state.status = m;

  const WindowState& w = state.window();
  const float font = ImGui::GetFontSize();
  // In presenter mode, or with the Controls panel away, what the class must see stays in view: the
  // prediction and the what-ifs lead the status line, each error gets a line above it.
  const PanelsShown shown = panels_shown(w, io.DisplaySize.x, font);
  const bool strip_on = w.presenter || !shown.controls;
  std::vector<StripLine> strip = strip_on ? presenter_strip(state) : std::vector<StripLine>{};
  std::vector<StripLine> strip_errors;
  for (const StripLine& l : strip)
    if (l.kind == StripLine::error) strip_errors.push_back(l);
  const float status_h = ImGui::GetFrameHeightWithSpacing() * float(1 + strip_errors.size());
  const float h = ImGui::GetContentRegionAvail().y - status_h;
  // A lesson open: its narration is the left column, in place of the controls (the step sets them).
  const bool lesson = w.lesson.lesson && !w.focus;
  const bool left = shown.controls || lesson, right = shown.inspector;
  // The side panels keep their width in font sizes (a presenter font widens them, so their labels
  // are not clipped) up to a share of the window that leaves the view at least 30% of it.
  const float share = left && right ? 0.35f : 0.45f;
  const float left_w = std::min(font * (lesson ? 24 : 19), io.DisplaySize.x * (lesson ? 0.4f : share));
  const float right_w = std::min(font * 22, io.DisplaySize.x * share);
  if (lesson) {
    ImGui::BeginChild("lesson", ImVec2(left_w, h), true);
    draw_lesson_panel(state, env);
    ImGui::EndChild();
    ImGui::SameLine();
  } else if (left) {
    ImGui::BeginChild("controls", ImVec2(left_w, h), true);
    ImGui::PushTextWrapPos(0.0f);  // its lines wrap at the panel's edge rather than run off it
    if (draw_controls(env.panels, state)) ask_open_folder(state, env);  // loads in the background
    ImGui::PopTextWrapPos();
    ImGui::EndChild();
    ImGui::SameLine();
  }
  const float centre_w =
      right ? ImGui::GetContentRegionAvail().x - right_w - ImGui::GetStyle().ItemSpacing.x : 0.0f;
  ImGui::BeginChild("views", ImVec2(centre_w, h), !w.focus);
  if (w.focus) {  // the view alone: no tab bar, no side panels
    ImGui::BeginChild("view-body");
    draw_view(w.tab, state, textures, env);
    record_view_fit(env);
    ImGui::EndChild();
    env.shown_tab = int(w.tab);
  } else if (ImGui::BeginTabBar("views-tabs", ImGuiTabBarFlags_FittingPolicyScroll)) {
    // Tabs keep their full names; when they do not fit, the bar scrolls (arrows at its end). The
    // window's tab is the view shown: when an action changed it, the tab bar is told to follow (it
    // shows the new tab from the next frame); a click on a tab is an action like any other.
    const ViewTab want = w.tab;
    const bool following = env.shown_tab != int(want);
    // SetSelected scrolls the bar to the tab, animated over a third of a second; an action's tab
    // (a lesson step's) is in sight at once, so that the frame drawn next shows its button.
    if (following) GImGui->CurrentTabBar->ScrollingSpeed = FLT_MAX;
    for (const ViewInfo& v : views()) {
      const ImGuiTabItemFlags flags = following && v.id == want ? ImGuiTabItemFlags_SetSelected : 0;
      const bool open = ImGui::BeginTabItem(v.name, nullptr, flags);
      lesson_mark_item(state, v.name);
      if (open) {
        if (!following && v.id != want) state.apply(show_view(v.id));
        env.shown_tab = int(v.id);
        ImGui::BeginChild("view-body");
        draw_view(v.id, state, textures, env);
        record_view_fit(env);
        ImGui::EndChild();
        ImGui::EndTabItem();
      }
    }
    ImGui::EndTabBar();
  }
  ImGui::EndChild();
  if (right) {
    ImGui::SameLine();
    ImGui::BeginChild("inspector", ImVec2(0, h), true);
    draw_inspector(state);
    ImGui::EndChild();
  }
  // A collapsed panel says how to bring it back; the status line drops this first when it is full.
  std::string hint;
  if (w.focus)
    hint = "F or Esc: leave focus   ? keys";
  else if (!left || !right)
    hint = std::string(left ? "" : "[ controls  ") + (right ? "" : "] inspector  ") + "? keys";
  draw_presenter_strip(strip_errors, w.presenter);
  status_bar(state, hint, strip, w.presenter);
  if (w.show_keys) keys_overlay(state);
  ImGui::End();
}

}  // namespace mha::app
