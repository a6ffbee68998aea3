// safetensors files as named mha::Arrays: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}, then the data buffer.
// Reads and writes F32, F64, F16, BF16 and BOOL; half types stay half (DType::f16 / DType::bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace mha {

// One tensor of a mapped file: its bytes stay in the mapping (valid while the SafetensorsFile lives).
struct TensorView {
  DType dtype = DType::f32;
  Shape shape;
  const unsigned char* data = nullptr;
  std::size_t nbytes = 0;
};

// A .safetensors file mapped read-only (mmap): opening a 500 MB checkpoint reads only its header;
// tensor bytes are paged in when first touched, and nothing is copied. Every header entry is checked
// as parse_safetensors checks it (offsets inside the file, sizes matching shapes, no duplicate names,
// no two tensors sharing bytes) before any view is handed out.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws FileError
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// Throws FileError with the conversion command when the bytes start like a torch.save file (a zip
// archive or a pickle), which every safetensors reader here refuses by name; returns otherwise.
void refuse_torch_save(const std::string& path, const unsigned char* head, std::size_t size);
// The one line of Python that turns a torch.save state_dict at `path` into model.safetensors beside it.
std::string torch_save_converter(const std::string& path);

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
