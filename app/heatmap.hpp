// The heatmap widget: one texture quad (not one widget per cell, so L = 256+ stays fast), token
// labels on both axes, values printed when cells are large enough, blocked cells hatched, NaN
// rows flagged, and the hovered/clicked cell reported back.
#pragma once

#include <imgui.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "colormap.hpp"
#include "scenario.hpp"
#include "studio_names.hpp"
#include "textures.hpp"

namespace mha::app {

struct Heatmap {
  std::string id;  // unique per widget; also the texture slot
  const float* values = nullptr;
  int rows = 0, cols = 0;
  std::int64_t row_stride = 0, col_stride = 1;  // in elements: strided views need no copy
  float vmin = 0, vmax = 1;
  Colormap colormap = Colormap::viridis;
  const std::vector<std::string>* row_labels = nullptr;  // queries
  const std::vector<std::string>* col_labels = nullptr;  // keys
  std::function<bool(int row, int col)> blocked;         // drawn grey and hatched
  // The same test as plain data, when it is an additive mask (-inf = blocked): read without a call
  // per cell when the map's texture is made (at L = 2048, 4M cells a map).
  const float* blocked_mask = nullptr;
  std::int64_t blocked_row_stride = 0, blocked_col_stride = 1;
  bool show_values = true;
  // Colour each row on [0, that row's largest finite, unblocked value] (vmin/vmax are then unused for
  // colour; cell text still prints the values themselves).
  bool row_scale = false;
  // Text for a cell instead of its value (e.g. the mask editor's "T"/"F"); "" leaves it empty. It is
  // drawn wherever it fits, blocked cells included.
  std::function<const char*(int row, int col, float cell_px)> cell_text;
  float max_cell = 48.0f;  // cell size cap in pixels (the widget fits `size`)
  // Cell size floor in pixels: a map with more cells than pixels scrolls past `size`. 0: it shrinks
  // to fit, each texel then the largest value of a patch of cells (the level of detail below).
  float min_cell = 1.0f;
  ImVec2 size{0, 0};          // space to fill; 0 = the available region
  std::uint64_t version = 0;  // content version: the texture is refilled only when it changes
  // Rows to redraw alone: when the texture holds content version `changed_since` (same colours and
  // sizes), only the rows flagged in `changed_rows` (`rows` flags) differ from it. 0 / null: all.
  std::uint64_t changed_since = 0;
  const char* changed_rows = nullptr;
  int selected_row = -1, selected_col = -1;  // outlined
  // Linked hover: the token under the pointer in any view (ViewState::hover_query / hover_key), its
  // row and column banded and its labels highlighted. -1: none.
  int hover_row = -1, hover_col = -1;
  // Tokens whose labels are drawn whatever the room, at full size over their neighbours (as the
  // hovered and selected row and column are): the keys a mask edit blocks, a what-if's key.
  std::vector<int> marked_rows, marked_cols;
  // Ctrl+wheel zooms about the pointer (cell values appear once they fit), a right-button drag pans,
  // a right double-click fits again. The footprint on screen stays; HeatmapEvent::grid_min and cell
  // then place cells off the grid's edge.
  bool zoomable = false;
  // false: no room kept for absent labels nor for the NaN-row flag (small multiples, where every
  // pixel goes to the cells; NaN cells keep their colour).
  bool margins = true;
  // What keeps `values` and what `blocked` reads alive (the result they come from). Set, the copy
  // menu reads them when it copies; unset, the map last under the pointer is copied whenever it
  // changes (at L = 2048, 4M values and 4M blocked checks per result).
  std::shared_ptr<const void> owner;
  // A zoomed-out map: each cell stands for a patch of this many query rows by keys of a stage with
  // stage_rows × stage_cols cells, and holds the patch's largest value (the tooltip names the patch).
  // 1 × 1: cells are the stage's own.
  std::int64_t patch_rows = 1, patch_cols = 1, stage_rows = 0, stage_cols = 0;
};

struct HeatmapEvent {
  bool hovered = false;
  bool clicked = false;   // mouse released on a cell
  bool dragging = false;  // left button held over a cell (mask painting)
  int row = -1, col = -1;
  // The pointer is over an axis label instead: a query (row) or key (column) token, else -1.
  int label_row = -1, label_col = -1;
  ImVec2 grid_min{0, 0};  // where the cells were drawn (screen space), for aligning other widgets
  float cell = 0;         // cell size in pixels
  ImVec2 grid_max{0, 0};  // the far corner of the cells' footprint
  // The rows and columns whose token labels were drawn (one cut short with "…" counts, one left out
  // for room does not), and the share of the font size the unmarked ones were drawn at.
  std::vector<int> row_labels_drawn, col_labels_drawn;
  float label_scale = 1;
};

// How the token labels along one axis fit cells smaller than a line of text (GUI-free). A label
// runs across its axis (a row's is one line tall along the rows; a column's is turned on its side),
// so a cell `pitch` pixels long holds one when pitch >= text_h. Otherwise the font shrinks (not below
// min_scale), then labels alternate between 2 or 3 lanes side by side (each then has lanes·pitch of
// the axis), and a label longer than its lane's room is cut short with "…" (not shorter than about
// four letters). Only when none of that fits is every step-th label drawn, at the
// smallest font on the lanes that leave out fewest within the room of one lane of whole labels.
struct AxisLabels {
  float scale = 1;       // of the font
  int lanes = 1;         // label i goes to lane (i / step) % lanes, lane 0 next to the cells
  int step = 1;          // every step-th label is drawn (1: every one)
  float lane_depth = 0;  // room across the axis for one lane's text, pixels
  float depth = 0;       // room across the axis for every lane, the gaps between them included
};
// widest: the widest label at scale 1; max_depth: the most room across the axis the labels may take;
// gap: between lanes.
AxisLabels plan_axis_labels(float pitch, float text_h, float widest, float max_depth, float min_scale,
                            float gap, int max_lanes = 3);
// The smallest share of the font a label is drawn at: 11 pixels, and never under 0.6 of a presenter's
// large font.
float label_min_scale(float font_px);

HeatmapEvent draw_heatmap(Textures& textures, const Heatmap& h);
// Where draw_heatmap puts the cells of `h` in `size` (0: the region available), before any zoom: the
// label margins (lanes included) and the fitted cell. A view laying out several maps asks it first.
struct HeatmapFit {
  float widest_row = 0, widest_col = 0;  // the widest label of each axis
  float row_w = 0, col_w = 0;            // margins left of and above the cells, for labels
  float fit = 0;                         // cell size in pixels
  bool vertical = false;                 // column labels run upwards
  float top = 0;                         // from the map's top to its cells
};
HeatmapFit fit_heatmap(const Heatmap& h, ImVec2 size);
// Linked hover. A view with the pointer over a token (a cell, an axis label, a line) reports it; once a
// frame, before the views draw, take_hover moves what the last frame reported into
// ViewState::hover_query / hover_key (-1 both when nothing was), which every view then marks.
void report_hover(int query, int key);
void report_hover(const HeatmapEvent& ev);  // its cell, or the label under the pointer
void take_hover(ViewState& v);
// The colour that marks the linked-hover token (bands, labels, lines): one for every view.
ImU32 hover_colour(int alpha = 255);
// Row r's colour top with row_scale: its largest finite, unblocked value (1 when none is above 0).
float row_top(const Heatmap& h, int r);
// A vertical colorbar with ticks, `height` pixels tall.
void draw_colorbar(Textures& textures, Colormap c, float vmin, float vmax, float height);
// Range helpers: sequential [min, max] of finite values; diverging symmetric [-m, m].
void finite_range(const float* v, std::int64_t n, float* lo, float* hi);

// The clipboard. The heatmap last under the pointer is kept (a copy of its values and labels; before
// any was, the first one the view draws), and its right-click menu, Ctrl+C over it and the Edit menu
// copy it: as TSV (a spreadsheet), as a numpy literal, or as a PNG image drawn by the figure exporter
// (where wl-copy or xclip runs).
enum class CopyAs { tsv, numpy, png };
std::string current_heatmap_name();  // "" before any heatmap was under the pointer
void copy_current_heatmap(CopyAs how);
std::string take_copy_message();  // what the last copy did, once ("" when nothing new)

}  // namespace mha::app
