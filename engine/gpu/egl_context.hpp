// A headless OpenGL 4.3 core context for the CLI and the tests, with no window and no X: EGL on
// Mesa's surfaceless platform (llvmpipe in CI), then EGL's device platform (NVIDIA) as a second try.
#pragma once

#include <memory>
#include <string>

namespace mha::gpu {

class EglContext {
 public:
  // Throws DeviceError with every attempt's reason when no GL 4.3 core context can be made.
  static std::unique_ptr<EglContext> create();
  ~EglContext();
  EglContext(const EglContext&) = delete;
  EglContext& operator=(const EglContext&) = delete;

  // Makes the context current on the calling thread (no surface); throws DeviceError on failure.
  void make_current();
  // Makes no context current on the calling thread, so that another thread may take this one.
  void release();
  const std::string& description() const { return description_; }  // "EGL surfaceless (Mesa)"

 private:
  EglContext() = default;
  void* display_ = nullptr;  // EGLDisplay
  void* context_ = nullptr;  // EGLContext
  std::string description_;
};

}  // namespace mha::gpu
