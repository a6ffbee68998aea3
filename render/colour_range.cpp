// The shared colour rule (see colour_range.hpp): the Heads view and the exporter both call it.
#include "colour_range.hpp"

namespace mha::render {

Colormap stage_colormap(const std::string& stage, Colormap chosen) {
  if (stage == "scores" || stage == "scores_scaled" || stage == "scores_masked") return Colormap::diverging;
  const bool weights = stage == "attn_weights" || stage == "attn_weights_avg";
  if (weights && chosen == Colormap::diverging) return Colormap::viridis;
  return chosen;
}

ColourRange auto_colour_range(const ValueRange& v, Colormap cmap, bool weights, bool row_scale) {
  if (weights && row_scale) return {0, 1};
  const float lo = v.empty() ? 0 : v.lo, hi = v.empty() ? 0 : v.hi;
  if (cmap == Colormap::diverging) {
    const float m = v.maxabs > 0 ? v.maxabs : 1.0f;
    return {-m, m};
  }
  if (weights) return {0, hi > 0 ? hi : 1.0f};
  if (hi <= lo) return {lo, lo + 1.0f};
  return {lo, hi};
}

}  // namespace mha::render
