// The headless EGL context (see egl_context.hpp), through libepoxy's EGL entry points.
#include "gpu/egl_context.hpp"
#include "gpu/egl_probe.hpp"

#include <epoxy/egl.h>

#include <vector>

#include "errors.hpp"

namespace mha::gpu {

namespace {

std::string egl_error() {
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%04x", unsigned(eglGetError()));
  return std::string("EGL error ") + hex;
}

// A GL 4.3 core context on `display` with no surface (EGL_KHR_surfaceless_context and
// EGL_KHR_no_config_context, both in Mesa and NVIDIA's EGL); null + `why` on failure.
EGLContext make_context(EGLDisplay display, std::string& why) {
  EGLint major = 0, minor = 0;
  if (!eglInitialize(display, &major, &minor)) {
    why = "eglInitialize failed (" + egl_error() + ")";
    return EGL_NO_CONTEXT;
  }
  if (!epoxy_has_egl_extension(display, "EGL_KHR_surfaceless_context")) {
    why = "no EGL_KHR_surfaceless_context";
    eglTerminate(display);
    return EGL_NO_CONTEXT;
  }
  if (!eglBindAPI(EGL_OPENGL_API)) {
    why = "eglBindAPI(EGL_OPENGL_API) failed (" + egl_error() + ")";
    eglTerminate(display);
    return EGL_NO_CONTEXT;
  }
  const EGLint attribs[] = {EGL_CONTEXT_MAJOR_VERSION,
                            4,
                            EGL_CONTEXT_MINOR_VERSION,
                            3,
                            EGL_CONTEXT_OPENGL_PROFILE_MASK,
                            EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT,
                            EGL_NONE};
  EGLConfig config = EGL_NO_CONFIG_KHR;
  if (!epoxy_has_egl_extension(display, "EGL_KHR_no_config_context")) {
    const EGLint want[] = {EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT, EGL_NONE};
    EGLint count = 0;
    if (!eglChooseConfig(display, want, &config, 1, &count) || count == 0) {
      why = "no EGL config for desktop OpenGL";
      eglTerminate(display);
      return EGL_NO_CONTEXT;
    }
  }
  EGLContext context = eglCreateContext(display, config, EGL_NO_CONTEXT, attribs);
  if (context == EGL_NO_CONTEXT) {
    why = "no OpenGL 4.3 core context (" + egl_error() + ")";
    eglTerminate(display);
  }
  return context;
}

}  // namespace

std::unique_ptr<EglContext> EglContext::create() {
  if (const std::string why = egl_probe(); !why.empty())  // before libepoxy, which would abort
    throw DeviceError("gpu", "no headless GL context: " + why);
  std::string reasons;
  // Client extensions: a display-less query, valid only with EGL 1.5 / EGL_EXT_client_extensions.
  if (!epoxy_has_egl_extension(EGL_NO_DISPLAY, "EGL_EXT_platform_base"))
    throw DeviceError("gpu",
                      "no headless GL context: EGL lacks EGL_EXT_platform_base (is libegl1 installed?)");

  std::unique_ptr<EglContext> c(new EglContext());
  // 1. Mesa's surfaceless platform: llvmpipe (or a Mesa GPU driver) with no X and no device file.
  if (epoxy_has_egl_extension(EGL_NO_DISPLAY, "EGL_MESA_platform_surfaceless")) {
    EGLDisplay display =
        eglGetPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, nullptr);
    std::string why;
    EGLContext context = display == EGL_NO_DISPLAY ? EGL_NO_CONTEXT : make_context(display, why);
    if (context != EGL_NO_CONTEXT) {
      c->display_ = display;
      c->context_ = context;
      c->description_ = "EGL surfaceless (Mesa)";
      return c;
    }
    reasons += "EGL surfaceless: " + (why.empty() ? egl_error() : why) + "; ";
  } else {
    reasons += "EGL surfaceless: EGL_MESA_platform_surfaceless absent; ";
  }
  // 2. The device platform: NVIDIA's EGL exposes each GPU as an EGLDevice.
  if (epoxy_has_egl_extension(EGL_NO_DISPLAY, "EGL_EXT_platform_device") &&
      epoxy_has_egl_extension(EGL_NO_DISPLAY, "EGL_EXT_device_enumeration")) {
    EGLDeviceEXT devices[8];
    EGLint count = 0;
    if (eglQueryDevicesEXT(8, devices, &count) && count > 0) {
      for (EGLint i = 0; i < count; ++i) {
        EGLDisplay display = eglGetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT, devices[i], nullptr);
        std::string why;
        EGLContext context = display == EGL_NO_DISPLAY ? EGL_NO_CONTEXT : make_context(display, why);
        if (context != EGL_NO_CONTEXT) {
          c->display_ = display;
          c->context_ = context;
          c->description_ = "EGL device " + std::to_string(i);
          return c;
        }
        reasons += "EGL device " + std::to_string(i) + ": " + why + "; ";
      }
    } else {
      reasons += "EGL device: no devices; ";
    }
  } else {
    reasons += "EGL device: EGL_EXT_platform_device absent; ";
  }
  reasons.resize(reasons.size() - 2);
  throw DeviceError("gpu", "no headless OpenGL 4.3 context: " + reasons);
}

void EglContext::make_current() {
  if (!eglMakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, context_))
    throw DeviceError(
        "gpu", "eglMakeCurrent failed (" + egl_error() + "; a context is current on one thread at a time)");
}

void EglContext::release() {
  eglMakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
}

EglContext::~EglContext() {
  if (!display_) return;
  eglMakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
  eglDestroyContext(display_, context_);
  // No eglTerminate: the platform display is one per process, and terminating it would destroy
  // every other EglContext's context on it too.
}

}  // namespace mha::gpu
