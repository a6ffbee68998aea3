// Reshape view: the projected q of one batch item as a grid of cells, each head's d_k columns in its
// own hue, animated through view -> transpose -> per-head attention -> transpose back -> concat, with
// shape, strides and contiguity from the trace at every step, and the course's common mistakes.
#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "data_dir.hpp"
#include "export_dialog.hpp"
#include "head_colour.hpp"
#include "heatmap.hpp"
#include "mistakes.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "reshape_export.hpp"
#include "stage_table.hpp"

namespace mha::app {

namespace {

using F = ForwardResult<float>;

constexpr int kLastStep = 5;
constexpr int kMaxRows = 32;             // rows drawn as cells; more would not be readable
constexpr int kMaxCols = 128;            // columns drawn as cells
constexpr double kMoveSeconds = 0.8;     // one layout change
constexpr double kPlaySeconds = 2.6;     // Play: time per step
constexpr double kWrongWorkLimit = 2e6;  // N·H·L·S·d_k of the local "no transpose" forward
constexpr const char* kViewError =
    "RuntimeError: view size is not compatible with input tensor's size and stride (at least one "
    "dimension spans across two contiguous subspaces). Use .reshape(...) instead.";

enum class Layout { flat, split, blocks };

struct StepText {
  const char* code;   // the torch expression of the step
  const char* stage;  // the trace stage it makes (stage_name::…; nullptr: not in the trace)
  Layout layout;
};

// The right way (course reference implementation) and mistake 1, where q.view goes straight to
// (N, H, L, d_k) and the context comes back with a plain .view.
const StepText kRight[] = {
    {"q = F.linear(query, W_q, b_q)", stage_name::q, Layout::flat},
    {"q_view = q.view(N, L, H, d_k)", stage_name::q_view, Layout::split},
    {"q_heads = q_view.transpose(1, 2)", stage_name::q_heads, Layout::blocks},
    {"context = softmax(q_heads k_heads^T / sqrt(d_k)) v_heads", stage_name::context, Layout::blocks},
    {"context.transpose(1, 2)", stage_name::context_transposed, Layout::split},
    {"concat = context.transpose(1, 2).contiguous().view(N, L, E)", stage_name::concat, Layout::flat},
};
const StepText kWrong[] = {
    {"q = F.linear(query, W_q, b_q)", stage_name::q, Layout::flat},
    {"q.view(N, H, L, d_k)   # no transpose", nullptr, Layout::blocks},
    {"(no transpose: the split is already 'done')", nullptr, Layout::blocks},
    {"context = softmax(q_h k_h^T / sqrt(d_k)) v_h on the scrambled rows", nullptr, Layout::blocks},
    {"(no transpose back)", nullptr, Layout::blocks},
    {"concat = context.view(N, L, E)", nullptr, Layout::flat},
};

double ease(double t) {
  t = std::clamp(t, 0.0, 1.0);
  return t * t * (3 - 2 * t);
}

// Element (n, i, j) of a 3-D stage and (n, a, b, c) of a 4-D one, without allocating an index.
float at3(const Stage<float>& s, std::int64_t n, std::int64_t i, std::int64_t j) {
  return (*s.storage)[std::size_t(s.offset + n * s.strides[0] + i * s.strides[1] + j * s.strides[2])];
}
float at4(const Stage<float>& s, std::int64_t n, std::int64_t a, std::int64_t b, std::int64_t c) {
  return (*s.storage)[std::size_t(s.offset + n * s.strides[0] + a * s.strides[1] + b * s.strides[2] +
                                  c * s.strides[3])];
}

std::string bytes_str(double b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return buf;
}

// ---- mistake 1: the forward with q/k/v split by .view(N, H, L, d_k) and no transpose ----

// Caches below belong to one result. Generation numbers restart with every Computer (tests make
// many), so the key is the result itself; a weak_ptr cannot mistake a new result at a recycled
// address for the old one.
bool same_result(const std::weak_ptr<const F>& cached, const Result& r) {
  return cached.lock() == r.forward;
}

struct WrongRun {
  std::weak_ptr<const F> source;
  bool computed = false;      // false: too large to demo
  std::vector<float> concat;  // (N, L, E): context (N, H, L, d_k) read back with .view(N, L, E)
  std::vector<float> diff;    // wrong - right concat
  float max_diff = 0, range = 1, diff_range = 1;
};

void compute_wrong(const F& f, WrongRun& w) {
  const Dims& d = f.dims;
  const Trace<float>& t = f.trace;
  const std::int64_t N = d.N, L = d.L, Sp = d.S_total, E = d.qdim(), H = d.H, dk = d.d_k;
  w.computed = double(N) * double(H) * double(L) * double(Sp) * double(dk) <= kWrongWorkLimit;
  w.concat.clear();
  w.diff.clear();
  if (!w.computed) return;
  const Stage<float>& right = t["concat"];
  // The engine's attention core with q/k/v split by .view(N, H, L, d_k): its scores, softmax and
  // mask handling, on the wrong rows.
  w.concat = attention_concat(f, HeadSplit::view_without_transpose);
  w.diff.resize(w.concat.size());
  w.max_diff = 0;
  float range = 0;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t e = 0; e < E; ++e) {
        const std::size_t at = std::size_t((n * L + i) * E + e);
        const float a = w.concat[at], b = at3(right, n, i, e);
        w.diff[at] = a - b;
        if (std::isfinite(a - b)) w.max_diff = std::max(w.max_diff, std::fabs(a - b));
        if (std::isfinite(a)) range = std::max(range, std::fabs(a));
        if (std::isfinite(b)) range = std::max(range, std::fabs(b));
      }
  w.range = std::max(range, 1e-6f);
  w.diff_range = std::max(w.max_diff, 1e-6f);
}

// The grid and the comparison below share one run, recomputed only for a new result.
const WrongRun& wrong_run(WrongRun& run, const Result& r) {
  if (!same_result(run.source, r)) {
    compute_wrong(*r.forward, run);
    run.source = r.forward;
  }
  return run;
}

// ---- the cell grid ----

// Sizes in cells and pixels. A cell is identified by its place in q: token i, head h, column c < d_k.
struct Grid {
  std::int64_t L = 0, E = 0, H = 0, dk = 0;  // E: q's width H·d_k
  bool wide = false;                         // that width is not the model's E (its head_dim)
  int rows = 0, heads = 0, cols = 0;  // shown: token rows, heads, columns per head
  int bcols = 1, brows = 1;           // blocks layout: heads arranged bcols × brows
  float cw = 0, ch = 0;               // cell width and height: E columns squeeze the width before the height
  float gap = 0, label_w = 0, label_h = 0;
  ImVec2 origin;  // top-left of the first cell

  float block_w() const { return float(cols) * cw; }
  float block_h() const { return float(rows) * ch; }
  // Top-left of cell (block or head b, row r, column c) in a layout.
  ImVec2 pos(Layout lay, int b, int r, int c) const {
    switch (lay) {
      case Layout::flat: return ImVec2(origin.x + float(b * cols + c) * cw, origin.y + float(r) * ch);
      case Layout::split:
        return ImVec2(origin.x + float(b) * (block_w() + gap) + float(c) * cw, origin.y + float(r) * ch);
      case Layout::blocks:
        return ImVec2(origin.x + float(b % bcols) * (block_w() + gap) + float(c) * cw,
                      origin.y + float(b / bcols) * (block_h() + gap + label_h) + float(r) * ch);
    }
    return origin;
  }
  float width() const {
    return label_w + std::max(float(heads) * (block_w() + gap) - gap, float(bcols) * (block_w() + gap) - gap);
  }
  float height() const { return label_h + float(brows) * (block_h() + gap + label_h) - gap - label_h; }
  // The height one layout takes: a row of heads (flat, split) or the blocks stacked.
  float height(Layout lay) const { return lay == Layout::blocks ? height() : label_h + block_h(); }
};

Grid fit_grid(const Dims& d, const std::vector<std::string>& tokens, ImVec2 avail) {
  Grid g;
  g.L = d.L;
  g.E = d.qdim();  // q's width H·d_k: the model's E unless its config gives head_dim
  g.wide = d.qdim() != d.E;
  g.H = d.H;
  g.dk = d.d_k;
  g.rows = int(std::min<std::int64_t>(d.L, kMaxRows));
  g.cols = int(std::min<std::int64_t>(d.d_k, kMaxCols));
  g.heads = int(std::clamp<std::int64_t>(kMaxCols / std::max<std::int64_t>(1, d.d_k), 1, d.H));
  const float font = ImGui::GetFontSize();
  g.gap = font * 0.8f;
  g.label_h = ImGui::GetTextLineHeightWithSpacing();
  for (int i = 0; i < g.rows && i < int(tokens.size()); ++i)
    g.label_w = std::max(g.label_w, ImGui::CalcTextSize((tokens[std::size_t(i)] + ":00").c_str()).x);
  g.label_w = std::min(g.label_w, font * 7) + font * 0.5f;
  // The transposed tensor is drawn as what it is, (H, L, d_k): one L x d_k block per head, the heads
  // one under the other. One cell size serves every layout (cells move between them): the width
  // holds the H·d_k columns side by side, the height the H blocks, down to a floor below which the
  // view scrolls instead. Cells may be up to 2.5 times taller than wide, so rows stay readable.
  const float max_cell = font * 3.0f, w = avail.x - g.label_w;
  const float h = avail.y - g.label_h - float(g.heads - 1) * (g.gap + g.label_h);
  float cw = std::min(max_cell, (w - float(g.heads - 1) * g.gap) / float(g.heads * g.cols));
  float ch = std::max(std::min(max_cell, h / float(g.heads * g.rows)), font * 0.45f);
  ch = std::min(ch, cw * 2.5f);
  cw = std::min(cw, ch * 2.5f);
  g.cw = std::max(cw, 2.0f);
  g.ch = std::max(ch, 2.0f);
  g.bcols = 1;
  g.brows = g.heads;
  return g;
}

// Where a cell of q sits in a layout. Mistake 1 reads memory in order: q's i-th row-major value goes
// to "head" f / (L·d_k), row f / d_k mod L. Returns false when that place is not drawn.
bool place(const Grid& g, Layout lay, bool wrong, int i, int h, int c, ImVec2* out) {
  if (!wrong || lay == Layout::flat) {
    *out = g.pos(lay, h, i, c);
    return true;
  }
  const std::int64_t f = std::int64_t(i) * g.E + std::int64_t(h) * g.dk + c;
  const std::int64_t b = f / (g.L * g.dk), r = (f / g.dk) % g.L, cc = f % g.dk;
  if (b >= g.heads || r >= g.rows || cc >= g.cols) return false;
  *out = g.pos(lay, int(b), int(r), int(cc));
  return true;
}

// The head's hue (render/head_colour.hpp, as the exported figure) at the animation's alpha.
ImU32 cell_colour(int h, std::int64_t H, float value, float maxabs, float alpha) {
  const ImU32 a = ImU32(std::lround(std::clamp(alpha, 0.0f, 1.0f) * 255.0f));
  return (render::head_colour(h, H, value, maxabs) & 0x00FFFFFFu) | a << IM_COL32_A_SHIFT;
}

// What the grid shows at a step: the values of q (steps 0-2) or of the context (3-5), and which
// storage the step's tensor reads, as an offset within the batch item.
struct StepView {
  int step = 0;
  bool wrong = false;
  Layout layout() const { return (wrong ? kWrong : kRight)[step].layout; }
  bool context() const { return step >= 3; }
  std::int64_t offset(const Grid& g, int i, int h, int c) const {
    if (!wrong && (step == 3 || step == 4)) return (h * g.L + i) * g.dk + c;  // context: head-major
    return std::int64_t(i) * g.E + std::int64_t(h) * g.dk + c;                // token-major
  }
};

struct Values {
  const Result& result;
  int n;
  WrongRun& no_transpose;
  const Stage<float>& q = result.forward->trace["q"];
  const Stage<float>& context = result.forward->trace["context"];
  const Dims& d = result.forward->dims;

  float value(const StepView& s, std::int64_t i, std::int64_t h, std::int64_t c) const {
    const std::int64_t e = h * d.d_k + c;
    if (!s.context()) return at3(q, n, i, e);
    if (!s.wrong) return at4(context, n, h, i, c);
    const WrongRun& w = wrong_run(no_transpose, result);  // also while animating away from mistake 1
    if (!w.computed) return std::numeric_limits<float>::quiet_NaN();
    return w.concat[std::size_t((n * d.L + i) * d.qdim() + e)];
  }
};

struct Anim {
  StepView from, to;
  double start = -1e9;
};

void draw_labels(ImDrawList* dl, const Grid& g, const StepView& s, const std::vector<std::string>& tokens,
                 float alpha) {
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text, alpha);
  const Layout lay = s.layout();
  char buf[64];
  auto token = [&](std::int64_t i) {
    return i < std::int64_t(tokens.size()) ? tokens[std::size_t(i)] : "t" + std::to_string(i);
  };
  // Head captions, in the head's hue.
  for (int h = 0; h < g.heads; ++h) {
    const ImVec2 p = g.pos(lay, h, 0, 0);
    const bool quoted = s.wrong && lay == Layout::blocks;  // mistake 1's "heads" are not heads
    std::snprintf(buf, sizeof buf, quoted ? "'head' %d" : "head %d", h);
    if (lay == Layout::flat || ImGui::CalcTextSize(buf).x > g.block_w())
      std::snprintf(buf, sizeof buf, quoted ? "'h%d'" : "h%d", h);
    const float tw = ImGui::CalcTextSize(buf).x;
    const float x = lay == Layout::blocks ? p.x : p.x + (g.block_w() - tw) * 0.5f;
    if (tw <= g.block_w() + g.gap * 0.8f)
      dl->AddText(ImVec2(x, p.y - g.label_h), cell_colour(h, g.H, 1, 1, alpha), buf);
  }
  // Token labels left of the first column of blocks. Mistake 1's rows hold pieces of tokens:
  // "cat:1" is token cat's columns of head 1. Rows shorter than a line of text take their labels on
  // lanes, smaller, before every k-th is left out (plan_axis_labels, as the heatmaps do).
  const bool pieces = s.wrong && lay == Layout::blocks;
  const int block_rows = lay == Layout::blocks ? g.brows : 1;
  auto label_of = [&](int b, int r) {
    if (!pieces) return token(r);
    const std::int64_t f = (std::int64_t(b) * g.L + r) * g.dk;
    return token(f / g.E) + ":" + std::to_string((f % g.E) / g.dk);
  };
  const float font = ImGui::GetFontSize(), pad = font * 0.4f, gap = font * 0.4f;
  float widest = 0;
  for (int br = 0; br < block_rows; ++br)
    for (int r = 0; r < g.rows; ++r)
      widest = std::max(widest, ImGui::CalcTextSize(label_of(br * g.bcols, r).c_str()).x);
  const AxisLabels plan = plan_axis_labels(g.ch, ImGui::GetTextLineHeight(), widest, g.label_w - pad - 2,
                                           label_min_scale(font), gap);
  const float size = font * plan.scale;
  for (int br = 0; br < block_rows; ++br)
    for (int r = 0; r < g.rows; r += plan.step) {
      const int b = br * g.bcols;
      const std::string label = label_of(b, r);
      const ImVec2 p = g.pos(lay, b, r, 0);
      const float w = ImGui::GetFont()->CalcTextSizeA(size, FLT_MAX, 0.0f, label.c_str()).x;
      const float right = g.origin.x - pad - float(r / plan.step % plan.lanes) * (plan.lane_depth + gap);
      // Clipped to its lane: long tokens must not run into the next lane or the panel's edge.
      dl->PushClipRect(ImVec2(std::max(g.origin.x - g.label_w, right - plan.lane_depth), p.y - size),
                       ImVec2(right, p.y + g.ch + size), true);
      dl->AddText(ImGui::GetFont(), size, ImVec2(right - w, p.y + (g.ch - size) * 0.5f), text, label.c_str());
      dl->PopClipRect();
    }
}

// The grid, animated from anim.from to anim.to. Returns the hovered cell (i, h, c) or i = -1.
struct Hover {
  int i = -1, h = 0, c = 0;
};

Hover draw_cells(const Anim& anim, bool show_offsets, const Grid& g, const Values& vals,
                 const std::vector<std::string>& tokens, float frame_h, const Hover& linked) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const double t = ease((ImGui::GetTime() - anim.start) / kMoveSeconds);
  // Magnitude scale per phase (q or context) over the shown cells, so shading compares like with like.
  float max_from = 1e-6f, max_to = 1e-6f;
  for (int i = 0; i < g.rows; ++i)
    for (int h = 0; h < g.heads; ++h)
      for (int c = 0; c < g.cols; ++c) {
        const float a = vals.value(anim.from, i, h, c), b = vals.value(anim.to, i, h, c);
        if (std::isfinite(a)) max_from = std::max(max_from, std::fabs(a));
        if (std::isfinite(b)) max_to = std::max(max_to, std::fabs(b));
      }
  ImGui::InvisibleButton("##reshape_grid", ImVec2(std::max(1.0f, g.width()), std::max(1.0f, frame_h)));
  const bool hovered_area = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;

  Hover hover;
  const ImU32 outline = ImGui::GetColorU32(ImGuiCol_WindowBg);
  char buf[32];
  const float value_w = ImGui::CalcTextSize("-0.00").x + 4;
  for (int i = 0; i < g.rows; ++i)
    for (int h = 0; h < g.heads; ++h)
      for (int c = 0; c < g.cols; ++c) {
        ImVec2 p0, p1;
        const bool v0 = place(g, anim.from.layout(), anim.from.wrong, i, h, c, &p0);
        const bool v1 = place(g, anim.to.layout(), anim.to.wrong, i, h, c, &p1);
        if (!v0 && !v1) continue;
        if (!v0) p0 = p1;
        if (!v1) p1 = p0;
        const float alpha = float((v0 ? 1 - t : 0) + (v1 ? t : 0));
        const ImVec2 p(p0.x + (p1.x - p0.x) * float(t), p0.y + (p1.y - p0.y) * float(t));
        const float a = vals.value(anim.from, i, h, c), b = vals.value(anim.to, i, h, c);
        const float v = t < 0.5 ? a : b;
        // Colours cross-fade, so q turning into the context (step 2 -> 3) reads as a change in place.
        const ImVec4 ca = ImGui::ColorConvertU32ToFloat4(cell_colour(h, g.H, a, max_from, alpha));
        const ImVec4 cb = ImGui::ColorConvertU32ToFloat4(cell_colour(h, g.H, b, max_to, alpha));
        const float tf = float(t);
        const ImU32 col = ImGui::GetColorU32(ImVec4(ca.x + (cb.x - ca.x) * tf, ca.y + (cb.y - ca.y) * tf,
                                                    ca.z + (cb.z - ca.z) * tf, ca.w + (cb.w - ca.w) * tf));
        const ImVec2 q(p.x + g.cw, p.y + g.ch);
        dl->AddRectFilled(p, q, col);
        if (std::min(g.cw, g.ch) >= 6) dl->AddRect(p, q, outline);
        if (hovered_area && mouse.x >= p.x && mouse.x < q.x && mouse.y >= p.y && mouse.y < q.y)
          hover = {i, h, c};
        if (linked.i == i && linked.h == h && linked.c == c)
          dl->AddRect(ImVec2(p.x - 1, p.y - 1), ImVec2(q.x + 1, q.y + 1), IM_COL32(255, 255, 255, 255), 0, 0,
                      2.5f);
        // Text: value or memory offset, when it fits; dark text on light cells.
        if (g.cw >= value_w && g.ch >= ImGui::GetTextLineHeight() && alpha > 0.5f) {
          if (show_offsets)
            std::snprintf(buf, sizeof buf, "%lld",
                          (long long)(t < 0.5 ? anim.from : anim.to).offset(g, i, h, c));
          else
            std::snprintf(buf, sizeof buf, std::isfinite(v) ? "%.2f" : "NaN", double(v));
          const ImVec4 cv = ImGui::ColorConvertU32ToFloat4(col);
          const bool light = cv.x * 0.3f + cv.y * 0.59f + cv.z * 0.11f > 0.55f;
          const ImVec2 ts = ImGui::CalcTextSize(buf);
          dl->AddText(ImVec2(p.x + (g.cw - ts.x) * 0.5f, p.y + (g.ch - ts.y) * 0.5f),
                      light ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255), buf);
        }
      }
  // One set of labels at a time: the old ones fade out over the first half of a move, the new ones
  // in over the second (both at once would print every label twice mid-move).
  if (t < 0.5)
    draw_labels(dl, g, anim.from, tokens, float(1 - 2 * t));
  else
    draw_labels(dl, g, anim.to, tokens, float(2 * t - 1));
  if (hover.i >= 0) {
    const float v = vals.value(anim.to, hover.i, hover.h, hover.c);
    ImGui::BeginTooltip();
    ImGui::Text("from q: token %d, head %d, column %d of d_k (column %lld of E)", hover.i, hover.h, hover.c,
                (long long)(std::int64_t(hover.h) * g.dk + hover.c));
    ImGui::Text("%s %.6g, at memory offset %lld of this batch item", anim.to.context() ? "context" : "q",
                double(v), (long long)anim.to.offset(g, hover.i, hover.h, hover.c));
    ImGui::EndTooltip();
  }
  return hover;
}

// The height draw_memory takes: its caption (up to two lines), the strip and its scrollbar.
float memory_height() {
  const ImGuiStyle& style = ImGui::GetStyle();
  return ImGui::GetTextLineHeightWithSpacing() * 2 + ImGui::GetFontSize() * 1.5f + style.ScrollbarSize +
         style.ItemSpacing.y * 2;
}

// One row of cells: the whole storage of the step's tensor for this batch item, in memory order, in a
// strip that scrolls sideways when the values do not fit.
Hover draw_memory(const Grid& g, const StepView& s, const Values& vals, const char* storage_name, int n,
                  const Hover& linked) {
  const float font = ImGui::GetFontSize();
  const std::int64_t total = g.L * g.E;
  const float avail_w = ImGui::GetContentRegionAvail().x;
  const float slot = std::max(font * 0.75f, std::min(font * 1.6f, avail_w / float(total)));
  const bool scrolls = float(total) * slot > avail_w;
  const char* lines = !s.wrong && (s.step == 3 || s.step == 4) ? "head (L·d_k values)"
                      : g.wide                                 ? "token (H·d_k values)"
                                                               : "token (E values)";
  ImGui::PushTextWrapPos(0);
  ImGui::Text("Memory of %s, batch item %d, in storage order: all %lld values, a line every %s%s.",
              storage_name, n, (long long)total, lines, scrolls ? "; scroll sideways for the rest" : "");
  ImGui::PopTextWrapPos();
  const float h = font * 1.2f;
  const float strip_h = h + font * 0.3f;
  ImGui::BeginChild("##memory", ImVec2(0, strip_h + ImGui::GetStyle().ScrollbarSize + 2), false,
                    ImGuiWindowFlags_HorizontalScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::Dummy(ImVec2(float(total) * slot, strip_h));
  const bool hovered_strip = ImGui::IsItemHovered();
  // Only the slots in view are drawn: a large L·E would be thousands of rectangles.
  const float scroll = ImGui::GetScrollX(), view_w = ImGui::GetWindowWidth();
  const std::int64_t o0 = std::clamp<std::int64_t>(std::int64_t(scroll / slot) - 1, 0, total);
  const std::int64_t o1 = std::clamp<std::int64_t>(std::int64_t((scroll + view_w) / slot) + 2, o0, total);
  const bool head_major = !s.wrong && (s.step == 3 || s.step == 4);
  // The q cell (token, head, column) that lives at offset o.
  auto cell_at = [&](std::int64_t o, std::int64_t* i, std::int64_t* hh, std::int64_t* c) {
    *i = head_major ? (o / g.dk) % g.L : o / g.E;
    *hh = head_major ? o / (g.L * g.dk) : (o % g.E) / g.dk;
    *c = o % g.dk;
  };
  float maxabs = 1e-6f;  // one shading scale over the whole tensor, not the part in view
  std::int64_t i, hh, c;
  for (std::int64_t o = 0; o < total; ++o) {
    cell_at(o, &i, &hh, &c);
    const float v = vals.value(s, i, hh, c);
    if (std::isfinite(v)) maxabs = std::max(maxabs, std::fabs(v));
  }
  Hover hover;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const std::int64_t boundary = head_major ? g.L * g.dk : g.E;
  for (std::int64_t o = o0; o < o1; ++o) {
    cell_at(o, &i, &hh, &c);
    const ImVec2 a(p.x + float(o) * slot, p.y), b(a.x + slot, a.y + h);
    dl->AddRectFilled(a, b, cell_colour(int(hh), g.H, vals.value(s, i, hh, c), maxabs, 1.0f));
    if (o % boundary == 0 && o > 0)
      dl->AddLine(a, ImVec2(a.x, b.y + font * 0.3f), ImGui::GetColorU32(ImGuiCol_Text), 2);
    if (linked.i == i && linked.h == hh && linked.c == c)
      dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), IM_COL32(255, 255, 255, 255), 0, 0,
                  2.5f);
    if (hovered_strip && mouse.x >= a.x && mouse.x < b.x) {
      if (i < g.rows && hh < g.heads && c < g.cols) hover = {int(i), int(hh), int(c)};
      ImGui::SetTooltip("offset %lld: %s token %lld, head %lld, column %lld = %.4g", (long long)o,
                        storage_name, (long long)i, (long long)hh, (long long)c,
                        double(vals.value(s, i, hh, c)));
    }
  }
  // A linked cell scrolled out of view comes into it.
  if (linked.i >= 0 && !ImGui::IsWindowHovered()) {
    for (std::int64_t o = 0; o < total; ++o) {
      cell_at(o, &i, &hh, &c);
      if (linked.i != i || linked.h != hh || linked.c != c) continue;
      const float x = float(o) * slot;
      if (x < scroll || x + slot > scroll + view_w) ImGui::SetScrollX(std::max(0.0f, x - view_w * 0.5f));
      break;
    }
  }
  ImGui::EndChild();
  return hover;
}

// Shape, strides and contiguity of the step's tensor: from the trace, or computed for mistake 1's
// tensors, which the trace does not hold.
void draw_step_facts(const F& f, const StepView& s) {
  const Dims& d = f.dims;
  const StepText& st = (s.wrong ? kWrong : kRight)[s.step];
  Shape shape, strides;
  if (st.stage) {
    const Stage<float>& stage = f.trace[st.stage];
    shape = stage.shape;
    strides = stage.strides;
  } else {
    shape = s.step == kLastStep ? Shape{d.N, d.L, d.qdim()} : Shape{d.N, d.H, d.L, d.d_k};
    strides = contiguous_strides(shape);
  }
  const bool contiguous = mha::is_contiguous(shape, strides);
  // Three facts a line while they fit, else each part on a line of its own (a narrow view).
  const std::string facts[] = {"shape " + shape_str(shape), "strides " + shape_str(strides), "contiguous:"};
  const float gap = ImGui::CalcTextSize("   ").x, space = ImGui::CalcTextSize(" ").x;
  const float answer = ImGui::CalcTextSize(contiguous ? " yes" : " no").x;
  for (int i = 0; i < 3; ++i) {
    const std::string& part = facts[i];
    if (i > 0) {
      ImGui::SameLine(0, gap);
      // "contiguous:" stays with its answer.
      if (ImGui::GetContentRegionAvail().x < ImGui::CalcTextSize(part.c_str()).x + (i == 2 ? answer : 0))
        ImGui::NewLine();
    }
    ImGui::TextUnformatted(part.c_str());
  }
  ImGui::SameLine(0, space);
  ImGui::TextColored(contiguous ? ImVec4(0.45f, 0.85f, 0.5f, 1) : ImVec4(1, 0.5f, 0.4f, 1), "%s",
                     contiguous ? "yes" : "no");
  if (!st.stage) {
    panel::same_line_if_fits(ImGui::CalcTextSize("(not in the trace)").x);
    ImGui::TextDisabled("(not in the trace)");
  }
}

std::string strides_of(const F& f, const char* stage) {
  return shape_str(f.trace[stage].strides);
}

// One line on why the step costs what it costs.
std::string step_reason(const F& f, const StepView& s) {
  const Dims& d = f.dims;
  const std::string values = std::to_string(d.N * d.L * d.qdim());
  const std::string width = d.qdim() == d.E ? "E" : "H·d_k";  // the heads side by side
  if (s.wrong) {
    switch (s.step) {
      case 0: return "One row per token; head h should own columns h·d_k to (h+1)·d_k-1 (the colours).";
      case 1:
        return "The wrong split: a single view to (N, H, L, d_k). It is legal and contiguous, so nothing "
               "warns you, but 'head' 0 now reads the first L·d_k values of memory: chunks of several "
               "tokens.";
      case 2:
        return "Look at the colours: every 'head' holds columns of both heads, and each row is a piece of a "
               "token.";
      case 3:
        return "k and v are split the same wrong way, so each 'head' attends among the scrambled pieces.";
      case 4:
        return "Without a transpose there is nothing to undo: the context stays in the scrambled order.";
      default:
        return "The concat has the right shape and the wrong values (compared below); the output projection "
               "then mixes wrong values.";
    }
  }
  switch (s.step) {
    case 0:
      if (d.qdim() != d.E)  // q_proj widens (or narrows) E to H·d_k: the model's head_dim
        return "One row per token, H·d_k = " + std::to_string(d.qdim()) + " features (the model's head_dim " +
               std::to_string(d.d_k) + " makes q " + (d.qdim() > d.E ? "wider" : "narrower") +
               " than E = " + std::to_string(d.E) +
               "); head h will own columns h·d_k to (h+1)·d_k-1 (the colours).";
      return "One row per token, E = H·d_k features; head h will own columns h·d_k to (h+1)·d_k-1 (the "
             "colours).";
    case 1:
      return "No value moves: the last axis is only read as H groups of d_k. Same storage as q, still "
             "contiguous.";
    case 2:
      return "Free: transpose only swaps the strides of dims 1 and 2, " + strides_of(f, "q_view") + " -> " +
             strides_of(f, "q_heads") + ". No value moves in memory, so it is no longer contiguous.";
    case 3:
      return "Each head attends on its own L x d_k block and writes a new contiguous (N, H, L, d_k) tensor: "
             "memory is now head-major.";
    case 4:
      return "Free again, strides " + strides_of(f, "context") + " -> " +
             strides_of(f, "context_transposed") +
             ", but memory is still head-major, so this is not contiguous and .view(N, L, " + width +
             ") would fail.";
    default:
      return ".contiguous() copies the " + values + " values into token-major order (" +
             bytes_str(double(d.N * d.L * d.qdim()) * sizeof(float)) +
             "); then .view() merges (H, d_k) into " + width + ".";
  }
}

// Titled heatmaps of one shape, each with its colorbar, side by side while their cells stay at least
// 1.2 font widths wide, else one under the other at full width (E = 64 columns would be slivers side
// by side).
void draw_maps(Textures& tex, const std::vector<std::pair<const char*, Heatmap>>& maps) {
  const float font = ImGui::GetFontSize(), spacing = ImGui::GetStyle().ItemSpacing.x;
  const float bar_w = font * 5;  // the colorbar and its tick labels
  const float avail = ImGui::GetContentRegionAvail().x, count = float(maps.size());
  const int rows = maps.front().second.rows, cols = maps.front().second.cols;
  const float side = (avail - spacing * (count - 1)) / count - bar_w;
  const bool stacked = side / float(cols) < font * 1.2f;
  const float w = stacked ? avail - bar_w : side;
  const float cell = std::min(font * 2.6f, (w - font * 4) / float(cols));
  const float h = std::clamp(float(rows) * cell + font * 1.5f, font * 4, font * 16);
  for (std::size_t i = 0; i < maps.size(); ++i) {
    if (i > 0 && !stacked) ImGui::SameLine();
    ImGui::BeginGroup();
    ImGui::TextUnformatted(maps[i].first);
    Heatmap hm = maps[i].second;
    hm.size = ImVec2(w, h);
    const float top = ImGui::GetCursorScreenPos().y;
    draw_heatmap(tex, hm);
    const float drawn = ImGui::GetItemRectMax().y - top;  // labels above the grid included
    ImGui::SameLine();
    ImGui::SetCursorScreenPos(ImVec2(ImGui::GetCursorScreenPos().x, top));
    panel::colorbar_within(tex, hm.colormap, hm.vmin, hm.vmax, std::max(drawn, font * 3));
    ImGui::EndGroup();
  }
}

Heatmap base_map(const std::string& id, std::uint64_t version, const std::vector<std::string>* rows,
                 float range, bool show_values) {
  Heatmap hm;
  hm.id = id;
  hm.version = version;
  hm.colormap = Colormap::diverging;
  hm.vmin = -range;
  hm.vmax = range;
  hm.row_labels = rows;
  hm.show_values = show_values;
  hm.max_cell = ImGui::GetFontSize() * 2.6f;
  return hm;
}

void draw_mistake_no_transpose(WrongRun& no_transpose, AppState& state, Textures& tex, int n) {
  const F& f = *state.result.forward;
  const Dims& d = f.dims;
  const WrongRun& run = wrong_run(no_transpose, state.result);
  if (!run.computed) {
    ImGui::TextWrapped(
        "Too large to demo here: N·H·L·S·d_k = %.3g is above %.0g. Try the course notebook's sizes.",
        double(d.N) * double(d.H) * double(d.L) * double(d.S_total) * double(d.d_k), kWrongWorkLimit);
    return;
  }
  if (d.H == 1 || d.L == 1)
    ImGui::TextWrapped(
        "With %s the two orders coincide, so the mistake is invisible here; it shows with H >= 2 "
        "and L >= 2.",
        d.H == 1 ? "H = 1" : "L = 1");
  ImGui::TextWrapped("max |wrong concat - right concat| = %.4g (whole batch, N = %lld)", double(run.max_diff),
                     (long long)d.N);
  ImGui::TextWrapped(
      "The output projection is linear (output = concat W_o^T + b), so it cannot repair this: the "
      "output is wrong too, for every token.");
  const Stage<float>& right = f.trace["concat"];
  const std::uint64_t v = state.result.generation * 131 + std::uint64_t(n);
  const bool values = state.scenario().view.show_values;
  Heatmap a = base_map("reshape/right", v, &state.query_tokens(), run.range, values);
  a.values = right.storage->data() + right.offset + std::int64_t(n) * right.strides[0];
  a.rows = int(d.L);
  a.cols = int(d.qdim());
  a.row_stride = right.strides[1];
  a.col_stride = right.strides[2];
  Heatmap b = a;
  b.id = "reshape/wrong";
  b.values = run.concat.data() + std::size_t(n * d.L * d.qdim());
  b.row_stride = d.qdim();
  b.col_stride = 1;
  Heatmap c = b;
  c.id = "reshape/diff";
  c.values = run.diff.data() + std::size_t(n * d.L * d.qdim());
  c.vmin = -run.diff_range;
  c.vmax = run.diff_range;
  draw_maps(tex, {{"right concat", a}, {"without transpose", b}, {"wrong - right", c}});
}

void draw_mistake_view(const F& f) {
  const Dims& d = f.dims;
  const Stage<float>& ct = f.trace["context_transposed"];
  ImGui::TextWrapped("context.transpose(1, 2).view(N, L, E)   # forgot .contiguous()");
  const bool fails = !mha::is_contiguous(ct.shape, ct.strides);
  if (fails) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1));
    ImGui::TextWrapped("%s", kViewError);
    ImGui::PopStyleColor();
    ImGui::TextWrapped(
        "Why: context_transposed has shape %s and strides %s. Merging (H, d_k) into one axis of E "
        "needs stride(H) = d_k = %lld, but it is L·d_k = %lld: a token's heads lie %lld values apart "
        "in memory, so no single stride walks one row of the concat.",
        shape_str(ct.shape).c_str(), shape_str(ct.strides).c_str(), (long long)d.d_k,
        (long long)ct.strides[2], (long long)ct.strides[2]);
  } else {
    ImGui::TextWrapped(
        "Here the view would succeed: with %s, context_transposed %s is contiguous as torch counts "
        "it (size-1 dims may have any stride). With L >= 2 and H >= 2 torch raises:",
        d.L == 1 ? "L = 1" : "H = 1", shape_str(ct.shape).c_str());
    ImGui::TextDisabled("%s", kViewError);
  }
}

// What mends mistake 2, after the grid (the message above comes first).
void draw_mistake_view_remedy(const F& f) {
  const Dims& d = f.dims;
  ImGui::TextWrapped(
      ".contiguous() copies the N·L·E = %lld values (%s) into token-major order; .reshape() does the "
      "same copy for you when it has to. The transposes themselves never copy.",
      (long long)(d.N * d.L * d.qdim()), bytes_str(double(d.N * d.L * d.qdim()) * sizeof(float)).c_str());
}

// Mistake 3's largest difference and colour range, recomputed only for a new result.
struct OutProjCache {
  std::weak_ptr<const F> source;
  float max_diff = 0, range = 1;
};

void draw_mistake_no_out_proj(OutProjCache& cache, AppState& state, Textures& tex, int n) {
  const F& f = *state.result.forward;
  const Dims& d = f.dims;
  const Stage<float>&concat = f.trace["concat"], &out = f.trace["output"];
  if (!same_result(cache.source, state.result)) {
    cache = {state.result.forward, 0, 1e-6f};
    for (std::int64_t b = 0; b < d.N; ++b)
      for (std::int64_t i = 0; i < d.L; ++i)
        for (std::int64_t e = 0; e < d.qdim(); ++e) {
          const float x = at3(concat, b, i, e), y = at3(out, b, i, e);
          if (std::isfinite(x - y)) cache.max_diff = std::max(cache.max_diff, std::fabs(x - y));
          if (std::isfinite(x)) cache.range = std::max(cache.range, std::fabs(x));
          if (std::isfinite(y)) cache.range = std::max(cache.range, std::fabs(y));
        }
  }
  ImGui::TextWrapped(
      "return concat   # forgot out_proj: max |concat - output| = %.4g. Without W_o each output "
      "feature comes from one head only; out_proj mixes the %lld heads' d_k-slices into every "
      "feature%s.",
      double(cache.max_diff), (long long)d.H, f.config.bias ? " (and adds out_proj.bias)" : "");
  const std::uint64_t v = state.result.generation * 131 + std::uint64_t(n);
  std::vector<std::pair<const char*, Heatmap>> maps;
  for (const Stage<float>* s : {&concat, &out}) {
    Heatmap hm = base_map("reshape/" + s->name, v, &state.query_tokens(), cache.range,
                          state.scenario().view.show_values);
    hm.values = s->storage->data() + s->offset + std::int64_t(n) * s->strides[0];
    hm.rows = int(d.L);
    hm.cols = int(d.qdim());
    hm.row_stride = s->strides[1];
    hm.col_stride = s->strides[2];
    maps.emplace_back(s == &concat ? "concat (returned)" : "output = out_proj(concat)", hm);
  }
  draw_maps(tex, maps);
}

}  // namespace

struct ReshapePanel {
  bool show_offsets = false;  // cells print memory offsets instead of values
  bool playing = false;
  double next_step_at = 0;
  Anim anim;
  Hover linked;              // hovered cell, drawn in both the grid and the memory row
  WrongRun no_transpose;     // mistake 1, shared by its grid and its comparison
  OutProjCache no_out_proj;  // mistake 3
  ReshapeInfo info;          // what the last frame drew
  void draw(AppState& state, Textures& tex);
};

namespace {

// Grouped-query attention: q splits into H heads, k and v into G, and each key/value head is read
// by H/G consecutive query heads (repeat_interleave). Two bars of columns, one cell per feature,
// coloured by key/value group, with a line from each k head to the query heads reading it.
void draw_gqa_split(const Dims& d) {
  const std::int64_t H = d.H, G = d.G, dk = d.d_k, per = H / G;
  const float font = ImGui::GetFontSize();
  ImGui::TextDisabled(
      "GQA: q.view(N, L, H=%lld, d_k) but k.view(N, S, G=%lld, d_k): query heads %lld at a time "
      "share a key/value head (k_heads.repeat_interleave(%lld, dim=1) in torch; the engine reads "
      "it in place)",
      (long long)H, (long long)G, (long long)per, (long long)per);
  const float label_w = ImGui::CalcTextSize("k, v ").x;
  const float w = std::max(font * 8, ImGui::GetContentRegionAvail().x - label_w);
  const float cw = w / float(H * dk), bar_h = font * 0.6f, gap = font * 0.9f;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const float shift = (ImGui::GetTextLineHeight() - bar_h) / 2;  // labels centred on their bars
  dl->AddText(ImVec2(o.x, o.y - shift), text, "q");
  dl->AddText(ImVec2(o.x, o.y + bar_h + gap - shift), text, "k, v");
  const float x0 = o.x + label_w;
  for (std::int64_t h = 0; h < H; ++h) {
    const ImU32 c = ImGui::GetColorU32(panel::kv_group_colour(h / per, G));
    const float a = x0 + float(h * dk) * cw, b = x0 + float((h + 1) * dk) * cw;
    dl->AddRectFilled(ImVec2(a, o.y), ImVec2(b - 1, o.y + bar_h), c);
  }
  const float kw = cw * float(per);  // k's bar spans the same width: each head drawn H/G times wider
  for (std::int64_t g = 0; g < G; ++g) {
    const ImU32 c = ImGui::GetColorU32(panel::kv_group_colour(g, G));
    const float a = x0 + float(g * dk) * kw, b = x0 + float((g + 1) * dk) * kw;
    const float y = o.y + bar_h + gap;
    dl->AddRectFilled(ImVec2(a, y), ImVec2(b - 1, y + bar_h), c);
    for (std::int64_t h = g * per; h < (g + 1) * per; ++h) {
      const float qx = x0 + (float(h * dk) + float(dk) / 2) * cw;
      dl->AddLine(ImVec2((a + b) / 2, y), ImVec2(qx, o.y + bar_h), c, 1.5f);
    }
  }
  ImGui::Dummy(ImVec2(label_w + w, 2 * bar_h + gap));
}

}  // namespace

const ReshapeInfo& reshape_info(const Panels& panels) {
  static const ReshapeInfo none;  // the view has not drawn yet
  return panels.reshape ? panels.reshape->info : none;
}

void draw_reshape(Panels& panels, AppState& state, Textures& tex) {
  panel::made(panels.reshape).draw(state, tex);
}

void ReshapePanel::draw(AppState& state, Textures& tex) {
  info = ReshapeInfo{};
  info.view = panel::window_rect();
  if (!state.result.valid()) {
    ImGui::TextDisabled("No result yet: fix the inputs marked in the controls.");
    return;
  }
  const F& f = *state.result.forward;
  const Dims& d = f.dims;
  ViewState& view = state.view();
  const int n = std::clamp(view.batch_index, 0, int(std::max<std::int64_t>(1, d.N)) - 1);
  const double now = ImGui::GetTime();
  if (playing || now - anim.start < kMoveSeconds) state.animating = true;  // keep frames coming
  // The step and the mistake are view choices, not edits: changing them neither recomputes nor adds
  // an undo step.
  view.reshape_step = std::clamp(view.reshape_step, 0, kLastStep);
  view.mistake = std::clamp(view.mistake, 0, 3);

  // Controls: Prev / Next / Play, the step, and the mistake.
  const float font = ImGui::GetFontSize();
  if (ImGui::ArrowButton("##prev", ImGuiDir_Left) && view.reshape_step > 0) {
    --view.reshape_step;
    playing = false;
  }
  ImGui::SameLine();
  if (ImGui::ArrowButton("##next", ImGuiDir_Right) && view.reshape_step < kLastStep) {
    ++view.reshape_step;
    playing = false;
  }
  ImGui::SameLine();
  if (ImGui::Button(playing ? "Pause" : "Play", ImVec2(font * 4, 0))) {
    playing = !playing;
    if (playing && view.reshape_step == kLastStep) view.reshape_step = 0;
    next_step_at = now + kPlaySeconds;
  }
  if (playing && now >= next_step_at) {
    if (view.reshape_step < kLastStep) ++view.reshape_step;
    playing = view.reshape_step < kLastStep;
    next_step_at = now + kPlaySeconds;
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(font * 6);
  ImGui::SliderInt("##step", &view.reshape_step, 0, kLastStep, "step %d of 5");
  static const char* mistakes[] = {"none", "1. split without transpose", "2. .view() without .contiguous()",
                                   "3. no output projection"};
  // On the buttons' line while the picker and its label fit there (a presenter font: the next line).
  panel::same_line_if_fits(panel::labelled("mistake", font * 8));
  ImGui::SetNextItemWidth(std::max(font * 8, ImGui::GetContentRegionAvail().x - font * 6));
  ImGui::Combo("mistake", &view.mistake, mistakes, 4);

  const bool wrong = view.mistake == 1;
  // Mistake 2 stops at step 4: the .view() that would make step 5 raises.
  const bool view_fails = view.mistake == 2 && view.reshape_step == kLastStep;
  const StepView target{view_fails ? 4 : view.reshape_step, wrong};
  if (anim.start < -1e8) {  // first time shown: no animation from step 0
    anim.from = anim.to = target;
    anim.start = now - kMoveSeconds;
  } else if (target.step != anim.to.step || target.wrong != anim.to.wrong) {
    anim.from = anim.to;
    anim.to = target;
    anim.start = now;
  }

  // What this step is: torch code, facts from the trace, and why.
  const StepText& st = (wrong ? kWrong : kRight)[view.reshape_step];
  {  // Export: q -> view -> transpose of this batch item as one image (export/reshape_export.hpp)
    FigureRequest req;
    req.id = "reshape";
    req.caption = "q of batch item " + std::to_string(n) + ": (N, L, E) -> view (N, L, H, d_k) -> transpose";
    const std::shared_ptr<const F> fwd = state.result.forward;
    const std::vector<std::string> labels = state.query_tokens();
    FigureChoice c;
    c.label = "view and transpose of q";
    c.file_stem = "mha-reshape-batch" + std::to_string(n);
    c.drawing = [fwd, labels, n](bool transparent) {
      exporter::ReshapeSpec rs;
      rs.batch_index = n;
      rs.tokens = labels;
      rs.transparent = transparent;
      rs.font_path = platform::default_font().path;
      return exporter::reshape_figure(*fwd, rs).drawing;
    };
    req.choices.push_back(std::move(c));
    export_button(state, req);
    ImGui::SameLine();
  }
  ImGui::Text("%d.", view.reshape_step);
  ImGui::SameLine();
  // The torch code wraps at the view's edge rather than run off it (a presenter font, a narrow view).
  ImGui::PushTextWrapPos(0);
  if (view_fails) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 0.45f, 0.4f, 1));
    ImGui::TextUnformatted("context.transpose(1, 2).view(N, L, E)  ->  RuntimeError");
    ImGui::PopStyleColor();
  } else if (f.dims.qdim() != f.dims.E) {  // the heads side by side are H·d_k wide, not E
    std::string code = st.code;
    if (const std::size_t at = code.rfind(", E)"); at != std::string::npos) code.replace(at, 4, ", H * d_k)");
    ImGui::TextUnformatted(code.c_str());
  } else {
    ImGui::TextUnformatted(st.code);
  }
  ImGui::PopTextWrapPos();
  draw_step_facts(f, target);
  ImGui::PushTextWrapPos(0);
  ImGui::TextDisabled("%s", step_reason(f, target).c_str());
  ImGui::PopTextWrapPos();
  if (d.G > 0 && d.G < d.H && (view.reshape_step == 1 || view.reshape_step == 2)) {  // the split
    ImGui::PushTextWrapPos(0);
    draw_gqa_split(d);
    ImGui::PopTextWrapPos();
  }
  // Mistake 2 is a message (torch's RuntimeError and why): it comes before the grid, so no window
  // is too small to show it.
  if (view.mistake == 2) {
    ImGui::Separator();
    ImGui::BeginGroup();
    draw_mistake_view(f);
    ImGui::EndGroup();
    info.message = panel::rect(ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
    ImGui::Separator();
  }

  // The grid, then memory. The other mistakes' consequences need room below, so the grid gets less
  // then.
  const std::vector<std::string>& tokens = state.query_tokens();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float strip_h = memory_height();
  const float grid_budget =
      std::max(font * 8, (avail.y - strip_h) * (view.mistake == 0 || view.mistake == 2 ? 0.9f : 0.42f));
  Grid g = fit_grid(d, tokens, ImVec2(avail.x, grid_budget));
  if (g.rows < d.L || g.heads < d.H || g.cols < d.d_k)
    ImGui::TextDisabled("Showing the first %d of %lld tokens, %d of %lld heads, %d of %lld columns per head.",
                        g.rows, (long long)d.L, g.heads, (long long)d.H, g.cols, (long long)d.d_k);
  ImGui::Checkbox("cells show memory offsets", &show_offsets);
  g.origin = ImGui::GetCursorScreenPos();
  g.origin.x += g.label_w;
  g.origin.y += g.label_h;
  const Values vals{state.result, n, no_transpose};
  // The grid takes the height of the layouts it shows, so at a flat step the memory strip sits right
  // under it; while cells move between layouts, the taller one's.
  const bool moving = now - anim.start < kMoveSeconds;
  const float grid_h = std::max(g.height(anim.to.layout()), moving ? g.height(anim.from.layout()) : 0.0f);
  const Hover grid_hover = draw_cells(anim, show_offsets, g, vals, tokens, grid_h, linked);
  if (view_fails) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRect(ImGui::GetItemRectMin(), ImGui::GetItemRectMax(), IM_COL32(240, 80, 70, 255), 0, 0, 3);
  }
  const char* storage = target.step <= 2 ? "q" : target.step <= 4 ? "context" : "concat";
  const Hover mem_hover = draw_memory(g, target, vals, storage, n, linked);
  linked = grid_hover.i >= 0 ? grid_hover : mem_hover;

  switch (view.mistake) {
    case 1:
      ImGui::Separator();
      draw_mistake_no_transpose(no_transpose, state, tex, n);
      break;
    case 2:
      ImGui::Separator();
      draw_mistake_view_remedy(f);
      break;
    case 3:
      ImGui::Separator();
      ImGui::BeginGroup();
      draw_mistake_no_out_proj(no_out_proj, state, tex, n);
      ImGui::EndGroup();
      info.message = panel::rect(ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
      break;
    default: break;
  }
}

}  // namespace mha::app
