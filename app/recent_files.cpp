// See recent_files.hpp.
#include "recent_files.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/file_io.hpp"
#include "window_config.hpp"

namespace mha::app {

namespace fs = std::filesystem;

std::string recent_files_path() {
  const std::string window = window_config_path();
  return window.empty() ? "" : (fs::path(window).parent_path() / "recent.json").string();
}

std::vector<std::string> load_recent(const std::string& file) {
  std::vector<std::string> out;
  if (file.empty()) return out;
  try {
    const std::vector<unsigned char> bytes = read_file_bytes(file, 1 << 20);
    const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
    if (j.contains("recent") && j["recent"].is_array())
      for (const nlohmann::json& p : j["recent"])
        if (p.is_string() && !p.get<std::string>().empty() && out.size() < kRecentMax)
          out.push_back(p.get<std::string>());
  } catch (const Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return out;
}

bool save_recent(const std::string& file, const std::vector<std::string>& paths) {
  if (file.empty()) return false;
  const std::string text =
      nlohmann::json{{"recent", paths}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  try {
    std::error_code ec;
    fs::create_directories(fs::path(file).parent_path(), ec);
    write_file_atomic(file, std::vector<unsigned char>(text.begin(), text.end()));
    return true;
  } catch (const Error&) {
    return false;
  }
}

void add_recent(std::vector<std::string>& paths, const std::string& path) {
  std::error_code ec;
  fs::path full = fs::absolute(path, ec).lexically_normal();
  std::string p = ec ? path : full.string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  paths.erase(std::remove(paths.begin(), paths.end(), p), paths.end());
  paths.insert(paths.begin(), p);
  if (paths.size() > kRecentMax) paths.resize(kRecentMax);
}

}  // namespace mha::app
