// The colours a stage is drawn in: which colormap and which value range. One rule for the screen
// and for an exported figure, so a figure shows what the Heads view showed (random-init weights of
// 0–0.2 spread over the whole map, not squeezed into its bottom fifth). No GL, no ImGui.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "colormap.hpp"

namespace mha::render {

// The finite values a view shows (NaN and ±inf left out): every head of one batch item in the
// Heads view. Empty (lo > hi) when there are none.
struct ValueRange {
  float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity();
  float maxabs = 0;
  void add(float v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    maxabs = std::max(maxabs, std::fabs(v));
  }
  bool empty() const { return lo > hi; }
};

struct ColourRange {
  float vmin = 0, vmax = 1;
};

// The map a stage is drawn with when the user chose `chosen`: scores are signed around 0, so always
// diverging; weights are probabilities, so never diverging (viridis instead); any other stage takes
// the choice.
Colormap stage_colormap(const std::string& stage, Colormap chosen);

// The automatic colour range. Diverging: symmetric, [-maxabs, maxabs]. Weights: [0, largest], so
// weights that are all small still use the whole map. Otherwise [lo, hi]. A map with no spread
// (all equal, all 0, none finite) still gets a range of width 1 or 2. With `row_scale` (weights
// coloured per row, see row_colour_top) the range is [0, 1]: the colorbar reads as a fraction of
// each row's largest weight.
ColourRange auto_colour_range(const ValueRange& values, Colormap cmap, bool weights, bool row_scale = false);

// A row's colour top when each row is coloured on its own: its largest finite value at a column
// not `blocked(col)`, or 1 when none is above 0 (an all-zero or all-blocked row: any range draws
// it). `row` is read at row[col * col_stride].
template <class Blocked>
float row_colour_top(const float* row, int cols, std::int64_t col_stride, Blocked&& blocked) {
  float top = 0;
  for (int c = 0; c < cols; ++c) {
    const float x = row[c * col_stride];
    if (std::isfinite(x) && x > top && !blocked(c)) top = x;
  }
  return top > 0 ? top : 1.0f;
}

}  // namespace mha::render
