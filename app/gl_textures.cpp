// GL texture creation for the Textures cache.
#include "gl_textures.hpp"

#include <epoxy/gl.h>

namespace mha::app {

GlTextures::~GlTextures() {
  if (!ids_.empty()) glDeleteTextures(GLsizei(ids_.size()), ids_.data());
}

ImTextureID GlTextures::create(int w, int h, const std::uint32_t* rgba) {
  GLuint id = 0;
  glGenTextures(1, &id);
  ids_.push_back(id);
  update(ImTextureID(std::intptr_t(id)), w, h, rgba);
  return ImTextureID(std::intptr_t(id));
}

void GlTextures::update(ImTextureID id, int w, int h, const std::uint32_t* rgba) {
  glBindTexture(GL_TEXTURE_2D, GLuint(std::intptr_t(id)));
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, w, h, 0, GL_RGBA, GL_UNSIGNED_BYTE, rgba);
}

void GlTextures::update_rows(ImTextureID id, int w, int y, int rows, const std::uint32_t* rgba) {
  glBindTexture(GL_TEXTURE_2D, GLuint(std::intptr_t(id)));
  glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
  glTexSubImage2D(GL_TEXTURE_2D, 0, 0, y, w, rows, GL_RGBA, GL_UNSIGNED_BYTE, rgba);
}

}  // namespace mha::app
