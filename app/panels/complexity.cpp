// Complexity view: FLOPs and memory of every stage at the current sizes, how both grow with L (log-log
// plots marking the current L and where attention overtakes the projections), what GQA saves, and the
// course's "what does it cost / how does GQA differ / why several heads" answered with these numbers.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cost.hpp"
#include "panel_util.hpp"
#include "panels.hpp"

namespace mha::app {

namespace {

enum class Part { projection, attention, other };

struct Row {
  const char* stage;
  std::string formula;
  double flops = 0;
  double bytes = 0;  // the new tensor the stage makes (float32); 0: a view or fused
  const char* note;  // shown in the memory column when bytes is 0
  Part part;
  bool ls_tensor = false;  // its tensor grows with L·S (scores, weights)
};

// One forward's cost by stage, as torch computes it (a multiply-add is 2 FLOPs). S is the key length
// the attention sees (S' with add_bias_kv / add_zero_attn); the K/V projections run on the S inputs.
std::vector<Row> cost_rows(const Dims& d, bool bias, bool mask) {
  const cost::Table t = cost::stages(cost::shape(d, bias, mask));
  const double f = sizeof(float);
  auto flops = [&t](cost::Stage st) { return cost::stage(t, st).flops(); };
  auto bytes = [&t, f](cost::Stage st) { return f * cost::stage(t, st).written; };
  const bool square_kv = d.G == d.H && d.kdim == d.E && d.vdim == d.E && d.qdim() == d.E;
  const std::string b = bias ? " + bias" : "";
  const std::string kv_formula = (square_kv ? "2·N·S·E²" : "2·N·S·E·G·d_k") + b;
  // A model's explicit head_dim makes q and the heads side by side H·d_k wide instead of E.
  const bool q_is_e = d.qdim() == d.E;
  const std::string q_formula = (q_is_e ? "2·N·L·E²" : "2·N·L·E·H·d_k") + b;
  using St = cost::Stage;
  std::vector<Row> rows = {
      {"Q projection", q_formula, flops(St::q_proj), bytes(St::q_proj), "", Part::projection},
      {"K projection", kv_formula, flops(St::k_proj), bytes(St::k_proj), "", Part::projection},
      {"V projection", kv_formula, flops(St::v_proj), bytes(St::v_proj), "", Part::projection},
      {"split heads (views)", "0", 0, 0, "no copy", Part::other},
      {"scores q·k^T", "2·N·H·L·S·d_k", flops(St::scores), bytes(St::scores), "", Part::attention, true},
      {"scale by 1/sqrt(d_k)", q_is_e ? "N·L·E (torch scales q)" : "N·L·H·d_k (torch scales q)",
       flops(St::scale), bytes(St::scale), "", Part::other},
  };
  if (mask)
    rows.push_back({"add the mask", "N·H·L·S", flops(St::mask_add), bytes(St::mask_add), "fused (baddbmm)",
                    Part::attention});
  rows.push_back(
      {"softmax", "~5·N·H·L·S", flops(St::softmax), bytes(St::softmax), "", Part::attention, true});
  rows.push_back(
      {"weights · v", "2·N·H·L·S·d_k", flops(St::context), bytes(St::context), "", Part::attention});
  rows.push_back({"merge heads (a copy)", "0", flops(St::concat), bytes(St::concat), "", Part::other});
  rows.push_back(
      {"output projection", q_formula, flops(St::out_proj), bytes(St::out_proj), "", Part::projection});
  rows.push_back(
      {"average over heads", "N·H·L·S", flops(St::average), bytes(St::average), "", Part::attention, true});
  return rows;
}

// The matmuls that scale differently: the four projections (O(L·E²)) and q·k^T plus weights·v
// (O(L·S·E)). The plot and the crossover use exactly these.
double projection_flops(const Dims& d) {
  return cost::matmul_flops(cost::shape(d), cost::Part::projection);
}
double attention_flops(const Dims& d) {
  return cost::matmul_flops(cost::shape(d), cost::Part::attention);
}

// The sizes at another L: self-attention keeps S = L; cross-attention keeps its S.
Dims at_length(const Dims& d, double L, bool self) {
  Dims x = d;
  x.L = std::int64_t(std::llround(L));
  if (self) {
    x.S_total = x.L + (d.S_total - d.S);
    x.S = x.L;
  }
  return x;
}

// The L where attention's matmuls overtake the projections', or 0 when they never do.
double crossover(const Dims& d, bool self) {
  double lo = 1, hi = double(1 << 26);
  if (attention_flops(at_length(d, hi, self)) < projection_flops(at_length(d, hi, self))) return 0;
  if (attention_flops(at_length(d, lo, self)) >= projection_flops(at_length(d, lo, self))) return 1;
  while (hi - lo > 1) {
    const double mid = std::floor((lo + hi) / 2);
    (attention_flops(at_length(d, mid, self)) >= projection_flops(at_length(d, mid, self)) ? hi : lo) = mid;
  }
  return hi;
}

std::string count_str(double v) {
  static const char* prefixes[] = {"", " k", " M", " G", " T", " P", " E"};
  int p = 0;
  while (std::fabs(v) >= 1000 && p < 6) {
    v /= 1000;
    ++p;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, p == 0 ? "%.0f%s" : "%.3g%s", v, prefixes[p]);
  return buf;
}

std::string bytes_str(double b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return buf;
}

std::string pct(double part, double total) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", total > 0 ? 100 * part / total : 0.0);
  return buf;
}

struct Series {
  const char* label;
  ImU32 colour;
  std::vector<double> y;
};

// A log-log plot drawn with the draw list: powers of 2 along L, decades up the y axis, the current L
// as a solid line and `mark_x` (when > 0) as a dashed one; hovering shows every series at that L.
void loglog_plot(const char* id, const std::vector<double>& xs, const std::vector<Series>& series, bool bytes,
                 double current_x, double mark_x, const char* mark_label, ImVec2 size) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text), dim = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  const ImU32 grid = ImGui::GetColorU32(ImGuiCol_Border);
  auto fmt = [bytes](double v) { return bytes ? bytes_str(v) : count_str(v); };
  // Decade ticks read best in decimal units: 1 kB, 10 kB, 100 kB.
  auto tick = [bytes](double v) { return bytes ? count_str(v) + "B" : count_str(v); };

  double ylo = 1e300, yhi = 0;
  for (const Series& s : series)
    for (double v : s.y)
      if (v > 0) {
        ylo = std::min(ylo, v);
        yhi = std::max(yhi, v);
      }
  if (yhi <= 0) {
    ImGui::Dummy(size);
    return;
  }
  const double d0 = std::floor(std::log10(ylo)), d1 = std::max(d0 + 1, std::ceil(std::log10(yhi)));
  const double x0 = std::log2(xs.front()), x1 = std::log2(xs.back());

  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float left = ImGui::CalcTextSize(bytes ? "100 MB" : "100 M").x + font * 0.5f;
  const ImVec2 a(p.x + left, p.y + font * 0.5f), b(p.x + size.x - font * 0.5f, p.y + size.y - font * 1.6f);
  auto X = [&](double x) { return a.x + float((std::log2(x) - x0) / (x1 - x0)) * (b.x - a.x); };
  auto Y = [&](double y) { return b.y - float((std::log10(y) - d0) / (d1 - d0)) * (b.y - a.y); };

  dl->AddRectFilled(a, b, ImGui::GetColorU32(ImGuiCol_FrameBg));
  const int decade_step =
      std::max(1, int(std::ceil((d1 - d0) / std::max(1.0f, (b.y - a.y) / (font * 1.4f)))));
  for (double e = d0; e <= d1; e += decade_step) {
    const float y = Y(std::pow(10.0, e));
    dl->AddLine(ImVec2(a.x, y), ImVec2(b.x, y), grid);
    const std::string t = tick(std::pow(10.0, e));
    dl->AddText(ImVec2(a.x - ImGui::CalcTextSize(t.c_str()).x - font * 0.3f, y - font * 0.5f), dim,
                t.c_str());
  }
  const int octave_step =
      std::max(1, int(std::ceil((x1 - x0) / std::max(1.0f, (b.x - a.x) / (font * 2.6f)))));
  for (double e = x0; e <= x1 + 0.01; e += octave_step) {
    const float x = X(std::pow(2.0, e));
    dl->AddLine(ImVec2(x, a.y), ImVec2(x, b.y), grid);
    const std::string t = count_str(std::pow(2.0, e));
    dl->AddText(ImVec2(x - ImGui::CalcTextSize(t.c_str()).x * 0.5f, b.y + font * 0.15f), dim, t.c_str());
  }
  dl->AddText(ImVec2(a.x - ImGui::CalcTextSize("L").x - font * 0.6f, b.y + font * 0.15f), text, "L");

  dl->PushClipRect(a, b, true);
  if (mark_x > 0) {  // dashed: the crossover
    const float x = X(mark_x);
    for (float y = a.y; y < b.y; y += font * 0.6f)
      dl->AddLine(ImVec2(x, y), ImVec2(x, std::min(b.y, y + font * 0.3f)), text, 1.5f);
    const float lw = ImGui::CalcTextSize(mark_label).x;  // left of the line near the right edge
    dl->AddText(
        ImVec2(x + lw + font * 0.5f > b.x ? x - lw - font * 0.25f : x + font * 0.25f, b.y - font * 2.4f),
        text, mark_label);
  }
  for (const Series& s : series) {
    std::vector<ImVec2> pts;
    for (std::size_t i = 0; i < xs.size(); ++i)
      if (s.y[i] > 0) pts.emplace_back(X(xs[i]), Y(s.y[i]));
    dl->AddPolyline(pts.data(), int(pts.size()), s.colour, 0, 2.0f);
  }
  const float cx = X(current_x);
  dl->AddLine(ImVec2(cx, a.y), ImVec2(cx, b.y), IM_COL32(240, 80, 70, 255), 2.0f);
  dl->PopClipRect();
  dl->AddText(ImVec2(cx + font * 0.25f, b.y - font * 1.2f), IM_COL32(240, 80, 70, 255), "now");
  dl->AddRect(a, b, dim);

  // Legend, top-left inside the frame.
  float ly = a.y + font * 0.3f;
  for (const Series& s : series) {
    dl->AddLine(ImVec2(a.x + font * 0.4f, ly + font * 0.5f), ImVec2(a.x + font * 1.4f, ly + font * 0.5f),
                s.colour, 3);
    dl->AddText(ImVec2(a.x + font * 1.7f, ly), text, s.label);
    ly += font * 1.15f;
  }

  ImGui::InvisibleButton(id, size);
  if (ImGui::IsItemHovered()) {
    const float mx = ImGui::GetIO().MousePos.x;
    std::size_t best = 0;
    for (std::size_t i = 1; i < xs.size(); ++i)
      if (std::fabs(X(xs[i]) - mx) < std::fabs(X(xs[best]) - mx)) best = i;
    ImGui::BeginTooltip();
    ImGui::Text("L = %s", count_str(xs[best]).c_str());
    for (const Series& s : series) ImGui::Text("%s: %s", s.label, fmt(s.y[best]).c_str());
    ImGui::EndTooltip();
  }
}

// The K and V projections' FLOPs and the K/V tensors' bytes (float32: what a KV cache holds), from
// the cost table at these sizes and at G = H (one K/V head per query head).
struct KvCost {
  double flops = 0, bytes = 0, flops_mha = 0, bytes_mha = 0;
};
KvCost kv_cost(const Dims& d, bool bias, bool mask) {
  auto at = [&](const Dims& x, double& flops, double& bytes) {
    const cost::Table t = cost::stages(cost::shape(x, bias, mask));
    const cost::StageCost &k = cost::stage(t, cost::Stage::k_proj), &v = cost::stage(t, cost::Stage::v_proj);
    flops = k.flops() + v.flops();
    bytes = sizeof(float) * (k.written + v.written);
  };
  KvCost c;
  at(d, c.flops, c.bytes);
  Dims mha = d;
  mha.G = d.H;
  at(mha, c.flops_mha, c.bytes_mha);
  return c;
}

// The K/V saving in one line, at the top of the view (in sight beside a lesson): the K and V
// tensors of this forward (float32) at these G key/value heads and at the other end of the range;
// the paragraph under the plots says the rest.
std::string kv_summary(const Dims& d, const KvCost& c) {
  const std::string G = std::to_string(d.G), H = std::to_string(d.H);
  if (d.G < d.H)
    return "K/V cache " + bytes_str(c.bytes) + " at G = " + G + ", " + bytes_str(c.bytes_mha) +
           " at G = H = " + H;
  if (d.H > 1)
    return "K/V cache " + bytes_str(c.bytes) + " at G = H = " + H + ", " + bytes_str(c.bytes / double(d.H)) +
           " at G = 1";
  return "";
}

void question(const char* q) {
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_PlotHistogram));
  ImGui::TextWrapped("%s", q);
  ImGui::PopStyleColor();
}

}  // namespace

void draw_complexity(AppState& state) {
  if (!state.result.valid()) {
    ImGui::TextDisabled("No result yet: fix the inputs marked in the controls.");
    return;
  }
  const ForwardResult<float>& f = *state.result.forward;
  const Dims& d = f.dims;
  const bool mask = f.trace.has("attn_mask"), bias = f.config.bias;
  const bool self = d.L == d.S;  // the growth plot moves S with L only when they are equal now
  const std::vector<Row> rows = cost_rows(d, bias, mask);
  double total = 0, total_bytes = 0, proj = 0, att = 0;
  for (const Row& r : rows) {
    total += r.flops;
    total_bytes += r.bytes;
    if (r.part == Part::projection) proj += r.flops;
    if (r.part == Part::attention) att += r.flops;
  }

  ImGui::TextWrapped(
      "N=%lld  L=%lld  S=%lld  E=%lld  H=%lld  d_k=%lld%s: %s FLOPs, %s of new tensors (float32)",
      (long long)d.N, (long long)d.L, (long long)d.S_total, (long long)d.E, (long long)d.H, (long long)d.d_k,
      d.G < d.H ? ("  G=" + std::to_string(d.G)).c_str() : "", count_str(total).c_str(),
      bytes_str(total_bytes).c_str());
  if (state.stale) {
    panel::same_line_if_fits(ImGui::CalcTextSize("(stale: recomputing)").x);
    ImGui::TextDisabled("(stale: recomputing)");
  }
  const KvCost kv = kv_cost(d, bias, mask);
  if (const std::string line = kv_summary(d, kv); !line.empty()) {
    // Wrapped in a tall view; one line in a short one, whole on hover.
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.45f, 0.65f, 1, 1));
    panel::long_text(line, panel::compact_view());
    ImGui::PopStyleColor();
  }

  const ImGuiTableFlags flags =
      ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  // Where the five columns do not fit (a presenter font beside the lesson panel) the formulas leave
  // the table for a tooltip on their stage.
  float widest_formula = ImGui::CalcTextSize("FLOPs formula").x, widest_stage = 0;
  for (const Row& r : rows) {
    widest_formula = std::max(widest_formula, ImGui::CalcTextSize(r.formula.c_str()).x);
    widest_stage = std::max(widest_stage, ImGui::CalcTextSize(r.stage).x);
  }
  const float font = ImGui::GetFontSize();
  const bool formulas =
      widest_stage + widest_formula + ImGui::CalcTextSize("1.54 k 100% no copy").x + font * 3 <=
      ImGui::GetContentRegionAvail().x;
  // Narrower still, a memory note keeps its first word ("fused"), the rest on hover, so that the
  // stage names stay whole.
  const bool whole_notes = widest_stage + ImGui::CalcTextSize("1.54 k 100% fused (baddbmm)").x + font * 3 <=
                           ImGui::GetContentRegionAvail().x;
  if (ImGui::BeginTable("##cost", formulas ? 5 : 4, flags)) {
    ImGui::TableSetupColumn("stage", ImGuiTableColumnFlags_WidthStretch);
    if (formulas) ImGui::TableSetupColumn("FLOPs formula");
    ImGui::TableSetupColumn("FLOPs");
    ImGui::TableSetupColumn("share");
    ImGui::TableSetupColumn("memory");
    ImGui::TableHeadersRow();
    const ImVec4 blue(0.45f, 0.65f, 1, 1), orange(1, 0.65f, 0.3f, 1);
    for (const Row& r : rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (r.part == Part::other)
        ImGui::TextUnformatted(r.stage);
      else
        ImGui::TextColored(r.part == Part::projection ? blue : orange, "%s", r.stage);
      if (formulas) {
        ImGui::TableNextColumn();
        ImGui::TextDisabled("%s", r.formula.c_str());
      } else if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("%s FLOPs", r.formula.c_str());
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(count_str(r.flops).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(pct(r.flops, total).c_str());
      ImGui::TableNextColumn();
      if (r.bytes > 0) {
        ImGui::TextUnformatted(bytes_str(r.bytes).c_str());
      } else {
        const std::string note = r.note, word = whole_notes ? note : note.substr(0, note.find(" ("));
        ImGui::TextUnformatted(word.c_str());
        if (word != note && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", r.note);
      }
    }
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted("total");
    if (formulas) ImGui::TableNextColumn();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(count_str(total).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted("100%");
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(bytes_str(total_bytes).c_str());
    ImGui::EndTable();
  }
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled(
      "memory: the tensor each stage makes. The trace on screen keeps every stage and the inputs: %s.",
      bytes_str(double(trace_bytes(d, sizeof(float), mask))).c_str());

  ImGui::PopTextWrapPos();

  // The split, and where it turns over.
  const double cross = crossover(d, self);
  ImGui::TextColored(ImVec4(0.45f, 0.65f, 1, 1), "projections O(L·E²): %s (%s)", count_str(proj).c_str(),
                     pct(proj, total).c_str());
  const std::string attention = std::string("attention ") + (self ? "O(L²·E)" : "O(L·S·E)") + ": " +
                                count_str(att) + " (" + pct(att, total) + ")";
  panel::same_line_if_fits(ImGui::CalcTextSize(attention.c_str()).x);
  ImGui::TextColored(ImVec4(1, 0.65f, 0.3f, 1), "%s", attention.c_str());
  ImGui::PushTextWrapPos(0);
  if (self) {
    ImGui::TextWrapped(
        "Attention's matmuls (4·N·L²·E) overtake the projections' (4·N·L·E² + 4·N·L·E·G·d_k) at L = "
        "E·(1 + G/H) = %.0f%s. Here L = %lld: %s.",
        cross, d.G == d.H ? " = 2E" : "", (long long)d.L,
        double(d.L) < cross ? "the projections dominate" : "attention dominates");
  } else if (cross > 0) {
    ImGui::TextWrapped(
        "Cross-attention with S = %lld fixed: attention grows like L·S·E, the projections like L·E², so "
        "attention overtakes them from L = %.0f on. Here L = %lld.",
        (long long)d.S, cross, (long long)d.L);
  } else {
    ImGui::TextWrapped(
        "Cross-attention with S = %lld fixed and S <= E: the projections stay ahead for every L.",
        (long long)d.S);
  }
  ImGui::PopTextWrapPos();

  // Growth with L, log-log, from 1 to past both the current L and the crossover.
  double lmax = 64;
  while (lmax < 4 * double(d.L) || lmax < 4 * cross) lmax *= 2;
  lmax = std::min(lmax, double(1 << 20));
  // Whole token counts only (rounded log-spaced samples), so the curves have no rounding steps.
  std::vector<double> xs;
  for (int i = 0; i <= 60; ++i) {
    const double x = std::round(std::pow(lmax, double(i) / 60));
    if (xs.empty() || x > xs.back()) xs.push_back(x);
  }
  Series sp{"projections", IM_COL32(90, 150, 255, 255), {}},
      sa{"attention matmuls", IM_COL32(255, 160, 60, 255), {}},
      st{"all stages", ImGui::GetColorU32(ImGuiCol_Text), {}};
  Series ml{"L x S tensors", IM_COL32(255, 160, 60, 255), {}},
      me{"L x E tensors", IM_COL32(90, 150, 255, 255), {}},
      mt{"all stages", ImGui::GetColorU32(ImGuiCol_Text), {}};
  for (double x : xs) {
    const Dims dx = at_length(d, x, self);
    sp.y.push_back(projection_flops(dx));
    sa.y.push_back(attention_flops(dx));
    double fl = 0, by = 0, ls = 0;
    for (const Row& r : cost_rows(dx, bias, mask)) {
      fl += r.flops;
      by += r.bytes;
      if (r.ls_tensor) ls += r.bytes;
    }
    st.y.push_back(fl);
    mt.y.push_back(by);
    ml.y.push_back(ls);
    me.y.push_back(by - ls);
  }

  const float w = (ImGui::GetContentRegionAvail().x - ImGui::GetStyle().ItemSpacing.x) / 2;
  const float h = std::clamp(w * 0.6f, font * 9, font * 16);
  ImGui::Text("FLOPs as L grows%s", self ? " (S = L)" : " (S fixed)");
  ImGui::SameLine(w + ImGui::GetStyle().ItemSpacing.x);
  ImGui::Text("memory as L grows");
  loglog_plot("##flops_plot", xs, {st, sp, sa}, false, double(d.L), cross,
              self && d.G == d.H ? "L = 2E" : "cross", ImVec2(w, h));
  ImGui::SameLine();
  loglog_plot("##bytes_plot", xs, {mt, me, ml}, true, double(d.L), 0, "", ImVec2(w, h));
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("Doubling L doubles the L x E work and quadruples the L x S work%s.",
                      self ? "" : " (here S stays fixed, so both double)");
  ImGui::PopTextWrapPos();

  // GQA's saving.
  ImGui::Separator();
  // K and V projections and tensors at G key/value heads, and what one K/V head per query head costs.
  const double kv_flops = kv.flops, kv_bytes = kv.bytes, kv_flops_mha = kv.flops_mha,
               kv_bytes_mha = kv.bytes_mha;
  ImGui::PushTextWrapPos(0);
  if (d.G < d.H) {
    ImGui::Text("GQA: G = %lld key/value heads serve H = %lld query heads (%lld each).", (long long)d.G,
                (long long)d.H, (long long)(d.H / d.G));
    ImGui::TextWrapped(
        "K and V projections: %s FLOPs instead of %s with one K/V head per query head, and K/V "
        "tensors (what a KV cache holds) take %s instead of %s: both scaled by G/H = %lld/%lld. "
        "Scores and weights · v cost the same: every query head still scores every key.",
        count_str(kv_flops).c_str(), count_str(kv_flops_mha).c_str(), bytes_str(kv_bytes).c_str(),
        bytes_str(kv_bytes_mha).c_str(), (long long)d.G, (long long)d.H);
  } else if (d.H > 1) {
    ImGui::TextWrapped(
        "GQA is off (num_kv_heads = H = %lld). With G key/value heads (G divides H) the K/V "
        "projections and K/V memory scale by G/H: at G = 1 (multi-query) they would cost %s FLOPs "
        "instead of %s and take %s instead of %s. Set KV heads in the controls to see it.",
        (long long)d.H, count_str(kv_flops / double(d.H)).c_str(), count_str(kv_flops).c_str(),
        bytes_str(kv_bytes / double(d.H)).c_str(), bytes_str(kv_bytes).c_str());
  } else {
    ImGui::TextWrapped(
        "GQA shares key/value heads between query heads; with H = 1 there is nothing to share.");
  }
  if (state.result.model) {
    // The whole model's KV cache at its own sizes: K and V of every layer, G heads of d_k, in the
    // 16-bit values inference keeps them in.
    const ModelSizes& ms = state.result.model->sizes;
    const double per_token = 2.0 * double(ms.n_layer) * double(ms.n_kv_head) * double(ms.head_dim) * 2;
    const double per_token_mha =
        per_token * double(ms.n_head) / double(std::max<std::int64_t>(1, ms.n_kv_head));
    const double T = double(d.L), P = double(ms.max_positions);
    ImGui::TextWrapped(
        "This model's KV cache (%lld layers, K and V of %lld head%s of %lld, 16-bit): %s a token, %s for "
        "this sentence's %lld tokens, %s at its longest context (%lld tokens)%s",
        (long long)ms.n_layer, (long long)ms.n_kv_head, ms.n_kv_head == 1 ? "" : "s", (long long)ms.head_dim,
        bytes_str(per_token).c_str(), bytes_str(per_token * T).c_str(), (long long)d.L,
        bytes_str(per_token * P).c_str(), (long long)ms.max_positions,
        ms.n_kv_head < ms.n_head
            ? ("; with one K/V head per query head it would be " + bytes_str(per_token_mha * P) + " there.")
                  .c_str()
            : ".");
  }

  // The course's follow-up questions, answered at these sizes.
  ImGui::Separator();
  question("What's the computational complexity?");
  ImGui::TextWrapped(
      "Time: O(N·L·E²) for the four projections plus O(N·L·S·E) for q·k^T and weights · v, i.e. "
      "O(N·L²·E) in self-attention; memory O(N·H·L·S) for the weights. Here that is %s FLOPs, %s of "
      "them in the projections.",
      count_str(total).c_str(), pct(proj, total).c_str());
  question("How does this compare to grouped-query attention?");
  ImGui::TextWrapped(
      "GQA keeps H query heads but only G key/value heads, each shared by H/G query heads: the K/V "
      "projections and the KV cache shrink by G/H while the attention FLOPs stay the same. G = H is "
      "plain multi-head attention, G = 1 is multi-query attention.");
  question("Why split into multiple heads instead of one large head?");
  ImGui::TextWrapped(
      "Not for speed: H heads of d_k = E/H cost 2·N·H·L·S·d_k = 2·N·L·S·E for the scores, exactly "
      "what one head of size E costs, with the same projection matrices. Each head has its own "
      "softmax, so it gets its own attention pattern over its own %lld-dimensional subspace; one big "
      "head would blend every relation into a single pattern per query. Only the weights grow: H·L·S "
      "per batch item.",
      (long long)d.d_k);
  ImGui::PopTextWrapPos();
}

}  // namespace mha::app
