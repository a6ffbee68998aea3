// A fresh folder under the system temp directory, removed with everything in it at scope exit.
// Shared by the file-format tests (NPY, safetensors, scenarios).
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace mha::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "mha_test_") {
    std::random_device rd;
    do {
      path = std::filesystem::temp_directory_path() / (prefix + std::to_string(rd()) + std::to_string(rd()));
    } while (!std::filesystem::create_directory(path));
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace mha::test
