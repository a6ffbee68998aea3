// The reshape figure: q of one batch item as (L, E) cells, each head's d_k columns in its own hue,
// then q.view(N, L, H, d_k) (the heads split apart, nothing moved in memory), then
// .transpose(1, 2) (N, H, L, d_k) (the heads stacked), with shape, strides and contiguity from the
// trace under each step. It mirrors the app's Reshape view; `mha export --figure reshape` writes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heatmap_export.hpp"
#include "mha.hpp"

namespace mha::exporter {

constexpr int kReshapeMaxRows = 32;  // tokens drawn; more are summarised in a note

struct ReshapeFigure {
  Drawing drawing;
  int cell_w = 0, cell_h = 0;
  int rows = 0;               // tokens drawn: min(L, kReshapeMaxRows)
  int gap = 0;                // between head blocks
  float maxabs = 1;           // |value| that gets the full brightness
  Rect flat, split, stacked;  // the three steps' cell areas (q, q_view, q_heads)
  // q_heads' blocks: head h at column h % stacked_cols, row h / stacked_cols of the stacked area,
  // block_pitch apart (a block is d_k cells wide, min(L, 32) tall).
  int stacked_cols = 1, pitch_x = 0, pitch_y = 0;
};

struct ReshapeSpec {
  int batch_index = 0;
  std::vector<std::string> tokens;  // query labels; empty: 0, 1, 2, ...
  int cell_px = 0;                  // cell width; 0: automatic (larger for small E)
  bool transparent = false;
  std::string font_path;
  float font_px = 13;
  // The three steps one above the other and the heads side by side (a printed page's shape), in
  // place of three columns.
  bool vertical = false;
  // The Reshape view's mistake: 0 the right path; 1 the split without transpose
  // (q.view(N, H, L, d_k): each "head" is a run of memory, its rows labelled with the token whose
  // values they hold); 2 the merge by .view on the non-contiguous context (torch's RuntimeError and
  // why); 3 no output projection (how far concat is from the output).
  int mistake = 0;
};

// The RuntimeError torch raises for .view on a tensor whose strides cannot be merged.
extern const char* const kViewRuntimeError;

// Throws ConfigError when the trace lacks q, q_view or q_heads (and the merge's stages for
// mistakes 2 and 3) or the batch index is out of range.
ReshapeFigure reshape_figure(const ForwardResult<float>& r, const ReshapeSpec& spec);

}  // namespace mha::exporter
