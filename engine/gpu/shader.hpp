// Builds the embedded compute shaders: `#version 430` and the variant #defines (work-group and tile
// sizes, the fully-masked policy) are injected at load, and every compile or link error goes
// through one checker that throws DeviceError naming the shader and carrying the driver's info log.
#pragma once

#include <epoxy/gl.h>

#include <string>
#include <utility>
#include <vector>

#include "gpu/gl_util.hpp"

namespace mha::gpu {

using Defines = std::vector<std::pair<std::string, std::string>>;  // {"TILE", "16"}

// The embedded source of shaders/<name> ("softmax.comp"); throws DeviceError if there is none.
const char* shader_source(const std::string& name);
// The names of every embedded file ("average.comp", ..., "gqa.glsl").
std::vector<std::string> shader_names();

// The text handed to the compiler: #version, the defines, the snippets (e.g. "gqa.glsl"), the
// shader. When the environment has MHA_GPU_BREAK_SHADER=<stem> ("softmax"), that shader gets an
// #error line, so tests can prove the fallback on a real compile failure. MHA_GPU_PERTURB=<stem>
// defines MHA_PERTURB in that shader, which then computes one value slightly wrong (tests of the
// self-check).
std::string assemble(const std::string& name, const Defines& defines,
                     const std::vector<std::string>& snippets);

// MHA_GPU_PERTURB's value, or "" when unset. Throws DeviceError when it names no shader that has a
// perturbation point, so a misspelt value cannot pass for a check that found nothing.
std::string perturbation();

// The members of a shader's `uniform Params { ... };` block in declaration order, with their
// std140 offsets (each member is a 4-byte int, uint or float); throws DeviceError on anything else.
Program parse_params(const std::string& name, const std::string& source);

// Compiles and links one compute program and reads its Params block; throws DeviceError "shader
// <name> failed to compile|link: <info log>", or when the driver places a Params member elsewhere
// than std140 says. Needs a current GL 4.3 context.
Program build_compute_program(const std::string& name, const Defines& defines,
                              const std::vector<std::string>& snippets = {});

}  // namespace mha::gpu
