// From a forward's trace to an export figure: which 2-D slice of a stage (batch item, head, all
// heads with their average), its labels, mask and colour range. The CLI and the app call this, then
// render_png / render_svg / render_csv (heatmap_export.hpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "heatmap_export.hpp"
#include "mha.hpp"

namespace mha::exporter {

constexpr int kAllHeads = -1;     // a grid: every head, then their average
constexpr int kHeadAverage = -2;  // the mean over heads (for attn_weights: attn_weights_avg)

struct StageSlice {
  std::string stage = "attn_weights";
  int batch_index = 0;
  int head = 0;  // an index, kAllHeads or kHeadAverage; ignored for stages without a head axis
  std::optional<app::Colormap> colormap;              // default: viridis for weights, diverging otherwise
  std::vector<std::string> query_labels, key_labels;  // tokens; empty: indices
};

// The spec and the buffers its panels point at (averages, masks); the rest points into the result,
// which must outlive it. Movable, not copyable: the panels hold pointers into the buffers.
struct StageFigure {
  ExportSpec spec;
  int heads = 0;  // size of the stage's head axis; 0: none
  std::vector<std::vector<float>> averages;
  std::vector<std::vector<char>> masks;

  StageFigure() = default;
  StageFigure(StageFigure&&) = default;
  StageFigure& operator=(StageFigure&&) = default;
  StageFigure(const StageFigure&) = delete;
  StageFigure& operator=(const StageFigure&) = delete;
};

// Throws ConfigError for an unknown stage (listing the valid ones) or an index out of range.
StageFigure stage_figure(const ForwardResult<float>& r, const StageSlice& slice);
// Size of the stage's head axis (0 when it has none); throws ConfigError for an unknown stage.
int stage_heads(const ForwardResult<float>& r, const std::string& stage);

}  // namespace mha::exporter
