// The texture cache shared by every Textures implementation: refill only on a new version or size.
#include "textures.hpp"

#include <vector>

namespace mha::app {

ImTextureID Textures::get(const std::string& slot, std::uint64_t version, int w, int h,
                          const std::function<void(std::uint32_t*)>& fill) {
  Entry& e = entries_[slot];
  if (e.id && e.version == version && e.w == w && e.h == h) return e.id;
  std::vector<std::uint32_t> rgba(std::size_t(w) * std::size_t(h));
  fill(rgba.data());
  ++uploads_;
  if (!e.id)
    e.id = create(w, h, rgba.data());
  else
    update(e.id, w, h, rgba.data());
  e.version = version;
  e.w = w;
  e.h = h;
  return e.id;
}

}  // namespace mha::app
