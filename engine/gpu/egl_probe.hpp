// Whether libepoxy can be asked for a headless context at all. libepoxy loads libEGL and the GL
// library itself on first use and aborts the process when either is missing or broken; dlopen-ing
// them first turns that abort into a reason the GPU path reports while the CPU computes.
#pragma once

#include <string>

namespace mha::gpu {

// "" when libEGL.so.1 (with eglGetProcAddress and eglGetPlatformDisplayEXT's entry point) and a
// desktop GL library (libOpenGL.so.0 or libGL.so.1) load; otherwise why not, naming the library and
// dlerror()'s words. The libraries stay loaded, so the answer holds for the process.
std::string egl_probe();

}  // namespace mha::gpu
