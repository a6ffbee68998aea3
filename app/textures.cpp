// The texture cache shared by every Textures implementation: refill only on a new version or size.
#include "textures.hpp"

#include <vector>

namespace mha::app {

ImTextureID Textures::get(const std::string& slot, std::uint64_t version, int w, int h,
                          const std::function<void(std::uint32_t*)>& fill) {
  Entry& e = entries_[slot];
  if (e.id && e.version == version && e.w == w && e.h == h) return e.id;
  pixels_.resize(std::size_t(w) * std::size_t(h));
  fill(pixels_.data());
  ++uploads_;
  if (!e.id)
    e.id = create(w, h, pixels_.data());
  else
    update(e.id, w, h, pixels_.data());
  e.version = version;
  e.w = w;
  e.h = h;
  return e.id;
}

ImTextureID Textures::kept(const std::string& slot) const {
  const auto it = kept_.find(slot);
  return it == kept_.end() ? ImTextureID{} : it->second;
}

}  // namespace mha::app
