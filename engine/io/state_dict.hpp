// Weights from files under torch's state_dict names: NAME.npy in a folder and/or the tensors of a
// safetensors file (the file wins where both hold a name). Absent names stay empty.
#pragma once

#include <string>

#include "mha.hpp"

namespace mha {

template <class T>
Weights<T> read_state_dict(const std::string& npy_dir, const std::string& safetensors_path);

}  // namespace mha
