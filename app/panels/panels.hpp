// One panel a file. Each draws into the current ImGui window region and edits state.scenario
// through state.edited(...). None touches GL: textures come through Textures.
#pragma once

#include <imgui.h>

#include <memory>
#include <string>
#include <vector>

#include "app_state.hpp"
#include "heatmap.hpp"
#include "studio_names.hpp"
#include "textures.hpp"

namespace mha::gpu {
class GpuBackend;
}

namespace mha::app {

// What a panel keeps from one frame to the next (caches keyed by the result, a drag in progress, an
// animation, what it drew last frame) are members of its panel struct, defined in its .cpp. Panels
// holds one of each (UiEnv::panels); each is made when its panel first draws.
struct ComparePanel;
struct ControlsPanel;
struct HeadsPanel;
struct WhatIfPanel;
struct OverviewPanel;
struct TokenLinesPanel;
struct PipelinePanel;
struct MaskEditorPanel;
struct ReshapePanel;
struct LargePanel;
struct AttentionFilePanel;
struct CheckPanel;
struct Panels {
  std::shared_ptr<ComparePanel> compare;
  std::shared_ptr<ControlsPanel> controls;
  std::shared_ptr<HeadsPanel> heads;
  std::shared_ptr<WhatIfPanel> what_if;
  std::shared_ptr<OverviewPanel> overview;
  std::shared_ptr<TokenLinesPanel> token_lines;
  std::shared_ptr<PipelinePanel> pipeline;
  std::shared_ptr<MaskEditorPanel> mask_editor;
  std::shared_ptr<ReshapePanel> reshape;
  std::shared_ptr<LargePanel> large;
  std::shared_ptr<AttentionFilePanel> attention_file;
  std::shared_ptr<CheckPanel> check;
};

// check.cpp: the Check view: a student's PyTorch file run against the engine (studio/check.hpp).
// check_file starts a check of `path` (a file the user picked) off the UI thread.
void check_file(Panels& panels, const std::string& path);
void draw_check(Panels& panels, AppState& state, Textures& tex);
bool check_busy(const Panels& panels);
struct CheckStatus {  // what the view shows, for dump-state
  std::string file, verdict, mask_convention, error;
  bool running = false;
  std::vector<std::string> mistakes;
  struct Case {
    std::string name;
    bool ok;
    double max_abs_diff;
  };
  std::vector<Case> cases;
};
CheckStatus check_status(const Panels& panels);

// Left column: sizes, sentence, seed, options.
// Returns whether "Open model folder..." was chosen: the caller opens the File menu's chooser.
bool draw_controls(Panels& panels, AppState& state);
// The Backend radio buttons' choice (auto, cpu, gpu): the next computes use it, the current one is redone.
void choose_backend(AppState& state, BackendChoice choice);
// Every stage as a box; click to see it.
void draw_pipeline(Panels& panels, AppState& state, Textures& tex);
// View / transpose / back, common mistakes.
void draw_reshape(Panels& panels, AppState& state, Textures& tex);
// Per-head heatmaps of any stage + average.
void draw_heads(Panels& panels, AppState& state, Textures& tex);
// Presets, click/drag, scope, convention.
void draw_mask_editor(Panels& panels, AppState& state, Textures& tex);
// The mask editor's paint tool on its attn_mask grid (the slice it shows), driven as the mouse drives
// it: a press on a cell (it decides block or unblock), moves (the line from the last cell fills),
// a release. One drag is one gesture: one undo step. Scripts use these for `mask-drag`.
void mask_drag_press(Panels& panels, AppState& state, int row, int col);
void mask_drag_move(Panels& panels, AppState& state, int row, int col);
void mask_drag_release(Panels& panels);
void draw_inspector(AppState& state);  // right column: one weight, term by term
// Difference of two heads / before-after.
void draw_compare(Panels& panels, AppState& state, Textures& tex);
void draw_complexity(AppState& state);  // FLOPs and memory per stage, growth with L
// Why divide by √d_k: a row's largest weight and entropy against d_k, with and without the scale.
void draw_sqrt_dk(AppState& state);
// Every head (and layer) at once; click opens one.
void draw_overview(Panels& panels, AppState& state, Textures& tex);
// BertViz head view: tokens joined by weighted lines.
void draw_token_lines(Panels& panels, AppState& state);
// What the Overview and Token lines views drew last frame (tests, scripts).
struct OverviewInfo {
  int layers = 0, heads = 0, cols = 0, rows = 0;
  float cell = 0;             // cell size in pixels
  bool fits = false;          // the whole grid lies inside the view: no scrolling
  bool labels = false;        // token labels drawn on the tiles
  int tagged = 0;             // tiles showing a head-role tag
  std::vector<ImVec4> tiles;  // (x0, y0, x1, y1) of each map, layer-major
};
const OverviewInfo& overview_info(const Panels& panels);
struct TokenLinesInfo {
  int lines = 0;                       // lines drawn
  int only_query = -1, only_key = -1;  // the filter in force (a hovered token, or the selected query)
  std::vector<int> heads_drawn;        // heads whose lines were drawn
  std::vector<int> queries_drawn;      // distinct query rows that have a line
  float left_x = 0, right_x = 0, top = 0, row_h = 0;  // token columns: query i at y = top + (i + 0.5)·row_h
  float view_x0 = 0, view_x1 = 0;                     // the panel's width on screen
};
const TokenLinesInfo& token_lines_info(const Panels& panels);
// strip.cpp: the presenter strip above the view: the next-token guess, the what-ifs in force, every
// error; drawn a line each, in the theme's colours.
struct StripLine {
  enum Kind { prediction, what_if, error } kind;
  std::string text;
  // The prediction's tokens, most likely first ("␣dog 41.2%"); a what-if's sentence in full.
  std::vector<std::string> parts;
};
std::vector<StripLine> presenter_strip(const AppState& state);
void draw_presenter_strip(const std::vector<StripLine>& lines, bool light_theme);
// What the Heads, Pipeline and Reshape views drew last frame (tests): rectangles are (x0, y0, x1, y1)
// on screen; `view` is the part of the view's window on screen.
struct HeadsInfo {
  ImVec4 view;
  float cell = 0;                   // cell size in pixels, as the grid planned it
  int cols = 0;                     // maps a row of the grid
  int rows_shown = 0;               // rows of maps whole on screen at once (0: the maps scroll)
  bool compact = false;             // a short view: one-line header and checks
  std::vector<HeatmapEvent> maps;   // each map's, slot order (the average last)
  std::vector<double> entropy_max;  // each map's "max" entropy, bits (weights; -1: not shown)
};
const HeadsInfo& heads_info(const Panels& panels);
struct PipelineInfo {
  ImVec4 view;
  ImVec4 graph_view;               // the graph's own scrolling region
  ImVec4 graph;                    // the boxes and arrows
  float zoom = 1;                  // the graph's text and boxes, to the view's font
  float label_px = 0;              // the graph's text size (its boxes' labels), in pixels
  ImVec4 selected_box;             // the chosen stage's box, where it was drawn (0: none)
  ImVec4 head_label, head_slider;  // the detail's head picker: its label, its slider
  ImVec4 export_button;            // the detail's Export... button
};
const PipelineInfo& pipeline_info(const Panels& panels);
struct ReshapeInfo {
  ImVec4 view;
  ImVec4 message;  // what the chosen mistake does (mistake 2: the RuntimeError); 0 without one
};
const ReshapeInfo& reshape_info(const Panels& panels);
// what_if.cpp: the temperature and scale what-if controls (not torch's computation), and a one-line
// warning for views that show its numbers (returns whether the what-if is on).
void draw_what_if(Panels& panels, AppState& state);
bool what_if_banner(const AppState& state);
void draw_attention_file(Panels& panels, Textures& tex);  // a saved attention tensor, read-only
// Opens a .npy in the Attention file view, as its Open button does (a bad file: the reason shows
// there and the file on screen stays). attention_file_info: what it holds now.
void open_attention_file(Panels& panels, const std::string& path);
struct AttentionFileInfo {
  std::int64_t N = 0, H = 0, T = 0, layers = 0;
  std::vector<std::string> warnings;
  std::string error;
};
AttentionFileInfo attention_file_info(const Panels& panels);

// Large L (large.cpp): one head's weights at L = S = *len (a causal mask with *causal) from GPU row
// statistics, tiles recomputed into a texture on `gpu` (null or unavailable: the reason and the CPU heatmap).
// It calls the GPU backend (which binds its own context), never GL itself. Ignores state.result's sizes.
// Where the Large L view computes: auto is the GPU where it is hardware, else the CPU.
enum class LargeDevice { automatic, cpu, gpu };
void draw_large(Panels& panels, AppState& state, Textures& tex, gpu::GpuBackend* gpu, std::int64_t* len,
                bool* causal, LargeDevice* device);
struct LargeViewInfo {  // what the last frame drew (tests, --frame-stats); empty when it did not draw the
                        // view
  bool gpu = false, cpu_heatmap = false;
  bool cpu = false;        // the CPU path drew: on-demand forward, tiles from stage_blocks
  std::string cpu_reason;  // why the CPU computes (no GPU, a software renderer, chosen, the GPU failed)
  bool computing = false;  // the row statistics are being computed on the view's thread
  std::string reason;      // why it fell back (cpu_heatmap or not)
  std::int64_t len = 0, block = 0;  // block: cells per pixel side (1: exact)
  int tiles_rendered = 0;           // textures recomputed this frame
  std::uint64_t gpu_bytes = 0, trace_bytes = 0;
  std::int64_t hover_i = -1, hover_j = -1;  // the hovered cell (block: its first row and column)
  float hover_value = 0;                    // the weight, or the block's max/mean (GPU: read back)
};
const LargeViewInfo& large_view_info(const Panels& panels);
// The problem the Large L view computes: the scenario's sizes, seed and weights at L = S = len, its mask
// preset made again at that size (a hand-drawn mask does not scale: none), or causal when `causal`.
Built large_view_problem(const Scenario& scenario, std::int64_t len, bool causal);
// Waits for the view's preparing thread (before its GPU backend or context goes away).
void large_view_wait(Panels& panels);
// Waits, then forgets the view's problem and position (tests: the next backend starts afresh).
void large_view_reset(Panels& panels);

}  // namespace mha::app
