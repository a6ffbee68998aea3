// Lessons: the course told step by step inside the app. A lesson is a JSON file (docs/lessons.md):
// steps, each with a title, narration (a small Markdown subset), the state it sets up as script
// lines (docs/scripting.md), what to point at, and an optional task whose check reads the app's
// state and whose solution is script lines again, so a test can prove every task can be done.
// GUI-free: the app runs the lines through its script runner (app/lessons.hpp).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "errors.hpp"

namespace mha::studio {

class AppState;
struct Scenario;
struct WindowState;

// A lesson file that cannot be used: `argument` is the file; the message names the file, the step
// (from 1, as the panel counts) and the rule broken.
struct LessonError : Error {
  using Error::Error;
};

// One condition of a task's check: the state's `what` (a control id, "tab", "mask_preset" or
// "key_padding") must read `value` (as control_value writes it: "4", "true", "causal", "Reshape").
struct LessonCondition {
  std::string what;
  std::string value;
};

struct LessonTask {
  std::string instruction;                         // "Make the mask causal."
  std::vector<LessonCondition> check;              // all must hold
  std::vector<std::string> hints;                  // shown one at a time
  std::vector<std::vector<std::string>> solution;  // script lines, as words
};

struct LessonStep {
  std::string title;
  std::string narration;                        // Markdown subset: **bold**, `code`, "- " lists
  std::vector<std::vector<std::string>> setup;  // script lines, as words
  std::string point_at;                         // a control id or a view name; "" none
  bool has_task = false;
  LessonTask task;
};

struct Lesson {
  std::string name;   // the file's name without .json: what `lesson NAME` takes
  std::string title;  // "Attention, one head"
  std::string summary;
  // Script lines run when the lesson is opened (at any step, or resumed) before the step's own: the
  // scenario its steps build on, so a step opened directly shows what it shows when walked to.
  std::vector<std::vector<std::string>> setup;
  std::vector<LessonStep> steps;
};

// Splits a script line into words: whitespace separates, "double quotes" group (\" and \\ inside),
// '#' outside quotes starts a comment. Throws ActionError for an open quote.
std::vector<std::string> action_words(const std::string& line);

// Says why a script line may not stand in a lesson ("" when it may): the app passes its script
// parser (an unknown action, a wrong argument count) and the actions a lesson may use.
using LessonLineCheck = std::function<std::string(const std::vector<std::string>& words)>;

// Reads and checks a lesson file; throws LessonError naming the file, the step and the rule.
// Without `line_check`, script lines are only split into words (the CLI has no script runner).
Lesson load_lesson(const std::string& path, const LessonLineCheck& line_check = nullptr);
Lesson parse_lesson(const std::string& json_text, const std::string& path,
                    const LessonLineCheck& line_check = nullptr);

// The lesson files in `dir` (*.json), sorted by name; empty if the folder is missing.
std::vector<std::string> list_lessons(const std::string& dir);

// What a condition reads from the state, as text (a control's value, the view's name…).
std::string condition_value(const std::string& what, const Scenario& s, const WindowState& w);
// Whether every condition of the task holds (false for a step without a task).
bool task_done(const LessonStep& step, const Scenario& s, const WindowState& w);

// The lesson open in the window and where each lesson was left (WindowState holds one).
struct LessonPlace {
  std::shared_ptr<const Lesson> lesson;  // null: no lesson open
  int step = 0;                          // from 0
  int hints_shown = 0;                   // the current step's hints shown so far
  std::map<std::string, int> resume;     // a lesson left: the step it was left at
};

}  // namespace mha::studio
