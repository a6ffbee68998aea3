// Internal to mha_gpu: the small GL helpers that gpu_backend.cpp, large_attention.cpp and
// self_check.cpp share: work-group counts, a compute program with its Params block, the
// per-dispatch parameters, dispatch + barrier, and the GL error check as DeviceError.
#pragma once

#include <epoxy/gl.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "errors.hpp"

namespace mha::gpu {

inline constexpr GLuint kMaxGroups = 65535;  // GL's guaranteed minimum of GL_MAX_COMPUTE_WORK_GROUP_COUNT

inline GLuint groups(std::int64_t n, std::int64_t per_group) {
  return GLuint((n + per_group - 1) / per_group);
}

// One built compute program and its `layout(std140, binding = 0) uniform Params { ... }` block:
// each member's name, type and byte offset (shader.cpp reads them from the shader's source and
// checks them against what the driver reports).
struct Program {
  GLuint id = 0;
  std::string name;  // "softmax.comp"
  struct Member {
    std::string name;
    GLenum type = GL_INT;  // GL_INT, GL_UNSIGNED_INT or GL_FLOAT
    std::uint32_t offset = 0;
  };
  std::vector<Member> params;
  std::uint32_t params_bytes = 0;  // the block's size, a multiple of 16
};

// The parameters of one dispatch. Every member of the program's Params block must be set before
// dispatch() (an unknown name, a wrong type or a member left unset is a DeviceError), and they
// travel in a buffer bound for that dispatch alone: no value is ever left over from an earlier
// dispatch or set on another program, and no driver can specialise the shader on them.
class Params {
 public:
  explicit Params(const Program& p) : program_(p), bytes_(p.params_bytes, 0), set_(p.params.size(), false) {}
  Params& set(const char* name, int value) { return put(name, GL_INT, &value); }
  Params& set(const char* name, std::uint32_t value) { return put(name, GL_UNSIGNED_INT, &value); }
  Params& set(const char* name, float value) { return put(name, GL_FLOAT, &value); }
  const Program& program() const { return program_; }
  // The block's bytes; throws DeviceError naming the first member left unset.
  const std::vector<unsigned char>& bytes() const;

 private:
  Params& put(const char* name, GLenum type, const void* value);
  const Program& program_;
  std::vector<unsigned char> bytes_;
  std::vector<bool> set_;
};

// Runs `params`' program over x·y·z work-groups with `ssbos` at bindings 0, 1, ... and the
// parameters in `params_buffer` at uniform binding 0, then orders everything after it behind its
// writes: shader storage reads of later dispatches, and buffer reads and updates by GL commands
// (glGetBufferSubData, glCopyBufferSubData, glClearBufferSubData, glBufferSubData).
void dispatch(const Params& params, GLuint params_buffer, std::initializer_list<GLuint> ssbos, GLuint x,
              GLuint y, GLuint z);

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
