// The RoPE figure: one head's scores computed from q and k before the rotation beside the trace's
// scores after it (engine/model/rope.hpp), on one diverging colour range with the masked cells grey,
// and under them each map's mean score against the distance i - j. The Heads view's "scores
// without RoPE" as a figure: `mha export --figure rope`, the view's Export dialog and the lesson
// handout write it.
#pragma once

#include <string>
#include <vector>

#include "heatmap_export.hpp"
#include "mha.hpp"

namespace mha::exporter {

// The name this figure goes by where a stage is chosen: the Heads view's choice (ViewState::stage)
// beside the trace's stages, and `mha export --stage`.
constexpr const char* kRopeStage = "scores_without_rope";

struct RopeSpec {
  int head = 0;                           // a query head, from 0
  std::vector<std::string> query_labels;  // the tokens; empty: 0, 1, 2, ...
  std::string title_prefix;               // before the title: "layer 1  "
  int cell_px = 0;                        // pixels per cell; 0: automatic (16 at 26 tokens)
  bool transparent = false;
  std::string font_path;
  float font_px = 13;
};

// What the figure shows, for a caller that reports it (the CLI's summary, the tests).
struct RopeFigure {
  Drawing drawing;
  int cell = 0;
  float vmin = 0, vmax = 1;  // the maps' colour range: symmetric about 0, as the Heads view's
  Rect without_map, with_map;
  std::vector<double> mean_without, mean_with;  // mean score by distance i - j = 0 … L-1 (L,)
};

// r: a traced forward with rotary positions and N = 1 (its trace holds q, k, q_rot, scores_scaled;
// scores_masked marks the blocked cells). `without`: scores_without_rope(r), (H, L, S), when the
// caller keeps it (the app); null: computed here. Throws ConfigError("rotary") for a forward without
// RoPE, ConfigError("--head") for a head outside 0 … H-1, FileError for the font.
RopeFigure rope_figure(const ForwardResult<float>& r, const RopeSpec& spec,
                       const Tensor<float>* without = nullptr);

}  // namespace mha::exporter
