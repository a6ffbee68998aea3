// Head colours: each head of q drawn in its own hue, brighter and more saturated with |value|. The
// app's Reshape view and the exported reshape figure take their colours from here.
#pragma once

#include <cstdint>

namespace mha::render {

// The colour of a value in head h of H, as RGBA8 packed R in the low byte (as colormap.hpp), alpha
// 255: hue 0.58 + h / H around the wheel, saturation 0.35–0.85 and brightness 0.3–1 growing with
// |value| / maxabs; NaN and ±inf magenta.
std::uint32_t head_colour(int h, std::int64_t H, float value, float maxabs);

}  // namespace mha::render
