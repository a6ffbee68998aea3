// libFuzzer target: the safetensors reader (parse_safetensors) on arbitrary bytes, then each tensor
// through to_tensor<float> as a state_dict load does. A FileError/DtypeError is an answer; a crash,
// a sanitizer report or an array whose bytes disagree with its shape is a bug.
#include <cstdint>
#include <cstdlib>

#include "errors.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto tensors = mha::parse_safetensors(data, size, "fuzz.safetensors");
    for (const auto& [name, a] : tensors) {
      if (a.data.size() != std::size_t(mha::numel(a.shape)) * mha::dtype_size(a.dtype)) std::abort();
      try {
        const mha::Tensor<float> t = mha::to_tensor<float>(a);
        if (t.data.size() != std::size_t(mha::numel(a.shape))) std::abort();
      } catch (const mha::Error&) {  // e.g. a bool tensor where floats are wanted
      }
    }
  } catch (const mha::FileError&) {
  }
  return 0;
}
