// The Overview: every head's attention weights at once as small multiples that fit the view without
// scrolling (H ≤ 16 at L ≤ 64 on a 1280×720 window), and with a model of several layers a
// layers × heads grid (BertViz's "model view"). Each tile names its head and its measured role;
// a click opens that head in the Heads view.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "heatmap.hpp"
#include "model/roles.hpp"
#include "panel_util.hpp"
#include "panels.hpp"

namespace mha::app {

namespace {

using namespace panel;

// Head h of batch item n of a (N, H, L, S) stage, as a strided plane.
struct Plane {
  const float* p = nullptr;
  std::int64_t rs = 0, cs = 1;
};
Plane head_of(const Stage<float>& s, int n, int h) {
  return {s.storage->data() + s.offset + n * s.strides[0] + h * s.strides[1], s.strides[2], s.strides[3]};
}

// The largest finite weight of batch item n over the given results (the tiles' shared colour range),
// kept until the result or the item changes: it is a pass over every weight.
struct LargestWeight {
  std::uint64_t seen_gen = 0;
  int seen_n = -1;
  std::size_t seen_count = 0;
  float top = 1;
  float of(const std::vector<const ForwardResult<float>*>& layers, int n, std::uint64_t gen);
};

float LargestWeight::of(const std::vector<const ForwardResult<float>*>& layers, int n, std::uint64_t gen) {
  if (gen == seen_gen && n == seen_n && layers.size() == seen_count) return top;
  top = 0;
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (const ForwardResult<float>* f : layers) {
    const Stage<float>& w = *find_stage(*f, "attn_weights");  // checked by the caller
    for (int h = 0; h < int(w.shape[1]); ++h) {
      const Plane p = head_of(w, n, h);
      for (std::int64_t i = 0; i < w.shape[2]; ++i) {
        // A row at a time through the plane's strides, in a loop the compiler vectorises (NaN and
        // inf compare false): at L = 2048, 33M weights a result.
        const float* row = p.p + i * p.rs;
        float m = top;
        for (std::int64_t j = 0; j < w.shape[3]; ++j) {
          const float v = row[j * p.cs];
          m = v > m && v < inf ? v : m;
        }
        top = m;
      }
    }
  }
  if (top <= 0) top = 1;
  seen_gen = gen, seen_n = n, seen_count = layers.size();
  return top;
}

struct Grid {
  int cols = 1, rows = 1;
  float tile_w = 0, tile_h = 0, cell = 0;
};

// The column count that gives the largest cells for n tiles of R × C cells in w × h, each tile with
// `title_h` above its map and margins mw (across) and mh (down) beside it.
Grid fit_grid(int n, int R, int C, float w, float h, float title_h, float mw, float mh) {
  Grid best;
  best.cell = -1;
  for (int cols = 1; cols <= n; ++cols) {
    const int rows = (n + cols - 1) / cols;
    const float tw = w / float(cols), th = h / float(rows);
    const float cell = std::min((tw - mw) / float(C), (th - title_h - mh) / float(R));
    if (cell > best.cell + 0.01f) best = Grid{cols, rows, tw, th, cell};
  }
  return best;
}

}  // namespace

struct OverviewPanel {
  OverviewInfo info;  // what the last frame drew
  LargestWeight largest_weight;
  void draw(AppState& state, Textures& tex);
};

const OverviewInfo& overview_info(const Panels& panels) {
  static const OverviewInfo none;  // the view has not drawn yet
  return panels.overview ? panels.overview->info : none;
}

void draw_overview(Panels& panels, AppState& state, Textures& tex) {
  made(panels.overview).draw(state, tex);
}

void OverviewPanel::draw(AppState& state, Textures& tex) {
  info = OverviewInfo{};
  if (!state.result.valid()) {
    ImGui::TextWrapped("No result yet: the heads appear once the inputs give a valid forward.");
    return;
  }
  ViewState& view = state.view();
  const Result& result = state.result;
  const ForwardResult<float>& f = *result.forward;
  const Dims& d = f.dims;
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  const int N = int(d.N), H = int(d.H);
  const int b = std::clamp(view.batch_index, 0, N - 1);

  // With a model of several layers: every layer's result (the Result keeps them all).
  const ModelResult* model = result.model ? &*result.model : nullptr;
  const bool several = model && model->layers.size() > 1;
  const bool all_layers = several && view.overview_layers;
  std::vector<const ForwardResult<float>*> shown;
  std::vector<std::shared_ptr<const ForwardResult<float>>> shown_owner;  // what keeps each one's weights
  std::vector<int> shown_layer;
  if (all_layers) {
    for (std::size_t l = 0; l < model->layers.size(); ++l)
      if (model->layers[l] && model->layers[l]->dims.H == d.H && model->layers[l]->dims.L == d.L) {
        shown.push_back(model->layers[l].get());
        shown_owner.push_back(model->layers[l]);
        shown_layer.push_back(int(l));
      }
  }
  if (shown.empty()) {
    shown.push_back(&f);
    shown_owner.push_back(result.forward);
    shown_layer.push_back(model ? int(model->layer) : 0);
  }
  const RoleTable* roles = model && model->roles && model->roles->n_head == H && !model->roles->heads.empty()
                               ? model->roles.get()
                               : nullptr;

  what_if_banner(state);
  // Controls: batch item, and with a model which grid.
  if (N > 1) {
    int pick = b;
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::SliderInt("batch item", &pick, 0, N - 1)) view.batch_index = pick;
    ImGui::SameLine();
  }
  ImGui::Checkbox("colour each row to its max", &view.weights_row_scale);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Each row's colours run from 0 to that row's largest weight (a causal row 0 holds a 1;\n"
        "long rows ~1/T each would otherwise look dark). Cell values stay the weights.");
  if (several) {
    panel::same_line_if_fits(panel::labelled("every layer", ImGui::GetFrameHeight()));
    ImGui::Checkbox("every layer", &view.overview_layers);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("On: layers down, heads across (the model view). Off: the heads of layer %lld only.",
                        (long long)model->layer);
    ImGui::SameLine();
  }
  {
    char buf[160];
    std::snprintf(buf, sizeof buf, "attn_weights%s: click a head to open it",
                  all_layers ? " of every layer"
                  : !model   ? ""
                             : (" of layer " + std::to_string(model->layer)).c_str());
    panel::same_line_if_fits(ImGui::CalcTextSize(buf).x);
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", buf);
    ImGui::PopStyleColor();
  }

  // At the largest sizes a result keeps no attn_weights: computed once per result off the UI thread
  // (the Heads view draws from the weights overview instead), unless they would not fit in memory.
  if (!panel::stages_ready(state.stages, {result.forward}, {"attn_weights"})) return;
  for (const ForwardResult<float>* lf : shown)
    if (!find_stage(*lf, "attn_weights")) {
      ImGui::TextWrapped(
          "attn_weights (%lld x %lld x %lld values a batch item) do not fit in memory here; the Heads view "
          "shows every head zoomed out.",
          (long long)d.H, (long long)d.L, (long long)d.S_total);
      return;
    }
  const Stage<float>* mask_stage = all_layers ? nullptr : f.trace.find("attn_mask");
  const int R = int(d.L), C = int(d.S_total);
  const int layers = int(shown.size());
  const float top = largest_weight.of(shown, b, result.generation);
  const Colormap picked = state.window().colormap;
  const Colormap cmap = picked == Colormap::diverging ? Colormap::viridis : picked;

  // Geometry: the colorbar on the right, layer names on the left of a layers × heads grid.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float colorbar_w = font * 4.5f;
  float row_head_w = 0;
  if (all_layers)
    for (int l : shown_layer)
      row_head_w = std::max(row_head_w, ImGui::CalcTextSize(("layer " + std::to_string(l)).c_str()).x);
  if (row_head_w > 0) row_head_w += style.ItemSpacing.x;
  const float grid_w = std::max(font * 6, avail.x - colorbar_w - row_head_w - style.ItemSpacing.x);
  const float grid_h = std::max(font * 6, avail.y - style.ItemSpacing.y);
  const float line_h = ImGui::GetTextLineHeight();
  const float margin = style.ItemSpacing.x;
  // What the heatmap widget keeps beside its cells without labels: a row margin and the NaN flag's
  // column across, a text line above.
  const float mw = margin, mh = margin;

  // Titles: "head 3 · prev-token 0.83", on a second line when the tile is too narrow for one.
  auto tag_of = [&](int layer, int h) {
    return model ? studio::head_role_label(*model, layer, h) : std::string();
  };
  // Under GQA each title names its key/value head and takes that group's colour.
  const std::int64_t G = result.forward->dims.G, group = G > 0 && G < H ? H / G : 0;
  auto title_of = [&](int h) {
    return "head " + std::to_string(h) +
           (group ? " \xC2\xB7 kv " + std::to_string(h / group) : std::string());
  };
  // One line when every title fits on one, else the tag on a second line; and when even that is wider
  // than a tile (a presenter font over small tiles), the titles at a smaller size, never truncated.
  int title_lines = 1;
  float title_size = font;
  auto grid_for = [&](float title_h) {
    Grid gg = all_layers ? Grid{H, layers, grid_w / float(H), grid_h / float(layers), 0}
                         : fit_grid(H, R, C, grid_w, grid_h, title_h, mw, mh);
    gg.cell = std::min((gg.tile_w - mw) / float(C), (gg.tile_h - title_h - mh) / float(R));
    return gg;
  };
  auto widest_title = [&](int lines) {
    float w = 0;
    for (std::size_t li = 0; li < shown.size(); ++li)
      for (int h = 0; h < H; ++h) {
        const std::string tag = tag_of(shown_layer[li], h);
        if (tag.empty() || lines == 2)
          w = std::max({w, ImGui::CalcTextSize(title_of(h).c_str()).x, ImGui::CalcTextSize(tag.c_str()).x});
        else
          w = std::max(w, ImGui::CalcTextSize((title_of(h) + " \xC2\xB7 " + tag).c_str()).x);
      }
    return w;
  };
  Grid g = grid_for(line_h + style.ItemSpacing.y);
  if (widest_title(1) > g.tile_w - margin && roles) {
    title_lines = 2;
    g = grid_for(2 * line_h + style.ItemSpacing.y);
    const float widest = widest_title(2);
    if (widest > g.tile_w - margin)
      title_size = std::max(std::min(font, 10.0f), font * (g.tile_w - margin) / widest);
  }
  const float title_line_h = line_h * title_size / font;
  const float title_h = float(title_lines) * title_line_h + style.ItemSpacing.y;
  if (title_size < font) g = grid_for(title_h);
  const float cell = std::max(1.0f, g.cell);
  // Token labels when, after their margins (the widest query token on the left, a line of key tokens
  // on top), the cells are still a text line tall.
  float label_w = 0;
  for (const std::string& t : result.query_tokens)
    label_w = std::max(label_w, ImGui::CalcTextSize(t.c_str()).x);
  const float cell_labelled = std::min((g.tile_w - mw - std::min(label_w, font * 8)) / float(C),
                                       (g.tile_h - title_h - mh - line_h - style.ItemSpacing.y) / float(R));
  const bool labels = cell_labelled >= line_h * 0.9f;

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  bool opened = false;
  info.layers = layers;
  info.heads = H;
  info.cols = all_layers ? H : g.cols;
  info.rows = all_layers ? layers : g.rows;
  info.cell = cell;
  info.labels = labels;

  for (int li = 0; li < layers; ++li) {
    const ForwardResult<float>& lf = *shown[std::size_t(li)];
    const Stage<float>& w = *find_stage(lf, "attn_weights");  // checked above
    const int layer = shown_layer[std::size_t(li)];
    const bool current = !model || layer == model->layer;
    if (all_layers) {
      const std::string name = "layer " + std::to_string(layer);
      const float y = origin.y + float(li) * g.tile_h + title_h;
      dl->AddText(ImVec2(origin.x, y), ImGui::GetColorU32(current ? ImGuiCol_Text : ImGuiCol_TextDisabled),
                  name.c_str());
    }
    for (int h = 0; h < H; ++h) {
      const int gx = all_layers ? h : h % g.cols, gy = all_layers ? li : h / g.cols;
      const ImVec2 t0(origin.x + row_head_w + float(gx) * g.tile_w, origin.y + float(gy) * g.tile_h);
      const std::string tag = tag_of(layer, h);
      const std::string title = title_of(h);
      const bool selected = current && h == view.sel_head;
      ImU32 title_col = ImGui::GetColorU32(selected ? ImGuiCol_Text : ImGuiCol_TextDisabled);
      if (group) {
        ImVec4 c = kv_group_colour(h / group, G);
        if (!selected) c.w = 0.75f;
        title_col = ImGui::GetColorU32(c);
      }
      ImFont* f = ImGui::GetFont();
      if (tag.empty()) {
        dl->AddText(f, title_size, t0, title_col, title.c_str());
      } else if (title_lines == 1) {
        dl->AddText(f, title_size, t0, title_col, (title + " \xC2\xB7 " + tag).c_str());
      } else {
        dl->AddText(f, title_size, t0, title_col, title.c_str());
        dl->AddText(f, title_size, ImVec2(t0.x, t0.y + title_line_h), title_col, tag.c_str());
      }
      ImGui::SetCursorScreenPos(ImVec2(t0.x, t0.y + title_h));
      const Plane p = head_of(w, b, h);
      Heatmap hm;
      hm.id = "overview/" + std::to_string(layer) + "/" + std::to_string(h);
      hm.values = p.p;
      hm.rows = R;
      hm.cols = C;
      hm.row_stride = p.rs;
      hm.col_stride = p.cs;
      hm.vmin = 0;
      hm.vmax = top;
      hm.colormap = cmap;
      hm.row_scale = view.weights_row_scale;
      hm.row_labels = labels ? &result.query_tokens : nullptr;
      hm.col_labels = labels ? &result.key_tokens : nullptr;
      hm.show_values = view.show_values;
      hm.max_cell = std::max(1.0f, cell);
      hm.min_cell = 0;  // every head whole on its tile; at large sizes a texel is a patch of cells
      hm.owner = shown_owner[std::size_t(li)];  // the copy menu reads the weights when it copies
      hm.margins = false;                       // every pixel to the cells
      hm.size = ImVec2(g.tile_w - margin, g.tile_h - title_h - margin * 0.5f);
      hm.version =
          mix({result.generation, std::uint64_t(layer), std::uint64_t(b), std::uint64_t(h),
               std::uint64_t(cmap), std::uint64_t(view.weights_row_scale), std::uint64_t(top * 1e6f)});
      if (mask_stage) {
        const Plane m = head_of(*mask_stage, b, h);
        if (cell >= 6) hm.blocked = [m](int i, int j) { return neg_inf(m.p[i * m.rs + j * m.cs]); };
      }
      hm.hover_row = view.hover_query;
      hm.hover_col = view.hover_key;
      if (selected) {
        hm.selected_row = view.sel_query;
        hm.selected_col = view.sel_key;
      }
      const HeatmapEvent ev = draw_heatmap(tex, hm);
      report_hover(ev);
      info.tiles.push_back(ImVec4(ev.grid_min.x, ev.grid_min.y, ev.grid_min.x + ev.cell * float(C),
                                  ev.grid_min.y + ev.cell * float(R)));
      if (!tag.empty()) ++info.tagged;
      if (ev.hovered)
        ImGui::SetTooltip("layer %d, head %d%s%s\nquery %d -> key %d: %.4g\nclick to open this head", layer,
                          h, tag.empty() ? "" : "\n", tag.c_str(), ev.row, ev.col,
                          double(p.p[ev.row * p.rs + ev.col * p.cs]));
      if (ev.clicked && !opened) {
        opened = true;
        view.sel_head = h;
        view.sel_query = ev.row;
        view.sel_key = ev.col;
        if (model && layer != model->layer) state.apply(choose_layer(layer));
        state.apply(show_view(ViewTab::heads));
      }
    }
  }
  // The colorbar beside the grid, as tall as the grid allows.
  ImGui::SetCursorScreenPos(
      ImVec2(origin.x + row_head_w + grid_w + style.ItemSpacing.x, origin.y + font * 0.5f));
  ImGui::BeginGroup();
  draw_colorbar(tex, cmap, 0, view.weights_row_scale ? 1.0f : top,
                std::clamp(grid_h - font * 3, font * 3, font * 14));
  if (view.weights_row_scale) ImGui::TextDisabled("x row max");
  ImGui::EndGroup();
  // Leave the cursor below the whole grid, so the child's extent is the grid (no scrolling).
  ImGui::SetCursorScreenPos(
      ImVec2(origin.x, origin.y + std::min(grid_h, float(all_layers ? layers : g.rows) * g.tile_h)));
  ImGui::Dummy(ImVec2(1, 1));
  // Fits: every map inside the view's window, and nothing to scroll to (the content size of the
  // last frame, so it settles on the second frame).
  const ImVec2 wp = ImGui::GetWindowPos(), ws = ImGui::GetWindowSize();
  info.fits = ImGui::GetScrollMaxY() == 0 && ImGui::GetScrollMaxX() == 0;
  for (const ImVec4& t : info.tiles)
    info.fits = info.fits && t.x >= wp.x && t.y >= wp.y && t.z <= wp.x + ws.x && t.w <= wp.y + ws.y;
}

}  // namespace mha::app
