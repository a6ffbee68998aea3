// The app's state: the scenario the user is editing, undo/redo, the last valid result (kept on
// screen while a new one computes or while the inputs are invalid), and errors shown inline.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compute.hpp"
#include "history.hpp"
#include "scenario.hpp"

namespace mha::studio {

struct AppState {
  Scenario scenario;  // what the user is editing now
  History history;

  Result result;       // the last valid result; views draw from it
  Result previous;     // the result before the last edit (Compare: before/after)
  bool stale = false;  // the scenario changed and `result` is not yet its result
  bool compute_failed = false;
  bool animating = false;  // a panel is animating this frame: the main loop must not idle  // the newest
                           // finished forward threw (its error is in `errors`)
  // Inline errors by control: "num_heads", "embed_dim", "num_kv_heads", "sizes", "mask", "tensors",
  // "file". The message says what is wrong and the numbers.
  std::map<std::string, std::string> errors;
  std::string status;         // one line in the status bar ("restored autosave from …")
  std::string autosave_path;  // empty: no autosave (tests)
  bool autosave_pending = false;
  double last_edit_time = 0;  // seconds (ImGui::GetTime) of the last edit, for the debounce
  ViewState autosaved_view;   // the view as last autosaved: a view change is saved like an edit
  Computer computer;
  Scenario committed;     // the scenario as of the last edit: what undo returns to
  std::string last_edit;  // consecutive edits of the same control within a moment coalesce
  double now = 0;         // seconds, updated by tick()

  // Every edit goes through here: records undo, clears the errors it may fix, recomputes.
  void edited(const char* what);
  void undo();
  void redo();
  // Replaces the whole scenario (open file, preset), as one undoable edit.
  void load(Scenario s, const std::string& what);
  // Called once per frame: takes finished results, runs the debounced autosave.
  void tick(double now);
  // Recompute now (at start, after load).
  void recompute();
  // Tokens that label the result's axes (from the scenario the result was made from).
  const std::vector<std::string>& query_tokens() const { return result.query_tokens; }
  const std::vector<std::string>& key_tokens() const { return result.key_tokens; }
};

}  // namespace mha::studio
