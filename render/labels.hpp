// Text on heatmap axes, shared by the app's views and the exported figures: which labels are drawn
// when cells are smaller than the text, and labels made safe to draw (valid UTF-8).
#pragma once

#include <string>
#include <string_view>

namespace mha::render {

// Every `step`-th label is drawn when a cell (in pixels) is smaller than a label's extent: the
// smallest power of two whose cells hold the text, so ticks land on 0, 16, 32, … at L = 512.
int label_step(float cell, float text_extent);

// `s` with each ill-formed UTF-8 sequence (a stray continuation byte, a truncated, overlong or
// surrogate sequence, a code point past U+10FFFF) replaced by U+FFFD, one per maximal ill-formed
// subpart as Unicode recommends; valid text comes back unchanged.
std::string valid_utf8(std::string_view s);

}  // namespace mha::render
