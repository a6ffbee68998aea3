// The app's state: the scenario the user is editing, undo/redo, the last valid result (kept on
// screen while a new one computes or while the inputs are invalid), and errors shown inline.
// The scenario changes only through apply (actions), load, undo and redo; panels read it through
// scenario(). The window's settings (window.hpp) change only through apply; the pointer's state
// (selection, hover) is written by the views directly (view()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actions.hpp"
#include "compute.hpp"
#include "history.hpp"
#include "scenario.hpp"
#include "stage_computer.hpp"

namespace mha::studio {

// A pinned state: the scenario and its result, kept to compare against (Compare: pins).
struct Pin {
  std::string name;
  Scenario scenario;
  Result result;
};

class AppState {
  Scenario scenario_;    // what the user is editing now
  WindowState window_;   // how it is shown: never changed by undo, redo, open or a model switch
  void keep_previous();  // the result on screen becomes `previous` (see there)

 public:
  History history;

  Result result;       // the last valid result; views draw from it
  Result previous;     // the result shown before the last edit began (Compare: before/after); a
                       // gesture (a drag) is one edit. None when the edit changed N, L, S or E: a
                       // before of other sizes compares with nothing, and at large sizes it would
                       // hold a whole result's memory through the next forward.
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
  ViewTab autosaved_tab = ViewTab::pipeline;  // and the view shown (a restored autosave opens on it)
  Computer computer;
  // Stages a result left out, computed off the UI thread for the views that read them.
  StageComputer stages;
  // The scenario as of the last edit, packed (a mask of 0 and -inf cells as bits): what the worker
  // computes, what a refused edit restores, and the undo step the next edit pushes.
  std::shared_ptr<Snapshot> committed = std::make_shared<Snapshot>();
  void commit();          // the scenario as it is now
  std::string last_edit;  // consecutive edits of the same control within a moment coalesce
  std::uint64_t last_gesture = 0;
  double now = 0;             // seconds, updated by tick()
  bool asked_worker = false;  // recompute() gave the worker a job since the last hold_for_result()

  const Scenario& scenario() const { return scenario_; }
  // How the work is looked at inside the views (batch item, stage, selection, hover): no undo step,
  // but autosaved; the pointer's state is written by the views directly.
  ViewState& view() { return scenario_.view; }
  const ViewState& view() const { return scenario_.view; }
  const WindowState& window() const { return window_; }
  // The window as the app remembered it (at start): no action, nothing to remember again.
  void restore_window(const WindowState& w) { window_ = w; }

  // The one way an edit happens: runs the action's change, fits the mask when the sizes may have
  // changed, records one undo step per edit (a gesture, or repeats of one control within a moment,
  // coalesce), recomputes. A change that throws is refused: the scenario stays as it was and the
  // reason is shown at the action's slot. Returns whether the action applied.
  bool apply(const Action& a);
  // Pins the scenario and its result under `name` (replacing a pin of that name). "live" is reserved
  // for the current state. Returns false (and says why in `status`) without a result to pin.
  bool pin(const std::string& name);
  const Pin* find_pin(const std::string& name) const;
  std::vector<Pin> pins;

  // The scenario the app opens with (a file, the autosave, the default): no undo step. `take_tab`:
  // the window shows the view the file suggests (opened from the command line or a lesson).
  void start(Scenario s, bool take_tab = false);
  void undo();
  void redo();
  // Replaces the whole scenario (open file, preset), as one undoable edit. The window stays as it is
  // (presenter mode, the font, the view shown) unless `take_tab` (a lesson, the command line).
  void load(Scenario s, const std::string& what, bool take_tab = false);
  // Called once per frame: takes finished results, runs the debounced autosave.
  void tick(double now);
  // Commits the scenario as it is now and recomputes it (at start, after load).
  void recompute();

  // Frame pacing, called once a frame is built and before it is drawn, `budget_ms` before the frame
  // would have lasted kHeldFrameMs. When this frame gave the worker a forward that took at most
  // that long the last time at these sizes, waits for it (at most that long) and returns whether it
  // landed: the caller then draws the next frame, which shows it, instead of this one, which would
  // show the old result. Drawing is CPU work where the renderer is software, and a frame drawn
  // meanwhile slows the forward it waits for; a held frame still ends within kHeldFrameMs.
  bool hold_for_result(double budget_ms);
  static constexpr double kHeldFrameMs = 20;
  // Tokens that label the result's axes (from the scenario the result was made from).
  const std::vector<std::string>& query_tokens() const { return result.query_tokens; }
  const std::vector<std::string>& key_tokens() const { return result.key_tokens; }
};

}  // namespace mha::studio
