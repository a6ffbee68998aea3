// The √d_k plot: each row's largest attention weight and its entropy against d_k, softmax with and
// without the division by √d_k (engine/saturation.hpp's curves), as two panels side by side with
// axes, ticks and a legend. One layout for the app's √d_k view (measured with ImGui's font, drawn
// with ImDrawList) and the lesson handout (measured and drawn by the exporter's cairo).
#pragma once

#include <functional>
#include <string>

#include "heatmap_export.hpp"
#include "saturation.hpp"

namespace mha::exporter {

struct SaturationSpec {
  int width = 640, height = 360;  // the whole figure, pixels
  int mark_d_k = 0;               // a vertical line at this d_k ("d_k here"); 0: none
  bool mark_scaled = true;        // which curve the marked d_k is on: the scores divided or not
  std::string font_path;          // the exporter's font (the export overload)
  float font_px = 13;
};

// How wide a line of text is (title: the Drawing's 1.3× font) and how tall a line is, in the
// font the figure is drawn with.
struct TextMetrics {
  std::function<int(const std::string&, bool title)> width;
  int line = 16, title_line = 20;
};

// The figure laid out for text measured by `m`. Throws ConfigError for curves without points.
Drawing saturation_figure(const SaturationCurves& c, const SaturationSpec& spec, const TextMetrics& m);
// Measured in the exporter's font (spec.font_path at spec.font_px): the handout's.
Drawing saturation_figure(const SaturationCurves& c, const SaturationSpec& spec);

// The curves the app and the handout draw: d_k = 1 … 256, S keys (2 to 64: the curves depend on S
// slowly, and more keys cost more time than they show), 2000 rows at S ≤ 6 and fewer above, a fixed seed.
SaturationCurves lesson_saturation_curves(int keys);

}  // namespace mha::exporter
