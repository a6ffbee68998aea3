// safetensors files as named mha::Arrays: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}, then the data buffer.
// Reads and writes F32, F64, F16, BF16 and BOOL; half types stay half (DType::f16 / DType::bf16).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "tensor.hpp"

namespace mha {

// Reads every tensor of a .safetensors file, keyed by name ("__metadata__" is skipped).
// Throws FileError for a missing, truncated, malformed or unsupported file.
std::map<std::string, Array> read_safetensors(const std::string& path);

// Parses a .safetensors file held in memory; `name_for_errors` starts every error message.
std::map<std::string, Array> parse_safetensors(const unsigned char* bytes, std::size_t size,
                                               const std::string& name_for_errors);

// Writes the tensors atomically (to path + ".tmp", then renamed), in name order.
// Throws FileError for an unsupported dtype, an array whose bytes disagree with its shape, or
// a failed write (naming the path and the system's reason).
void write_safetensors(const std::string& path, const std::map<std::string, Array>& tensors);

}  // namespace mha
