// One panel a file. Each draws into the current ImGui window region and edits state.scenario
// through state.edited(...). None touches GL: textures come through Textures.
#pragma once

#include <string>
#include <vector>

#include "app_state.hpp"
#include "studio_names.hpp"
#include "textures.hpp"

namespace mha::gpu {
class GpuBackend;
}

namespace mha::app {

void draw_controls(AppState& state);                    // left column: sizes, sentence, seed, options
void draw_pipeline(AppState& state, Textures& tex);     // every stage as a box; click to see it
void draw_reshape(AppState& state, Textures& tex);      // view / transpose / back, common mistakes
void draw_heads(AppState& state, Textures& tex);        // per-head heatmaps of any stage + average
void draw_mask_editor(AppState& state, Textures& tex);  // presets, click/drag, scope, convention
void draw_inspector(AppState& state);                   // right column: one weight, term by term
void draw_compare(AppState& state, Textures& tex);      // difference of two heads / before-after
void draw_complexity(AppState& state);                  // FLOPs and memory per stage, growth with L
void draw_attention_file(Textures& tex);                // a saved attention tensor, read-only
// Opens a .npy in the Attention file view, as its Open button does (a bad file: the reason shows
// there and the file on screen stays). attention_file_info: what it holds now.
void open_attention_file(const std::string& path);
struct AttentionFileInfo {
  std::int64_t N = 0, H = 0, T = 0, layers = 0;
  std::vector<std::string> warnings;
  std::string error;
};
AttentionFileInfo attention_file_info();

// Large L (large.cpp): one head's weights at L = S = *len (a causal mask with *causal) from GPU row
// statistics, tiles recomputed into a texture on `gpu` (null or unavailable: the reason and the CPU heatmap).
// It calls the GPU backend (which binds its own context), never GL itself. Ignores state.result's sizes.
void draw_large(AppState& state, Textures& tex, gpu::GpuBackend* gpu, std::int64_t* len, bool* causal);
struct LargeViewInfo {  // what the last frame drew (tests, --frame-stats)
  bool gpu = false, cpu_heatmap = false;
  bool computing = false;           // the row statistics are being computed on the view's thread
  std::string reason;               // why it fell back (cpu_heatmap or not)
  std::int64_t len = 0, block = 0;  // block: cells per pixel side (1: exact)
  int tiles_rendered = 0;           // textures recomputed this frame
  std::uint64_t gpu_bytes = 0, trace_bytes = 0;
  std::int64_t hover_i = -1, hover_j = -1;  // the hovered cell (block: its first row and column)
  float hover_value = 0;                    // read back from the GPU: the weight, or the block's max/mean
};
const LargeViewInfo& large_view_info();
// Waits for the view's preparing thread (before its GPU backend or context goes away).
void large_view_wait();
// Waits, then forgets the view's problem and position (tests: the next backend starts afresh).
void large_view_reset();

}  // namespace mha::app
