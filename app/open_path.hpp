// What `mha-studio FILE` opens: a scenario (JSON), attention weights (.npy) or a model folder (GPT-2, Llama,
// Mistral, Qwen2), told apart before any window opens so that a wrong path is a usage error.
#pragma once

#include <string>

namespace mha::app {

enum class OpenKind { scenario, attention, model_folder };

struct OpenRequest {
  OpenKind kind = OpenKind::scenario;
  std::string path;  // a folder as an absolute path (a bare name would mean a shipped model)
};

// A folder with config.json is a model folder, and so is a .safetensors file's folder (when it holds
// config.json); a file ending in .npy is attention weights; any other regular file is read as a
// scenario. Throws FileError("FILE", ...) for a missing path, a folder
// without config.json, or something that is neither a file nor a folder.
OpenRequest classify_open_path(const std::string& path);

}  // namespace mha::app
