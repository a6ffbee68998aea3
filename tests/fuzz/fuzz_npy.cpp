// libFuzzer target: the NPY reader (parse_npy) on arbitrary bytes. Every input must give an Array
// whose bytes match its shape, or a FileError; anything else (a crash, a sanitizer report, another
// exception) is a bug. Seeds: tests/fuzz/corpus/npy/.
#include <cstdint>
#include <cstdlib>

#include "errors.hpp"
#include "io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const mha::Array a = mha::parse_npy(data, size, "fuzz.npy");
    if (a.data.size() != std::size_t(mha::numel(a.shape)) * mha::dtype_size(a.dtype)) std::abort();
  } catch (const mha::FileError&) {
  }
  return 0;
}
