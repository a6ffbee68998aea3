// The window's size and its settings (presenter mode, font, colormap, side panels, focus), remembered between
// runs in $XDG_CONFIG_HOME/mha-studio/window.json (~/.config when unset). Not part of a scenario: a scenario
// is the user's work, this is the user's screen.
#pragma once

#include <string>

#include "window.hpp"

namespace mha::app {

struct WindowConfig {
  int width = 1280, height = 720;
  studio::WindowState window;  // all but the view shown and the keys overlay
};

// The file's path ("" where there is no home to keep it in).
std::string window_config_path();
// Reads it; a missing, unreadable or malformed file gives the defaults (it is a preference, never
// worth an error).
WindowConfig load_window_config(const std::string& path);
// Writes it atomically; returns false where it could not (the app says nothing: a preference).
bool save_window_config(const std::string& path, const WindowConfig& c);

}  // namespace mha::app
