// Head colours (see head_colour.hpp).
#include "head_colour.hpp"

#include <algorithm>
#include <cmath>

namespace mha::render {

std::uint32_t head_colour(int h, std::int64_t H, float value, float maxabs) {
  if (!std::isfinite(value)) return 0xFFFF00FF;
  const float m = maxabs > 0 ? std::clamp(std::fabs(value) / maxabs, 0.0f, 1.0f) : 1.0f;
  // HSV to RGB as ImGui::ColorConvertHSVtoRGB computes it.
  const float hue = std::fmod(0.58f + float(h) / float(std::max<std::int64_t>(1, H)), 1.0f) * 6.0f;
  const float s = 0.35f + 0.5f * m, v = 0.3f + 0.7f * m;
  const int i = int(hue);
  const float f = hue - float(i), p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  float r = v, g = t, b = p;
  switch (i) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
  }
  auto byte = [](float x) { return std::uint32_t(std::lround(std::clamp(x, 0.0f, 1.0f) * 255)); };
  return 0xFF000000u | (byte(b) << 16) | (byte(g) << 8) | byte(r);
}

}  // namespace mha::render
