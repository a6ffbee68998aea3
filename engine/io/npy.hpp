// NumPy .npy files as mha::Array: reads format versions 1.0, 2.0 and 3.0 (C or Fortran order),
// writes version 1.0 in C order. Little-endian f32/f64/f16/bool/u8/i64 only; anything else is a
// FileError that names the file, says what is wrong and lists what is supported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace mha {

// Reads a whole .npy file. Throws FileError for a missing, unreadable, truncated or unsupported file.
Array read_npy(const std::string& path);

// Parses the bytes of a .npy file held in memory; `name_for_errors` starts every error message.
Array parse_npy(const unsigned char* bytes, std::size_t size, const std::string& name_for_errors);

// Writes `a` as NPY 1.0 atomically (to path + ".tmp", then renamed). bf16 has no NumPy dtype and
// is refused. Throws FileError naming the path and the system's reason on failure.
void write_npy(const std::string& path, const Array& a);

// File helpers shared by the readers and writers of every file format in engine/io.
// open_regular_file: a read-only descriptor (the caller closes it) and the file's size; a missing
// file, a folder, a FIFO or a device is a FileError naming the path, and nothing blocks.
int open_regular_file(const std::string& path, std::uint64_t* size);
// read_file_bytes: the whole file; FileError "<path>: cannot open: <strerror>" when it fails.
std::vector<unsigned char> read_file_bytes(const std::string& path);
// write_file_atomic: writes and fsyncs path + ".tmp", renames it over `path`, fsyncs the folder, so a
// crash or power loss leaves the old file or the new one, and a reader never sees a
// half-written file. FileError naming the path and the system's reason when it fails.
void write_file_atomic(const std::string& path, const std::vector<unsigned char>& bytes);

}  // namespace mha
