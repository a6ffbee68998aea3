// Edits, undo/redo, recompute and debounced autosave: the only places the scenario changes.
#include "app_state.hpp"

#include <tuple>

#include "errors.hpp"

namespace mha::studio {

namespace {

// Which inline error slot an engine error belongs to (the argument it names).
std::string error_slot(const std::string& argument) {
  if (argument == "attn_mask" || argument == "key_padding_mask") return "mask";
  if (argument == "num_heads" || argument == "num_kv_heads" || argument == "embed_dim") return argument;
  if (argument == "sizes" || argument == "shape") return "sizes";
  if (argument == "model") return "model";
  return "tensors";  // query/key/value/weights
}

constexpr double kCoalesceSeconds = 0.75;  // a slider drag is one undo step
constexpr double kAutosaveDelay = 1.0;     // debounce: save a second after the last edit

// View changes (tab, stage, colormap, selection) are made by the panels without an undo step, but
// are part of what a teacher prepared: they are autosaved too.
bool same_view(const ViewState& a, const ViewState& b) {
  auto fields = [](const ViewState& v) {
    return std::tie(v.batch_index, v.stage, v.compare_mode, v.compare_a, v.compare_b, v.show_values,
                    v.weights_row_scale, v.reshape_step, v.mistake, v.head_order, v.sel_head, v.sel_query,
                    v.sel_key, v.hidden_heads, v.overview_layers, v.pipeline_stage);
  };
  return fields(a) == fields(b);
}

}  // namespace

bool AppState::apply(const Action& a) {
  if (a.view) {  // how the work is shown: no undo step, nothing recomputed
    WindowState window = window_;
    ViewState view = scenario_.view;
    Display d{window, view};
    try {
      a.view(d);
    } catch (const NoChange&) {
      return false;
    } catch (const Error& e) {
      errors[a.slot] = e.what();
      return false;
    }
    window_ = window;
    scenario_.view = std::move(view);  // autosaved by tick() like any view change
    return true;
  }
  const ViewState view_before = scenario_.view;
  try {
    a.change(scenario_);
  } catch (const NoChange&) {
    return false;
  } catch (const Error& e) {
    committed->restore(scenario_);  // nothing half-applied
    scenario_.view = view_before;
    errors[a.slot] = e.what();
    return false;
  }
  errors.erase(a.slot);
  if (a.refit_mask) {
    try {
      fit_mask_to_sizes(scenario_);
    } catch (const Error& e) {  // a mask too large to hold: the sizes apply, the mask says why
      errors["mask"] = e.what();
    }
  }
  const std::string& key = a.key.empty() ? a.what : a.key;
  const bool coalesce =
      a.gesture ? a.gesture == last_gesture : key == last_edit && now - last_edit_time < kCoalesceSeconds;
  if (!coalesce) keep_previous();  // what was on screen before this edit began
  last_edit = key;
  last_gesture = a.gesture;
  last_edit_time = now;
  autosave_pending = true;
  // The new state packed and handed to the worker first; the undo step (the last state, already
  // packed) is made beside the forward.
  std::shared_ptr<Snapshot> before = std::move(committed);
  recompute();
  if (!coalesce) history.push(std::move(before), a.what);
  return true;
}

bool AppState::pin(const std::string& name) {
  if (name.empty() || name == "live") {
    status = "a pin needs a name other than \"live\"";
    return false;
  }
  if (!result.valid()) {
    status = "nothing to pin yet: no result";
    return false;
  }
  Pin p{name, scenario_, result};
  for (Pin& old : pins)
    if (old.name == name) {
      old = std::move(p);
      status = "pinned " + name + " (replaced)";
      return true;
    }
  pins.push_back(std::move(p));
  status = "pinned " + name;
  return true;
}

const Pin* AppState::find_pin(const std::string& name) const {
  for (const Pin& p : pins)
    if (p.name == name) return &p;
  return nullptr;
}

void AppState::commit() {
  committed = std::make_shared<Snapshot>(Snapshot::of(scenario_));
  committed->reads_every_weight = view_info(window_.tab).reads == ViewReads::every_weight;
}

void AppState::start(Scenario s, bool take_tab) {
  scenario_ = std::move(s);
  if (take_tab && scenario_.suggested_tab) window_.tab = *scenario_.suggested_tab;
  commit();
}

void AppState::undo() {
  const std::string what = history.undo(scenario_);
  if (what.empty()) return;
  keep_previous();
  last_edit.clear();
  last_gesture = 0;
  status = "undid: " + what;
  autosave_pending = true;
  recompute();
}

void AppState::redo() {
  const std::string what = history.redo(scenario_);
  if (what.empty()) return;
  keep_previous();
  last_edit.clear();
  last_gesture = 0;
  status = "redid: " + what;
  autosave_pending = true;
  recompute();
}

void AppState::load(Scenario s, const std::string& what, bool take_tab) {
  history.push(std::move(committed), what);
  scenario_ = std::move(s);
  if (take_tab && scenario_.suggested_tab) window_.tab = *scenario_.suggested_tab;
  keep_previous();
  last_edit.clear();
  last_gesture = 0;
  autosave_pending = true;
  recompute();
}

void AppState::keep_previous() {
  if (!result.valid()) return;
  const Dims& d = result.forward->dims;
  const Scenario& s = scenario_;
  if (s.has_model() || (s.batch == d.N && s.L() == d.L && s.S() == d.S && s.embed_dim == d.E))
    previous = result;
  else
    previous = Result{};
}

void AppState::recompute() {
  commit();
  computer.request(committed);
  asked_worker = computer.busy();
  tick(now);  // a synchronous result is ready now: show it this frame
}

bool AppState::hold_for_result(double budget_ms) {
  const bool asked = asked_worker;
  asked_worker = false;
  if (!asked || !computer.busy() || budget_ms <= 0) return false;
  const double expected = computer.expected_ms(scenario_);
  return expected >= 0 && expected <= budget_ms && computer.wait_idle(budget_ms);
}

void AppState::tick(double t) {
  now = t;
  if (auto o = computer.poll()) {
    for (const char* key : {"num_heads", "num_kv_heads", "embed_dim", "sizes", "mask", "tensors", "model"})
      errors.erase(key);
    compute_failed = !o->result;
    if (o->result) {
      // A mask edit of the result on screen: views redraw only the rows it changed.
      if (o->result->rows_changed && result.valid() && o->result->changed_since.lock() == result.forward)
        o->result->changed_since_generation = result.generation;
      result = std::move(*o->result);
    } else {
      errors[error_slot(o->error_argument)] = o->error;
    }
  }
  // Derived every frame: a job the worker dropped (overtaken by a newer edit) delivers nothing.
  stale = computer.busy() || compute_failed;
  if (!autosave_pending && (!same_view(scenario_.view, autosaved_view) || autosaved_tab != window_.tab)) {
    autosave_pending = true;
    last_edit_time = now;
  }
  if (autosave_pending && !autosave_path.empty() && now - last_edit_time >= kAutosaveDelay) {
    autosave_pending = false;
    autosaved_view = scenario_.view;
    autosaved_tab = window_.tab;
    try {
      save_scenario(autosave_path, scenario_, window_.tab);
    } catch (const Error& e) {
      status = std::string("autosave failed: ") + e.what();
    }
  }
}

}  // namespace mha::studio
