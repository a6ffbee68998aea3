#include "lessons.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "errors.hpp"
#include "script.hpp"

namespace mha::app {

namespace fs = std::filesystem;

namespace {

std::string refused(AppState& state, const std::string& why) {
  if (why.empty())
    state.errors.erase("lesson");
  else
    state.errors["lesson"] = why;
  return why;
}

// Runs script lines one after another; stops at the first that fails. A relative `open` path is the
// assets folder's (lessons open the shipped presets wherever the app is started from).
std::string run_lines(AppState& state, UiEnv& env, const std::vector<std::vector<std::string>>& lines,
                      const std::string& where) {
  for (const std::vector<std::string>& words : lines) {
    if (words[0] == "open") {  // a scenario, as one undo step; not the file Save writes to, not in Recent
      const fs::path file =
          fs::path(words[1]).is_relative() ? fs::path(env.assets_dir) / words[1] : fs::path(words[1]);
      try {
        state.load(load_scenario(file.string()), "lesson: open " + words[1]);
      } catch (const Error& e) {
        return where + ": \"open " + words[1] + "\": " + e.what();
      }
      continue;
    }
    if (const std::string why = Script::run_now(words, state, env); !why.empty())
      return where + ": \"" + words[0] + (words.size() > 1 ? " " + words[1] : "") + "\": " + why;
  }
  return "";
}

std::string run_setup(AppState& state, UiEnv& env) {
  const studio::LessonPlace& p = state.window().lesson;
  if (!p.lesson) return "";
  const studio::LessonStep& step = p.lesson->steps[std::size_t(p.step)];
  return run_lines(state, env, step.setup, p.lesson->name + " step " + std::to_string(p.step + 1));
}

}  // namespace

const std::vector<std::string>& lesson_actions() {
  static const std::vector<std::string> names = {"open",        "tab",        "set",
                                                 "mask-preset", "mask-paint", "compare"};
  return names;
}

studio::LessonLineCheck lesson_line_check() {
  return [](const std::vector<std::string>& words) -> std::string {
    const std::vector<std::string>& ok = lesson_actions();
    if (std::find(ok.begin(), ok.end(), words[0]) == ok.end()) {
      std::string names;
      for (const std::string& n : ok) names += (names.empty() ? "" : ", ") + n;
      const std::vector<std::string>& all = Script::action_names();
      const bool known = std::find(all.begin(), all.end(), words[0]) != all.end();
      return (known ? words[0] + " is not for lessons" : "unknown action \"" + words[0] + "\"") +
             "; a lesson's lines may use " + names;
    }
    std::string line;
    for (const std::string& w : words) {  // quoted again, so the script parser reads the same words
      std::string q = "\"";
      for (char c : w) q += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
      line += q + "\" ";
    }
    try {
      Script::parse(line, "line");
    } catch (const ScriptError& e) {
      return e.message.substr(e.message.find(": ") + 2);  // without "line:1"
    }
    // The words a line's action is built from, checked as it would build it (no state needed).
    try {
      if (words[0] == "set" && words[1] != "backend" && words[1] != "Backend")
        set_control(words[1], words[2]);
      if (words[0] == "mask-preset") set_mask_preset(words[1]);
      if (words[0] == "tab" && !find_view(words[1]))
        return "no tab \"" + words[1] + "\"; the tabs are " + view_names();
    } catch (const ActionError& e) {
      return e.what();
    }
    return "";
  };
}

std::vector<std::string> lesson_files(const UiEnv& env) {
  return studio::list_lessons(env.assets_dir + "/lessons");
}

studio::Lesson read_lesson(const UiEnv& env, const std::string& name_or_path) {
  const bool path =
      name_or_path.find('/') != std::string::npos || fs::path(name_or_path).extension() == ".json";
  const std::string file = path ? name_or_path : env.assets_dir + "/lessons/" + name_or_path + ".json";
  if (!path && !fs::exists(file)) {
    std::string names;
    for (const std::string& f : lesson_files(env))
      names += (names.empty() ? "" : ", ") + fs::path(f).stem().string();
    throw studio::LessonError(name_or_path, "no lesson \"" + name_or_path + "\"; the lessons are " +
                                                (names.empty() ? "(none)" : names));
  }
  return studio::load_lesson(file, lesson_line_check());
}

std::string start_lesson(AppState& state, UiEnv& env, const std::string& name_or_path, int step) {
  std::shared_ptr<const studio::Lesson> lesson;
  try {
    lesson = std::make_shared<const studio::Lesson>(read_lesson(env, name_or_path));
  } catch (const studio::LessonError& e) {
    return refused(state, e.what());
  }
  if (step >= int(lesson->steps.size()))
    return refused(state, lesson->name + " has " + std::to_string(lesson->steps.size()) + " steps; step " +
                              std::to_string(step) + " (from 0) is past them");
  state.apply(studio::open_lesson(lesson, step));
  if (const std::string why = run_lines(state, env, lesson->setup, lesson->name + " setup"); !why.empty())
    return refused(state, why);
  return refused(state, run_setup(state, env));
}

std::string go_to_lesson_step(AppState& state, UiEnv& env, int step) {
  const studio::LessonPlace& p = state.window().lesson;
  if (!p.lesson) return refused(state, "no lesson is open (lesson NAME first)");
  if (step < 0 || step >= int(p.lesson->steps.size())) return "";  // Back on the first, Next on the last
  state.apply(studio::lesson_step(step));
  return refused(state, run_setup(state, env));
}

std::string next_lesson_step(AppState& state, UiEnv& env) {
  return go_to_lesson_step(state, env, state.window().lesson.step + 1);
}

std::string previous_lesson_step(AppState& state, UiEnv& env) {
  return go_to_lesson_step(state, env, state.window().lesson.step - 1);
}

std::string solve_lesson_step(AppState& state, UiEnv& env) {
  const studio::LessonPlace& p = state.window().lesson;
  if (!p.lesson) return refused(state, "no lesson is open (lesson NAME first)");
  const studio::LessonStep& step = p.lesson->steps[std::size_t(p.step)];
  if (!step.has_task) return refused(state, "step " + std::to_string(p.step + 1) + " has no task to solve");
  return refused(state, run_lines(state, env, step.task.solution,
                                  p.lesson->name + " step " + std::to_string(p.step + 1) + " solution"));
}

bool lesson_task_done(const AppState& state) {
  const studio::LessonPlace& p = state.window().lesson;
  return p.lesson &&
         studio::task_done(p.lesson->steps[std::size_t(p.step)], state.scenario(), state.window());
}

}  // namespace mha::app
