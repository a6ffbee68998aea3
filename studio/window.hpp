// The window's settings: how the user looks at the work, not the work. They belong to the screen
// in front of the class, so Undo, Redo, Open, a preset and a model switch never change them; they
// are not in a scenario file (which may only suggest a view when opened from the command line or a
// lesson) and are remembered between runs with the window's size (app/window_config.hpp). They
// change only through actions (actions.hpp), from a key, a menu, a script or a test alike.
#pragma once

#include "colormap.hpp"
#include "lesson.hpp"
#include "views.hpp"

namespace mha::studio {

struct WindowState {
  ViewTab tab = ViewTab::pipeline;  // the view shown
  bool presenter = false;           // high-contrast theme, and font_scale applies
  float font_scale = 1.0f;          // presenter font, 1-3
  render::Colormap colormap = render::Colormap::viridis;
  // The side panels. Until the user shows or hides one (layout_chosen), they follow the window: a
  // side panel is shown only where the view keeps room beside it at the current font size.
  bool show_controls = true, show_inspector = true;
  bool layout_chosen = false;
  bool focus = false;      // the view alone: no side panels, no tab bar
  bool show_keys = false;  // the `?` overlay
  LessonPlace lesson;      // the lesson open (its narration beside the view) and where others were left
};

}  // namespace mha::studio
