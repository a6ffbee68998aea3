// See open_path.hpp.
#include "open_path.hpp"

#include <filesystem>

#include "errors.hpp"

namespace fs = std::filesystem;

namespace mha::app {

OpenRequest classify_open_path(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw FileError("FILE", path + ": no such file or folder");
  if (fs::is_directory(st)) {
    if (!fs::is_regular_file(fs::path(path) / "config.json", ec))
      throw FileError("FILE",
                      path +
                          ": a folder without config.json is not a model folder (a Hugging Face model: "
                          "config.json, model.safetensors, vocab.json, merges.txt)");
    return {OpenKind::model_folder, fs::absolute(path).lexically_normal().string()};
  }
  if (!fs::is_regular_file(st)) throw FileError("FILE", path + ": not a regular file");
  if (fs::path(path).extension() == ".npy") return {OpenKind::attention, path};
  if (fs::path(path).extension() == ".safetensors") {  // the weights of a model folder
    const fs::path folder = fs::absolute(path, ec).parent_path();
    if (!fs::is_regular_file(folder / "config.json", ec))
      throw FileError("FILE", path + ": a .safetensors file opens as its model folder, and " +
                                  folder.string() + " has no config.json");
    return {OpenKind::model_folder, folder.lexically_normal().string()};
  }
  return {OpenKind::scenario, path};
}

}  // namespace mha::app
