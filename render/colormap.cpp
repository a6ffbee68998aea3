// Colormaps as 9 anchor colours each, interpolated linearly in sRGB. The sequential anchors are
// matplotlib's viridis, magma and cividis sampled at t = 0, 1/8, …, 1; the diverging map is
// ColorBrewer's RdBu (reversed: blue for negative, white at 0, red for positive).
#include "colormap.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace mha::render {

namespace {

using Anchors = std::uint32_t[9];  // 0xRRGGBB
const Anchors kViridis = {0x440154, 0x472c7a, 0x3b518b, 0x2c718e, 0x21908d,
                          0x27ad81, 0x5cc863, 0xaadc32, 0xfde725};
const Anchors kMagma = {0x000004, 0x1c1044, 0x4f127b, 0x812581, 0xb5367a,
                        0xe55964, 0xfb8761, 0xfec287, 0xfcfdbf};
const Anchors kCividis = {0x00224e, 0x123570, 0x3b496c, 0x575d6d, 0x707173,
                          0x8a8779, 0xa69d75, 0xc4b56c, 0xfee838};
const Anchors kDiverging = {0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7,
                            0xfddbc7, 0xf4a582, 0xd6604d, 0xb2182b};

const Anchors& anchors(Colormap c) {
  switch (c) {
    case Colormap::viridis: return kViridis;
    case Colormap::magma: return kMagma;
    case Colormap::cividis: return kCividis;
    case Colormap::diverging: return kDiverging;
  }
  return kViridis;
}

// The exact interpolation, used once per table entry.
std::uint32_t interpolate(Colormap c, float t) {
  const Anchors& a = anchors(c);
  const float x = t * 8.0f;
  const int i = std::min(int(x), 7);
  const float f = x - float(i);
  auto channel = [&](int shift) {
    const float lo = float((a[i] >> shift) & 0xFF), hi = float((a[i + 1] >> shift) & 0xFF);
    return std::uint32_t(std::lround(lo + (hi - lo) * f));
  };
  const std::uint32_t r = channel(16), g = channel(8), b = channel(0);
  return 0xFF000000u | (b << 16) | (g << 8) | r;  // IM_COL32 order: R in the low byte
}

// Heatmap textures colour millions of cells per recompute at L = 512+: a 4096-entry table per map
// (built once) replaces the interpolation; neighbouring entries differ by at most one level.
constexpr int kLut = 4096;
const std::uint32_t* lut(Colormap c) {
  static const auto tables = [] {
    std::array<std::array<std::uint32_t, kLut>, 4> t{};
    for (int m = 0; m < 4; ++m)
      for (int i = 0; i < kLut; ++i)
        t[std::size_t(m)][std::size_t(i)] = interpolate(Colormap(m), float(i) / (kLut - 1));
    return t;
  }();
  return tables[std::size_t(c)].data();
}

}  // namespace

std::uint32_t colormap_rgba(Colormap c, float t) {
  if (!(t >= 0)) t = 0;  // also catches NaN
  if (t > 1) t = 1;
  return lut(c)[int(t * float(kLut - 1) + 0.5f)];
}

std::uint32_t value_rgba(Colormap c, float v, float vmin, float vmax) {
  if (std::isnan(v)) return kNanColor;
  const float span = vmax - vmin;
  return colormap_rgba(c, span > 0 ? (v - vmin) / span : 0.5f);
}

const char* to_string(Colormap c) {
  switch (c) {
    case Colormap::viridis: return "viridis";
    case Colormap::magma: return "magma";
    case Colormap::cividis: return "cividis";
    case Colormap::diverging: return "diverging";
  }
  return "viridis";
}

}  // namespace mha::render
