// Internal to mha_gpu: the launch constants shared with the shaders' #defines, and the small GL
// helpers (uniforms, bindings, dispatch + barrier, the GL error check as DeviceError) that
// gpu_backend.cpp and large_attention.cpp share.
#pragma once

#include <epoxy/gl.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>

#include "errors.hpp"

namespace mha::gpu {

inline constexpr int kTile = 16;             // TILE: the matmul shaders' work-group is TILE x TILE
inline constexpr int kLocalSize = 256;       // LOCAL_SIZE: softmax, concat, average
inline constexpr GLuint kMaxGroups = 65535;  // GL's guaranteed minimum of GL_MAX_COMPUTE_WORK_GROUP_COUNT

inline GLuint groups(std::int64_t n, std::int64_t per_group) {
  return GLuint((n + per_group - 1) / per_group);
}

inline void set(GLuint program, const char* name, int value) {
  glUniform1i(glGetUniformLocation(program, name), value);
}
inline void set(GLuint program, const char* name, float value) {
  glUniform1f(glGetUniformLocation(program, name), value);
}

inline void bind_buffers(std::initializer_list<GLuint> ids) {
  GLuint binding = 0;
  for (GLuint id : ids) glBindBufferBase(GL_SHADER_STORAGE_BUFFER, binding++, id);
}

// Every dispatch's outputs are read by the next one.
inline void dispatch(GLuint x, GLuint y, GLuint z) {
  glDispatchCompute(x, y, z);
  glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT | GL_BUFFER_UPDATE_BARRIER_BIT);
}

inline void check_gl(const char* where) {
  const GLenum e = glGetError();
  if (e == GL_NO_ERROR) return;
  if (e == GL_OUT_OF_MEMORY) throw DeviceError("gpu", std::string("GL_OUT_OF_MEMORY ") + where);
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%04x", e);
  throw DeviceError("gpu", std::string("GL error ") + hex + " " + where);
}

// Releases the caller's context however the scope ends.
struct Release {
  const std::function<void()>& release;
  ~Release() {
    if (release) release();
  }
};

}  // namespace mha::gpu
