// Inspector (right column): one attention weight (batch n, head h, query i, key j) worked out by hand
// from the trace: q_i·k_j term by term, ÷ sqrt(d_k), + mask, the softmax of its row, then the context
// cell it feeds. Every line shows the number by hand beside the trace's, so a student can check both.
#include <imgui.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "heatmap.hpp"
#include "panels.hpp"

namespace mha::app {

namespace {

constexpr int kRowTableMax = 12;  // the whole softmax row is listed up to this many keys
const ImVec4 kWarn(1.0f, 0.55f, 0.2f, 1.0f);

// Element (a, b, c, e) of a rank-4 stage through its strides: views and broadcasts need no copy.
float at(const Stage<float>& s, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t e) {
  return (*s.storage)[std::size_t(s.offset + a * s.strides[0] + b * s.strides[1] + c * s.strides[2] +
                                  e * s.strides[3])];
}

// Whether the trace left `name` out and stage_rows can compute it (mha::find_stage's condition).
bool on_demand(const ForwardResult<float>& f, const char* name) {
  const std::vector<std::string>& names = on_demand_stages();
  return f.backend == Backend::eigen && std::find(names.begin(), names.end(), name) != names.end() &&
         std::any_of(f.trace.left_out.begin(), f.trace.left_out.end(),
                     [&](const Stage<float>& s) { return s.name == name; });
}

// Row (n, h, i) of stages the trace left out (Options::stages at large sizes), computed by stage_rows
// for the inspected cell only, and kept while the same result and row are inspected.
struct InspectedRow {
  std::uint64_t generation = 0;  // Result::generation: unique per result in the process
  std::int64_t n = -1, h = -1, i = -1;
  std::deque<Stage<float>> stages;  // a deque: references handed out stay valid as it grows
};

// A stage to read at (n, h, i, ·): the trace's own, or that one row as a Stage whose strides send
// every (n, h, i) to it (only the inspected row is meaningful; it is the only one this view reads).
const Stage<float>& stage_row(const Result& r, const std::string& name, std::int64_t n, std::int64_t h,
                              std::int64_t i, InspectedRow& row) {
  const ForwardResult<float>& f = *r.forward;
  if (const Stage<float>* s = f.trace.find(name)) return *s;
  if (row.generation != r.generation || row.n != n || row.h != h || row.i != i)
    row = InspectedRow{r.generation, n, h, i, {}};
  for (const Stage<float>& s : row.stages)
    if (s.name == name) return s;
  Stage<float> s;
  for (const Stage<float>& meta : f.trace.left_out)
    if (meta.name == name) s = meta;
  s.strides = {0, 0, 0, 1};
  s.storage = std::make_shared<const std::vector<float>>(stage_rows(f, name, n, h, i, 1).data);
  s.offset = 0;
  row.stages.push_back(std::move(s));
  return row.stages.back();
}

// Numbers as a student copies them: four decimals where a column holds "-0.0000", fewer in a narrow
// column or at a presenter font size; tiny or huge values in %g with as many digits.
struct Num {
  int decimals = 4;
  static Num fitting(float column_width) {
    const float pad = ImGui::GetStyle().CellPadding.x * 2;
    for (int d : {4, 3})
      if (ImGui::CalcTextSize(d == 4 ? "-0.0000" : "-0.000").x + pad <= column_width) return Num{d};
    return Num{2};
  }
  std::string operator()(double v) const {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
    char buf[32];
    const double a = std::fabs(v);
    std::snprintf(buf, sizeof buf, (a != 0 && (a < 1e-3 || a >= 1e5)) ? "%.*g" : "%.*f", decimals, v);
    return buf;
  }
};

std::string token(const std::vector<std::string>& tokens, std::int64_t i) {
  return i < std::int64_t(tokens.size()) ? "\"" + tokens[std::size_t(i)] + "\"" : "#" + std::to_string(i);
}

bool begin_table(const char* id, int columns) {
  return ImGui::BeginTable(id, columns,
                           ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_BordersInnerH |
                               ImGuiTableFlags_RowBg | ImGuiTableFlags_PadOuterX);
}

void cells(std::initializer_list<std::string> texts) {
  for (const std::string& t : texts) {
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(t.c_str());
  }
}

void heading(const char* text) {
  ImGui::Spacing();
  ImGui::TextColored(ImGui::GetStyleColorVec4(ImGuiCol_PlotHistogram), "%s", text);
}

void note(const char* text) {
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("%s", text);
  ImGui::PopTextWrapPos();
}

// Steppers for the selection: view state, so no undo step. The result drawn can be an older one than
// the scenario (a file just opened, its compute not landed yet), so the selection is clamped for
// drawing only and written back only when a stepper changes it: an opened file keeps its saved head.
// Returns the selection to draw, (head, query, key), each within the result's sizes.
std::array<std::int64_t, 3> selection_controls(ViewState& v, const Dims& d) {
  const std::pair<const char*, int*> fields[] = {
      {"head", &v.sel_head}, {"query", &v.sel_query}, {"key", &v.sel_key}};
  const std::int64_t limits[] = {d.H, d.L, d.S_total};
  std::array<std::int64_t, 3> shown{};
  const bool table = ImGui::BeginTable("sel", 3, ImGuiTableFlags_SizingStretchSame);
  for (int k = 0; k < 3; ++k) {
    const int last = int(std::max<std::int64_t>(limits[k], 1)) - 1;
    int pick = std::clamp(*fields[k].second, 0, last);
    if (table) {
      ImGui::TableNextColumn();
      ImGui::TextDisabled("%s", fields[k].first);
      ImGui::SetNextItemWidth(-1);
      ImGui::PushID(k);
      if (ImGui::InputInt("##v", &pick, 1, 1)) *fields[k].second = pick = std::clamp(pick, 0, last);
      ImGui::PopID();
    }
    shown[std::size_t(k)] = pick;
  }
  if (table) ImGui::EndTable();
  return shown;
}

}  // namespace

void draw_inspector(AppState& state) {
  ImGui::TextUnformatted("Inspector");
  ImGui::Separator();
  if (!state.result.valid()) {
    note(
        "No result yet. Once the inputs are valid, click a cell in the Heads or Mask view to see how that "
        "weight is made.");
    return;
  }
  const auto& f = *state.result.forward;
  const Dims& d = f.dims;
  const Trace<float>& t = f.trace;
  ViewState& v = state.view();
  // Linked hover: the token under the pointer in any view, and its weight in the selected head.
  if ((v.hover_query >= 0 && v.hover_query < d.L) || (v.hover_key >= 0 && v.hover_key < d.S_total)) {
    const std::int64_t n = std::clamp<std::int64_t>(v.batch_index, 0, d.N - 1);
    const std::int64_t h = std::clamp<std::int64_t>(v.sel_head, 0, d.H - 1);
    std::string line = "hover:";
    if (v.hover_query >= 0)
      line +=
          " query " + std::to_string(v.hover_query) + " " + token(state.result.query_tokens, v.hover_query);
    if (v.hover_query >= 0 && v.hover_key >= 0) line += " ->";
    if (v.hover_key >= 0)
      line += " key " + std::to_string(v.hover_key) + " " + token(state.result.key_tokens, v.hover_key);
    if (v.hover_query >= 0 && v.hover_key >= 0 && t.has("attn_weights")) {
      char buf[64];
      std::snprintf(buf, sizeof buf, ": head %lld weight %.4f", (long long)h,
                    double(at(t["attn_weights"], n, h, v.hover_query, v.hover_key)));
      line += buf;
    }
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::ColorConvertU32ToFloat4(hover_colour()));
    ImGui::PushTextWrapPos(0);
    ImGui::TextUnformatted(line.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
  }
  if (v.sel_head < 0 || v.sel_query < 0 || v.sel_key < 0) {
    note(
        "Nothing selected. Click a cell in the Heads or Mask view to see how that attention weight is made, "
        "term by term.");
    return;
  }
  const char* needed[] = {"q_heads",       "k_heads",       "v_heads",      "scores",
                          "scores_scaled", "scores_masked", "attn_weights", "context"};
  for (const char* name : needed)
    if (!t.has(name) && !on_demand(f, name)) {
      ImGui::TextColored(kWarn, "The trace has no \"%s\" stage.", name);
      return;
    }
  const std::int64_t n = std::clamp<std::int64_t>(v.batch_index, 0, d.N - 1);
  const std::array<std::int64_t, 3> sel = selection_controls(v, d);
  const std::int64_t h = sel[0], i = sel[1], j = sel[2];
  static InspectedRow row;  // the UI thread's only
  const Stage<float>&q = t["q_heads"], &k = t["k_heads"], &vs = t["v_heads"];
  const Stage<float>&scores = stage_row(state.result, "scores", n, h, i, row),
        &scaled = stage_row(state.result, "scores_scaled", n, h, i, row),
        &masked = stage_row(state.result, "scores_masked", n, h, i, row);
  const Stage<float>&weights = stage_row(state.result, "attn_weights", n, h, i, row), &context = t["context"];
  const Stage<float>* mask = t.find("attn_mask");

  const std::int64_t g =
      h / std::max<std::int64_t>(1, d.H / std::max<std::int64_t>(1, d.G));  // GQA's kv head
  const std::int64_t dk = d.d_k, S = d.S_total;
  // The steps table is the tightest: three number columns beside a label column 1.2 times as wide.
  const Num num = Num::fitting(ImGui::GetContentRegionAvail().x / 4.2f);
  const auto& qt = state.result.query_tokens;
  const auto& kt = state.result.key_tokens;

  ImGui::PushTextWrapPos(0);
  ImGui::Text("batch item %lld, head %lld: query %lld %s -> key %lld %s", (long long)n, (long long)h,
              (long long)i, token(qt, i).c_str(), (long long)j, token(kt, j).c_str());
  if (d.G < d.H)
    ImGui::TextDisabled("GQA: head %lld reads kv head %lld = %lld / (H/G = %lld)", (long long)h, (long long)g,
                        (long long)h, (long long)(d.H / d.G));
  ImGui::PopTextWrapPos();

  // 1. The dot product, term by term. Long heads show the first 8 and last 4 terms; the sum is over all.
  char title[96];
  std::snprintf(title, sizeof title, "1. q_i \xC2\xB7 k_j, term by term (d_k = %lld)", (long long)dk);
  heading(title);
  double dot = 0;
  for (std::int64_t c = 0; c < dk; ++c) dot += double(at(q, n, h, i, c)) * double(at(k, n, g, j, c));
  if (begin_table("dot", 4)) {
    ImGui::TableSetupColumn("c", ImGuiTableColumnFlags_WidthFixed, ImGui::CalcTextSize("sum").x);
    ImGui::TableSetupColumn("q_i[c]");
    ImGui::TableSetupColumn("k_j[c]");
    ImGui::TableSetupColumn("product");
    ImGui::TableHeadersRow();
    for (std::int64_t c = 0; c < dk; ++c) {
      if (dk > 16 && c == 8) {
        cells({"...", "", "", ""});
        c = dk - 4;
      }
      const float a = at(q, n, h, i, c), b = at(k, n, g, j, c);
      cells({std::to_string(c), num(a), num(b), num(double(a) * double(b))});
    }
    cells({"sum", "", "", num(dot)});
    ImGui::EndTable();
  }

  // 2. From the score to the weight: by hand beside the trace.
  heading("2. score -> weight (by hand | trace)");
  const double sqrt_dk = std::sqrt(double(dk));
  const float trace_scaled = at(scaled, n, h, i, j);
  const float m = mask ? at(*mask, n, h, i, j) : 0.0f;
  double row_max = -INFINITY;
  std::int64_t arg_max = 0;
  for (std::int64_t jj = 0; jj < S; ++jj) {
    const float x = at(masked, n, h, i, jj);
    if (x > row_max) {
      row_max = x;
      arg_max = jj;
    }
  }
  double denominator = 0;
  for (std::int64_t jj = 0; jj < S; ++jj) denominator += std::exp(double(at(masked, n, h, i, jj)) - row_max);
  const double x_ij = at(masked, n, h, i, j);
  const double e_ij = std::exp(x_ij - row_max);
  if (begin_table("steps", 3)) {
    ImGui::TableSetupColumn("step", ImGuiTableColumnFlags_WidthStretch, 1.2f);
    ImGui::TableSetupColumn("by hand");
    ImGui::TableSetupColumn("trace");
    ImGui::TableHeadersRow();
    cells({"q\xC2\xB7k (sum)", num(dot), num(at(scores, n, h, i, j))});
    cells({"\xC3\xB7 sqrt(" + std::to_string(dk) + ")", num(dot / sqrt_dk), num(trace_scaled)});
    if (mask) cells({"mask value", "", num(m)});  // from the merged attn_mask stage
    cells({mask ? "+ mask" : "+ no mask", num(double(trace_scaled) + double(m)), num(x_ij)});
    cells({"row max", num(row_max), "at " + token(kt, arg_max)});
    cells({"exp(x - max)", num(e_ij), ""});
    cells({"row sum of exp", num(denominator), ""});
    cells({"exp / sum", num(e_ij / denominator), num(at(weights, n, h, i, j))});
    ImGui::EndTable();
  }
  const std::string why =
      "sqrt(" + std::to_string(dk) + ") = " + num(sqrt_dk) +
      ". torch divides q by it before the product, so the last digits of the scaled score "
      "may differ; + mask starts from the trace's scaled score.";
  note(why.c_str());
  if (std::isinf(row_max) && row_max < 0) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(
        kWarn,
        "Every key of this query is blocked: the row is all -inf, so its max is -inf and x - max = "
        "-inf - (-inf) is NaN. Softmax of the row is 0/0. %s",
        f.fully_masked == FullyMasked::nan ? "torch returns NaN here."
                                           : "This result maps it to 0, like the course notebook.");
    ImGui::PopTextWrapPos();
  }

  // The whole row, when it is short enough to read: where the denominator comes from.
  if (S <= kRowTableMax && begin_table("row", 4)) {
    ImGui::TableSetupColumn("key", ImGuiTableColumnFlags_WidthStretch, 1.3f);
    ImGui::TableSetupColumn("x");
    ImGui::TableSetupColumn("exp(x-max)");
    ImGui::TableSetupColumn("weight");
    ImGui::TableHeadersRow();
    for (std::int64_t jj = 0; jj < S; ++jj) {
      const double x = at(masked, n, h, i, jj);
      cells({token(kt, jj), num(x), num(std::exp(x - row_max)), num(at(weights, n, h, i, jj))});
      if (jj == j)
        ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, ImGui::GetColorU32(ImGuiCol_TextSelectedBg));
    }
    ImGui::EndTable();
  }

  // 3. The context cell this row makes: a weighted mix of the value rows.
  std::snprintf(title, sizeof title, "3. context[%lld, c] = sum_j w_ij \xC2\xB7 v_j[c]", (long long)i);
  heading(title);
  if (begin_table("ctx", 3)) {
    ImGui::TableSetupColumn("c", ImGuiTableColumnFlags_WidthFixed, ImGui::CalcTextSize("sum").x);
    ImGui::TableSetupColumn("by hand");
    ImGui::TableSetupColumn("trace");
    ImGui::TableHeadersRow();
    for (std::int64_t c = 0; c < std::min<std::int64_t>(dk, 4); ++c) {
      double sum = 0;
      for (std::int64_t jj = 0; jj < S; ++jj)
        sum += double(at(weights, n, h, i, jj)) * double(at(vs, n, g, jj, c));
      cells({std::to_string(c), num(sum), num(at(context, n, h, i, c))});
    }
    ImGui::EndTable();
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(S));
  for (std::int64_t jj = 0; jj < S; ++jj) order[std::size_t(jj)] = jj;
  const std::size_t top = std::min<std::size_t>(3, order.size());
  // NaN (a fully masked row) sorts as -inf, so the comparison stays a strict weak order.
  auto weight_of = [&](std::int64_t jj) {
    const float w = at(weights, n, h, i, jj);
    return std::isnan(w) ? -INFINITY : w;
  };
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(top), order.end(),
                    [&](std::int64_t a, std::int64_t b) { return weight_of(a) > weight_of(b); });
  ImGui::TextDisabled("top %zu keys by weight, for c = 0:", top);
  if (begin_table("top", 4)) {
    ImGui::TableSetupColumn("key", ImGuiTableColumnFlags_WidthStretch, 1.3f);
    ImGui::TableSetupColumn("w_ij");
    ImGui::TableSetupColumn("v_j[0]");
    ImGui::TableSetupColumn("w\xC2\xB7v");
    ImGui::TableHeadersRow();
    double rest = 0;
    for (std::int64_t jj = 0; jj < S; ++jj)
      rest += double(at(weights, n, h, i, jj)) * double(at(vs, n, g, jj, 0));
    for (std::size_t r = 0; r < top; ++r) {
      const std::int64_t jj = order[r];
      const double w = at(weights, n, h, i, jj), val = at(vs, n, g, jj, 0);
      cells({token(kt, jj), num(w), num(val), num(w * val)});
      rest -= w * val;
    }
    if (S > std::int64_t(top)) cells({"the others", "", "", num(rest)});
    ImGui::EndTable();
  }
  note("The output row then mixes every head's context through out_proj: output[i] = out_proj(concat[i]).");
  ImGui::Spacing();
  note("Click any cell in the Heads or Mask view to inspect it.");
}

}  // namespace mha::app
