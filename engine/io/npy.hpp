// NumPy .npy files as mha::Array: reads format versions 1.0, 2.0 and 3.0 (C or Fortran order),
// writes version 1.0 in C order. Little-endian f32/f64/f16/bool/u8/i64 only; anything else is a
// FileError that names the file, says what is wrong and lists what is supported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/file_io.hpp"  // the file helpers every format here uses
#include "tensor.hpp"

namespace mha {

// Reads a .npy file: the header first, then, only when the file's size (fstat) is exactly what the
// header promises, the data. Throws FileError for a missing, unreadable, truncated, oversized or
// unsupported file, or one that is not a regular file.
Array read_npy(const std::string& path);

// Parses the bytes of a .npy file held in memory; `name_for_errors` starts every error message.
Array parse_npy(const unsigned char* bytes, std::size_t size, const std::string& name_for_errors);

// Writes `a` as NPY 1.0 atomically (write_file_atomic). bf16 has no NumPy dtype and
// is refused. Throws FileError naming the path and the system's reason on failure.
void write_npy(const std::string& path, const Array& a);

}  // namespace mha
