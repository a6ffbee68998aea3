#include "commands.hpp"

#include <imgui.h>

#include <algorithm>

#include "file_actions.hpp"
#include "heatmap.hpp"
#include "lessons.hpp"
#include "stage_table.hpp"
#include "trace.hpp"
#include "ui.hpp"

namespace mha::app {

using studio::ViewTab;

namespace {

// A named key's chord: the key map is the context's, so it is read when the key is checked.
Chord named(ImGuiKey k, int arg = 0) {
  return {int(k), false, false, arg, true};
}

std::string always(const char* what) {
  return what;
}

// The Pipeline's stages in its graph's order: every stage of the trace.
std::vector<std::string> pipeline_stages(const AppState& state) {
  std::vector<std::string> order;
  if (state.result.valid())
    for (const Stage<float>* s : trace_order(state.result.forward->trace)) order.push_back(s->name);
  return order;
}

const std::vector<Command> kCommands = {
    {"1 - 9, 0",
     {{'1', false, false, 0},
      {'2', false, false, 1},
      {'3', false, false, 2},
      {'4', false, false, 3},
      {'5', false, false, 4},
      {'6', false, false, 5},
      {'7', false, false, 6},
      {'8', false, false, 7},
      {'9', false, false, 8},
      {'0', false, false, 9}},
     [](const AppState&, ViewTab) { return always("the views, in the tab bar's order (0: the tenth)"); },
     [](AppState& s, UiEnv&, int k) {
       if (k < int(studio::views().size())) s.apply(studio::show_view(studio::views()[std::size_t(k)].id));
     }},
    {"Left / Right",
     {named(ImGuiKey_LeftArrow, -1), named(ImGuiKey_RightArrow, 1)},
     [](const AppState&, ViewTab v) {
       const char* what = studio::view_info(v).left_right;
       return std::string(what ? what : "");
     },
     [](AppState& s, UiEnv&, int step) {
       const ViewTab v = s.window().tab;
       if (v == ViewTab::reshape)
         s.apply(studio::step_reshape(step));
       else if (v == ViewTab::pipeline)
         s.apply(studio::step_stage(step, pipeline_stages(s)));
       else
         s.apply(studio::step_stage(step, arrow_key_stages()));  // the stage table's
     }},
    {"Up / Down",
     {named(ImGuiKey_UpArrow, -1), named(ImGuiKey_DownArrow, 1)},
     [](const AppState&, ViewTab v) {
       const char* what = studio::view_info(v).up_down;
       return std::string(what ? what : "");
     },
     [](AppState& s, UiEnv&, int step) {
       if (s.result.valid()) s.apply(studio::step_head(step, s.result.forward->dims.H));
     }},
    {"Ctrl+Left / Ctrl+Right",
     {{int(ImGuiKey_LeftArrow), true, false, -1, true}, {int(ImGuiKey_RightArrow), true, false, 1, true}},
     [](const AppState& s, ViewTab) {
       return std::string(s.window().lesson.lesson ? "the lesson's previous / next step" : "");
     },
     [](AppState& s, UiEnv& env, int step) {
       step < 0 ? previous_lesson_step(s, env) : next_lesson_step(s, env);
     }},
    {"PgUp / PgDn",
     {named(ImGuiKey_PageUp, -1), named(ImGuiKey_PageDown, 1)},
     [](const AppState& s, ViewTab) {
       return std::string(s.scenario().has_model() ? "the model's layer shown in every view" : "");
     },
     [](AppState& s, UiEnv&, int step) {
       s.apply(studio::choose_layer(std::max<std::int64_t>(0, s.scenario().layer + step)));
     }},
    {"F",
     {{'F'}},
     [](const AppState&, ViewTab) { return always("focus: the view alone, the whole window (Esc leaves)"); },
     [](AppState& s, UiEnv&, int) { s.apply(studio::toggle_focus()); }},
    {"[  ]",
     {{'[', false, false, 0}, {']', false, false, 1}},
     [](const AppState&, ViewTab) { return always("the controls / the inspector panel"); },
     [](AppState& s, UiEnv&, int which) {
       const PanelsShown p = panels_shown(s.window(), ImGui::GetIO().DisplaySize.x, ImGui::GetFontSize());
       s.apply(studio::show_panels(which == 0 ? !p.controls : p.controls,
                                   which == 1 ? !p.inspector : p.inspector));
     }},
    {"P",
     {{'P'}},
     [](const AppState&, ViewTab) { return always("presenter mode: light theme, large font, the strip"); },
     [](AppState& s, UiEnv&, int) { s.apply(studio::toggle_presenter()); }},
    {"K",
     {{'K'}},
     [](const AppState& s, ViewTab v) {
       return std::string(s.scenario().has_model() && (v == ViewTab::heads || v == ViewTab::compare)
                              ? "knock the selected head out of the model, or back in (a what-if)"
                              : "");
     },
     [](AppState& s, UiEnv&, int) {
       if (s.result.valid())
         s.apply(studio::toggle_knockout(
             {s.scenario().layer,
              std::clamp<std::int64_t>(s.view().sel_head, 0, s.result.forward->dims.H - 1)}));
     }},
    {"Ctrl+Z / Ctrl+Y",
     {{'Z', true, false, -1}, {'Z', true, true, 1}, {'Y', true, false, 1}},
     [](const AppState&, ViewTab) { return always("undo / redo (the view stays as it is)"); },
     [](AppState& s, UiEnv&, int step) { step < 0 ? s.undo() : s.redo(); }},
    {"Ctrl+O / Ctrl+S",
     {{'O', true, false, 0}, {'S', true, false, 1}},
     [](const AppState&, ViewTab) { return always("open / save a scenario (or drop a file on the window)"); },
     [](AppState& s, UiEnv& env, int which) { which == 0 ? ask_open(s, env) : save(s, env); }},
    {"Ctrl+C",
     {{'C', true, false, 0}},
     [](const AppState&, ViewTab) {
       return always("copy the heatmap under the pointer as TSV (right-click: more)");
     },
     [](AppState&, UiEnv&, int) { copy_current_heatmap(CopyAs::tsv); }},
    {"Ctrl+Q",
     {{'Q', true, false, 0}},
     [](const AppState&, ViewTab) { return always("quit"); },
     [](AppState&, UiEnv& env, int) { env.quit_requested = true; }},
    {"?",
     {{'/', false, true, 0}},
     [](const AppState&, ViewTab) { return always("this list (for the view shown)"); },
     [](AppState& s, UiEnv&, int) { s.apply(studio::set_keys_overlay(!s.window().show_keys)); }},
    {"Esc",
     {named(ImGuiKey_Escape)},
     [](const AppState&, ViewTab) { return always("leave focus, close this list"); },
     [](AppState& s, UiEnv&, int) { s.apply(studio::close_overlays()); }},
};

}  // namespace

const std::vector<Command>& commands() {
  return kCommands;
}

void handle_keys(AppState& state, UiEnv& env) {
  const ImGuiIO& io = ImGui::GetIO();
  for (const Command& c : kCommands) {
    if (io.WantTextInput && !c.in_text_field) continue;
    for (const Chord& k : c.chords) {
      // Ctrl must match both ways (Ctrl+S is not S); Shift only where a chord asks for it ('?' is
      // Shift+/), so a held Shift does not stop a plain key.
      if (k.ctrl != io.KeyCtrl || (k.shift && !io.KeyShift) || (k.ctrl && k.shift != io.KeyShift)) continue;
      if (!ImGui::IsKeyPressed(k.named ? ImGui::GetKeyIndex(ImGuiKey(k.key)) : k.key)) continue;
      if (c.what(state, state.window().tab).empty()) continue;  // does nothing in this view
      c.run(state, env, k.arg);
    }
  }
}

std::vector<std::pair<std::string, std::string>> key_help(const AppState& state, ViewTab v) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Command& c : kCommands)
    if (std::string what = c.what(state, v); !what.empty()) out.emplace_back(c.keys, std::move(what));
  return out;
}

PanelsShown panels_shown(const studio::WindowState& w, float width, float font) {
  if (w.focus) return {false, false};
  if (w.layout_chosen) return {w.show_controls, w.show_inspector};
  // Widths in font sizes: the panels' own plus a view that stays readable.
  return {width >= font * 44, width >= font * 68};
}

}  // namespace mha::app
