// Textures backed by OpenGL (the app's GLFW context): nearest sampling so cells stay crisp.
#pragma once

#include <vector>

#include "textures.hpp"

namespace mha::app {

class GlTextures : public Textures {
 public:
  ~GlTextures() override;

 protected:
  ImTextureID create(int w, int h, const std::uint32_t* rgba) override;
  void update(ImTextureID id, int w, int h, const std::uint32_t* rgba) override;
  void update_rows(ImTextureID id, int w, int y, int rows, const std::uint32_t* rgba) override;

 private:
  std::vector<unsigned> ids_;
};

}  // namespace mha::app
