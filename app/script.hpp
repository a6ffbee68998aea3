// `mha-studio --script FILE`: user actions, one a line, run through the code paths the mouse and
// keyboard use (actions for edits, the tab bar's selection, the backend's key state, the views'
// hover report). The language is in docs/scripting.md. A line runs once the previous one's compute
// has landed and been drawn, so a screenshot or a dump shows its result.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "app_state.hpp"
#include "studio_names.hpp"
#include "ui.hpp"

struct ImGuiIO;

namespace mha::app {

// A script that cannot run: the file, the 1-based line and why.
struct ScriptError {
  std::string message;  // "script.txt:3: unknown action "pain"; the actions are …"
};

struct ScriptLine {
  int number = 0;  // 1-based, in the file
  std::vector<std::string> words;
};

// Splits one line into words: whitespace separates, "double quotes" group (\" and \\ inside), '#'
// outside quotes starts a comment. Throws ScriptError (without the location) for an open quote.
std::vector<std::string> script_words(const std::string& line);

class Script {
 public:
  // Reads and checks every line (known action, argument count); throws ScriptError.
  static Script load(const std::string& path);
  static Script parse(const std::string& text, const std::string& name);

  // Before ImGui::NewFrame: presses and releases scripted keys in the backend's key state.
  void before_new_frame(ImGuiIO& io);
  // After NewFrame, before draw_ui: runs the next line when the state has settled. A line that
  // fails sets error() and done().
  void before_ui(AppState& state, UiEnv& env);
  // After the frame is rendered, before the swap: a pending screenshot is read from it.
  // `save` writes the framebuffer as PNG and returns false if it could not.
  void after_render(const AppState& state, const UiEnv& env, int width, int height,
                    const std::function<bool(const std::string&, int, int)>& save);

  bool done() const {
    return next_ >= lines_.size() && key_ < 0 && drag_path_.empty() && pending_screenshot_.empty() &&
           !failed_;
  }
  bool failed() const { return failed_; }
  const std::string& error() const { return error_; }

  // The names of the actions, for errors and docs/scripting.md (a test checks the two agree).
  static const std::vector<std::string>& action_names();
  // The fields of dump-state's `result` object, for docs/scripting.md (a test checks the two agree).
  static const std::vector<std::string>& result_fields();
  // Runs one line at once (a lesson's setup or solution): returns "" or why it failed. For the
  // actions that finish within the call (lessons.hpp lists them), not keys, drags or screenshots.
  static std::string run_now(const std::vector<std::string>& words, AppState& state, UiEnv& env);

 private:
  void run(const ScriptLine& line, AppState& state, UiEnv& env);
  void fail(const ScriptLine& line, const std::string& why);
  bool settled(const AppState& state, const UiEnv& env) const;

  std::string name_;
  std::vector<ScriptLine> lines_;
  std::size_t next_ = 0;
  int quiet_frames_ = 0;  // frames drawn since the last line ran (views settle their layout)
  int key_ = -1;          // a key held down for one frame
  bool key_ctrl_ = false, key_shift_ = false;
  int key_frames_ = 0;
  std::vector<std::pair<int, int>> drag_path_;  // a mask-drag's cells still to move through
  int hover_query_ = -1, hover_key_ = -1;       // reported every frame, as a pointer over a cell would
  std::string pending_screenshot_, pending_dump_;
  bool failed_ = false;
  std::string error_;
};

}  // namespace mha::app
