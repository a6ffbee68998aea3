// The Compare view: the difference of two heads of one stage (same batch item), or of one stage
// before and after the last edit, as a diverging heatmap with a symmetric range and its max |diff|.
// The two inputs are drawn small beside the difference when the width allows.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "export_dialog.hpp"
#include "heatmap.hpp"
#include "panel_util.hpp"
#include "panels.hpp"

namespace mha::app {

namespace {

using namespace panel;

// Secondary text that wraps (TextDisabled does not).
void note(const char* fmt, ...) IM_FMTARGS(1);
void note(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrappedV(fmt, args);
  ImGui::PopStyleColor();
  va_end(args);
}

// One (rows, cols) matrix of a stage, addressed through its strides (no copy).
struct Plane {
  const float* p = nullptr;
  std::int64_t rs = 0, cs = 1;
  int rows = 0, cols = 0;
  float at(int i, int j) const { return p[std::int64_t(i) * rs + std::int64_t(j) * cs]; }
};

Plane head_plane(const Stage<float>& s, int n, int h) {  // (N, H, R, C) at [n, h]
  return {s.storage->data() + s.offset + n * s.strides[0] + h * s.strides[1], s.strides[2], s.strides[3],
          int(s.shape[2]), int(s.shape[3])};
}

// One side of the comparison: a head of the stage in one result, and what blocks its cells.
struct Side {
  Plane values;
  Plane mask;  // p == nullptr: no mask
  bool blocked(int si, int i, int j) const {
    if (si == kMasked) return neg_inf(values.at(i, j));
    return si == kWeights && mask.p && neg_inf(mask.at(i, j));
  }
};

Side side_of(const ForwardResult<float>& f, int si, int b, int h) {
  Side s;
  s.values = head_plane(*find_stage(f, kStages[si].name), b, h);
  if (const Stage<float>* m = f.trace.find("attn_mask")) s.mask = head_plane(*m, b, h);
  return s;
}

// The difference and its ranges; rebuilt only when a result, the stage, the item or a head changes.
struct CompareCache {
  std::weak_ptr<const ForwardResult<float>> after, before;  // the results it was made from
  std::uint64_t key = 0;
  std::vector<float> diff;            // rows × cols, A - B (mode 0) or after - before (mode 1)
  std::vector<std::uint8_t> blocked;  // rows × cols; empty: nothing blocked
  float max_abs = 0;                  // over finite differences
  int arg_i = -1, arg_j = -1;         // where max_abs is
  int nan_cells = 0;
  float in_lo = 0, in_hi = 0, in_maxabs = 0;  // finite values of both inputs: one range for both
  std::vector<float> head_max;                // mode 1: max |after - before| per head
};

// Head knock-outs (a what-if of the model): the next-token top-5 without and with them side by
// side, then the heads whose pattern moved. Shown above every mode while some head is knocked out.
void knockout_summary(const ModelResult& m) {
  const float font = ImGui::GetFontSize();
  ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.85f, 0.35f, 0.1f, 1));
  ImGui::TextWrapped("KNOCK-OUT, a what-if (not torch): head%s %s %s; the layers after follow",
                     m.knockouts.heads.size() > 1 ? "s" : "", format_heads(m.knockouts.heads).c_str(),
                     m.knockouts.ablation == Ablation::zero ? "zeroed" : "mean-ablated");
  ImGui::PopStyleColor();
  if (ImGui::BeginTable("knockout_top5", 2, ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupColumn("next token before", ImGuiTableColumnFlags_WidthFixed, font * 11);
    ImGui::TableSetupColumn("after the knock-out", ImGuiTableColumnFlags_WidthFixed, font * 11);
    ImGui::TableHeadersRow();
    const std::size_t n = std::max(m.top_k_before.size(), m.top_k.size());
    for (std::size_t k = 0; k < n; ++k) {
      ImGui::TableNextRow();
      for (int side = 0; side < 2; ++side) {
        ImGui::TableSetColumnIndex(side);
        const std::vector<TokenProb>& top = side == 0 ? m.top_k_before : m.top_k;
        const std::vector<std::string>& labels = side == 0 ? m.top_k_before_labels : m.top_k_labels;
        if (k >= top.size() || k >= labels.size()) continue;
        // A token that is in one list only is marked: it came in or went out.
        const std::vector<TokenProb>& other = side == 0 ? m.top_k : m.top_k_before;
        const bool moved =
            std::none_of(other.begin(), other.end(), [&](const TokenProb& t) { return t.id == top[k].id; });
        ImGui::Text("%s%-10s %5.1f %%", moved ? (side == 0 ? "- " : "+ ") : "  ", labels[k].c_str(),
                    100 * top[k].probability);
      }
    }
    ImGui::EndTable();
  }
  std::string changed;
  int n_changed = 0;
  for (const PatternChange& p : m.pattern_changes)
    if (p.max_abs_diff >= kPatternChanged) {
      char item[48];
      std::snprintf(item, sizeof item, "%s%s (%.2f)", changed.empty() ? "" : ", ",
                    format_heads({p.head}).c_str(), p.max_abs_diff);
      changed += item;
      ++n_changed;
    }
  note("Heads whose attention pattern changed (max |diff| of a weight >= %g): %s", kPatternChanged,
       n_changed ? changed.c_str()
                 : "none (a knock-out in the last layer changes no pattern, only the output)");
}

void rebuild(CompareCache& c, std::uint64_t key, int si, const Side& a, const Side& b) {
  const int R = a.values.rows, C = a.values.cols;
  c.key = key;
  c.diff.assign(std::size_t(R) * std::size_t(C), 0.0f);
  c.blocked.clear();
  c.max_abs = 0;
  c.arg_i = c.arg_j = -1;
  c.nan_cells = 0;
  float lo = std::numeric_limits<float>::infinity(), hi = -lo, maxabs = 0;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      const float va = a.values.at(i, j), vb = b.values.at(i, j);
      for (float v : {va, vb})
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
          maxabs = std::max(maxabs, std::fabs(v));
        }
      const std::size_t k = std::size_t(i) * std::size_t(C) + std::size_t(j);
      // Masked scores: -inf on either side makes the difference infinite, so the cell is blocked.
      // Weights: a blocked weight is 0, so the difference is meaningful unless both are blocked.
      const bool ba = a.blocked(si, i, j), bb = b.blocked(si, i, j);
      if (si == kMasked ? (ba || bb) : (ba && bb)) {
        if (c.blocked.empty()) c.blocked.assign(c.diff.size(), 0);
        c.blocked[k] = 1;
        continue;
      }
      const float d = va - vb;
      c.diff[k] = d;
      if (std::isnan(d)) {
        ++c.nan_cells;
      } else if (std::fabs(d) > c.max_abs || c.arg_i < 0) {
        c.max_abs = std::fabs(d);
        c.arg_i = i;
        c.arg_j = j;
      }
    }
  if (lo > hi) lo = hi = 0;
  c.in_lo = lo;
  c.in_hi = hi;
  c.in_maxabs = maxabs;
}

const char* label_at(const std::vector<std::string>* v, int i) {
  return v && i >= 0 && i < int(v->size()) ? (*v)[std::size_t(i)].c_str() : "";
}

}  // namespace

struct ComparePanel {
  CompareCache cache;
  std::vector<std::string> feature_labels;
  void draw(AppState& state, Textures& tex);
};

void draw_compare(Panels& panels, AppState& state, Textures& tex) {
  made(panels.compare).draw(state, tex);
}

void ComparePanel::draw(AppState& state, Textures& tex) {
  if (!state.result.valid()) {
    ImGui::TextWrapped("No result yet: the comparison appears once the inputs give a valid forward.");
    return;
  }
  ViewState& view = state.view();
  // Mode 3 compares two pins (or a pin and the live state): B takes the live result's place.
  const Pin* pin_a = view.compare_mode == CompareMode::pins ? state.find_pin(view.compare_pin_a) : nullptr;
  const Pin* pin_b = view.compare_mode == CompareMode::pins ? state.find_pin(view.compare_pin_b) : nullptr;
  const std::shared_ptr<const ForwardResult<float>> live =
      pin_b ? pin_b->result.forward : state.result.forward;
  const Result& live_result = pin_b ? pin_b->result : state.result;
  const ForwardResult<float>& f = *live;
  const Dims& d = f.dims;
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  const int N = int(d.N), H = int(d.H);

  auto mode_button = [&](const char* label, CompareMode m) {  // a view action, as a script's `compare`
    if (ImGui::RadioButton(label, view.compare_mode == m)) state.apply(set_compare_mode(m));
  };
  mode_button("two heads", CompareMode::two_heads);
  same_line_if_fits(labelled("before / after the last edit", ImGui::GetFrameHeight()));
  mode_button("before / after the last edit", CompareMode::before_after);
  // With a trained model: its heads beside the same layer with untrained (default-init) weights.
  const ModelResult* model = state.result.model ? &*state.result.model : nullptr;
  if (model && model->untrained) {
    same_line_if_fits(labelled("trained / untrained", ImGui::GetFrameHeight()));
    mode_button("trained / untrained", CompareMode::trained_untrained);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "The same layer input (ln_1 of the residual stream) through nn.MultiheadAttention's\n"
          "default init from the seed: what these heads looked like before training.");
  }
  if (!state.pins.empty()) {
    same_line_if_fits(labelled("pins", ImGui::GetFrameHeight()));
    mode_button("pins", CompareMode::pins);
  }
  ImGui::SameLine();
  if (ImGui::SmallButton("Pin this")) state.pin("pin " + std::to_string(state.pins.size() + 1));
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Keep this state and its result to compare against later");
  if (model && model->knockouts.active()) knockout_summary(*model);
  const CompareMode mode = view.compare_mode == CompareMode::trained_untrained && model && model->untrained
                               ? CompareMode::trained_untrained
                           : view.compare_mode == CompareMode::pins && !state.pins.empty() ? CompareMode::pins
                           : view.compare_mode == CompareMode::before_after ? CompareMode::before_after
                                                                            : CompareMode::two_heads;
  if (mode == CompareMode::pins) {  // A and B: any pin, or the live state
    if (!pin_a && !state.pins.empty()) view.compare_pin_a = state.pins.front().name;
    pin_a = state.find_pin(view.compare_pin_a);
    auto pick = [&](const char* label, std::string& name, bool allow_live) {
      ImGui::SetNextItemWidth(font * 8);
      if (ImGui::BeginCombo(label, name.c_str())) {
        if (allow_live && ImGui::Selectable("live", name == "live")) name = "live";
        for (const Pin& p : state.pins)
          if (ImGui::Selectable(p.name.c_str(), name == p.name)) name = p.name;
        ImGui::EndCombo();
      }
    };
    pick("A (before)", view.compare_pin_a, false);
    same_line_if_fits(labelled("B (after)", font * 8));
    pick("B (after)", view.compare_pin_b, true);
  }
  // The result subtracted in modes 1, 2 and 3 (mode 0 subtracts a head of the same result).
  const std::shared_ptr<const ForwardResult<float>> other =
      mode == CompareMode::before_after        ? state.previous.forward
      : mode == CompareMode::trained_untrained ? model->untrained
      : mode == CompareMode::pins && pin_a     ? pin_a->result.forward
                                               : nullptr;

  const int si = stage_index(view.stage);
  ImGui::SetNextItemWidth(std::min(font * 14, ImGui::GetContentRegionAvail().x - labelled("stage", 0)));
  if (ImGui::BeginCombo("stage", kStages[si].label)) {
    for (int i = 0; i < kStageCount; ++i)
      if (ImGui::Selectable(kStages[i].label, i == si)) view.stage = kStages[i].name;
    ImGui::EndCombo();
  }
  int b = std::clamp(view.batch_index, 0, N - 1);
  if (N > 1) {
    same_line_if_fits(labelled("batch item", font * 6));
    int pick = b;
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::SliderInt("batch item", &pick, 0, N - 1)) view.batch_index = b = pick;
  }

  // The two sides, or a message that says why there is nothing to subtract.
  const ForwardResult<float>* before = nullptr;
  int ha = std::clamp(view.compare_a, 0, H - 1), hb = std::clamp(view.compare_b, 0, H - 1);
  if (mode == CompareMode::two_heads) {
    if (H < 2) {
      ImGui::TextWrapped("There is one head only: set num_heads to 2 or more to compare heads.");
      return;
    }
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::SliderInt("head A", &ha, 0, H - 1)) view.compare_a = ha;
    same_line_if_fits(labelled("head B", font * 6));
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::SliderInt("head B", &hb, 0, H - 1)) view.compare_b = hb;
    if (ha == hb) note("A and B are the same head: pick two different heads.");
  } else {
    if (!other) {
      ImGui::TextWrapped(
          "No result from before the last edit at these sizes yet: make an edit that keeps N, L, S and E "
          "(the seed, the head count, a mask cell, a value) and the difference "
          "between before and after appears here.");
      return;
    }
    before = other.get();
    // Stages the forwards left out (large sizes) are computed once per result, off the UI thread.
    if (!stages_ready(state.stages, {other, state.result.forward}, {kStages[si].name})) return;
    const Stage<float>* sb = find_stage(*before, kStages[si].name);
    const Stage<float>* sa = find_stage(f, kStages[si].name);
    if (!sb || !sa || sb->shape != sa->shape) {
      ImGui::TextWrapped("The shapes differ, so there is nothing to subtract: before: %s, after: %s.",
                         sb ? shape_str(sb->shape).c_str() : "(none)",
                         sa ? shape_str(sa->shape).c_str() : "(none)");
      return;
    }
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::SliderInt("head", &ha, 0, H - 1)) view.compare_a = ha;
  }

  if (!stages_ready(state.stages, {state.result.forward}, {kStages[si].name})) return;
  const Stage<float>* sp = find_stage(f, kStages[si].name);
  if (!sp || sp->shape.size() != 4) {
    ImGui::TextWrapped(
        "This result does not hold stage '%s', and it cannot be computed here: the GPU computed this "
        "result, or the stage would not fit in memory. Pick another stage.",
        kStages[si].name);
    return;
  }
  const Side A = mode == CompareMode::two_heads ? side_of(f, si, b, ha) : side_of(*before, si, b, ha);
  const Side B = mode == CompareMode::two_heads ? side_of(f, si, b, hb) : side_of(f, si, b, ha);
  // Mode 0 shows A - B; mode 1 after - before, i.e. B - A: swap the rebuild's operands.
  const Side& first = mode == CompareMode::two_heads ? A : B;
  const Side& second = mode == CompareMode::two_heads ? B : A;
  const std::uint64_t gen = live_result.generation,
                      prev_gen = mode == CompareMode::before_after        ? state.previous.generation
                                 : mode == CompareMode::trained_untrained ? ~gen
                                 : mode == CompareMode::pins && pin_a     ? pin_a->result.generation
                                                                          : 0;
  const std::uint64_t key = mix({std::uint64_t(mode), gen, prev_gen, std::uint64_t(std::uintptr_t(&f)),
                                 std::uint64_t(std::uintptr_t(before)), std::uint64_t(si), std::uint64_t(b),
                                 std::uint64_t(ha), std::uint64_t(mode == CompareMode::two_heads ? hb : 0)});
  const std::shared_ptr<const ForwardResult<float>> none;
  if (cache.key != key || !same_owner(cache.after, live) ||
      !same_owner(cache.before, before ? other : none)) {
    rebuild(cache, key, si, first, second);
    cache.after = live;
    cache.before = before ? other : none;
    cache.head_max.clear();
    if (mode != CompareMode::two_heads)  // which heads moved most: one pass over every head, here only
      for (int h = 0; h < H; ++h) {
        CompareCache one;
        rebuild(one, 0, si, side_of(f, si, b, h), side_of(*before, si, b, h));
        cache.head_max.push_back(one.max_abs);
      }
  }

  const int R = A.values.rows, C = A.values.cols;
  const std::vector<std::string>* row_labels = &live_result.query_tokens;
  const std::vector<std::string>* col_labels =
      si == kContext ? &numbered(feature_labels, C) : &live_result.key_tokens;

  // The summary line: what is subtracted and the largest difference, with its tokens.
  char what[64];
  if (mode == CompareMode::two_heads)
    std::snprintf(what, sizeof what, "head %d - head %d", ha, hb);
  else if (mode == CompareMode::before_after)
    std::snprintf(what, sizeof what, "after - before, head %d", ha);
  else if (mode == CompareMode::pins)
    std::snprintf(what, sizeof what, "%.20s - %.20s, head %d", view.compare_pin_b.c_str(),
                  view.compare_pin_a.c_str(), ha);
  else
    std::snprintf(what, sizeof what, "trained - untrained, head %d", ha);
  if (cache.arg_i >= 0)
    ImGui::TextWrapped("%s (%s):  max |diff| = %.3g  at query %d %s, %s %d %s", what, kStages[si].name,
                       double(cache.max_abs), cache.arg_i, label_at(row_labels, cache.arg_i),
                       si == kContext ? "feature" : "key", cache.arg_j,
                       si == kContext ? "" : label_at(col_labels, cache.arg_j));
  else
    ImGui::TextWrapped("%s (%s): no comparable cells", what, kStages[si].name);
  if (mode != CompareMode::two_heads && !cache.head_max.empty()) {
    const auto top = std::max_element(cache.head_max.begin(), cache.head_max.end());
    if (*top == 0)
      note("Identical in every head: the last edit did not change %s.", kStages[si].name);
    else
      note("Over all heads: max |diff| = %.3g in head %d.", double(*top), int(top - cache.head_max.begin()));
  }
  if (mode == CompareMode::two_heads && d.G < d.H && ha / (d.H / d.G) == hb / (d.H / d.G))
    note("Heads %d and %d share kv head %lld (GQA): same keys and values, so only their queries differ.", ha,
         hb, (long long)(ha / (d.H / d.G)));
  if (cache.nan_cells > 0 || !cache.blocked.empty())
    note("%s%s",
         cache.blocked.empty() ? ""
         : si == kMasked       ? "Grey: blocked on either side (the difference is infinite). "
                               : "Grey: blocked on both sides. ",
         cache.nan_cells > 0 ? "Magenta: NaN on a side (a query with every key blocked)." : "");

  // Export: the same difference, drawn by the GL-free exporter (export/stage_export.hpp).
  {
    FigureRequest req;
    req.id = "compare";
    req.caption = std::string(what) + " (" + kStages[si].name + "), batch item " + std::to_string(b);
    exporter::StageSlice sa;
    sa.stage = kStages[si].name;
    sa.batch_index = b;
    sa.head = ha;
    sa.query_labels = live_result.query_tokens;
    sa.key_labels = live_result.key_tokens;
    exporter::StageSlice sb = sa;
    const std::shared_ptr<const ForwardResult<float>> after = live;
    const std::shared_ptr<const ForwardResult<float>> prev = mode != CompareMode::two_heads ? other : after;
    if (mode == CompareMode::two_heads) sb.head = hb;
    const std::string a_name = mode == CompareMode::two_heads      ? "head " + std::to_string(ha)
                               : mode == CompareMode::before_after ? "after (head " + std::to_string(ha) + ")"
                               : mode == CompareMode::pins
                                   ? view.compare_pin_b + " (head " + std::to_string(ha) + ")"
                                   : "trained (head " + std::to_string(ha) + ")";
    const std::string b_name = mode == CompareMode::two_heads      ? "head " + std::to_string(hb)
                               : mode == CompareMode::before_after ? "before"
                               : mode == CompareMode::pins         ? view.compare_pin_a
                                                                   : "untrained";
    req.choices.push_back(
        {"difference map",
         "mha-" + sa.stage + "-batch" + std::to_string(b) +
             (mode == CompareMode::two_heads
                  ? "-head" + std::to_string(ha) + "-minus-head" + std::to_string(hb)
              : mode == CompareMode::before_after ? "-head" + std::to_string(ha) + "-after-minus-before"
              : mode == CompareMode::pins         ? "-head" + std::to_string(ha) + "-pin-difference"
                                          : "-head" + std::to_string(ha) + "-trained-minus-untrained"),
         [after, prev, sa, sb, a_name, b_name] {
           return exporter::difference_figure(*after, sa, a_name, *prev, sb, b_name);
         }});
    export_button(state, req);
  }

  // Layout: the difference, its colorbar, then the two inputs stacked small when there is room.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float colorbar_w = font * 5.0f;
  const float map_h = std::max(font * 8, avail.y - style.ItemSpacing.y);
  const float small_h = (map_h - ImGui::GetTextLineHeightWithSpacing() * 2 - style.ItemSpacing.y) * 0.5f;
  float side_w = (avail.x - colorbar_w) * 0.3f;
  // Thumbnails need at least a pixel a cell beside the widget's margins (NaN flag, spacing).
  const bool side_maps = avail.x >= font * 26 && side_w - font * 2 >= float(C) && small_h - font >= float(R);
  if (!side_maps) side_w = 0;
  const float main_w = avail.x - colorbar_w - side_w - style.ItemSpacing.x * (side_maps ? 2 : 1);

  const float m = cache.max_abs > 0 ? cache.max_abs : 1.0f;
  Heatmap diff;
  diff.zoomable = true;  // Ctrl+wheel zooms, a right-button drag pans
  diff.id = "compare/diff";
  diff.values = cache.diff.data();
  diff.rows = R;
  diff.cols = C;
  diff.row_stride = C;
  diff.vmin = -m;
  diff.vmax = m;
  diff.colormap = Colormap::diverging;
  diff.row_labels = row_labels;
  diff.col_labels = col_labels;
  diff.show_values = view.show_values;
  diff.max_cell = font * 4.0f;
  diff.size = ImVec2(main_w, map_h);
  diff.version = key;
  if (!cache.blocked.empty()) {
    const std::uint8_t* bl = cache.blocked.data();
    diff.blocked = [bl, C](int i, int j) {
      return bl[std::size_t(i) * std::size_t(C) + std::size_t(j)] != 0;
    };
  }
  ImGui::BeginGroup();
  const HeatmapEvent ev = draw_heatmap(tex, diff);
  ImGui::EndGroup();
  // A click selects the cell for the inspector (view state: no undo step).
  if (ev.clicked) {
    view.sel_query = ev.row;
    if (si != kContext) view.sel_key = ev.col;
    view.sel_head = ha;
  }
  ImGui::SameLine();
  ImGui::BeginGroup();
  draw_colorbar(tex, Colormap::diverging, -m, m, std::clamp(map_h - font * 2, font * 4, font * 16));
  ImGui::EndGroup();

  if (side_maps) {
    // Inputs in the stage's own colours (as the Heads view draws them), one range for both.
    Colormap cmap = si < kWeights ? Colormap::diverging : state.window().colormap;
    if (si == kWeights && cmap == Colormap::diverging) cmap = Colormap::viridis;
    float vmin = cache.in_lo, vmax = cache.in_hi;
    if (cmap == Colormap::diverging) {
      vmax = cache.in_maxabs > 0 ? cache.in_maxabs : 1.0f;
      vmin = -vmax;
    } else if (si == kWeights) {
      vmin = 0;
      vmax = vmax > 0 ? vmax : 1.0f;
    } else if (vmax <= vmin) {
      vmax = vmin + 1.0f;
    }
    ImGui::SameLine();
    ImGui::BeginGroup();
    for (int k = 0; k < 2; ++k) {
      const Side& s = k == 0 ? A : B;
      char title[48];
      if (mode == CompareMode::two_heads)
        std::snprintf(title, sizeof title, "%s: head %d", k == 0 ? "A" : "B", k == 0 ? ha : hb);
      else if (mode == CompareMode::before_after)
        std::snprintf(title, sizeof title, "%s: head %d", k == 0 ? "before" : "after", ha);
      else if (mode == CompareMode::pins)
        std::snprintf(title, sizeof title, "%.20s: head %d",
                      k == 0 ? view.compare_pin_a.c_str() : view.compare_pin_b.c_str(), ha);
      else
        std::snprintf(title, sizeof title, "%s: head %d", k == 0 ? "untrained" : "trained", ha);
      ImGui::TextUnformatted(title);
      Heatmap in;
      in.id = k == 0 ? "compare/a" : "compare/b";
      in.values = s.values.p;
      in.rows = R;
      in.cols = C;
      in.row_stride = s.values.rs;
      in.col_stride = s.values.cs;
      in.vmin = vmin;
      in.vmax = vmax;
      in.colormap = cmap;
      // Thumbnails: no labels or values, so the cells get the room; the difference carries both.
      in.show_values = false;
      in.margins = false;  // no room kept for labels they do not have: the two fit the difference's height
      in.max_cell = font * 2.5f;
      in.size = ImVec2(side_w, small_h);
      in.version = mix({key, std::uint64_t(k), std::uint64_t(cmap)});
      if (si == kMasked || (si == kWeights && s.mask.p)) {
        const Side* sp2 = &s;
        in.blocked = [sp2, si](int i, int j) { return sp2->blocked(si, i, j); };
      }
      draw_heatmap(tex, in);
    }
    ImGui::EndGroup();
  }
}

}  // namespace mha::app
