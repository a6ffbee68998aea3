// Mask editor (view 4): preset, scope and convention of the attn_mask; its cells painted by click or
// drag (one undoable edit per drag); key_padding_mask toggles and valid lengths; the merged mask torch
// really adds to the scores, read from the trace; "Copy as PyTorch".
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "errors.hpp"
#include "export_dialog.hpp"
#include "heatmap.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "studio_names.hpp"
#include "text_parse.hpp"

namespace mha::app {

namespace {

constexpr float kBlocked = kMaskBlocked;
const ImVec4 kWarn(1.0f, 0.55f, 0.2f, 1.0f);
const ImVec4 kError(1.0f, 0.35f, 0.35f, 1.0f);

// Labels for axes whose tokens do not match the size: "0", "1", … (one growing list for every grid).
const std::vector<std::string>* axis_labels(std::vector<std::string>& indices,
                                            const std::vector<std::string>& tokens, int n) {
  if (int(tokens.size()) == n) return &tokens;
  while (int(indices.size()) < n) indices.push_back(std::to_string(indices.size()));
  return &indices;
}

// A grid's content can change from anywhere (undo, load, another panel) and the scenario keeps no
// revision counter, so texture versions hash the values: word-wise, ~20 µs for 256×256 floats.
std::uint64_t fingerprint(const void* data, std::size_t bytes, std::uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::uint64_t fingerprint_floats(std::initializer_list<float> v, std::uint64_t h) {
  for (float x : v) h = fingerprint(&x, sizeof x, h);
  return h;
}

// draw_heatmap with `text(r, c, cell width)` printed on the cells where it fits.
HeatmapEvent heatmap_with_text(Textures& tex, Heatmap h,
                               const std::function<const char*(int, int, float)>& text) {
  h.cell_text = text;
  return draw_heatmap(tex, h);
}

// The height a heatmap needs for `rows` rows of at most `max_cell`, plus room for vertical key labels.
float grid_height(int rows, float max_cell) {
  return ImGui::GetFontSize() * 8 + float(rows) * max_cell;
}

// The scale beside a mask map, from `top`: a colorbar when cells hold additive biases, else what its
// two colours mean (0 attends, -inf blocks).
constexpr float kScaleFonts = 5.5f;  // its width, in font sizes
void mask_scale(Textures& tex, float range, float top, float height) {
  ImGui::SameLine();
  ImGui::SetCursorScreenPos(ImVec2(ImGui::GetCursorScreenPos().x, top));
  if (range > 0) return panel::colorbar_within(tex, Colormap::diverging, -range, range, height);
  const float font = ImGui::GetFontSize();
  ImGui::BeginGroup();
  for (const bool blocked : {false, true}) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::GetWindowDrawList()->AddRectFilled(
        p, ImVec2(p.x + font, p.y + font), blocked ? kMaskedColor : colormap_rgba(Colormap::diverging, 0.5f));
    ImGui::GetWindowDrawList()->AddRect(p, ImVec2(p.x + font, p.y + font),
                                        ImGui::GetColorU32(ImGuiCol_TextDisabled));
    ImGui::Dummy(ImVec2(font, font));
    ImGui::SameLine();
    ImGui::TextUnformatted(blocked ? "-inf" : "0");
  }
  ImGui::EndGroup();
  // The legend is shorter than the grid beside it: what follows goes under the grid.
  const float below = top + height + ImGui::GetStyle().ItemSpacing.y;
  if (ImGui::GetCursorScreenPos().y < below)
    ImGui::SetCursorScreenPos(ImVec2(ImGui::GetCursorScreenPos().x, below));
}

// The paint tool. A press decides whether the whole drag blocks or unblocks (the first cell's
// state flipped); each move paints the cells on the line from the last cell that change, as one
// action; every action of a drag shares one gesture: one undo step, and Compare's "before" is the
// mask before the press. The mouse (paint below) and scripts (mask_drag_*) drive the same tool.
using Blocked = std::function<bool(int, int)>;
using MakePaint = std::function<Action(Cells, bool, std::uint64_t)>;
struct PaintTool {
  std::string grid;  // empty: no drag
  bool block = false;
  int row = -1, col = -1;  // last cell painted: fast drags fill the line from there
  std::uint64_t gesture = 0;
  bool scripted = false;  // driven by mask_drag_* (a script), not the mouse: only release() ends it

  void press(AppState& state, const std::string& on, int r, int c, const Blocked& blocked,
             const MakePaint& make) {
    grid = on;
    block = !blocked(r, c);
    row = r;
    col = c;
    gesture = new_gesture();
    state.apply(make({{r, c}}, block, gesture));
  }
  void move_to(AppState& state, int r, int c, const Blocked& blocked, const MakePaint& make) {
    if (grid.empty() || (r == row && c == col)) return;
    Cells cells;
    const int steps = std::max(std::abs(r - row), std::abs(c - col));
    for (int k = 1; k <= steps; ++k) {
      const int rr = row + int(std::lround(float(r - row) * float(k) / float(steps)));
      const int cc = col + int(std::lround(float(c - col) * float(k) / float(steps)));
      if (blocked(rr, cc) != block) cells.push_back({rr, cc});
    }
    row = r;
    col = c;
    if (!cells.empty()) state.apply(make(std::move(cells), block, gesture));
  }
  void release() { *this = PaintTool{}; }
};

// The popup that types one additive value ("-inf" allowed).
struct ValuePopup {
  std::size_t index = 0;
  int row = 0, col = 0;
  char text[32] = "";
  std::string error;
};

// Rows of the merged slice whose every key is blocked, cached per result and slice.
struct MergedInfo {
  std::uint64_t generation = 0;
  int n = -1, h = -1;
  float range = 0;
  std::vector<int> full_rows;
};

}  // namespace

// What the mask editor keeps between frames.
struct MaskEditorPanel {
  PaintTool drag;                       // the drag painting a grid (mouse or script)
  ValuePopup popup;                     // the additive value being typed
  std::vector<std::string> indices;     // "0", "1", …: axis labels where the tokens do not fit
  std::uint64_t slider_gesture = 0;     // the slider drag in progress: one undo step
  std::uint64_t cells_fingerprint = 0;  // the shown attn_mask slice's values, and from them:
  float cells_range = 0;                // the largest |finite value|
  int cells_biases = 0;                 // finite non-zero values
  MergedInfo merged;
  std::vector<float> padding_values;       // the heatmap reads floats: 0/1 of the N·S bytes, a few hundred
  std::vector<std::string> padding_items;  // "item 0", "item 1", …
  std::string pytorch_text;                // "Copy as PyTorch", made again for each new result
  std::uint64_t pytorch_generation = 0;
  void draw(AppState& state, Textures& tex);
};

namespace {

// One frame of painting on `grid` by the mouse.
void paint(PaintTool& drag, AppState& state, const std::string& grid, const HeatmapEvent& ev,
           const Blocked& blocked, const MakePaint& make) {
  if (drag.scripted) return;  // the pointer is not the one painting
  if (drag.grid.empty() && ev.hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Left))
    drag.press(state, grid, ev.row, ev.col, blocked, make);
  else if (drag.grid == grid && ev.hovered && ImGui::IsMouseDown(ImGuiMouseButton_Left))
    drag.move_to(state, ev.row, ev.col, blocked, make);
  if (drag.grid == grid && !drag.scripted && !ImGui::IsMouseDown(ImGuiMouseButton_Left)) drag.release();
}

// Whether cell (r, c) of the attn_mask slice the editor shows is blocked, read from the live scenario.
bool shown_cell_blocked(const AppState& state, int r, int c) {
  const Scenario& sc = state.scenario();
  const MaskSpec& m = sc.mask;
  const Shape want = attn_mask_shape(m.scope, sc.batch, sc.num_heads, sc.L(), sc.S());
  if (m.cells_shape != want || m.cells.size() != std::size_t(numel(want))) return false;
  const std::int64_t L = want[want.size() - 2], S = want.back();
  const std::int64_t n =
      std::clamp<std::int64_t>(sc.view.batch_index, 0, std::max<std::int64_t>(0, sc.batch - 1));
  const std::int64_t h =
      std::clamp<std::int64_t>(sc.view.sel_head, 0, std::max<std::int64_t>(0, sc.num_heads - 1));
  if (r < 0 || c < 0 || r >= L || c >= S) return false;
  const std::size_t k = std::size_t((mask_slice(m.scope, n, h, sc.num_heads) * L + r) * S + c);
  return is_blocked(m.cells[k]);
}

// One additive value of the mask cells (bounds checked: the mask may have changed since the click).
void set_cell(MaskSpec& m, std::size_t k, float v) {
  if (k >= m.cells.size()) throw ConfigError("attn_mask", "the mask changed under the edited cell");
  m.cells[k] = v;
  m.preset = MaskPreset::custom;
}

// A slider's gesture: a new one each time the slider is grabbed, so a drag is one undo step.
std::uint64_t slider_gesture(std::uint64_t& gesture) {
  if (ImGui::IsItemActivated() || gesture == 0) gesture = new_gesture();
  return gesture;
}

// An edit of the mask spec, refused with the reason by the mask controls if the mask would not fit
// in memory (apply_mask_preset and fit_mask_to_sizes throw then).
Action mask_edit(std::string what, std::function<void(MaskSpec&)> edit, void (*then)(Scenario&),
                 std::uint64_t gesture = 0) {
  Action a;
  a.what = std::move(what);
  a.slot = "mask";
  a.gesture = gesture;
  a.change = [edit = std::move(edit), then](Scenario& s) {
    edit(s.mask);
    if (then) then(s);
  };
  return a;
}

const char* const kPresetNames[] = {"none",           "causal",    "padding", "sliding window",
                                    "block-diagonal", "prefix-LM", "random",  "custom (edited)"};
const char* const kScopeNames[] = {"shared (L, S)", "per batch (N, L, S)", "per head (N\xC2\xB7H, L, S)"};
const char* const kConventionNames[] = {"torch bool (True = blocked)", "keep (1 = attend)", "additive float"};

const char* convention_text(MaskConvention c) {
  switch (c) {
    case MaskConvention::torch_bool:
      return "torch bool: True = blocked (the score becomes -inf), False = attend. torch takes exactly this "
             "as attn_mask (dtype torch.bool).";
    case MaskConvention::keep:
      return "keep: 1 = attend, 0 = blocked, as in masked_fill(mask == 0, -inf). torch reads True as "
             "BLOCKED, so pass attn_mask = (mask == 0), never the keep mask itself.";
    case MaskConvention::additive:
      return "additive float: each value is added to the scaled score: 0 = attend, -inf = blocked, anything "
             "else biases. torch adds a float attn_mask as it is.";
  }
  return "";
}

const char* scope_text(MaskScope s) {
  switch (s) {
    case MaskScope::shared: return "One (L, S) mask for every batch item and head.";
    case MaskScope::per_batch:
      return "One mask per batch item, shared by its heads. torch has no (N, L, S) layout: it needs the mask "
             "repeated per head to (N\xC2\xB7H, L, S).";
    case MaskScope::per_head: return "torch's 3-D layout: slice n\xC2\xB7H + h masks batch item n, head h.";
  }
  return "";
}

// What a cell `cell` pixels wide shows, by convention ("T"/"F" where "False" does not fit). Finite
// non-zero values are additive biases: the bool conventions ignore them (compute.cpp reads only -inf
// as blocked), so they show as attend there.
const char* cell_text(MaskConvention c, float v, float cell, char* buf, std::size_t n) {
  const bool b = is_blocked(v);
  switch (c) {
    case MaskConvention::torch_bool:
      if (ImGui::CalcTextSize("False").x + 4 > cell) return b ? "T" : "F";
      return b ? "True" : "False";
    case MaskConvention::keep: return b ? "0" : "1";
    case MaskConvention::additive:
      if (b) return "-inf";
      std::snprintf(buf, n, "%.3g", double(v));
      return buf;
  }
  return "";
}

void preset_controls(AppState& state, std::uint64_t& gesture_of_slider) {
  const Scenario& sc = state.scenario();
  const MaskSpec& m = sc.mask;
  const float font = ImGui::GetFontSize();
  ImGui::SetNextItemWidth(font * 9);
  if (ImGui::BeginCombo("preset", kPresetNames[int(m.preset)])) {
    for (int p = 0; p < int(MaskPreset::custom); ++p)
      if (ImGui::Selectable(kPresetNames[p], int(m.preset) == p))
        state.apply(set_mask_preset(to_string(MaskPreset(p))));
    ImGui::EndCombo();
  }
  const int L = int(std::max<std::int64_t>(1, sc.L())), S = int(std::max<std::int64_t>(1, sc.S()));
  // A preset's parameter: each change re-applies the preset; a slider drag is one gesture.
  auto slider = [&](bool changed, const char* what, std::function<void(MaskSpec&)> set) {
    const std::uint64_t gesture = slider_gesture(gesture_of_slider);
    if (changed) state.apply(mask_edit(what, std::move(set), apply_mask_preset, gesture));
  };
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 7);
  MaskSpec edit = m;  // the widgets edit a copy; the action carries the new value
  // The preset's note, cut short at the view's edge (whole on hover).
  auto note = [](const char* text) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    panel::folded_text(text);
    ImGui::PopStyleColor();
  };
  switch (m.preset) {
    case MaskPreset::sliding_window:
      slider(ImGui::SliderInt("window w", &edit.window, 1, S), "mask: sliding window w",
             [w = edit.window](MaskSpec& x) { x.window = w; });
      break;
    case MaskPreset::block_diagonal:
      slider(ImGui::SliderInt("segments", &edit.segments, 1, L), "mask: block-diagonal segments",
             [k = edit.segments](MaskSpec& x) { x.segments = k; });
      break;
    case MaskPreset::prefix_lm:
      slider(ImGui::SliderInt("prefix length", &edit.prefix, 0, S), "mask: prefix length",
             [k = edit.prefix](MaskSpec& x) { x.prefix = k; });
      break;
    case MaskPreset::random: {
      slider(ImGui::SliderFloat("p", &edit.random_p, 0.0f, 1.0f, "blocked %.2f"), "mask: random p",
             [p = edit.random_p](MaskSpec& x) { x.random_p = p; });
      ImGui::SameLine();
      ImGui::SetNextItemWidth(font * 6);
      const std::uint64_t one = 1;
      if (ImGui::InputScalar("seed", ImGuiDataType_U64, &edit.random_seed, &one, nullptr, "%llu",
                             ImGuiInputTextFlags_EnterReturnsTrue))
        state.apply(mask_edit(
            "mask: random seed", [seed = edit.random_seed](MaskSpec& x) { x.random_seed = seed; },
            apply_mask_preset));
      break;
    }
    case MaskPreset::padding: note("valid lengths: under key_padding_mask below"); break;
    case MaskPreset::none: note("no attn_mask"); break;
    case MaskPreset::causal: note("query i sees keys j <= i"); break;
    case MaskPreset::custom: note("edited by hand"); break;
  }
}

// Scope, the batch item / head pickers (clamped to the result's N and H) and the convention.
// compact: a short view, whose explanations fold to a line each.
void scope_controls(AppState& state, int N, int H, bool compact) {
  const MaskSpec& m = state.scenario().mask;
  ViewState& view = state.view();
  const float font = ImGui::GetFontSize();
  // A short view sizes the scope's picker to the scope shown, so the pickers share its line.
  ImGui::SetNextItemWidth(ImGui::CalcTextSize(kScopeNames[compact ? int(m.scope) : 2]).x +
                          ImGui::GetFrameHeight() * 1.5f);
  int scope = int(m.scope);
  if (ImGui::Combo("scope", &scope, kScopeNames, 3) && scope != int(m.scope))
    state.apply(set_mask_scope(MaskScope(scope)));
  const bool scope_hovered = ImGui::IsItemHovered();
  // Which slice: the batch item and head are shared view state, so Heads and the inspector follow.
  // Written only when a picker moves: the result can be older than a file just opened, whose saved
  // head may be past this result's H.
  const float picker_w = font * (compact ? 2.5f : 5);  // a short view: narrow, to share the scope's line
  const char* item_label = compact ? "item" : "batch item";
  panel::same_line_if_fits(panel::labelled(item_label, picker_w));
  ImGui::SetNextItemWidth(picker_w);
  int n = std::clamp(view.batch_index, 0, std::max(0, N - 1));
  if (ImGui::SliderInt(item_label, &n, 0, std::max(0, N - 1)))
    view.batch_index = std::clamp(n, 0, std::max(0, N - 1));
  panel::same_line_if_fits(panel::labelled("head", picker_w));
  ImGui::SetNextItemWidth(picker_w);
  int h = std::clamp(view.sel_head, 0, std::max(0, H - 1));
  if (ImGui::SliderInt("head", &h, 0, std::max(0, H - 1)))
    view.sel_head = std::clamp(h, 0, std::max(0, H - 1));
  // A short view: what the scope means on hovering its picker, not a line of its own.
  if (compact) {
    if (scope_hovered) panel::text_tooltip(scope_text(m.scope));
  } else {
    panel::long_text(scope_text(m.scope), false, true);
  }

  ImGui::SetNextItemWidth(ImGui::CalcTextSize(kConventionNames[0]).x + ImGui::GetFrameHeight() * 1.5f);
  int conv = int(m.convention);
  if (ImGui::Combo("convention", &conv, kConventionNames, 3) && conv != int(m.convention))
    state.apply(mask_edit(
        std::string("mask convention: ") + kConventionNames[conv],
        [conv](MaskSpec& x) { x.convention = MaskConvention(conv); }, nullptr));
  // A short view: the picker's own text names the convention; what it means is on hover.
  if (compact) {
    if (ImGui::IsItemHovered()) panel::text_tooltip(convention_text(m.convention));
  } else {
    panel::long_text(convention_text(m.convention), false, true);
  }
}

void value_popup(ValuePopup& popup, AppState& state, const std::vector<std::string>& rows,
                 const std::vector<std::string>& cols) {
  if (!ImGui::BeginPopup("mask value")) return;
  const MaskSpec& m = state.scenario().mask;
  // The mask or the sizes changed under the popup.
  if (popup.index >= m.cells.size() || std::size_t(popup.row) >= rows.size() ||
      std::size_t(popup.col) >= cols.size()) {
    ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
    return;
  }
  ImGui::Text("query %s -> key %s: added to the score", rows[std::size_t(popup.row)].c_str(),
              cols[std::size_t(popup.col)].c_str());
  auto set = [&](float v, const char* what) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "mask cell (%d, %d) %s", popup.row, popup.col, what);
    state.apply(mask_edit(
        buf, [k = popup.index, v](MaskSpec& x) { set_cell(x, k, v); }, nullptr));
    ImGui::CloseCurrentPopup();
  };
  if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8);
  if (ImGui::InputText("value", popup.text, sizeof popup.text, ImGuiInputTextFlags_EnterReturnsTrue)) {
    float v = 0;
    if (parse_mask_value(popup.text, &v, &popup.error)) set(v, (std::string("= ") + popup.text).c_str());
  }
  if (ImGui::Button("0 (attend)")) set(0.0f, "= 0");
  ImGui::SameLine();
  if (ImGui::Button("-inf (block)")) set(kBlocked, "= -inf");
  if (!popup.error.empty()) ImGui::TextColored(kError, "%s", popup.error.c_str());
  ImGui::EndPopup();
}

// The cells of the slice being edited, painted or typed into.
// compact: a short view, where the grid takes the height left above its one hint line.
void cell_grid(MaskEditorPanel& p, AppState& state, Textures& tex, float width, bool compact) {
  const Scenario& sc = state.scenario();
  const MaskSpec& m = sc.mask;
  const float font = ImGui::GetFontSize();
  const std::int64_t N = sc.batch, H = sc.num_heads;
  const Shape want = attn_mask_shape(m.scope, N, H, sc.L(), sc.S());
  if (m.cells.empty()) {
    ImGui::TextWrapped(
        "No attn_mask: every query may attend to every key. Pick a preset, or start from an "
        "all-attend mask and paint it.");
    if (ImGui::Button("Start an empty mask"))  // fitting a custom mask with no cells makes them all 0
      state.apply(mask_edit(
          "mask: start an empty mask", [](MaskSpec& x) { x.preset = MaskPreset::custom; },
          fit_mask_to_sizes));
    return;
  }
  if (m.cells_shape != want || m.cells.size() != std::size_t(numel(want))) {
    ImGui::TextColored(kWarn, "The mask is %s but the sizes and scope need %s.",
                       shape_str(m.cells_shape).c_str(), shape_str(want).c_str());
    if (ImGui::Button("Fit the mask to the sizes"))
      state.apply(mask_edit(
          "mask: fit to sizes", [](MaskSpec&) {}, fit_mask_to_sizes));
    return;
  }
  const int L = int(want[want.size() - 2]), S = int(want.back());
  // The pickers follow the result; the scenario's sizes may differ while it recomputes.
  const std::int64_t n = std::clamp<std::int64_t>(sc.view.batch_index, 0, std::max<std::int64_t>(0, N - 1));
  const std::int64_t hd = std::clamp<std::int64_t>(sc.view.sel_head, 0, std::max<std::int64_t>(0, H - 1));
  const std::int64_t slice = mask_slice(m.scope, n, hd, H);
  const std::size_t base = std::size_t(slice) * std::size_t(L) * std::size_t(S);
  const float* cells = m.cells.data() + base;

  // The colour range and count of biases change only with the values: cached by fingerprint.
  std::uint64_t& cached = p.cells_fingerprint;
  float& range = p.cells_range;
  int& biases = p.cells_biases;
  const std::uint64_t fp =
      fingerprint(cells, sizeof(float) * std::size_t(L) * std::size_t(S), 0xcbf29ce484222325ull);
  if (fp != cached) {
    cached = fp;
    range = 0;
    biases = 0;
    for (int k = 0; k < L * S; ++k)
      if (std::isfinite(cells[k]) && cells[k] != 0) {
        range = std::max(range, std::fabs(cells[k]));
        ++biases;
      }
  }
  const bool additive = m.convention == MaskConvention::additive;
  const std::vector<std::string>* rows = axis_labels(p.indices, state.result.query_tokens, L);
  const std::vector<std::string>* cols = axis_labels(p.indices, state.result.key_tokens, S);

  if (m.scope == MaskScope::shared)
    ImGui::TextUnformatted("attn_mask (L, S): click or drag to paint");
  else if (m.scope == MaskScope::per_batch)
    ImGui::Text("attn_mask[%d] (batch item %d): click or drag", int(slice), int(n));
  else
    ImGui::Text("attn_mask[%d] (item %d, head %d): click or drag", int(slice), int(n), int(hd));
  Heatmap h;
  h.id = "mask/cells";
  h.values = cells;
  h.rows = L;
  h.cols = S;
  h.row_stride = S;
  // Allowed cells are one colour (white, the diverging map's 0); additive biases are coloured only
  // where they count, in the additive convention.
  h.vmin = additive ? -range : 0;
  h.vmax = additive ? range : 0;
  h.colormap = Colormap::diverging;
  h.row_labels = rows;
  h.col_labels = cols;
  h.blocked = [cells, S](int r, int c) {
    return is_blocked(cells[std::size_t(r) * std::size_t(S) + std::size_t(c)]);
  };
  h.show_values = false;
  h.max_cell = font * 3;
  const float below = ImGui::GetTextLineHeightWithSpacing() * (!additive && biases > 0 ? 2 : 1) +
                      ImGui::GetStyle().ItemSpacing.y;
  h.size = ImVec2(
      width - font * kScaleFonts,
      compact ? std::clamp(ImGui::GetContentRegionAvail().y - below, font * 5, grid_height(L, h.max_cell))
              : std::min(grid_height(L, h.max_cell), std::max(font * 12, width)));
  h.version = fingerprint_floats({h.vmin, h.vmax}, fp);
  h.selected_row = sc.view.sel_query;
  h.selected_col = sc.view.sel_key;
  char buf[96];  // cell text, then the name of the edit
  const MaskConvention conv = m.convention;
  const float top = ImGui::GetCursorScreenPos().y;
  const HeatmapEvent ev = heatmap_with_text(tex, h, [&](int r, int c, float cell) {
    return cell_text(conv, cells[std::size_t(r) * std::size_t(S) + std::size_t(c)], cell, buf, sizeof buf);
  });
  mask_scale(tex, h.vmax, top, ImGui::GetItemRectMax().y - top);

  if (ev.hovered &&
      (ImGui::IsMouseClicked(ImGuiMouseButton_Left) || ImGui::IsMouseClicked(ImGuiMouseButton_Right))) {
    state.view().sel_query = ev.row;  // the inspector follows the cell being edited
    state.view().sel_key = ev.col;
  }
  if (ev.hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Right)) {
    const std::size_t k = base + std::size_t(ev.row) * std::size_t(S) + std::size_t(ev.col);
    if (m.cells[k] != 0) {
      std::snprintf(buf, sizeof buf, "mask cell (%d, %d) = 0", ev.row, ev.col);
      state.apply(mask_edit(
          buf, [k](MaskSpec& x) { set_cell(x, k, 0.0f); }, nullptr));
    }
  }
  if (additive) {
    if (ev.hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
      p.popup.index = base + std::size_t(ev.row) * std::size_t(S) + std::size_t(ev.col);
      p.popup.row = ev.row;
      p.popup.col = ev.col;
      p.popup.error.clear();
      const float v = m.cells[p.popup.index];
      if (is_blocked(v))
        std::snprintf(p.popup.text, sizeof p.popup.text, "-inf");
      else
        std::snprintf(p.popup.text, sizeof p.popup.text, "%g", double(v));
      ImGui::OpenPopup("mask value");
    }
    value_popup(p.popup, state, *rows, *cols);
  } else {
    paint(
        p.drag, state, "cells", ev, [&state](int r, int c) { return shown_cell_blocked(state, r, c); },
        paint_mask_cells);
  }
  panel::long_text(additive
                       ? "Click a cell to type a value (-inf blocks); right-click resets it to 0."
                       : "The first cell pressed decides: the drag blocks or unblocks. Right-click: attend.",
                   compact, true);
  if (!additive && biases > 0) {
    ImGui::PushStyleColor(ImGuiCol_Text, kWarn);
    panel::long_text(std::to_string(biases) +
                         " cells hold additive values that this convention ignores (it reads only -inf as "
                         "blocked); switch to additive float to see them.",
                     compact);
    ImGui::PopStyleColor();
  }
}

// The additive mask torch adds to the scores: attn_mask merged with key_padding_mask (the trace's
// "attn_mask" stage), for the shown batch item and head.
void merged_grid(MaskEditorPanel& editor, AppState& state, Textures& tex, float width) {
  const auto& f = *state.result.forward;
  const Dims& d = f.dims;
  ViewState& view = state.view();
  ImGui::TextUnformatted("What torch adds to the scores");
  const Stage<float>* s = f.trace.find("attn_mask");
  if (!s) {
    ImGui::TextWrapped(
        "No mask in the last result: neither attn_mask nor key_padding_mask, so every query "
        "sees every key.");
    return;
  }
  const int n = std::clamp(view.batch_index, 0, int(d.N) - 1), h = std::clamp(view.sel_head, 0, int(d.H) - 1);
  const int L = int(s->shape[2]), S = int(s->shape[3]);
  const float* p = s->storage->data() + s->offset + n * s->strides[0] + h * s->strides[1];
  const std::int64_t rs = s->strides[2], cs = s->strides[3];
  MergedInfo& info = editor.merged;
  if (info.generation != state.result.generation || info.n != n || info.h != h) {
    info = MergedInfo{state.result.generation, n, h, 0, {}};
    for (int i = 0; i < L; ++i) {
      bool all = true;
      for (int j = 0; j < S; ++j) {
        const float v = p[i * rs + j * cs];
        all = all && is_blocked(v);
        if (std::isfinite(v)) info.range = std::max(info.range, std::fabs(v));
      }
      if (all) info.full_rows.push_back(i);
    }
  }
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("merged attn_mask, item %d, head %d%s", n, h, state.stale ? " (updating...)" : "");
  ImGui::PopTextWrapPos();
  {  // the merged mask as a figure: -inf cells hatched, as torch adds it
    FigureRequest req;
    req.id = "mask";
    req.caption = "merged attn_mask (what torch adds to the scores), batch item " + std::to_string(n);
    exporter::StageSlice sl;
    sl.stage = "attn_mask";
    sl.batch_index = n;
    sl.query_labels = state.result.query_tokens;
    sl.key_labels = state.result.key_tokens;
    const std::shared_ptr<const ForwardResult<float>> fwd = state.result.forward;
    const std::string stem = "mha-attn_mask-batch" + std::to_string(n);
    auto add = [&](const std::string& label, const std::string& suffix, int head) {
      exporter::StageSlice one = sl;
      one.head = head;
      req.choices.push_back({label, stem + suffix, [fwd, one] { return exporter::stage_figure(*fwd, one); }});
    };
    add("head " + std::to_string(h), "-head" + std::to_string(h), h);
    add("all heads", "-all", exporter::kAllHeads);
    export_button(state, req);
  }
  Heatmap hm;
  hm.zoomable = true;  // read-only: Ctrl+wheel zooms, a right-button drag pans
  hm.id = "mask/merged";
  hm.values = p;
  hm.rows = L;
  hm.cols = S;
  hm.row_stride = rs;
  hm.col_stride = cs;
  hm.vmin = -info.range;
  hm.vmax = info.range;
  hm.colormap = Colormap::diverging;
  hm.row_labels = axis_labels(editor.indices, state.result.query_tokens, L);
  hm.col_labels = axis_labels(editor.indices, state.result.key_tokens, S);
  hm.blocked = [p, rs, cs](int i, int j) { return is_blocked(p[i * rs + j * cs]); };
  hm.show_values = false;
  hm.max_cell = ImGui::GetFontSize() * 3;
  hm.size = ImVec2(width - ImGui::GetFontSize() * kScaleFonts,
                   std::min(grid_height(L, hm.max_cell), std::max(ImGui::GetFontSize() * 12, width)));
  hm.version = state.result.generation * 1000003u + std::uint64_t(n) * 131u + std::uint64_t(h);
  hm.selected_row = view.sel_query;
  hm.selected_col = view.sel_key;
  char buf[32];
  const float top = ImGui::GetCursorScreenPos().y;
  const HeatmapEvent ev = heatmap_with_text(tex, hm, [&](int i, int j, float cell) {
    return cell_text(MaskConvention::additive, p[i * rs + j * cs], cell, buf, sizeof buf);
  });
  mask_scale(tex, hm.vmax, top, ImGui::GetItemRectMax().y - top);
  if (ev.clicked) {  // selects for the inspector: view state, no undo step
    view.sel_query = ev.row;
    view.sel_key = ev.col;
  }
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled(
      "key_padding_mask blocks whole columns of one batch item; attn_mask blocks cells. A key "
      "blocked by either is -inf here.");
  if (!info.full_rows.empty()) {
    const std::vector<std::string>& q = *hm.row_labels;
    std::string which;
    for (std::size_t k = 0; k < info.full_rows.size() && k < 6; ++k)
      which += (k ? ", " : "") + q[std::size_t(info.full_rows[k])];
    if (info.full_rows.size() > 6) which += ", ...";
    ImGui::TextColored(kWarn,
                       "Fully masked: query %s may see no key here. softmax of a row of only -inf is 0/0, so "
                       "torch returns NaN for that row and the NaN flows into context and output. %s",
                       which.c_str(),
                       f.fully_masked == FullyMasked::nan
                           ? "The controls can map such rows to 0, as the course notebook does."
                           : "This result maps those rows to 0, as the course notebook does.");
  } else if (f.fully_masked_rows > 0) {
    ImGui::TextColored(kWarn, "%lld fully masked (batch, head, query) rows elsewhere: they are NaN in torch.",
                       (long long)f.fully_masked_rows);
  }
  ImGui::PopTextWrapPos();
}

// key_padding_mask (N, S): 1 = padding. Toggled per batch item and key, or set by valid length.
void key_padding(MaskEditorPanel& p, AppState& state, Textures& tex) {
  const Scenario& sc = state.scenario();
  const MaskSpec& m = sc.mask;
  const float font = ImGui::GetFontSize();
  const int N = int(sc.batch), S = int(sc.S());
  bool on = !m.key_padding.empty();
  if (ImGui::Checkbox("key_padding_mask (N, S)", &on))
    state.apply(mask_edit(
        on ? "key_padding_mask on" : "key_padding_mask off",
        [on, N, S](MaskSpec& x) {
          x.key_padding.assign(on ? std::size_t(std::max(0, N * S)) : 0, 0);
          x.key_padding_shape = on ? Shape{N, S} : Shape{};
        },
        nullptr));
  ImGui::SameLine();
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("True = padding: no query of that batch item attends to that key.");
  ImGui::PopTextWrapPos();
  if (!on) return;
  if (N <= 0 || S <= 0 || m.key_padding.size() != std::size_t(N * S)) {
    ImGui::TextColored(kWarn, "key_padding_mask holds %zu values but N\xC2\xB7S = %d.", m.key_padding.size(),
                       N * S);
    if (ImGui::Button("Fit key_padding_mask to the sizes"))
      state.apply(mask_edit(
          "key_padding_mask: fit to sizes", [](MaskSpec&) {}, fit_mask_to_sizes));
    return;
  }
  std::vector<float>& values = p.padding_values;
  values.assign(m.key_padding.begin(), m.key_padding.end());
  std::vector<std::string>& items = p.padding_items;
  while (int(items.size()) < N) items.push_back("item " + std::to_string(items.size()));
  const std::uint8_t* pad = m.key_padding.data();

  // Toggles first, so the valid-length sliders can sit level with their rows in the column left of them.
  const float slider_w = font * 6;
  if (ImGui::BeginTable("kpm", 2, ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("lengths", ImGuiTableColumnFlags_WidthFixed, slider_w);
    ImGui::TableSetupColumn("toggles", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableNextRow();
    ImGui::TableSetColumnIndex(1);
    Heatmap h;
    h.id = "mask/key_padding";
    h.values = values.data();
    h.rows = N;
    h.cols = S;
    h.row_stride = S;
    h.vmin = h.vmax = 0;
    h.colormap = Colormap::diverging;
    h.row_labels = &items;
    h.col_labels = axis_labels(p.indices, state.result.key_tokens, S);
    h.blocked = [pad, S](int r, int c) { return pad[r * S + c] != 0; };
    h.show_values = false;
    h.max_cell = std::max(font * 2.2f, ImGui::GetFrameHeight());
    h.size = ImVec2(ImGui::GetContentRegionAvail().x, grid_height(N, h.max_cell));
    h.version = fingerprint(pad, m.key_padding.size(), 0xcbf29ce484222325ull);
    const HeatmapEvent ev =
        heatmap_with_text(tex, h, [pad, S](int r, int c, float) { return pad[r * S + c] ? "pad" : ""; });
    paint(
        p.drag, state, "padding", ev, [pad, S](int r, int c) { return pad[r * S + c] != 0; },
        paint_key_padding);

    ImGui::TableSetColumnIndex(0);
    const float x = ImGui::GetCursorScreenPos().x;
    ImGui::SetCursorScreenPos(ImVec2(x, ev.grid_min.y - ImGui::GetTextLineHeightWithSpacing()));
    ImGui::TextDisabled("valid length");
    // Rows shorter than a slider (many batch items) get the sliders stacked instead.
    const bool level = ev.cell >= ImGui::GetFrameHeight();
    for (int n = 0; n < N; ++n) {
      int len = S;
      for (int j = 0; j < S; ++j)
        if (pad[n * S + j]) {
          len = j;
          break;
        }
      ImGui::PushID(n);
      if (level)
        ImGui::SetCursorScreenPos(
            ImVec2(x, ev.grid_min.y + ev.cell * (float(n) + 0.5f) - ImGui::GetFrameHeight() * 0.5f));
      ImGui::SetNextItemWidth(slider_w);
      const bool changed =
          ImGui::SliderInt("##len", &len, 0, S, level ? "%d" : (items[std::size_t(n)] + ": %d").c_str());
      const std::uint64_t gesture = slider_gesture(p.slider_gesture);
      if (changed)
        state.apply(mask_edit(
            "valid length of item " + std::to_string(n),
            [n, len, S](MaskSpec& x) {
              for (int j = 0; j < S; ++j) x.key_padding[std::size_t(n * S + j)] = j >= len;
            },
            nullptr, gesture));
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
}

// "Copy as PyTorch" and the text it copies. The preview is rebuilt when a new result lands (every
// edit makes one), not every frame: at L = 256 the text is long.
void pytorch_box(MaskEditorPanel& p, AppState& state) {
  std::string& text = p.pytorch_text;
  std::uint64_t& generation = p.pytorch_generation;
  auto make = [&] {
    try {
      text = mask_as_pytorch(state.scenario());
    } catch (const Error& e) {
      text = std::string("# ") + e.what();
    }
  };
  if (generation != state.result.generation || text.empty()) {
    generation = state.result.generation;
    make();
  }
  if (ImGui::Button("Copy as PyTorch")) {
    make();
    ImGui::SetClipboardText(text.c_str());
    state.status = "copied the mask as PyTorch to the clipboard";
  }
  ImGui::SameLine();
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  panel::folded_text("both masks as torch code");
  ImGui::PopStyleColor();
  // Lines as copied, scrolled sideways rather than wrapped: a wrapped Python line would read as two.
  const float lines = float(std::min<std::ptrdiff_t>(14, std::count(text.begin(), text.end(), '\n') + 1));
  ImGui::BeginChild("pytorch", ImVec2(-1, ImGui::GetTextLineHeightWithSpacing() * (lines + 1.5f)), true,
                    ImGuiWindowFlags_HorizontalScrollbar);
  ImGui::TextUnformatted(text.c_str());
  ImGui::EndChild();
}

}  // namespace

void mask_drag_press(Panels& panels, AppState& state, int row, int col) {
  PaintTool& drag = panel::made(panels.mask_editor).drag;
  drag.scripted = true;
  drag.press(
      state, "cells", row, col, [&state](int r, int c) { return shown_cell_blocked(state, r, c); },
      paint_mask_cells);
}

void mask_drag_move(Panels& panels, AppState& state, int row, int col) {
  panel::made(panels.mask_editor)
      .drag.move_to(
          state, row, col, [&state](int r, int c) { return shown_cell_blocked(state, r, c); },
          paint_mask_cells);
}

void mask_drag_release(Panels& panels) {
  panel::made(panels.mask_editor).drag.release();
}

void draw_mask_editor(Panels& panels, AppState& state, Textures& tex) {
  panel::made(panels.mask_editor).draw(state, tex);
}

void MaskEditorPanel::draw(AppState& state, Textures& tex) {
  if (!state.result.valid()) {
    ImGui::TextWrapped("No result yet: the mask editor shows the mask next to what torch makes of it.");
    return;
  }
  // Copied, not referenced: an edit below can replace the result (and free this one) within the frame.
  const Dims d = state.result.forward->dims;
  const float font = ImGui::GetFontSize();
  preset_controls(state, slider_gesture);
  // A short view (a presenter font beside the lesson panel): the explanations fold to a line each
  // and the grids take the height left.
  const bool compact = panel::compact_view();
  scope_controls(state, int(d.N), int(d.H), compact);
  auto err = state.errors.find("mask");
  if (err != state.errors.end()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(kError, "%s", err->second.c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::Separator();

  // Side by side when there is room: what the user edits (the larger, it is clicked), and what torch
  // adds after merging.
  // The merged grid needs at least a pixel per key (draw_heatmap's smallest cell) beside its labels.
  const float avail = ImGui::GetContentRegionAvail().x;
  const bool two = avail >= font * 30 && avail * 0.4f >= float(d.S_total) + font * 10;
  if (two && ImGui::BeginTable("mask_grids", 2)) {
    ImGui::TableSetupColumn("cells", ImGuiTableColumnFlags_WidthStretch, 1.4f);
    ImGui::TableSetupColumn("merged", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableNextColumn();
    cell_grid(*this, state, tex, ImGui::GetContentRegionAvail().x, false);
    ImGui::TableNextColumn();
    merged_grid(*this, state, tex, ImGui::GetContentRegionAvail().x);
    ImGui::EndTable();
  } else {
    cell_grid(*this, state, tex, avail, compact);
    merged_grid(*this, state, tex, avail);
  }
  ImGui::Separator();
  key_padding(*this, state, tex);
  ImGui::Separator();
  pytorch_box(*this, state);
  // A drag whose grid was not drawn this frame (the mask was emptied or resized meanwhile) ends here,
  // so the next press can start a new one; what it painted is still one edit.
  if (!drag.grid.empty() && !drag.scripted && !ImGui::IsMouseDown(ImGuiMouseButton_Left)) drag.release();
}

}  // namespace mha::app
