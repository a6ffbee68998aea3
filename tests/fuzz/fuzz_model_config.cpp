// libFuzzer target: the GPT-2 config.json reader (read_gpt2_config) on arbitrary bytes, written to a
// file as a model folder holds it. Every input must give a FileError or a config that validate()
// accepts; anything else (a crash, a sanitizer report, another exception) is a bug.
// Seeds: tests/fuzz/corpus/model_config/.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "errors.hpp"
#include "io/hf_checkpoint.hpp"

namespace {

// One file per fuzzing process, rewritten for every input and removed at exit.
struct ConfigFile {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("fuzz_model_config_" + std::to_string(::getpid()) + ".json");
  ~ConfigFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const ConfigFile file;
  {
    std::ofstream out(file.path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    if (!out) std::abort();  // the fuzzer's own temp file: not the reader's fault
  }
  try {
    const mha::GPT2Config c = mha::read_gpt2_config(file.path.string());
    mha::validate(c);  // what was returned must be a config the runner can use
    if (c.head_dim() * c.n_head != c.n_embd || c.inner() <= 0) std::abort();
  } catch (const mha::FileError&) {
  }
  return 0;
}
