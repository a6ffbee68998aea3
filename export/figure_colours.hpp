// The colours every exported figure shares, RGBA packed with R in the low byte (as colormap.hpp).
#pragma once

#include <cstdint>

namespace mha::exporter::colours {

constexpr std::uint32_t kInk = 0xFF202020;    // text and lines
constexpr std::uint32_t kMuted = 0xFF606060;  // secondary text
constexpr std::uint32_t kGrid = 0xFFE4E4E4;   // plot grid lines
constexpr std::uint32_t kAxis = 0xFF909090;   // axes, map and colorbar outlines
// Two curves on one plot: blue for what torch computes, orange for the what-if beside it (the app's
// views use the same pair).
constexpr std::uint32_t kBlue = 0xFFB4641E;
constexpr std::uint32_t kOrange = 0xFF1E6EE6;

}  // namespace mha::exporter::colours
