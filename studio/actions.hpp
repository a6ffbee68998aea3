// Actions: the one way the state changes. A click in a panel, a key, a menu item, a line of a script
// (`mha-studio --script`), the soak (`--soak`, `--edits`) and the latency driver (`--frame-stats`) all
// build an Action and hand it to AppState::apply, so every driver goes through the path a user's
// click goes through. An action edits the work (the scenario: an undo step, a new forward) or
// changes how it is looked at (the window's settings and the views' state: no undo step, nothing
// recomputed).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "scenario.hpp"
#include "window.hpp"

namespace mha::studio {

// What a view action changes: the window's settings and the views' own state.
struct Display {
  WindowState& window;
  ViewState& view;
};

struct Action {
  Action() = default;
  // An edit of the work: what it is, the change, where a refusal is shown.
  Action(std::string what_, std::function<void(Scenario&)> change_, std::string slot_ = "sizes")
      : what(std::move(what_)), change(std::move(change_)), slot(std::move(slot_)) {}
  std::string what;                       // in words, for undo and the status line: "H num_heads = 4"
  std::function<void(Scenario&)> change;  // an edit: run by AppState::apply on the live scenario
  std::string slot = "sizes";             // where a refusal is shown: "sizes", "mask", "model", "tensors"
  // Repeats of one control within a moment (typing, +/- clicks) coalesce into one undo step: the
  // control's id, or "" to use `what`.
  std::string key;
  // Actions of one gesture (a drag, typing in one field) share a non-zero id: they are one undo step,
  // and Compare's "before" is the state before the gesture's first action.
  std::uint64_t gesture = 0;
  bool refit_mask = false;  // the sizes may have changed: fit the mask to them afterwards
  // Or, instead of `change`, a view change (the tab, presenter mode, a panel, the stage shown):
  // applied and remembered, not an undo step, nothing recomputed.
  std::function<void(Display&)> view;
};

// Runs the action's change on a scenario and a window (AppState::apply does this and more; tests
// and batch tools call it on states of their own).
void run(const Action& a, Scenario& s, WindowState& w);

// Thrown by a change that finds nothing to do (the layer is already the last one): apply records
// nothing and shows no error.
struct NoChange {};

// A fresh id for a gesture (never 0).
std::uint64_t new_gesture();

// An action that cannot be built from what it was given (unknown control, bad number): the message
// says which and what is accepted.
struct ActionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The controls on the left of the app, by id (the scenario's JSON name) and by the label the panel
// shows, and the window's settings (presenter, font_scale, colormap…). `set` in a script and the
// Controls panel both go through set_control.
struct ControlInfo {
  const char* id;      // "num_heads"
  const char* label;   // "H num_heads"
  const char* values;  // what it accepts, for errors and docs/scripting.md: "an integer from 1"
};
const std::vector<ControlInfo>& controls();
// The control's value as text, as `set` accepts it back.
std::string control_value(const Scenario& s, const WindowState& w, const std::string& id_or_label);
// Throws ActionError for an unknown control or a value it does not accept.
Action set_control(const std::string& id_or_label, const std::string& value);

// One value of an edited tensor: "query", "key" or "value" (made editable from the values on screen
// first), or a weight by its state_dict name ("out_proj.weight"). `index` is the flat row-major index.
Action set_tensor_value(const std::string& tensor, std::int64_t index, float value);

// The mask (attn_mask) presets by their names in scenario files ("causal", "sliding_window", …).
Action set_mask_preset(const std::string& name);
// The attn_mask's scope: one (L, S) slice shared, one per batch item, or one per (item, head), the
// (N·num_heads, L, S) torch wants; the mask is refitted to it (the Mask editor's scope picker).
Action set_mask_scope(MaskScope scope);
// Cells (row, col) of the attn_mask slice the mask editor shows (view.batch_index, view.sel_head by
// scope): blocked (-inf) or attending (0). The preset becomes custom.
using Cells = std::vector<std::pair<int, int>>;
Action paint_mask_cells(Cells cells, bool block, std::uint64_t gesture = 0);
// Keys (item, key) of key_padding_mask: padding (True) or not. Turns the mask on if it is off.
Action paint_key_padding(Cells cells, bool pad, std::uint64_t gesture = 0);
// The model ("" = one module with default init, a shipped name, or a model folder).
Action choose_model(const std::string& model);
Action choose_layer(std::int64_t layer);
// Head knock-outs with a model (a what-if, not torch): the heads whose context is replaced, and how.
// set_knockouts replaces the list (empty: none); toggle_knockout knocks one head out or back in;
// keep_only_heads knocks out every head of `layer` but `keep` (the other layers' stay as they are).
// ConfigError ("knockouts") without a model or for a head outside it.
Action set_knockouts(std::vector<HeadRef> heads, Ablation ablation);
Action toggle_knockout(HeadRef head);
Action keep_only_heads(std::int64_t layer, std::vector<std::int64_t> keep, std::optional<Ablation> ablation = {});
Action set_ablation(Ablation ablation);

// View actions: the keys, the View menu, the tab bar, a script and a test build these.
Action show_view(ViewTab tab);
// The side panels as the user chose them (from then on they no longer follow the window's width).
Action show_panels(bool controls, bool inspector);
Action set_focus(bool on);
Action toggle_focus();
Action toggle_presenter();
Action set_keys_overlay(bool on);
Action close_overlays();  // Esc: the keys overlay and focus mode
// Left / Right in the view shown: the stage `step` places after the one shown in `order` (the
// Pipeline's own stage in the Pipeline, the other views' stage elsewhere), or the Reshape view's
// step. Up / Down: the head, within `heads`.
Action step_stage(int step, std::vector<std::string> order);
Action step_reshape(int step);
Action set_reshape_mistake(int mistake);        // the Reshape view's mistake: 0 none, 1-3 the course's
Action show_pipeline_stage(std::string stage);  // the Pipeline's box drawn below its graph
Action step_head(int step, std::int64_t heads);
Action set_compare_mode(CompareMode mode);
// Compare, pins: B - A of two pins by name ("live": the state now).
Action set_compare_pins(std::string a, std::string b);

// Lessons (lesson.hpp): the step shown is the window's, like the view shown. The app runs the step's
// setup lines after a step change (app/lessons.hpp); those are ordinary actions, each an undo step.
// Opens `lesson` at `step` (-1: where it was left, else its first step); null closes.
Action open_lesson(std::shared_ptr<const Lesson> lesson, int step = -1);
Action close_lesson();  // remembers the step, to resume there
// The open lesson's step `step` (from 0, clamped); NoChange where it is already there or none is open.
Action lesson_step(int step);
Action show_lesson_hint();  // one more of the task's hints

}  // namespace mha::studio
