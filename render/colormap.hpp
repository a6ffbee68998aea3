// Colormaps for heatmaps: perceptually uniform sequential maps (viridis, magma, cividis) for
// weights, a diverging blue–white–red map centred on 0 for scores. No GL, no ImGui: the app and the
// exporter (export/) share it, so an exported PNG has the on-screen colours.
#pragma once

#include <cstdint>

namespace mha::render {

enum class Colormap { viridis, magma, cividis, diverging };
const char* to_string(Colormap c);  // its name in scenario files and the CLI: "viridis", …

// RGBA8 packed as ImGui wants it (IM_COL32: R in the low byte), alpha 255. t is clamped to [0, 1].
std::uint32_t colormap_rgba(Colormap c, float t);
// Value → colour with the map's range; NaN → kNanColor.
std::uint32_t value_rgba(Colormap c, float v, float vmin, float vmax);
constexpr std::uint32_t kMaskedColor = 0xFF6E6E6E;  // grey: blocked cells, never "low"
constexpr std::uint32_t kNanColor = 0xFFFF00FF;     // magenta: NaN (fully masked row)

}  // namespace mha::render
