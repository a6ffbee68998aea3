// The commands: every key the app answers to, bound in one table to what it does, the menu item that
// does the same, and what it does in each view. The key handler, the View and Edit menus and the `?`
// overlay are made from it, so `?` lists exactly what each key does in the view shown. A command that
// changes the state builds an Action (studio/actions.hpp) and hands it to AppState::apply, the path
// a click, a script line and a test take too.
#pragma once

#include <string>
#include <vector>

#include "app_state.hpp"
#include "studio_names.hpp"

namespace mha::app {

struct UiEnv;

// A key as ImGui 1.86 reports it from GLFW: the backend's code (ASCII capitals for letters and
// digits), or a named key (arrows, PgUp, Esc: ImGuiKey, mapped to the backend's code when pressed),
// with the modifiers it needs.
struct Chord {
  int key;
  bool ctrl = false, shift = false;
  int arg = 0;         // handed to the command: -1 / +1 for a pair of keys, the view's place for 1-9
  bool named = false;  // `key` is an ImGuiKey
};

struct Command {
  const char* keys;  // as `?` lists them: "Left / Right"
  std::vector<Chord> chords;
  // What it does in view `v`, for `?`; "" where it does nothing there (the key is then ignored).
  std::string (*what)(const AppState& state, studio::ViewTab v);
  void (*run)(AppState& state, UiEnv& env, int arg);
  bool in_text_field = false;  // also while a text field has the keyboard
};

const std::vector<Command>& commands();
// Runs each command whose key was pressed this frame, as the table says.
void handle_keys(AppState& state, UiEnv& env);
// The keys that do something in view `v`, as `?` lists them: {keys, what}.
std::vector<std::pair<std::string, std::string>> key_help(const AppState& state, studio::ViewTab v);

// The side panels as they are shown now: the user's choice, or, until there is one, what the window's
// width leaves room for at the current font size (a projector at 2x font opens on the view alone).
struct PanelsShown {
  bool controls, inspector;
};
PanelsShown panels_shown(const studio::WindowState& w, float width, float font);

}  // namespace mha::app
