// Pipeline view: the trace as a dataflow graph, tensors as boxes and operations as labelled arrows, in
// the order torch computes them. A box gives the name and shape; its tooltip the strides, contiguity,
// the torch expression, FLOPs and bytes. Clicking a box shows that tensor below for the current batch
// item (one head of 4-D stages).
#include <imgui.h>
#include <imgui_internal.h>  // the window's font scale: the graph zooms to fit

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cost.hpp"
#include "export_dialog.hpp"
#include "heatmap.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "stage_table.hpp"

namespace mha::app {

namespace {

enum class Kind { input, matmul, elementwise, view, copy };

struct KindStyle {
  const char* label;
  ImU32 colour;
};

KindStyle kind_style(Kind k) {
  switch (k) {
    case Kind::input: return {"input", IM_COL32(130, 130, 140, 255)};
    case Kind::matmul: return {"matmul", IM_COL32(70, 130, 230, 255)};
    case Kind::elementwise: return {"elementwise", IM_COL32(230, 150, 50, 255)};
    case Kind::view: return {"view (no copy)", IM_COL32(70, 185, 110, 255)};
    case Kind::copy: return {"copy", IM_COL32(175, 100, 220, 255)};
  }
  return {"", 0};
}

struct StageCost {
  Kind kind = Kind::input;
  double flops = 0;
  std::string formula;  // the FLOPs in the sizes' names
};

// FLOPs of one trace stage as torch computes it (a multiply-add is 2 FLOPs). The trace's `scores` is
// the unscaled product shown for teaching; torch computes the product once, on the scaled q.
StageCost stage_cost(const std::string& name, const Dims& d, bool bias, bool has_mask) {
  const cost::Table t = cost::stages(cost::shape(d, bias, has_mask));
  const StageInfo* info = stage_info(name);
  const double flops = info && info->cost ? cost::stage(t, *info->cost).flops() : 0;  // its cost row's
  const std::string s = d.S_total > d.S ? "S'" : "S";
  const std::string plus_bias = bias ? " + bias" : "";
  const bool square_kv = d.G == d.H && d.kdim == d.E && d.vdim == d.E && d.qdim() == d.E;
  if (name == "query" || name == "key" || name == "value") return {Kind::input, 0, "input"};
  if (name == "attn_mask") return {Kind::input, 0, "input (masks merged)"};
  // A model's explicit head_dim makes q and the heads side by side H·d_k wide instead of E.
  const bool q_is_e = d.qdim() == d.E;
  const std::string q_formula = (q_is_e ? "2·N·L·E²" : "2·N·L·E·H·d_k") + plus_bias;
  if (name == "q") return {Kind::matmul, flops, q_formula};
  if (name == "k" || name == "v")
    return {Kind::matmul, flops, (square_kv ? "2·N·S·E²" : "2·N·S·E·G·d_k") + plus_bias};
  if (name == "scores") return {Kind::matmul, flops, "2·N·H·L·" + s + "·d_k"};
  if (name == "scores_scaled")
    return {Kind::elementwise, flops, q_is_e ? "N·L·E (torch scales q)" : "N·L·H·d_k (torch scales q)"};
  if (name == "scores_masked")
    return has_mask ? StageCost{Kind::elementwise, flops, "N·H·L·" + s + " (add mask)"}
                    : StageCost{Kind::view, 0, "none: no mask"};
  if (name == "attn_weights") return {Kind::elementwise, flops, "~5·N·H·L·" + s + " (max, -, exp, sum, /)"};
  if (name == "context") return {Kind::matmul, flops, "2·N·H·L·" + s + "·d_k"};
  if (name == "concat")
    return {Kind::copy, 0, q_is_e ? "0 (copies N·L·E values)" : "0 (copies N·L·H·d_k values)"};
  if (name == "output") return {Kind::matmul, flops, q_formula};
  if (name == "attn_weights_avg") return {Kind::elementwise, flops, "N·H·L·" + s + " (sum, /H)"};
  return {Kind::view, 0, "view: no FLOPs"};
}

std::string count_str(double v, const char* unit) {
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int p = 0;
  while (std::fabs(v) >= 1000 && p < 5) {
    v /= 1000;
    ++p;
  }
  char buf[48];
  if (p == 0)
    std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
  else
    std::snprintf(buf, sizeof buf, "%.3g%s %s", v, prefixes[p], unit);
  return buf;
}

std::string bytes_str(double b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return buf;
}

bool contains(std::initializer_list<const char*> names, const std::string& n) {
  for (const char* x : names)
    if (n == x) return true;
  return false;
}

// Where a 4-D stage keeps its head axis: (N, H, L, x) or, for the views before the transpose and the
// one after the transpose back, (N, L, H, d_k).
int head_axis(const Stage<float>& s) {
  if (s.shape.size() != 4) return -1;
  return contains({"q_view", "k_view", "v_view", "context_transposed"}, s.name) ? 2 : 1;
}

// One stage's box as shown, computed once per frame.
struct Box {
  const Stage<float>* stage;
  StageCost cost;
  std::string bytes;  // "384 B", "no copy", "= query's storage"
  bool contiguous;
};

std::vector<Box> make_boxes(const ForwardResult<float>& f) {
  std::vector<Box> boxes;
  const bool has_mask = f.trace.has("attn_mask");
  // A stage the forward left out (large sizes) has a box too: it is computed when clicked.
  for (const Stage<float>* sp : trace_order(f.trace)) {
    const Stage<float>& s = *sp;
    Box b{&s, stage_cost(s.name, f.dims, f.config.bias, has_mask), "",
          mha::is_contiguous(s.shape, s.strides)};
    if (!s.view_of.empty()) {
      b.bytes = "no copy";
    } else if (!s.storage) {
      b.bytes = "not kept: computed when shown";
    } else {
      // Self-attention may hand the same tensor in as query, key and value.
      for (const Box& prev : boxes)
        if (prev.stage->storage == s.storage && prev.stage->view_of.empty())
          b.bytes = "= " + prev.stage->name + "'s storage";
      if (b.bytes.empty()) b.bytes = bytes_str(s.storage ? double(s.storage->size()) * sizeof(float) : 0);
    }
    boxes.push_back(std::move(b));
  }
  return boxes;
}

void arrow_head(ImDrawList* dl, ImVec2 tip, ImVec2 dir, float size, ImU32 col) {
  const ImVec2 n(-dir.y, dir.x);
  dl->AddTriangleFilled(
      tip, ImVec2(tip.x - dir.x * size + n.x * size * 0.5f, tip.y - dir.y * size + n.y * size * 0.5f),
      ImVec2(tip.x - dir.x * size - n.x * size * 0.5f, tip.y - dir.y * size - n.y * size * 0.5f), col);
}

// The dataflow graph: tensors are boxes, operations are the arrows between them, labelled with the
// torch call. The query, key and value each run along a lane (input, projection, view, transpose);
// the lanes meet at the scores, and the per-head chain, drawn as a stack of H boxes, flows on to the
// output, wrapping onto further rows when the width runs out. Boxes show the name and the shape in
// full; the hover tooltip has the strides, the expression, the FLOPs and the memory.

// The lane a stage belongs to (the stage table's): 0 query, 1 key, 2 value, 3 the joined chain.
int lane_of(const std::string& n) {
  const StageInfo* info = stage_info(n);
  return int(info ? info->lane : StageLane::joined);
}

// The operation that makes a stage, short enough for an arrow: the stage table's torch call or
// operator; for a stage the table lacks, the call's name in its formula.
std::string op_label(const Stage<float>& s) {
  if (const StageInfo* info = stage_info(s.name)) return info->op;
  const std::string& f = s.formula;
  if (f == s.name || f.empty()) return "";
  const std::size_t open = f.find('(');
  return f.substr(0, std::min<std::size_t>(open == std::string::npos ? f.size() : open, 16));
}

struct Node {
  int box;           // index in boxes
  ImVec2 pos, size;  // screen position and size
  bool per_head;     // a stack of H boxes
};

struct Graph {
  std::vector<Node> nodes;
  float height = 0, width = 0;
};

// The smallest text the graph's boxes and arrows are drawn in, in pixels: it zooms out no further.
constexpr float kGraphFloorPx = 11;

// Places every box: the three lanes as rows of columns, then the joined chain in rows that wrap at
// `width`, or (wrap false: a short view, which scrolls the graph sideways) in one row.
Graph layout_graph(const std::vector<Box>& boxes, const Dims& d, float width, ImVec2 origin,
                   bool wrap = true) {
  const float font = ImGui::GetFontSize(), line = ImGui::GetTextLineHeightWithSpacing();
  const float pad = font * 0.4f, gap = font * 3.2f, row_gap = font * 1.6f, stack = font * 0.3f;
  Graph g;
  auto box_size = [&](const Box& b) {
    const Stage<float>& s = *b.stage;
    const float w = std::max({ImGui::CalcTextSize(s.name.c_str()).x,
                              ImGui::CalcTextSize(shape_str(s.shape).c_str()).x, font * 4.0f});
    return ImVec2(w + pad * 2 + font * 0.35f, line * 2 + pad * 1.5f);
  };
  auto per_head = [&](const Box& b) {
    const Stage<float>& s = *b.stage;
    return s.shape.size() == 4 && d.H > 1 && s.name != "attn_weights_avg" && lane_of(s.name) == 3 &&
           s.name != "concat" && s.name != "output";
  };
  // Lanes: column c of every lane shares one width.
  std::vector<std::vector<int>> lanes(3);
  std::vector<int> chain;
  for (int i = 0; i < int(boxes.size()); ++i) {
    const int l = lane_of(boxes[std::size_t(i)].stage->name);
    (l < 3 ? lanes[std::size_t(l)] : chain).push_back(i);
  }
  // The gap before a box holds its operation's label.
  auto gap_before = [&](int i) {
    return std::max(gap, ImGui::CalcTextSize(op_label(*boxes[std::size_t(i)].stage).c_str()).x + font * 1.2f);
  };
  std::vector<float> col_w, col_gap;
  for (const auto& lane : lanes)
    for (std::size_t c = 0; c < lane.size(); ++c) {
      if (col_w.size() <= c) col_w.push_back(0), col_gap.push_back(0);
      col_w[c] = std::max(col_w[c], box_size(boxes[std::size_t(lane[c])]).x);
      col_gap[c] = std::max(col_gap[c], gap_before(lane[c]));
    }
  float y = origin.y, chain_y = origin.y;
  for (const auto& lane : lanes) {
    if (lane.empty()) continue;
    if (&lane - lanes.data() <= 1) chain_y = y;  // the key lane's row (the query's without one)
    float x = origin.x;
    for (std::size_t c = 0; c < lane.size(); ++c) {
      const ImVec2 sz = box_size(boxes[std::size_t(lane[c])]);
      if (c > 0) x += col_gap[c];
      g.nodes.push_back({lane[c], ImVec2(x, y), ImVec2(col_w[c], sz.y), false});
      x += col_w[c];
    }
    x += gap;
    g.width = std::max(g.width, x - gap - origin.x);
    y += line * 2 + pad * 1.5f + row_gap * 0.6f;
  }
  // The joined chain, indented under the lanes' last column, wrapping at the width. Unwrapped, it
  // carries on along the key lane's row to the right of the lanes: one row that scrolls sideways,
  // and the graph no taller than the lanes.
  const float lanes_bottom = y - row_gap * 0.6f;
  y += row_gap * 0.4f;
  float x = origin.x;
  if (!wrap) {
    x = origin.x + g.width;
    y = chain_y;
  }
  for (const int i : chain) {
    const Box& b = boxes[std::size_t(i)];
    const ImVec2 sz = box_size(b);
    const bool heads = wrap && per_head(b);  // unwrapped, a stack reaches into the gap above its row
    const float w = sz.x + (heads ? stack * 2 : 0), before = x > origin.x ? gap_before(i) : 0.0f;
    if (wrap && x > origin.x && x + before + w > origin.x + width) {
      x = origin.x + font;  // a wrapped row starts in a little, so the arrow into it has room
      y += sz.y + stack * 2 + row_gap * 1.4f;
    } else {
      x += before;
    }
    g.nodes.push_back(
        {i, ImVec2(x + (heads ? stack * 2 : 0), y + (heads ? stack * 2 : 0)), sz, heads || per_head(b)});
    x += w;
    g.width = std::max(g.width, x - origin.x);
  }
  g.height = wrap ? y + line * 2 + pad * 1.5f + stack * 2 + font * 0.5f - origin.y
                  : std::max(lanes_bottom, y + line * 2 + pad * 1.5f + line) - origin.y;
  return g;
}

// The graph's zoom: the largest of 1, 0.95, 0.9, … at which it fits width × height, down to text of
// kGraphFloorPx (below that the graph scrolls instead). Laid out at each zoom: a smaller font also
// wraps the chain into fewer rows. Unwrapped (a short view) only the height has to fit: the graph
// scrolls sideways.
float fit_zoom(const std::vector<Box>& boxes, const Dims& d, float width, float height, bool wrap) {
  ImGuiWindow* window = ImGui::GetCurrentWindow();
  const float scale = window->FontWindowScale;
  const float floor = std::min(1.0f, kGraphFloorPx / ImGui::GetFontSize());
  float zoom = 1;
  for (int step = 1; zoom > floor; zoom = 1 - 0.05f * float(step++)) {  // no drift from repeated sums
    ImGui::SetWindowFontScale(scale * zoom);
    const Graph g = layout_graph(boxes, d, width, ImVec2(0, 0), wrap);
    if (g.height <= height && (!wrap || g.width <= width)) break;
  }
  ImGui::SetWindowFontScale(scale);
  return std::max(zoom, floor);
}

// wrap false: the chain in one row, scrolled sideways; `follow` names a stage just chosen, scrolled
// into sight.
void draw_graph(const std::vector<Box>& boxes, const Dims& d, float height, float zoom, bool wrap,
                const std::string& follow, std::string& selected_stage, PipelineInfo& info) {
  ImGui::BeginChild("##pipeline_graph", ImVec2(0, height), false, ImGuiWindowFlags_HorizontalScrollbar);
  ImGui::SetWindowFontScale(zoom);  // the child's own scale, times its parent's
  info.graph_view = panel::window_rect();
  info.zoom = zoom;
  info.label_px = ImGui::GetFontSize();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize(), pad = font * 0.4f, stack = font * 0.3f;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  const Graph g = layout_graph(boxes, d, width, origin, wrap);
  if (!follow.empty())
    for (const Node& n : g.nodes)
      if (boxes[std::size_t(n.box)].stage->name == follow) {
        // Box's x from the graph's left edge; the part of the graph in sight is [scroll, scroll + width).
        const float left = n.pos.x - origin.x - (n.per_head ? stack * 2 : 0) - font * 2,
                    right = n.pos.x - origin.x + n.size.x + font;
        const float scroll = ImGui::GetScrollX();
        if (left < scroll || right > scroll + width)
          ImGui::SetScrollX(std::max(0.0f, right - left > width ? left : right - width));
      }
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text), dim = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  const ImU32 bg = ImGui::GetColorU32(ImGuiCol_FrameBg), arrow = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  const ImU32 op_col = ImGui::GetColorU32(ImGuiCol_PlotLinesHovered);
  auto node_of = [&](const std::string& name) -> const Node* {
    for (const Node& n : g.nodes)
      if (boxes[std::size_t(n.box)].stage->name == name) return &n;
    return nullptr;
  };
  // An arrow from a's right edge to b's left edge (an elbow when they are on different rows),
  // labelled with b's operation above its last straight part.
  auto connect = [&](const Node& a, const Node& b, const std::string& label) {
    const float asz = font * 0.45f;
    const ImVec2 from(a.pos.x + a.size.x + 2, a.pos.y + a.size.y * 0.5f);
    const ImVec2 to(b.pos.x - (b.per_head ? stack * 2 : 0) - 3, b.pos.y + b.size.y * 0.5f);
    if (std::fabs(from.y - to.y) < 1 && to.x > from.x) {
      dl->AddLine(from, to, arrow, 1.5f);
    } else {  // down the gap right of a, across under the rows, down to b's row, then in from the left
      const float mid_y = b.pos.y - (b.per_head ? stack * 2 : 0) - font * 0.8f;
      const float out_x = from.x + font * 0.6f, in_x = to.x - font * 0.9f;
      dl->AddLine(from, ImVec2(out_x, from.y), arrow, 1.5f);
      dl->AddLine(ImVec2(out_x, from.y), ImVec2(out_x, mid_y), arrow, 1.5f);
      dl->AddLine(ImVec2(out_x, mid_y), ImVec2(in_x, mid_y), arrow, 1.5f);
      dl->AddLine(ImVec2(in_x, mid_y), ImVec2(in_x, to.y), arrow, 1.5f);
      dl->AddLine(ImVec2(in_x, to.y), to, arrow, 1.5f);
    }
    arrow_head(dl, ImVec2(to.x + 1, to.y), ImVec2(1, 0), asz, arrow);
    if (!label.empty() && std::fabs(from.y - to.y) < 1) {
      const ImVec2 ts = ImGui::CalcTextSize(label.c_str());
      const float lx = std::max(from.x, (from.x + to.x - ts.x) * 0.5f);
      dl->AddText(ImVec2(lx, from.y - ts.y - 1), op_col, label.c_str());
    }
  };
  // Edges: each stage from the one before it in its lane or chain; the scores from q and k, the
  // context from the weights and v.
  auto last_of_lane = [&](int lane) -> const Node* {
    const Node* last = nullptr;
    for (const Node& n : g.nodes)
      if (lane_of(boxes[std::size_t(n.box)].stage->name) == lane) last = &n;
    return last;
  };
  const Node* prev_in_lane[4] = {nullptr, nullptr, nullptr, nullptr};
  for (const Node& n : g.nodes) {
    const Stage<float>& s = *boxes[std::size_t(n.box)].stage;
    const int lane = lane_of(s.name);
    const std::string op = op_label(s);
    if (lane == 3 && !prev_in_lane[3]) {  // the first joined stage (the scores) takes q and k
      if (const Node* q = last_of_lane(0)) connect(*q, n, "");
      if (const Node* k = last_of_lane(1)) connect(*k, n, "");
    } else if (prev_in_lane[lane]) {
      connect(*prev_in_lane[lane], n, op);
    }
    if (s.name == "context")
      if (const Node* v = last_of_lane(2)) connect(*v, n, "");
    if (s.name == "scores_masked")
      if (const Node* m = node_of("attn_mask"); m && m != prev_in_lane[3]) connect(*m, n, "");
    prev_in_lane[lane] = &n;
  }
  // Boxes over the arrows.
  for (const Node& n : g.nodes) {
    const Box& b = boxes[std::size_t(n.box)];
    const Stage<float>& s = *b.stage;
    const KindStyle ks = kind_style(b.cost.kind);
    const ImVec2 p = n.pos, q(p.x + n.size.x, p.y + n.size.y);
    if (n.per_head)  // a stack: the same box once per head
      for (int k = 2; k >= 1; --k)
        dl->AddRect(ImVec2(p.x - stack * float(k), p.y - stack * float(k)),
                    ImVec2(q.x - stack * float(k), q.y - stack * float(k)), dim, font * 0.3f);
    ImGui::SetCursorScreenPos(p);
    ImGui::PushID(n.box);
    if (ImGui::InvisibleButton("##box", n.size)) selected_stage = s.name;
    const bool hovered = ImGui::IsItemHovered();
    ImGui::PopID();
    const bool selected = s.name == selected_stage;
    if (selected) info.selected_box = panel::rect(p, q);
    dl->AddRectFilled(p, q, bg, font * 0.3f);
    dl->AddRectFilled(p, ImVec2(p.x + font * 0.35f, q.y), ks.colour, font * 0.3f,
                      ImDrawFlags_RoundCornersLeft);
    dl->AddRect(p, q, selected ? text : hovered ? ks.colour : dim, font * 0.3f, 0, selected ? 3.0f : 1.0f);
    const float x = p.x + font * 0.35f + pad;
    dl->AddText(ImVec2(x, p.y + pad * 0.75f), ks.colour, s.name.c_str());
    dl->AddText(ImVec2(x, p.y + pad * 0.75f + ImGui::GetTextLineHeightWithSpacing()),
                mha::is_contiguous(s.shape, s.strides) ? text : IM_COL32(240, 110, 90, 255),
                shape_str(s.shape).c_str());
    if (n.per_head) {
      char h[24];
      std::snprintf(h, sizeof h, "x%lld heads", (long long)d.H);
      dl->AddText(ImVec2(q.x - ImGui::CalcTextSize(h).x, q.y + 1), dim, h);
    }
    if (hovered) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(font * 30);
      ImGui::Text("%s  (%s)", s.name.c_str(), ks.label);
      ImGui::TextUnformatted(s.formula.c_str());
      ImGui::Text("shape %s, strides %s", shape_str(s.shape).c_str(), shape_str(s.strides).c_str());
      ImGui::Text("contiguous: %s", b.contiguous ? "yes" : "no (red shape)");
      if (!s.view_of.empty()) ImGui::Text("a view of %s: no copy", s.view_of.c_str());
      if (!s.note.empty()) ImGui::TextDisabled("%s", s.note.c_str());
      ImGui::Text("FLOPs: %s = %s", b.cost.formula.c_str(), count_str(b.cost.flops, "FLOPs").c_str());
      ImGui::Text("memory: %s", b.bytes.c_str());
      ImGui::TextDisabled("click to show this tensor below");
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
  }
  ImGui::SetCursorScreenPos(origin);
  ImGui::Dummy(ImVec2(g.width, g.height));
  info.graph = panel::rect(origin, ImVec2(origin.x + g.width, origin.y + g.height));
  ImGui::EndChild();
}

// The selected stage for one batch item as a 2-D strided view: its last two dims, or (L, d_k) of one
// head for the (N, L, H, d_k) views.
struct Slice {
  const float* values = nullptr;
  int rows = 0, cols = 0;
  std::int64_t row_stride = 0, col_stride = 1;
  int head = -1, heads = 0;  // head shown, of how many (-1: a 3-D stage)
  bool rows_are_keys = false, cols_are_keys = false;
};

Slice make_slice(const Stage<float>& s, const Dims& d, int n, int sel_head) {
  Slice sl;
  if (!s.storage || s.shape.size() < 3) return sl;
  std::int64_t off = s.offset + std::int64_t(n) * s.strides[0];
  const int ha = head_axis(s);
  if (ha > 0) {
    sl.heads = int(s.shape[std::size_t(ha)]);
    // K/V stages have G heads; query head h reads key/value head h / (H / G).
    sl.head = sl.heads == d.H || d.G <= 0 ? sel_head : sel_head / int(std::max<std::int64_t>(1, d.H / d.G));
    sl.head = std::clamp(sl.head, 0, std::max(0, sl.heads - 1));
    off += std::int64_t(sl.head) * s.strides[std::size_t(ha)];
  }
  const std::size_t r = ha == 2 ? 1 : s.shape.size() - 2, c = s.shape.size() - 1;
  sl.rows = int(s.shape[r]);
  sl.cols = int(s.shape[c]);
  sl.row_stride = s.strides[r];
  sl.col_stride = s.strides[c];
  sl.values = s.storage->data() + off;
  sl.rows_are_keys = contains({"key", "value", "k", "v", "k_view", "v_view", "k_heads", "v_heads"}, s.name);
  sl.cols_are_keys =
      s.shape[c] == d.S_total && !sl.rows_are_keys &&
      contains({"scores", "scores_scaled", "attn_mask", "scores_masked", "attn_weights", "attn_weights_avg"},
               s.name);
  return sl;
}

// Colour range of the shown slice, cached by content version (no L·S loop per frame).
// Keyed by the result itself as well: generation numbers restart with every Computer (tests make many).
struct RangeCache {
  std::weak_ptr<const ForwardResult<float>> source;
  std::uint64_t version = 0;
  float lo = 0, hi = 1;
};

void draw_detail(AppState& state, Textures& tex, const std::vector<Box>& boxes,
                 const std::string& selected_stage, RangeCache& range, PipelineInfo& info, bool compact) {
  const ForwardResult<float>& f = *state.result.forward;
  const Trace<float>& tr = f.trace;
  int index = -1;
  for (int i = 0; i < int(boxes.size()); ++i)
    if (boxes[std::size_t(i)].stage->name == selected_stage) index = i;
  // A stage the forward left out is computed once per result (mha::find_stage), off the UI thread
  // where it is large.
  if (index >= 0 && !panel::stages_ready(state.stages, {state.result.forward}, {selected_stage})) return;
  const Stage<float>* found = index < 0 ? nullptr : find_stage(f, selected_stage);
  if (!found) {
    ImGui::TextDisabled(index < 0 ? "Click a box above to see its tensor."
                                  : "This stage was left out of this result and cannot be computed again.");
    return;
  }
  const Stage<float>& s = *found;
  ViewState& view = state.view();
  const int n = std::clamp(view.batch_index, 0, int(std::max<std::int64_t>(1, f.dims.N)) - 1);

  const std::string formula = s.name + " = " + s.formula;
  const std::string facts = "shape " + shape_str(s.shape) + "   strides " + shape_str(s.strides) +
                            "   contiguous: " + (boxes[std::size_t(index)].contiguous ? "yes" : "no");
  std::string note = s.note;
  if (!s.view_of.empty())
    note += " (reads " + s.view_of + "'s memory through these strides: nothing was copied)";
  if (compact) {
    // A short view: the formula and the facts a line each, the note with them on hover.
    const std::string whole = formula + "\n" + facts + (note.empty() ? "" : "\n" + note);
    for (const std::string* line : {&formula, &facts}) {
      const std::string shown = panel::fit_line(*line, ImGui::GetContentRegionAvail().x);
      ImGui::TextUnformatted(shown.c_str());
      if (ImGui::IsItemHovered() && (shown != *line || !note.empty())) panel::text_tooltip(whole);
    }
  } else {
    ImGui::PushTextWrapPos(0);
    ImGui::TextUnformatted(formula.c_str());
    ImGui::TextUnformatted(facts.c_str());
    if (!note.empty()) ImGui::TextDisabled("%s", note.c_str());
    ImGui::PopTextWrapPos();
  }

  Slice sl = make_slice(s, f.dims, n, view.sel_head);
  if (!sl.values || sl.rows <= 0 || sl.cols <= 0) {
    ImGui::TextDisabled("This stage has no 2-D part to show (shape %s).", shape_str(s.shape).c_str());
    return;
  }
  // Each picker's label before it, and a wide gap between them, so "batch item" never reads as the
  // head slider's label.
  ImGui::Text("batch item %d", n);
  if (sl.head >= 0) {
    ImGui::SameLine(0, ImGui::GetFontSize() * 1.5f);
    ImGui::TextUnformatted("head");
    info.head_label = panel::rect(ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
    ImGui::SameLine();
    int h = view.sel_head;
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8);
    // Selecting a head is a view choice (the Inspector's too), not an edit: no recompute, no undo.
    if (ImGui::SliderInt("##head", &h, 0, int(f.dims.H) - 1)) view.sel_head = h;
    info.head_slider = panel::rect(ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
    if (sl.heads != f.dims.H) {
      ImGui::SameLine();
      ImGui::TextDisabled("(key/value head %d of %d, shared by query heads)", sl.head, sl.heads);
    }
    sl = make_slice(s, f.dims, n, view.sel_head);
  }
  const std::string ns = std::to_string(n), hs = std::to_string(sl.head);
  // Export: the stage's slice at this batch item and head, drawn by the GL-free exporter.
  auto export_slice = [&] {
    FigureRequest req;
    req.id = "pipeline";
    req.caption = s.name + ", batch item " + std::to_string(n) + (sl.head >= 0 ? ", head " + hs : "");
    exporter::StageSlice one;
    one.stage = s.name;
    one.batch_index = n;
    one.head = std::max(0, sl.head);
    one.query_labels = state.result.query_tokens;
    one.key_labels = state.result.key_tokens;
    const std::shared_ptr<const ForwardResult<float>> fwd = state.result.forward;
    req.choices.push_back({sl.head >= 0 ? "head " + hs : "this slice",
                           "mha-" + s.name + "-batch" + ns + (sl.head >= 0 ? "-head" + hs : ""),
                           [fwd, one] { return exporter::stage_figure(*fwd, one); }});
    export_button(state, req);
    info.export_button = panel::rect(ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
  };
  // A short view: Export... ends the pickers' line, so it stays in sight above the map.
  if (compact) {
    ImGui::SameLine(0, ImGui::GetFontSize());
    if (ImGui::GetContentRegionAvail().x <
        ImGui::CalcTextSize("Export...").x + ImGui::GetStyle().FramePadding.x * 2)
      ImGui::NewLine();
    export_slice();
  }

  // First values of the first row, indexed as torch would index them.
  std::string first = sl.head < 0         ? "[" + ns + ", 0, :]"
                      : head_axis(s) == 2 ? "[" + ns + ", 0, " + hs + ", :]"
                                          : "[" + ns + ", " + hs + ", 0, :]";
  char buf[32];
  for (int c = 0; c < std::min(sl.cols, 8); ++c) {
    std::snprintf(buf, sizeof buf, " %.4g", double(sl.values[std::int64_t(c) * sl.col_stride]));
    first += buf;
  }
  if (sl.cols > 8) first += " ...";
  if (compact) {  // after Export... on its line, cut short there
    ImGui::SameLine(0, ImGui::GetFontSize());
    if (ImGui::GetContentRegionAvail().x < ImGui::GetFontSize() * 6) ImGui::NewLine();
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    panel::folded_text(first);
    ImGui::PopStyleColor();
  } else {
    export_slice();
    ImGui::SameLine(0, ImGui::GetFontSize());
    if (ImGui::GetContentRegionAvail().x < ImGui::CalcTextSize(first.c_str()).x) ImGui::NewLine();
    ImGui::TextDisabled("%s", first.c_str());
  }

  const bool weights = s.name == "attn_weights" || s.name == "attn_weights_avg";
  const std::uint64_t version =
      ((state.result.generation * 1000003 + std::uint64_t(index)) * 131 + std::uint64_t(sl.head + 1)) * 7919 +
      std::uint64_t(n);
  if (range.source.lock() != state.result.forward || range.version != version) {
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (int r = 0; r < sl.rows; ++r)
      for (int c = 0; c < sl.cols; ++c) {
        const float v = sl.values[std::int64_t(r) * sl.row_stride + std::int64_t(c) * sl.col_stride];
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
    if (lo > hi) lo = hi = 0;
    range = {state.result.forward, version, lo, hi};
  }

  Heatmap hm;
  hm.id = "pipeline/tensor";
  hm.values = sl.values;
  hm.rows = sl.rows;
  hm.cols = sl.cols;
  hm.row_stride = sl.row_stride;
  hm.col_stride = sl.col_stride;
  if (weights) {
    const Colormap picked = state.window().colormap;
    hm.colormap = picked == Colormap::diverging ? Colormap::viridis : picked;
    hm.vmin = 0;
    hm.vmax = std::max(range.hi, 1e-6f);
  } else {
    const float m = std::max({std::fabs(range.lo), std::fabs(range.hi), 1e-6f});
    hm.colormap = Colormap::diverging;
    hm.vmin = -m;
    hm.vmax = m;
  }
  hm.row_labels = sl.rows_are_keys ? &state.key_tokens() : &state.query_tokens();
  hm.col_labels = sl.cols_are_keys ? &state.key_tokens() : nullptr;
  // Blocked cells are grey and hatched, never "low": where the merged additive mask is -inf, from the
  // stage that applies the mask on (the raw and scaled scores come before it).
  const Stage<float>* mask = tr.find("attn_mask");
  if (mask && sl.head >= 0 && contains({"attn_mask", "scores_masked", "attn_weights"}, s.name)) {
    const std::int64_t base = mask->offset + std::int64_t(n) * mask->strides[0] + sl.head * mask->strides[1];
    hm.blocked = [mask, base](int r, int c) {
      return std::isinf((*mask->storage)[std::size_t(base + r * mask->strides[2] + c * mask->strides[3])]);
    };
  }
  // The keys a mask edit blocks keep their labels (a pass over the mask each frame: small sizes only).
  if (mask && sl.cols_are_keys && double(mask->shape[2]) * double(mask->shape[3]) <= double(1 << 16))
    hm.marked_cols = panel::edited_keys(*mask, n);
  hm.show_values = view.show_values;
  hm.max_cell = ImGui::GetFontSize() * 3.0f;
  hm.version = version;
  const float font = ImGui::GetFontSize();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float bar_w = font * 5;
  // A short view gives the map the height left, however little (the graph above took its share).
  const float least = compact ? font * 3 : font * 8;
  hm.size = ImVec2(std::max(font * 8, avail.x - bar_w), std::max(least, avail.y));
  const ImVec2 start = ImGui::GetCursorScreenPos();
  draw_heatmap(tex, hm);
  const ImVec2 end = ImGui::GetCursorScreenPos();
  // The colorbar goes right of the cells actually drawn (the heatmap may use less than its size).
  ImGui::SetCursorScreenPos(ImVec2(ImGui::GetItemRectMax().x + font * 0.5f, start.y + font * 1.5f));
  draw_colorbar(tex, hm.colormap, hm.vmin, hm.vmax, std::max(font * 4, end.y - start.y - font * 3));
  ImGui::SetCursorScreenPos(end);
}

}  // namespace

struct PipelinePanel {
  RangeCache range;      // of the shown slice
  PipelineInfo info;     // what the last frame drew
  std::string followed;  // the stage the graph last scrolled to follow
  void draw(AppState& state, Textures& tex);
};

const PipelineInfo& pipeline_info(const Panels& panels) {
  static const PipelineInfo none;  // the view has not drawn yet
  return panels.pipeline ? panels.pipeline->info : none;
}

void draw_pipeline(Panels& panels, AppState& state, Textures& tex) {
  panel::made(panels.pipeline).draw(state, tex);
}

void PipelinePanel::draw(AppState& state, Textures& tex) {
  info = PipelineInfo{};
  info.view = panel::window_rect();
  if (!state.result.valid()) {
    ImGui::TextDisabled("No result yet: fix the inputs marked in the controls.");
    return;
  }
  const ForwardResult<float>& f = *state.result.forward;
  const std::vector<Box> boxes = make_boxes(f);
  // A short view (a presenter font beside the lesson panel) folds the detail's text to a line each.
  const bool compact = panel::compact_view();

  double total = 0;
  for (const Box& b : boxes) total += b.cost.flops;
  ImGui::Text("%zu stages, %s in all", boxes.size(), count_str(total, "FLOPs").c_str());
  if (state.stale) {
    ImGui::SameLine();
    ImGui::TextDisabled("(stale: recomputing)");
  }
  // Legend of the box colours.
  const float sz = ImGui::GetFontSize() * 0.7f;
  for (Kind k : {Kind::input, Kind::matmul, Kind::elementwise, Kind::view, Kind::copy}) {
    const KindStyle ks = kind_style(k);
    // Same line while the entry fits, else a new line.
    const float entry = sz + ImGui::GetFontSize() * 0.3f + ImGui::CalcTextSize(ks.label).x;
    ImGui::SameLine();
    if (ImGui::GetContentRegionAvail().x < entry) ImGui::NewLine();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float y = p.y + (ImGui::GetTextLineHeight() - sz) * 0.5f;
    ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, y), ImVec2(p.x + sz, y + sz), ks.colour);
    ImGui::Dummy(ImVec2(sz, sz));
    ImGui::SameLine(0, ImGui::GetFontSize() * 0.3f);
    ImGui::TextUnformatted(ks.label);
  }

  // The graph takes what it needs up to 55% of the height, zoomed out until it fits there (a large
  // font, a small window); the chosen tensor gets the rest. A short view would shrink the wrapped
  // graph's text below legibility: there the chain stays in one row that scrolls sideways, and the
  // graph takes up to 45% of the height: its text at about half the body font, and the tensor's map
  // keeps room below its lines.
  const ImGuiStyle& style = ImGui::GetStyle();
  const bool wrap = !compact;
  const float share = compact ? 0.45f : 0.55f;
  const float avail_w = ImGui::GetContentRegionAvail().x - style.ScrollbarSize;
  const float avail_h = ImGui::GetContentRegionAvail().y;
  const float room =
      std::max(ImGui::GetFontSize() * 6, avail_h * share) - style.ScrollbarSize - style.ItemSpacing.y;
  const float zoom = fit_zoom(boxes, f.dims, avail_w, room, wrap);
  const float own_scale = ImGui::GetCurrentWindow()->FontWindowScale;
  ImGui::SetWindowFontScale(own_scale * zoom);
  const Graph g = layout_graph(boxes, f.dims, avail_w, ImVec2(0, 0), wrap);
  ImGui::SetWindowFontScale(own_scale);
  // The stage shown below is the view's (Left / Right step it): a click on a box is an action too.
  // Scrolled sideways, a stage newly chosen (a key, a lesson step) is brought into sight.
  std::string selected_stage = state.view().pipeline_stage;
  const std::string follow = selected_stage != followed ? selected_stage : "";
  followed = selected_stage;
  draw_graph(boxes, f.dims,
             std::max(ImGui::GetFontSize() * 6,
                      std::min(g.height + style.ScrollbarSize + style.ItemSpacing.y, share * avail_h)),
             zoom, wrap, follow, selected_stage, info);
  if (selected_stage != state.view().pipeline_stage) state.apply(show_pipeline_stage(selected_stage));
  ImGui::Separator();
  // Grouped-query attention, below the graph so that it takes none of the graph's room: k and v
  // are computed once per key/value head; which query heads read each, in the group colours the
  // Heads and Overview titles use.
  const Dims& dd = f.dims;
  if (dd.G > 0 && dd.G < dd.H) {
    const std::int64_t per = dd.H / dd.G;
    panel::long_text("GQA: k, v hold " + std::to_string(dd.G) + " heads, read by " + std::to_string(per) +
                         " query heads each:",
                     compact, true);
    for (std::int64_t g = 0; g < dd.G; ++g) {
      const std::string entry = "kv " + std::to_string(g) + " <- q " + std::to_string(g * per) + "-" +
                                std::to_string(g * per + per - 1);
      // Folded, the heading fills its line: the entries start the next (a SameLine there would
      // reach past the edge before its NewLine).
      if (g > 0 || !compact) {
        ImGui::SameLine();
        if (ImGui::GetContentRegionAvail().x < ImGui::CalcTextSize(entry.c_str()).x) ImGui::NewLine();
      }
      ImGui::TextColored(panel::kv_group_colour(g, dd.G), "%s", entry.c_str());
    }
  }

  draw_detail(state, tex, boxes, state.view().pipeline_stage, range, info, compact);
}

}  // namespace mha::app
