// The cost figure: what one forward costs stage by stage at the work's sizes (engine/cost.hpp's
// table, as the Complexity view lists it): FLOPs and the bytes of the new tensors each stage makes,
// as bars coloured by part (projections, attention, the rest), with the K/V a cache keeps. The
// lesson handout's figure for the Complexity view.
#pragma once

#include <string>

#include "heatmap_export.hpp"
#include "mha.hpp"

namespace mha::exporter {

struct CostSpec {
  bool bias = true;   // in_proj_bias / out_proj.bias counted
  bool mask = false;  // a mask added to the scores
  std::string font_path;
  float font_px = 13;
};

// Throws FileError for the font.
Drawing cost_figure(const Dims& d, const CostSpec& spec);

}  // namespace mha::exporter
