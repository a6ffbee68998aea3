# The GPU tests (mha_gpu_tests) on zink over lavapipe, Mesa's OpenGL on its software Vulkan driver:
# another shader compiler (GLSL -> SPIR-V -> NIR) and another driver's handling of uniforms, buffers
# and barriers than llvmpipe's, headless through EGL. Where zink or lavapipe is missing (lavapipe is
# Debian's mesa-vulkan-drivers), the test prints "SKIPPED: " and why, and ctest reports it skipped.
# Run as: cmake -DMHA=<mha> -DTESTS=<mha_gpu_tests> -P gpu_zink_test.cmake
set(ENV{MESA_LOADER_DRIVER_OVERRIDE} "zink")
set(ENV{LIBGL_ALWAYS_SOFTWARE} "1")  # zink takes a CPU Vulkan device (lavapipe) only when asked to
set(ENV{CI} "true")                   # from here on, a missing context is a failure, not a skip

execute_process(COMMAND ${MHA} gpu-check RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT out MATCHES "GL renderer: +zink")
  string(REGEX MATCH "GL renderer:[^\n]*" renderer "${out}")
  string(REGEX MATCH "verdict:[^\n]*" verdict "${out}")
  message("SKIPPED: no zink context here (${renderer}; ${verdict}); zink_dri.so comes with "
          "libgl1-mesa-dri, lavapipe with mesa-vulkan-drivers")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mha gpu-check refuses zink (exit ${rc}):\n${out}\n${err}")
endif()
string(REGEX MATCH "GL renderer:[^\n]*" renderer "${out}")
message(STATUS "${renderer}: self-check trusted")

execute_process(COMMAND ${TESTS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mha_gpu_tests on zink exited ${rc}:\n${out}\n${err}")
endif()
string(REGEX MATCH "All tests passed[^\n]*" summary "${out}")
message(STATUS "mha_gpu_tests on zink: ${summary}")
