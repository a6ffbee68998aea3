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
};

// Throws ConfigError when the trace lacks q, q_view or q_heads or the batch index is out of range.
ReshapeFigure reshape_figure(const ForwardResult<float>& r, const ReshapeSpec& spec);

}  // namespace mha::exporter
