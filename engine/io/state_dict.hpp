// Weights from files under torch's state_dict names: NAME.npy in a folder and/or the tensors of a
// safetensors file (the file wins where both hold a name). Absent names stay empty. The safetensors
// file may be a bigger model's state_dict holding one nn.MultiheadAttention under a prefix.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mha.hpp"

namespace mha {

// Groups `names` by the prefix before an nn.MultiheadAttention parameter name ("in_proj_weight",
// "out_proj.bias", ...): "" for a module's own state_dict, "encoder.layers.0.self_attn." for the
// one inside nn.TransformerEncoderLayer. A prefix is empty or ends with '.'; names that end with no
// parameter name are in no group.
std::map<std::string, std::vector<std::string>> attention_prefixes(const std::vector<std::string>& names);

// Reads the module under `prefix`, or, when none is given, the only one the safetensors file holds.
// Throws FileError when the file holds several (listing every prefix), when `prefix` matches none
// (listing those found), or when a name under the chosen prefix is not a parameter name (a typo
// there would otherwise leave the default weights in silence). Tensors outside the prefix are
// ignored; `warnings`, when given, gets a line saying which prefix was used and how many were.
template <class T>
Weights<T> read_state_dict(const std::string& npy_dir, const std::string& safetensors_path,
                           const std::optional<std::string>& prefix = std::nullopt,
                           std::vector<std::string>* warnings = nullptr);

}  // namespace mha
