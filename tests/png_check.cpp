// png_check FILE.png MIN_COLOURS: fails unless the screenshot has at least MIN_COLOURS distinct
// colours and its central region (where the views are) holds coloured (heatmap) pixels.
#include <stb_image.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: png_check FILE.png MIN_COLOURS\n");
    return 2;
  }
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load(argv[1], &w, &h, &n, 4);
  if (!px) {
    std::fprintf(stderr, "png_check: cannot read %s: %s\n", argv[1], stbi_failure_reason());
    return 1;
  }
  std::set<unsigned> colours;
  long coloured = 0, centre = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const unsigned char* p = px + 4 * (std::size_t(y) * std::size_t(w) + std::size_t(x));
      colours.insert(unsigned(p[0]) << 16 | unsigned(p[1]) << 8 | p[2]);
      if (x > w / 4 && x < 3 * w / 4 && y > h / 8 && y < 7 * h / 8) {
        ++centre;
        const int mx = std::max({p[0], p[1], p[2]}), mn = std::min({p[0], p[1], p[2]});
        coloured += mx - mn > 40;  // saturated: a colormap cell, not UI grey
      }
    }
  stbi_image_free(px);
  const double frac = centre ? double(coloured) / double(centre) : 0;
  std::printf("%s: %dx%d, %zu colours, %.1f%% of the centre coloured\n", argv[1], w, h, colours.size(),
              100 * frac);
  if (long(colours.size()) < std::atol(argv[2]) || frac < 0.02) {
    std::fprintf(stderr, "png_check: %s looks blank\n", argv[1]);
    return 1;
  }
  return 0;
}
