// Lessons headless: every shipped lesson read with the app's line check, its steps gone through with
// the panel drawn (presenter font 2x at 1280x720), each task false before its solution and true
// after; the keys step through a lesson; bad lesson files refused naming the file, the step and the
// rule.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "commands.hpp"
#include "lesson_export_dialog.hpp"
#include "lessons.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using Catch::Matchers::Contains;
using mha::test::HeadlessUi;

namespace {

std::string refusal(const std::string& json) {
  try {
    parse_lesson(json, "bad.json", lesson_line_check());
  } catch (const LessonError& e) {
    CHECK(e.argument == "bad.json");
    return e.what();
  }
  return "";
}

const std::string kFirst = R"({"title": "t", "steps": [{"title": "a", "narration": "n"}, )";

}  // namespace

TEST_CASE("a bad lesson file is refused naming the file, the step and the rule", "[lesson]") {
  CHECK_THAT(refusal("[1]"), Contains("bad.json: a lesson is a JSON object"));
  CHECK_THAT(refusal(R"({"steps": []})"), Contains("bad.json: \"title\" is missing"));
  CHECK_THAT(refusal(kFirst + R"({"title": "b"}]})"), Contains("bad.json: step 2: \"narration\" is missing"));
  CHECK_THAT(refusal(kFirst + R"({"title": "b", "narration": "n", "setup": ["key ctrl+z"]}]})"),
             Contains("step 2: setup \"key ctrl+z\": key is not for lessons"));
  CHECK_THAT(refusal(kFirst + R"({"title": "b", "narration": "n", "setup": ["tab Hedas"]}]})"),
             Contains("step 2: setup \"tab Hedas\": no tab \"Hedas\""));
  CHECK_THAT(refusal(kFirst + R"({"title": "b", "narration": "n", "setup": ["mask-preset diagonal"]}]})"),
             Contains("no mask preset \"diagonal\""));
  CHECK_THAT(
      refusal(
          kFirst +
          R"({"title": "b", "narration": "n", "task": {"instruction": "i", "check": {}, "solution": ["undo"]}}]})"),
      Contains("step 2: task: \"check\" must be a non-empty object"));
  CHECK_THAT(
      refusal(
          kFirst +
          R"({"title": "b", "narration": "n", "task": {"instruction": "i", "check": {"num_heads": [2]}, "solution": ["set num_heads 2"]}}]})"),
      Contains("check \"num_heads\" must be a string, a number or true/false"));
  CHECK_THAT(
      refusal(
          kFirst +
          R"({"title": "b", "narration": "n", "task": {"instruction": "i", "check": {"num_heads": 2}, "solution": ["undo"]}}]})"),
      Contains("solution \"undo\": undo is not for lessons"));
  CHECK(
      refusal(
          kFirst +
          R"({"title": "b", "narration": ["n", "- m"], "task": {"instruction": "i", "check": {"num_heads": 2}, "solution": ["set num_heads 2"]}}]})")
          .empty());
}

TEST_CASE("every shipped lesson: each step applies and is drawn, each task is done by its solution only",
          "[lesson][ui]") {
  HeadlessUi ui(1280, 720);
  AppState state;
  state.apply(set_control("presenter", "true"));
  state.apply(set_control("font_scale", "2"));
  const std::vector<std::string> files = lesson_files(ui.env);
  REQUIRE(files.size() >= 6);
  int tasks = 0;
  for (const std::string& file : files) {
    const Lesson lesson = read_lesson(ui.env, file);
    INFO(lesson.name);
    REQUIRE(start_lesson(state, ui.env, file, 0).empty());
    for (std::size_t k = 0; k < lesson.steps.size(); ++k) {
      INFO("step " << k + 1);
      REQUIRE(state.window().lesson.step == int(k));
      ui.settle(state);
      CHECK(state.errors.count("lesson") == 0);
      if (lesson.steps[k].has_task) {
        ++tasks;
        CHECK_FALSE(lesson_task_done(state));
        CHECK(solve_lesson_step(state, ui.env).empty());
        CHECK(lesson_task_done(state));
        ui.frame(state);
      }
      if (k + 1 < lesson.steps.size()) CHECK(next_lesson_step(state, ui.env).empty());
    }
    CHECK(next_lesson_step(state, ui.env).empty());  // Next on the last step: nothing
    CHECK(state.window().lesson.step == int(lesson.steps.size()) - 1);
  }
  CHECK(tasks >= 6);
}

TEST_CASE("a lesson's edits are undone like any; leaving it and coming back resumes its step",
          "[lesson][ui]") {
  HeadlessUi ui(1280, 720);
  AppState state;
  REQUIRE(start_lesson(state, ui.env, "4_masks", 1).empty());
  REQUIRE_FALSE(lesson_task_done(state));
  REQUIRE(solve_lesson_step(state, ui.env).empty());
  REQUIRE(lesson_task_done(state));
  state.undo();
  CHECK_FALSE(lesson_task_done(state));
  CHECK(state.window().lesson.step == 1);  // undo leaves the lesson where it is
  REQUIRE(start_lesson(state, ui.env, "1_attention_one_head").empty());
  CHECK(state.window().lesson.step == 0);
  REQUIRE(start_lesson(state, ui.env, "4_masks").empty());
  CHECK(state.window().lesson.step == 1);
  state.apply(close_lesson());
  ui.frame(state);
  CHECK_FALSE(state.window().lesson.lesson);
  REQUIRE(start_lesson(state, ui.env, "4_masks").empty());
  CHECK(state.window().lesson.step == 1);
  CHECK_THAT(start_lesson(state, ui.env, "no_such"), Contains("no lesson \"no_such\"; the lessons are"));
  CHECK_THAT(start_lesson(state, ui.env, "4_masks", 40), Contains("4_masks has 6 steps"));
}

TEST_CASE("? lists the lesson keys only while a lesson is open", "[lesson][ui]") {
  HeadlessUi ui(1280, 720);
  AppState state;
  auto listed = [&] {
    for (const auto& [keys, what] : key_help(state, state.window().tab))
      if (keys == "Ctrl+Left / Ctrl+Right") return true;
    return false;
  };
  CHECK_FALSE(listed());
  REQUIRE(start_lesson(state, ui.env, "2_many_heads").empty());
  CHECK(listed());
  state.apply(close_lesson());
  CHECK_FALSE(listed());
}

TEST_CASE("File > Export lesson... writes the handout or says why, the work untouched", "[lesson][ui]") {
  HeadlessUi ui(1280, 720);
  AppState state;
  REQUIRE(start_lesson(state, ui.env, "4_masks", 1).empty());
  ui.settle(state);
  const std::string before = to_json(state.scenario());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "mha-lesson-export-ui";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  std::string summary;
  const std::string pdf = (dir / "masks.pdf").string();
  CHECK(export_lesson(ui.env.assets_dir, "4_masks", pdf, false, &summary) == "");
  CHECK(summary == "8 pages, 5 figures");  // title, 6 steps, answers; a figure for each of steps 1-5
  std::ifstream in(pdf, std::ios::binary);
  std::string head(5, '\0');
  in.read(head.data(), 5);
  CHECK(head == "%PDF-");
  CHECK(export_lesson(ui.env.assets_dir, "4_masks", (dir / "md/").string(), true, &summary) == "");
  CHECK(std::filesystem::is_regular_file(dir / "md" / "index.md"));

  CHECK_THAT(export_lesson(ui.env.assets_dir, "no_such", pdf, false), Contains("no lesson \"no_such\""));
  CHECK_THAT(export_lesson(ui.env.assets_dir, "4_masks", (dir / "masks.pdf" / "x.pdf").string(), false),
             Contains("masks.pdf"));
  CHECK_THAT(export_lesson(ui.env.assets_dir, "4_masks", "/dev/full", false), Contains("/dev/full"));
  // The lesson on screen and its work are as they were.
  CHECK(to_json(state.scenario()) == before);
  CHECK(state.window().lesson.step == 1);

  // The dialog draws over the lesson at presenter size.
  ask_export_lesson(state);
  for (int i = 0; i < 3; ++i) ui.frame(state);
  std::filesystem::remove_all(dir);
}
