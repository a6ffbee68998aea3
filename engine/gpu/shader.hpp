// Builds the embedded compute shaders: `#version 430` and the variant #defines (tile sizes, the
// fully-masked policy) are injected at load, and every compile or link error goes through one
// checker that throws DeviceError naming the shader and carrying the driver's info log.
#pragma once

#include <epoxy/gl.h>

#include <string>
#include <utility>
#include <vector>

namespace mha::gpu {

using Defines = std::vector<std::pair<std::string, std::string>>;  // {"TILE", "16"}

// The embedded source of shaders/<name> ("softmax.comp"); throws DeviceError if there is none.
const char* shader_source(const std::string& name);

// The text handed to the compiler: #version, the defines, the snippets (e.g. "gqa.glsl"), the
// shader. When the environment has MHA_GPU_BREAK_SHADER=<stem> ("softmax"), that shader gets an
// #error line, so tests can prove the fallback on a real compile failure.
std::string assemble(const std::string& name, const Defines& defines,
                     const std::vector<std::string>& snippets);

// Compiles and links one compute program; throws DeviceError "shader <name> failed to
// compile|link: <info log>". Needs a current GL 4.3 context.
GLuint build_compute_program(const std::string& name, const Defines& defines,
                             const std::vector<std::string>& snippets = {});

}  // namespace mha::gpu
