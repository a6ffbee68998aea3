// Lessons in the app: found in assets/lessons, checked against the script language, and stepped
// through. A step's setup and a task's solution are script lines run through the script's own
// runner, each an ordinary action (undo works). The panel, the keys, the Lessons menu, a script's
// `lesson` actions and `--lesson` all go through these.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "app_state.hpp"
#include "lesson.hpp"
#include "studio_names.hpp"
#include "ui.hpp"

namespace mha::app {

// The actions a lesson's lines may use: the ones that set up state (no screenshot, no files written,
// no keys or pointer, no lessons inside lessons).
const std::vector<std::string>& lesson_actions();
// Refuses a line the script parser refuses or a lesson may not use.
studio::LessonLineCheck lesson_line_check();
// assets/lessons/*.json
std::vector<std::string> lesson_files(const UiEnv& env);
// Reads assets/lessons/NAME.json (or a path to a .json) with the lesson's checks; throws LessonError.
studio::Lesson read_lesson(const UiEnv& env, const std::string& name_or_path);

// Each returns "" or why it could not (also shown in state.errors["lesson"]).
// Opens the lesson at `step` (from 0; -1: where it was left) and runs that step's setup.
std::string start_lesson(AppState& state, UiEnv& env, const std::string& name_or_path, int step = -1);
// Goes to the open lesson's step `step` and runs its setup; nothing where it is out of range.
std::string go_to_lesson_step(AppState& state, UiEnv& env, int step);
std::string next_lesson_step(AppState& state, UiEnv& env);
std::string previous_lesson_step(AppState& state, UiEnv& env);
// Runs the current step's task's solution.
std::string solve_lesson_step(AppState& state, UiEnv& env);
// Whether the open lesson's current step has a task and it is done.
bool lesson_task_done(const AppState& state);

// The Lesson panel (app/panels/lesson.cpp): the step beside the view, Back / Next, the task.
void draw_lesson_panel(AppState& state, UiEnv& env);
// Whether the open lesson's step points at `what` (a view's name, any case, or a control id).
bool lesson_points_at(const AppState& state, const std::string& what);
// After a widget that stands for `what` (a view's tab, a control's field, in the panel or in a view):
// where the step points at it, a pulsing outline around the part of it in sight. The panel says so
// where it was drawn out of sight (scrolled away).
void lesson_mark_item(const AppState& state, const std::string& what);
// Whether what the open step points at was drawn in the last frames, and in sight there
// ({false, false} without a lesson or a pointer).
std::pair<bool, bool> lesson_pointer_seen(const AppState& state);
// The menu bar's Lessons menu: every lesson file, Next / Previous step, Close.
void lessons_menu(AppState& state, UiEnv& env);

}  // namespace mha::app
