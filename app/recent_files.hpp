// The Recent menu's list: the last files and model folders opened (newest first, at most
// kRecentMax), kept in $XDG_CONFIG_HOME/mha-studio/recent.json beside window.json. A preference:
// a missing or malformed file is an empty list, never an error.
#pragma once

#include <string>
#include <vector>

namespace mha::app {

constexpr std::size_t kRecentMax = 10;

// The file's path ("" where there is no home to keep it in).
std::string recent_files_path();
std::vector<std::string> load_recent(const std::string& file);
// Writes it atomically; false where it could not.
bool save_recent(const std::string& file, const std::vector<std::string>& paths);
// `path` (made absolute) moved to the front; duplicates dropped; at most kRecentMax kept.
void add_recent(std::vector<std::string>& paths, const std::string& path);

}  // namespace mha::app
