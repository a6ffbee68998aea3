// Autosave ownership, recovery and cleanup (see autosave.hpp).
#include "autosave.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "errors.hpp"
#include "io/file_io.hpp"

namespace mha::studio {

namespace fs = std::filesystem;

AutosaveLock& AutosaveLock::operator=(AutosaveLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

AutosaveLock::~AutosaveLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::string set_aside_unreadable(const std::string& path, std::string* error) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  std::string aside = path + ".unreadable-" + stamp;
  for (int n = 2; fs::exists(fs::symlink_status(aside)); ++n)
    aside = path + ".unreadable-" + stamp + "-" + std::to_string(n);
  if (std::rename(path.c_str(), aside.c_str()) != 0) {
    if (error) *error = std::strerror(errno);
    return "";
  }
  return aside;
}

AutosaveSession open_autosave(const std::string& path) {
  AutosaveSession s;
  if (path.empty()) return s;
  const fs::path folder = fs::path(path).parent_path();
  clean_stale_temps(folder.empty() ? "." : folder.string());

  // The lock file holds the owner's pid, so a second instance can say who owns the autosave.
  const std::string lock_path = path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    s.message = "autosave off: cannot open " + lock_path + ": " + std::strerror(errno);
    return s;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char owner[32] = {};
    const ssize_t n = ::pread(fd, owner, sizeof owner - 1, 0);
    ::close(fd);
    const std::string pid = n > 0 ? std::string(owner, std::size_t(n)) : "";
    s.message = "another MHA Studio" + (pid.empty() ? std::string() : " (pid " + pid + ")") +
                " owns the autosave " + path + "; this one will not autosave";
    return s;
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only for the other instance's message: the lock itself is held either way.
  }
  s.lock = AutosaveLock(fd);
  s.path = path;

  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return s;
  try {
    s.restored = load_scenario(path);
    s.message = "restored autosave from " + path;
  } catch (const Error& e) {
    // Corrupt, cut short, or from a newer version: kept under another name before any edit could
    // overwrite it, and the status bar says where.
    std::string why;
    s.set_aside = set_aside_unreadable(path, &why);
    if (s.set_aside.empty()) {
      s.message = std::string("the autosave could not be read (") + e.what() + ") nor moved aside (" + why +
                  "); autosave is off so that it is not overwritten";
      s.path.clear();
    } else {
      s.message = std::string("the autosave could not be read (") + e.what() + "); it was moved to " +
                  s.set_aside + "; started from the default";
    }
  }
  return s;
}

}  // namespace mha::studio
