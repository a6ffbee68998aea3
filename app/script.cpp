// The scripted UI: each line becomes what a user's mouse or keyboard would have produced.
#include "script.hpp"

#include "commands.hpp"

#include <GLFW/glfw3.h>  // key codes only: ImGui 1.86 indexes io.KeysDown by the backend's codes
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "errors.hpp"
#include "file_actions.hpp"
#include "heatmap.hpp"
#include "io/file_io.hpp"
#include "lesson_export_dialog.hpp"
#include "lessons.hpp"
#include "open_path.hpp"
#include "panels/panels.hpp"

namespace mha::app {

namespace {

struct ActionSpec {
  const char* name;
  int min_args, max_args;
  const char* usage;
};

const std::vector<ActionSpec> kActions = {
    {"open", 1, 1, "open FILE.json"},
    {"tab", 1, 1, "tab NAME"},
    {"set", 2, 2, "set CONTROL VALUE"},
    {"mask-preset", 1, 1, "mask-preset NAME"},
    {"mask-paint", 2, 3, "mask-paint ROW COL [block|unblock]"},
    {"mask-drag", 4, 4, "mask-drag ROW0 COL0 ROW1 COL1"},
    {"key", 1, 1, "key NAME"},
    {"hover", 3, 3, "hover VIEW ROW COL"},
    {"unhover", 0, 0, "unhover"},
    {"pin", 1, 1, "pin NAME"},
    {"compare", 2, 2, "compare A B"},
    {"knockout", 1, 3, "knockout none|HEADS|all-but HEADS [zero|mean]"},
    {"undo", 0, 0, "undo"},
    {"redo", 0, 0, "redo"},
    {"screenshot", 1, 1, "screenshot FILE.png"},
    {"dump-state", 1, 1, "dump-state FILE.json"},
    {"drop", 1, 1, "drop PATH"},
    {"copy", 1, 1, "copy tsv|numpy"},
    {"clipboard", 1, 1, "clipboard FILE"},
    {"check", 1, 1, "check FILE.py"},
    {"lesson", 1, 2, "lesson NAME [STEP]"},
    {"lesson-next", 0, 0, "lesson-next"},
    {"lesson-back", 0, 0, "lesson-back"},
    {"lesson-solve", 0, 0, "lesson-solve"},
    {"lesson-export", 2, 2, "lesson-export NAME OUT.pdf|DIR/"},
};

const ActionSpec* find_action(const std::string& name) {
  for (const ActionSpec& a : kActions)
    if (name == a.name) return &a;
  return nullptr;
}

// A key by name: a letter or digit, "[", "]", "/", or a named key; "ctrl+", "shift+" before it.
// "?" is shift+/ as on a keyboard.
bool parse_key(std::string name, int* code, bool* ctrl, bool* shift) {
  *ctrl = *shift = false;
  for (;;) {
    if (name.rfind("ctrl+", 0) == 0) {
      *ctrl = true;
      name = name.substr(5);
    } else if (name.rfind("shift+", 0) == 0) {
      *shift = true;
      name = name.substr(6);
    } else {
      break;
    }
  }
  static const std::map<std::string, int> named = {
      {"left", GLFW_KEY_LEFT},      {"right", GLFW_KEY_RIGHT},     {"up", GLFW_KEY_UP},
      {"down", GLFW_KEY_DOWN},      {"pageup", GLFW_KEY_PAGE_UP},  {"pagedown", GLFW_KEY_PAGE_DOWN},
      {"escape", GLFW_KEY_ESCAPE},  {"enter", GLFW_KEY_ENTER},     {"tab", GLFW_KEY_TAB},
      {"[", GLFW_KEY_LEFT_BRACKET}, {"]", GLFW_KEY_RIGHT_BRACKET}, {"/", GLFW_KEY_SLASH},
  };
  std::string lower;
  for (char c : name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "?") {
    *shift = true;
    *code = GLFW_KEY_SLASH;
    return true;
  }
  if (auto it = named.find(lower); it != named.end()) {
    *code = it->second;
    return true;
  }
  if (lower.size() == 1 && std::isalnum(static_cast<unsigned char>(lower[0]))) {
    *code = std::toupper(static_cast<unsigned char>(lower[0]));  // GLFW: letters and digits are ASCII
    return true;
  }
  return false;
}

int parse_index(const std::string& text, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end || v < 0 || v > (1 << 24))
    throw ActionError(std::string(what) + ": expected an index from 0, got \"" + text + "\"");
  return int(v);
}

// The largest |after - before| over one stage of two results of the same shape, and where.
nlohmann::json stage_difference(const ForwardResult<float>& after, const ForwardResult<float>& before,
                                const std::string& stage) {
  const Stage<float>* a = find_stage(after, stage);
  const Stage<float>* b = find_stage(before, stage);
  if (!a || !b || a->shape != b->shape) return {{"stage", stage}, {"comparable", false}};
  const Tensor<float> x = a->contiguous(), y = b->contiguous();
  double max_abs = 0;
  std::int64_t at = -1, changed = 0;
  std::set<std::int64_t> rows;  // (N, H, L, ·) stages: the query rows with a change
  const std::int64_t cols = x.shape.size() == 4 ? x.shape[3] : 1, L = x.shape.size() == 4 ? x.shape[2] : 1;
  for (std::size_t k = 0; k < x.data.size(); ++k) {
    const float u = x.data[k], v = y.data[k];
    if (std::isnan(u) && std::isnan(v)) continue;
    if (u == v) continue;  // equal, blocked on both sides (-inf) included
    ++changed;
    if (x.shape.size() == 4) rows.insert((std::int64_t(k) / cols) % L);
    const double d = std::isfinite(u) && std::isfinite(v) ? std::fabs(double(u) - double(v))
                                                          : std::numeric_limits<double>::infinity();
    if (d > max_abs || at < 0) max_abs = d, at = std::int64_t(k);
  }
  nlohmann::json where = nlohmann::json::array();
  for (std::int64_t k = at, i = std::int64_t(x.shape.size()) - 1; at >= 0 && i >= 0; --i) {
    where.insert(where.begin(), k % x.shape[std::size_t(i)]);
    k /= x.shape[std::size_t(i)];
  }
  return {{"stage", stage},
          {"comparable", true},
          {"max_abs_diff", std::isfinite(max_abs) ? nlohmann::json(max_abs) : nlohmann::json("inf")},
          {"at", where},
          {"cells_changed", changed},
          {"rows_changed", std::vector<std::int64_t>(rows.begin(), rows.end())}};
}

}  // namespace

const std::vector<std::string>& Script::result_fields() {
  static const std::vector<std::string> fields = {"tab",
                                                  "stage",
                                                  "hovered",
                                                  "selected",
                                                  "side_panels",
                                                  "presenter",
                                                  "valid",
                                                  "can_undo",
                                                  "can_redo",
                                                  "errors",
                                                  "status",
                                                  "backend",
                                                  "visible_heads",
                                                  "dims",
                                                  "computed_by",
                                                  "gpu_fallback_reason",
                                                  "query_tokens",
                                                  "padded_keys",
                                                  "next_token",
                                                  "knockout",
                                                  "pins",
                                                  "compare",
                                                  "attn_weights",
                                                  "weights_overview",
                                                  "window",
                                                  "check",
                                                  "lesson",
                                                  "view_fit",
                                                  "pipeline_layout"};
  return fields;
}

std::vector<std::string> script_words(const std::string& line) {
  try {
    return action_words(line);  // one splitter for scripts and lessons' lines
  } catch (const ActionError& e) {
    throw ScriptError{e.what()};
  }
}

const std::vector<std::string>& Script::action_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ActionSpec& a : kActions) n.push_back(a.name);
    return n;
  }();
  return names;
}

Script Script::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ScriptError{path + ": cannot read the script"};
  std::stringstream text;
  text << f.rdbuf();
  return parse(text.str(), path);
}

Script Script::parse(const std::string& text, const std::string& name) {
  Script s;
  s.name_ = name;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = name + ":" + std::to_string(number) + ": ";
    std::vector<std::string> words;
    try {
      words = script_words(line);
    } catch (const ScriptError& e) {
      throw ScriptError{where + e.message};
    }
    if (words.empty()) continue;
    const ActionSpec* a = find_action(words[0]);
    if (!a) {
      std::string known;
      for (const ActionSpec& k : kActions) known += std::string(known.empty() ? "" : ", ") + k.name;
      throw ScriptError{where + "unknown action \"" + words[0] + "\"; the actions are " + known};
    }
    const int n = int(words.size()) - 1;
    if (n < a->min_args || n > a->max_args)
      throw ScriptError{
          where + words[0] + " takes " +
          (a->min_args == a->max_args ? std::to_string(a->min_args)
                                      : std::to_string(a->min_args) + " to " + std::to_string(a->max_args)) +
          " argument" + (a->max_args == 1 ? "" : "s") + " (" + a->usage + "), got " + std::to_string(n)};
    s.lines_.push_back({number, std::move(words)});
  }
  return s;
}

void Script::fail(const ScriptLine& line, const std::string& why) {
  failed_ = true;
  error_ = name_ + ":" + std::to_string(line.number) + ": " + why;
}

bool Script::settled(const AppState& state, const UiEnv& env) const {
  return !state.computer.busy() && !state.stages.busy() && !large_view_info(env.panels).computing &&
         !check_busy(env.panels) && (state.autosave_path.empty() || !state.autosave_pending);
}

void Script::before_new_frame(ImGuiIO& io) {
  if (key_ < 0) return;
  const bool down = key_frames_ == 0;  // down for one frame, then up: one press
  io.KeysDown[key_] = down;
  io.KeyCtrl = down && key_ctrl_;
  io.KeyShift = down && key_shift_;
  if (++key_frames_ > 1) key_ = -1;
}

void Script::before_ui(AppState& state, UiEnv& env) {
  if (hover_query_ >= 0 || hover_key_ >= 0) report_hover(hover_query_, hover_key_);
  if (!drag_path_.empty()) {  // a scripted drag moves one cell a frame, as a hand would
    mask_drag_move(env.panels, state, drag_path_.front().first, drag_path_.front().second);
    drag_path_.erase(drag_path_.begin());
    if (drag_path_.empty()) mask_drag_release(env.panels);
    return;
  }
  if (failed_ || next_ >= lines_.size() || key_ >= 0 || !pending_screenshot_.empty()) return;
  // The previous line's result has landed and been drawn twice (a tab opened, a layout settled).
  if (!settled(state, env) || ++quiet_frames_ < 3) return;
  quiet_frames_ = 0;
  const ScriptLine& line = lines_[next_++];
  try {
    run(line, state, env);
  } catch (const ActionError& e) {
    fail(line, e.what());
  } catch (const Error& e) {
    fail(line, e.what());
  }
}

std::string Script::run_now(const std::vector<std::string>& words, AppState& state, UiEnv& env) {
  Script s;
  const ScriptLine line{0, words};
  try {
    s.run(line, state, env);
  } catch (const ActionError& e) {
    return e.what();
  } catch (const Error& e) {
    return e.what();
  }
  return s.failed_ ? s.error_.substr(s.error_.find(": ") + 2) : "";
}

void Script::run(const ScriptLine& line, AppState& state, UiEnv& env) {
  const std::vector<std::string>& w = line.words;
  const std::string& verb = w[0];
  auto applied = [&](const Action& a, const char* slot) {
    if (!state.apply(a) && state.errors.count(slot)) fail(line, state.errors[slot]);
  };
  if (verb == "open") {  // File > Open's own path: the same kinds of file, remembered in Recent
    state.errors.erase("file");
    open_any_path(state, env, w[1]);  // the window stays as it is: Open suggests no view
    if (state.errors.count("file")) return fail(line, state.errors["file"]);
  } else if (verb == "tab") {
    const ViewInfo* v = find_view(w[1]);
    if (!v) return fail(line, "no tab \"" + w[1] + "\"; the tabs are " + view_names());
    state.apply(show_view(v->id));
  } else if (verb == "set" && (w[1] == "backend" || w[1] == "Backend")) {  // not an edit of the scenario
    static const std::map<std::string, BackendChoice> choices = {
        {"auto", BackendChoice::automatic}, {"cpu", BackendChoice::cpu}, {"gpu", BackendChoice::gpu}};
    const auto it = choices.find(w[2]);
    if (it == choices.end()) return fail(line, "backend: expected auto, cpu or gpu, got \"" + w[2] + "\"");
    choose_backend(state, it->second);
  } else if (verb == "set") {
    const Action a = set_control(w[1], w[2]);
    applied(a, a.slot.c_str());
  } else if (verb == "mask-preset") {
    applied(set_mask_preset(w[1]), "mask");
  } else if (verb == "mask-paint") {
    const int row = parse_index(w[1], "mask-paint ROW"), col = parse_index(w[2], "mask-paint COL");
    bool block;
    if (w.size() == 4) {
      if (w[3] != "block" && w[3] != "unblock")
        return fail(line, "mask-paint: the third word is block or unblock, got \"" + w[3] + "\"");
      block = w[3] == "block";
    } else {  // a click: the cell pressed decides, as in the mask editor
      const Scenario& s = state.scenario();
      const std::size_t k =
          std::size_t(row) * std::size_t(std::max<std::int64_t>(1, s.S())) + std::size_t(col);
      block = !(k < s.mask.cells.size() && std::isinf(s.mask.cells[k]));
      if (s.mask.scope != MaskScope::shared)
        throw ActionError("mask-paint ROW COL needs block or unblock with a per-batch or per-head mask");
    }
    applied(paint_mask_cells({{row, col}}, block), "mask");
  } else if (verb == "mask-drag") {
    const int r0 = parse_index(w[1], "mask-drag ROW0"), c0 = parse_index(w[2], "mask-drag COL0");
    const int r1 = parse_index(w[3], "mask-drag ROW1"), c1 = parse_index(w[4], "mask-drag COL1");
    const Scenario& s = state.scenario();
    if (s.mask.cells.empty())
      return fail(line, "mask-drag: there is no attn_mask to paint (mask-preset first)");
    if (std::max(r0, r1) >= s.L() || std::max(c0, c1) >= s.S())
      return fail(line, "mask-drag: a cell is outside the (" + std::to_string(s.L()) + ", " +
                            std::to_string(s.S()) + ") mask");
    state.apply(show_view(ViewTab::mask));
    mask_drag_press(env.panels, state, r0, c0);
    // The pointer's path, one cell a frame: the straight line, as the editor fills a fast drag.
    const int steps = std::max(std::abs(r1 - r0), std::abs(c1 - c0));
    for (int k = 1; k <= steps; ++k)
      drag_path_.push_back({r0 + int(std::lround(float(r1 - r0) * float(k) / float(steps))),
                            c0 + int(std::lround(float(c1 - c0) * float(k) / float(steps)))});
    if (drag_path_.empty()) mask_drag_release(env.panels);
  } else if (verb == "key") {
    if (!parse_key(w[1], &key_, &key_ctrl_, &key_shift_)) {
      key_ = -1;
      return fail(line, "no key \"" + w[1] +
                            "\"; keys are letters, digits, [ ] / ?, left right up down pageup pagedown "
                            "escape enter tab, with ctrl+ or shift+ before them");
    }
    key_frames_ = 0;
  } else if (verb == "hover") {
    const ViewInfo* v = find_view(w[1]);
    if (!v) return fail(line, "no view \"" + w[1] + "\"; the views are " + view_names());
    state.apply(show_view(v->id));
    hover_query_ = parse_index(w[2], "hover ROW");
    hover_key_ = parse_index(w[3], "hover COL");
  } else if (verb == "unhover") {
    hover_query_ = hover_key_ = -1;
  } else if (verb == "drop") {  // a path dropped on the window, as a file manager drops it
    if (!env.files) env.files = std::make_shared<FileUi>();
    env.files->dropped.push_back(w[1]);
  } else if (verb == "copy") {  // Edit > Copy heatmap values
    if (w[1] != "tsv" && w[1] != "numpy") return fail(line, "copy takes tsv or numpy");
    copy_current_heatmap(w[1] == "tsv" ? CopyAs::tsv : CopyAs::numpy);
  } else if (verb == "clipboard") {  // the clipboard's text, to a file
    const char* text = ImGui::GetClipboardText();
    const std::string t = text ? text : "";
    try {
      write_file_atomic(w[1], std::vector<unsigned char>(t.begin(), t.end()));
    } catch (const Error& e) {
      return fail(line, e.what());
    }
  } else if (verb == "check") {  // File > Check my implementation...: the student's file, in the Check view
    check_file(env.panels, w[1]);
    state.apply(show_view(ViewTab::check));
  } else if (verb == "pin") {
    if (!state.pin(w[1])) fail(line, state.status);
  } else if (verb == "compare" && w[1] == "previous" && w[2] == "live") {  // before / after the last edit
    state.apply(set_compare_mode(CompareMode::before_after));
    state.apply(show_view(ViewTab::compare));
  } else if (verb == "compare") {
    for (const std::string& p : {w[1], w[2]})
      if (p != "live" && !state.find_pin(p))
        return fail(line, "no pin \"" + p + "\" (pin it first, or say live)");
    state.apply(set_compare_pins(w[1], w[2]));
    state.apply(show_view(ViewTab::compare));
  } else if (verb == "knockout") {  // HEADS: layer.head list, "1.0,1.3"
    std::vector<std::string> args(w.begin() + 1, w.end());
    Ablation mode = state.scenario().knockouts.ablation;
    if (args.size() > 1 && (args.back() == "zero" || args.back() == "mean")) {
      mode = args.back() == "zero" ? Ablation::zero : Ablation::mean;
      args.pop_back();
    }
    try {
      if (args.size() == 1 && args[0] == "none") {
        applied(set_knockouts({}, mode), "what_if");
      } else if (args.size() == 1) {
        applied(set_knockouts(parse_heads(args[0], "knockout"), mode), "what_if");
      } else if (args.size() == 2 && args[0] == "all-but") {
        const std::vector<HeadRef> keep = parse_heads(args[1], "knockout all-but");
        std::vector<std::int64_t> heads;
        for (const HeadRef& h : keep) {
          if (h.layer != keep[0].layer)
            return fail(line, "knockout all-but: the heads kept are of one layer");
          heads.push_back(h.head);
        }
        applied(keep_only_heads(keep[0].layer, heads, mode), "what_if");
      } else {
        return fail(line,
                    "knockout: expected none, HEADS (layer.head list, e.g. 1.0,1.3) or all-but HEADS, "
                    "then zero or mean");
      }
    } catch (const ConfigError& e) {
      return fail(line, e.what());
    }
  } else if (verb == "undo") {
    state.undo();
  } else if (verb == "redo") {
    state.redo();
  } else if (verb == "screenshot") {
    pending_screenshot_ = w[1];
  } else if (verb == "dump-state") {
    pending_dump_ = w[1];
  } else if (verb == "lesson") {
    const int step = w.size() == 3 ? parse_index(w[2], "lesson STEP") : -1;
    if (const std::string why = start_lesson(state, env, w[1], step); !why.empty()) fail(line, why);
  } else if (verb == "lesson-next" || verb == "lesson-back" || verb == "lesson-solve") {
    const std::string why = verb == "lesson-next"   ? next_lesson_step(state, env)
                            : verb == "lesson-back" ? previous_lesson_step(state, env)
                                                    : solve_lesson_step(state, env);
    if (!why.empty()) fail(line, why);
  } else if (verb == "lesson-export") {  // File > Export lesson...'s export, waited for
    const bool folder = !w[2].empty() && (w[2].back() == '/' || std::filesystem::is_directory(w[2]));
    std::string summary;
    if (const std::string why = export_lesson(env.assets_dir, w[1], w[2], folder, &summary); !why.empty())
      fail(line, why);
    else
      state.status = "exported the lesson handout to " + w[2] + " (" + summary + ")";
  }
}

void Script::after_render(const AppState& state, const UiEnv& env, int width, int height,
                          const std::function<bool(const std::string&, int, int)>& save) {
  if (!pending_screenshot_.empty()) {
    if (!save(pending_screenshot_, width, height)) {
      failed_ = true;
      error_ = name_ + ": cannot write the screenshot " + pending_screenshot_;
    }
    pending_screenshot_.clear();
  }
  if (pending_dump_.empty()) return;
  const std::string path = pending_dump_;
  pending_dump_.clear();
  nlohmann::json j = nlohmann::json::parse(to_json(state.scenario()));
  const ViewState& v = state.scenario().view;
  const WindowState& win = state.window();
  const PanelsShown panels = panels_shown(win, float(width), ImGui::GetFontSize());
  nlohmann::json r = {{"tab", view_info(win.tab).name},
                      {"stage", v.stage},
                      {"hovered", {{"query", v.hover_query}, {"key", v.hover_key}}},
                      {"selected", {{"head", v.sel_head}, {"query", v.sel_query}, {"key", v.sel_key}}},
                      {"side_panels", {{"controls", panels.controls}, {"inspector", panels.inspector}}},
                      {"presenter", win.presenter},
                      {"window",
                       {{"presenter", win.presenter},
                        {"font_scale", win.font_scale},
                        {"colormap", to_string(win.colormap)},
                        {"focus", win.focus},
                        {"keys_overlay", win.show_keys},
                        {"pipeline_stage", v.pipeline_stage},
                        {"reshape_step", v.reshape_step}}},
                      {"valid", state.result.valid()},
                      {"can_undo", state.history.can_undo()},
                      {"can_redo", state.history.can_redo()},
                      {"errors", state.errors},
                      {"status", state.status},
                      {"backend", state.computer.backend() == BackendChoice::cpu   ? "cpu"
                                  : state.computer.backend() == BackendChoice::gpu ? "gpu"
                                                                                   : "auto"}};
  if (state.result.valid()) {
    const Dims& d = state.result.forward->dims;
    nlohmann::json heads = nlohmann::json::array();
    for (std::int64_t h = 0; h < d.H; ++h)  // the heads' toggles (Token lines) hide some
      if (std::find(v.hidden_heads.begin(), v.hidden_heads.end(), int(h)) == v.hidden_heads.end())
        heads.push_back(h);
    r["visible_heads"] = heads;
    r["dims"] = {{"N", d.N}, {"L", d.L}, {"S", d.S_total}, {"E", d.E}, {"H", d.H}};
    r["computed_by"] = backend_name(state.result.forward->backend);
    // Whether the result holds attn_weights, or a view computed them, or only their overview (the
    // Heads view's at the largest sizes).
    const ForwardResult<float>& f = *state.result.forward;
    r["attn_weights"] = f.trace.has("attn_weights")                       ? "kept"
                        : find_stage(f, "attn_weights", false) != nullptr ? "computed"
                        : f.overview.valid()                              ? "overview"
                                                                          : "left out";
    if (f.overview.valid())
      r["weights_overview"] = {{"block", f.overview.block}, {"columns", f.overview.columns}};
    r["gpu_fallback_reason"] = state.result.forward->fallback_reason;  // "" unless the GPU was refused
    r["query_tokens"] = state.result.query_tokens;
    // The keys of the batch item shown that key_padding_mask marks as padding (the views label them).
    const MaskSpec& m = state.scenario().mask;
    const std::int64_t b = std::clamp<std::int64_t>(v.batch_index, 0, d.N - 1);
    nlohmann::json padded = nlohmann::json::array();
    if (m.key_padding_shape.size() == 2 && m.key_padding_shape[0] == d.N)
      for (std::int64_t j = 0; j < m.key_padding_shape[1]; ++j)
        if (m.key_padding[std::size_t(b * m.key_padding_shape[1] + j)]) padded.push_back(j);
    r["padded_keys"] = padded;
    if (state.result.model) {
      nlohmann::json top = nlohmann::json::array();
      for (std::size_t k = 0; k < state.result.model->top_k.size(); ++k)
        top.push_back({{"token", state.result.model->top_k_labels[k]},
                       {"probability", state.result.model->top_k[k].probability}});
      r["next_token"] = top;
      // Head knock-outs: the heads, how, the next token without them, and the heads whose
      // pattern moved by at least kPatternChanged.
      const ModelResult& mr = *state.result.model;
      if (mr.knockouts.active()) {
        nlohmann::json before = nlohmann::json::array(), changed = nlohmann::json::array();
        for (std::size_t k = 0; k < mr.top_k_before.size(); ++k)
          before.push_back(
              {{"token", mr.top_k_before_labels[k]}, {"probability", mr.top_k_before[k].probability}});
        for (const PatternChange& p : mr.pattern_changes)
          if (p.max_abs_diff >= kPatternChanged)
            changed.push_back({{"head", format_heads({p.head})}, {"max_abs_diff", p.max_abs_diff}});
        r["knockout"] = {{"heads", format_heads(mr.knockouts.heads)},
                         {"ablation", to_string(mr.knockouts.ablation)},
                         {"next_token_before", before},
                         {"changed_heads", changed}};
      }
    }
  }
  if (const LessonPlace& p = win.lesson; p.lesson) {
    const LessonStep& step = p.lesson->steps[std::size_t(p.step)];
    r["lesson"] = {{"name", p.lesson->name},
                   {"step", p.step},
                   {"steps", p.lesson->steps.size()},
                   {"task", step.has_task ? nlohmann::json(step.task.instruction) : nlohmann::json()},
                   {"task_done", lesson_task_done(state)}};
    const auto [drawn, shown] = lesson_pointer_seen(state);  // the step's pointer, last frame
    r["lesson"]["pointer"] = {{"drawn", drawn}, {"shown", shown}};
  } else {
    r["lesson"] = nullptr;
  }
  nlohmann::json pins = nlohmann::json::array();
  for (const Pin& p : state.pins) pins.push_back(p.name);
  r["pins"] = pins;
  if (win.tab == ViewTab::compare && state.result.valid()) {
    std::shared_ptr<const ForwardResult<float>> after = state.result.forward, before;
    if (v.compare_mode == CompareMode::before_after) before = state.previous.forward;
    if (v.compare_mode == CompareMode::pins) {
      const Pin* a = state.find_pin(v.compare_pin_a);
      const Pin* b = state.find_pin(v.compare_pin_b);
      before = a ? a->result.forward : nullptr;
      if (b) after = b->result.forward;
    }
    nlohmann::json c = {{"mode", int(v.compare_mode)}};
    if (before && after) c.update(stage_difference(*after, *before, v.stage));
    r["compare"] = c;
  }
  // How far the view's items reached past its right edge (a cut line) and below its bottom (it
  // scrolls), last frame, in pixels.
  r["view_fit"] = {{"overflow_right", env.view_overflow_right},
                   {"overflow_bottom", env.view_overflow_bottom}};
  if (win.tab == ViewTab::pipeline) {  // the Pipeline view and its Export... button on screen, in pixels
    const PipelineInfo& p = pipeline_info(env.panels);
    r["pipeline_layout"] = {
        {"view", {p.view.x, p.view.y, p.view.z, p.view.w}},
        {"export", {p.export_button.x, p.export_button.y, p.export_button.z, p.export_button.w}},
        {"label_px", p.label_px},
        {"font", ImGui::GetFontSize()},
        {"selected_box", {p.selected_box.x, p.selected_box.y, p.selected_box.z, p.selected_box.w}},
        {"graph_view", {p.graph_view.x, p.graph_view.y, p.graph_view.z, p.graph_view.w}}};
  }
  if (win.tab == ViewTab::heads) {  // the Heads view's grid as the last frame drew it, in pixels
    const HeadsInfo& h = heads_info(env.panels);
    nlohmann::json maps = nlohmann::json::array();
    for (const HeatmapEvent& m : h.maps)
      maps.push_back({{"cells", {m.grid_min.x, m.grid_min.y, m.grid_max.x, m.grid_max.y}}, {"cell", m.cell}});
    r["heads_layout"] = {{"view", {h.view.x, h.view.y, h.view.z, h.view.w}},
                         {"font", ImGui::GetFontSize()},
                         {"compact", h.compact},
                         {"cols", h.cols},
                         {"rows_shown", h.rows_shown},
                         {"maps", maps}};
  }
  if (const CheckStatus c = check_status(env.panels); !c.file.empty()) {
    nlohmann::json cases = nlohmann::json::array();
    for (const CheckStatus::Case& k : c.cases)
      cases.push_back({{"name", k.name},
                       {"ok", k.ok},
                       {"max_abs_diff", std::isfinite(k.max_abs_diff) ? nlohmann::json(k.max_abs_diff)
                                                                      : nlohmann::json("inf")}});
    r["check"] = {{"file", c.file},
                  {"running", c.running},
                  {"verdict", c.verdict.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.verdict)},
                  {"mistakes", c.mistakes},
                  {"mask_convention",
                   c.mask_convention.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.mask_convention)},
                  {"error", c.error},
                  {"cases", cases}};
  }
  j["result"] = r;
  const std::string text = j.dump(2) + "\n";
  try {
    write_file_atomic(path, std::vector<unsigned char>(text.begin(), text.end()));
  } catch (const Error& e) {
    failed_ = true;
    error_ = name_ + ": " + e.what();
  }
}

}  // namespace mha::app
