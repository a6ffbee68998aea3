// The case table's shared parts: every torch fixture (tests/fixtures/) is a case; these are the
// cases the engine refuses on purpose, with the error it gives. Used by the CPU paths' test
// (test_cases.cpp) and the GPU path's (test_gpu.cpp).
#pragma once

#include <map>
#include <string>

namespace mha::test {

// Cases whose torch behaviour the engine does not reproduce, on purpose, with the error it gives.
inline const std::map<std::string, std::string> refused_cases = {
    {"float_attn_float_kpm", "cannot be combined with a float attn_mask"},
};

}  // namespace mha::test
