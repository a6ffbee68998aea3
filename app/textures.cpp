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

ImTextureID Textures::get_rows(const std::string& slot, std::uint64_t version, std::uint64_t since, int w,
                               int h, const std::vector<std::pair<int, int>>& dirty,
                               const std::function<void(std::uint32_t*, int, int)>& fill_rows) {
  Entry& e = entries_[slot];
  if (e.id && e.version == version && e.w == w && e.h == h) return e.id;
  if (!e.id || e.version != since || e.w != w || e.h != h)
    return get(slot, version, w, h, [&](std::uint32_t* rgba) { fill_rows(rgba, 0, h); });
  for (const auto& [r0, r1] : dirty) {
    if (r1 <= r0) continue;
    pixels_.resize(std::size_t(w) * std::size_t(r1 - r0));
    fill_rows(pixels_.data(), r0, r1);
    update_rows(e.id, w, r0, r1 - r0, pixels_.data());
  }
  ++row_uploads_;
  e.version = version;
  return e.id;
}

ImTextureID Textures::kept(const std::string& slot) const {
  const auto it = kept_.find(slot);
  return it == kept_.end() ? ImTextureID{} : it->second;
}

}  // namespace mha::app
