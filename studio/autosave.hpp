// The app's autosave file, owned by one running instance: a lock beside it says who writes it, a
// copy that cannot be read is moved aside (never overwritten) before anything new is written, and
// temp files left by killed instances are removed.
#pragma once

#include <optional>
#include <string>

#include "scenario.hpp"

namespace mha::studio {

// Holds the autosave's lock for as long as it lives (an flock on "<autosave>.lock", released by the
// kernel when the process ends, however it ends).
class AutosaveLock {
 public:
  AutosaveLock() = default;
  explicit AutosaveLock(int fd) : fd_(fd) {}
  AutosaveLock(AutosaveLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  AutosaveLock& operator=(AutosaveLock&& o) noexcept;
  ~AutosaveLock();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct AutosaveSession {
  std::string path;                  // where this instance autosaves; "" when it must not
  std::optional<Scenario> restored;  // the autosave that was there, when it could be read
  std::string message;               // one line for the status bar ("restored autosave from ...")
  std::string set_aside;             // where an unreadable autosave was moved, or ""
  AutosaveLock lock;
};

// Opens the autosave at `path` ("" gives an empty session): removes dead instances' temp files
// beside it, takes the lock (a second instance gets path "" and a message naming the owner's pid),
// reads the file, and moves a corrupt or unreadable one to "<path>.unreadable-<UTC time>" so that
// the first edit cannot overwrite it.
AutosaveSession open_autosave(const std::string& path);

// Moves `path` aside to "<path>.unreadable-YYYYMMDD-HHMMSS" (a suffix -2, -3, ... if taken); returns
// the new path, or "" with `error` set when it cannot be moved.
std::string set_aside_unreadable(const std::string& path, std::string* error);

}  // namespace mha::studio
