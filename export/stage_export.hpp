// From a forward's trace to an export figure: which 2-D slice of a stage (batch item, head, all
// heads with their average), its labels, mask and colours. The CLI and the app call this, then
// write_figure (heatmap_export.hpp). The colours are the Heads view's (render/colour_range.hpp): the
// figure of a head is coloured as that head is on screen.
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
  // The map chosen in the view; default: viridis for weights, diverging otherwise. Scores are drawn
  // diverging and weights never are, whatever the choice (render::stage_colormap), as on screen.
  std::optional<render::Colormap> colormap;
  // Weights: each row coloured on [0, its largest visible weight] (the Heads view's "colour each
  // row to its max"); ignored for other stages.
  bool row_scale = false;
  std::vector<std::string> query_labels, key_labels;  // tokens; empty: indices
};

// The spec and the buffers its panels point at (averages, masks); the rest points into the result,
// which must outlive it. Movable, not copyable: the panels hold pointers into the buffers.
struct StageFigure {
  ExportSpec spec;
  int heads = 0;           // size of the stage's head axis; 0: none
  float max_abs_diff = 0;  // difference_figure: max |a − b| over finite cells
  std::vector<std::vector<float>> averages;
  std::vector<std::vector<char>> masks;

  StageFigure() = default;
  StageFigure(StageFigure&&) = default;
  StageFigure& operator=(StageFigure&&) = default;
  StageFigure(const StageFigure&) = delete;
  StageFigure& operator=(const StageFigure&) = delete;
};

// The colour range: render::auto_colour_range over the finite values of every head of the batch
// item (the panels shown or not: heads compare on one range, as in the Heads view), [0, 1] with
// row_scale. Throws ConfigError for an unknown stage (listing the valid ones) or an index out of range.
StageFigure stage_figure(const ForwardResult<float>& r, const StageSlice& slice);
// A difference map: `a` − `b`, each one panel (a head or the head average) of the same size, drawn
// with the diverging colormap on a range symmetric about 0. `a_name`/`b_name` say what is subtracted
// ("head 0", "reference backend"); the title names both, the stage and max |diff| over finite cells.
// Cells blocked on both sides, or on one side where the difference is not finite, are hatched.
// Throws ConfigError for a grid (kAllHeads) or unequal shapes.
StageFigure difference_figure(const ForwardResult<float>& a, const StageSlice& sa, const std::string& a_name,
                              const ForwardResult<float>& b, const StageSlice& sb, const std::string& b_name);

// Size of the stage's head axis (0 when it has none); throws ConfigError for an unknown stage.
int stage_heads(const ForwardResult<float>& r, const std::string& stage);

// Attention computed elsewhere (e.g. a Hugging Face model's output_attentions, stacked), drawn as a
// forward's attn_weights: `result`'s trace holds that one stage, (N, H, T, T), and its dims, so
// stage_figure, difference_figure and stage_heads take it as they take a forward's.
struct AttentionMap {
  ForwardResult<float> result;
  std::int64_t layers = 0;  // size of the file's layer axis; 0 without one
  std::int64_t layer = 0;   // the layer in `result`
  // Values that are not a softmax's: outside [0, 1], or a row not summing to 1; each names the first.
  std::vector<std::string> warnings;
};
// `weights`: (T, T), (H, T, T), (N, H, T, T) or (layers, N, H, T, T), any float dtype; `layer` picks
// one of the last (default 0). `name` (the file) starts every message. Throws DtypeError for another
// dtype, ShapeError for another rank or a non-square (T, T), ConfigError("--layer") for a layer out
// of range or one given without a layer axis.
AttentionMap attention_map(const Array& weights, std::optional<std::int64_t> layer, const std::string& name);

}  // namespace mha::exporter
