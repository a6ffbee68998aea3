// dlopen probe of the libraries libepoxy will load for a headless EGL context (see egl_probe.hpp).
#include "gpu/egl_probe.hpp"

#include <dlfcn.h>

#include <mutex>

namespace mha::gpu {

namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

std::string probe_once() {
  // The same names libepoxy opens (src/dispatch_common.c); a handle is kept open on purpose.
  void* egl = dlopen("libEGL.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!egl) return "libEGL.so.1 cannot be loaded (" + dl_error() + "; is libegl1 installed?)";
  for (const char* symbol : {"eglGetProcAddress", "eglGetDisplay", "eglInitialize", "eglQueryString"})
    if (!dlsym(egl, symbol))
      return std::string("libEGL.so.1 is unusable: it has no ") + symbol + " (" + dl_error() + ")";
  // A GL 4.3 context on EGL takes its GL entry points from the GLVND OpenGL library, else libGL.
  std::string gl_errors;
  for (const char* name : {"libOpenGL.so.0", "libGL.so.1"}) {
    if (dlopen(name, RTLD_LAZY | RTLD_LOCAL)) return "";
    gl_errors += std::string(gl_errors.empty() ? "" : "; ") + dl_error();
  }
  return "no OpenGL library can be loaded for EGL (" + gl_errors + "; is libopengl0 or libgl1 installed?)";
}

}  // namespace

std::string egl_probe() {
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] { reason = probe_once(); });
  return reason;
}

}  // namespace mha::gpu
