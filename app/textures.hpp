// Panels reach textures only through this interface, so every panel can run without a GL context
// (tests/test_ui_headless.cpp). The app's implementation is GL (gl_textures.cpp).
#pragma once

#include <imgui.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mha::app {

class Textures {
 public:
  virtual ~Textures() = default;
  // The texture for `slot` (e.g. "heads/3"), refilled through `fill` (w×h RGBA8, row-major, top row
  // first) only when `version` or the size changed since the last call for that slot.
  ImTextureID get(const std::string& slot, std::uint64_t version, int w, int h,
                  const std::function<void(std::uint32_t* rgba)>& fill);
  // The same through a fill of rows: fill_rows(rgba, r0, r1) writes texel rows [r0, r1), (r1 - r0)·w
  // texels. When the slot holds version `since` at this size, only the row ranges [first, second) in
  // `dirty` are filled and uploaded (a mask edit's result redraws its changed rows); otherwise the
  // whole texture is.
  ImTextureID get_rows(const std::string& slot, std::uint64_t version, std::uint64_t since, int w, int h,
                       const std::vector<std::pair<int, int>>& dirty,
                       const std::function<void(std::uint32_t* rgba, int r0, int r1)>& fill_rows);
  // Textures made elsewhere (the GPU backend renders the Large L view's tiles into textures of its
  // own), by slot: the cache keeps their ids, not the textures (their maker owns them). Panels hold no
  // texture handles: they keep a slot's texture here and ask for it when they draw.
  void keep(const std::string& slot, ImTextureID id) { kept_[slot] = id; }
  ImTextureID kept(const std::string& slot) const;  // null when none was kept
  int uploads() const { return uploads_; }          // for tests: refills so far
  int row_uploads() const { return row_uploads_; }  // for tests: refills of some rows only

 protected:
  virtual ImTextureID create(int w, int h, const std::uint32_t* rgba) = 0;
  virtual void update(ImTextureID id, int w, int h, const std::uint32_t* rgba) = 0;
  // Rows [y, y + rows) of a texture `w` texels wide.
  virtual void update_rows(ImTextureID id, int w, int y, int rows, const std::uint32_t* rgba) = 0;

 private:
  struct Entry {
    ImTextureID id{};
    std::uint64_t version = 0;
    int w = 0, h = 0;
  };
  std::map<std::string, Entry> entries_;
  std::map<std::string, ImTextureID> kept_;
  std::vector<std::uint32_t> pixels_;  // fill's buffer, kept: a large map's pixels are 16 MiB
  int uploads_ = 0, row_uploads_ = 0;
};

// No GL: ids are counters, pixels are dropped (the ImGui draw lists still get one quad per texture).
class NullTextures : public Textures {
 protected:
  ImTextureID create(int, int, const std::uint32_t*) override { return ImTextureID(std::intptr_t(++next_)); }
  void update(ImTextureID, int, int, const std::uint32_t*) override {}
  void update_rows(ImTextureID, int, int, int, const std::uint32_t*) override {}

 private:
  std::intptr_t next_ = 0;
};

}  // namespace mha::app
