// The desktop's own file chooser, for Open / Save / Export: zenity (GTK; told to go through the XDG
// desktop portal where one runs, GTK_USE_PORTAL=1) or kdialog (preferred on KDE), run as a helper
// process. The portal is not called over D-Bus directly: its answer is a signal sent to the caller's
// own bus connection, which a `gdbus` helper process cannot wait for without closing the request.
// With neither program installed the caller falls back to its typed-path prompt. No GUI here.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mha::platform {

struct FileFilter {
  std::string name;                   // "Scenarios"
  std::vector<std::string> patterns;  // {"*.json"}
};

struct ChooserRequest {
  enum class Kind { open_file, save_file, open_folder } kind = Kind::open_file;
  std::string title;
  std::string start;  // a folder to start in, or (saving) a suggested path or file name
  std::vector<FileFilter> filters;
};

struct ChooserResult {
  enum class Status { chosen, cancelled, unavailable, failed } status = Status::unavailable;
  std::string path;     // when chosen
  std::string tool;     // the helper that ran ("zenity", "kdialog"), "" when none could
  std::string message;  // why, when unavailable or failed
};

// The helper this desktop would use ("zenity" or "kdialog"), "" when neither is installed. MHA_CHOOSER
// names one (or "none", to test the typed-path prompt).
std::string chooser_tool();
// The helper's argv for `r` (tests check it).
std::vector<std::string> chooser_argv(const std::string& tool, const ChooserRequest& r);
// Runs the chooser and waits for the user: call it off the UI thread (FileChooser does).
// running_pid: as ProcessOptions::running_pid.
ChooserResult run_chooser(const ChooserRequest& r, std::atomic<int>* running_pid = nullptr);

// One chooser at a time on a thread of its own; the UI polls it once a frame.
class FileChooser {
 public:
  FileChooser() = default;
  ~FileChooser();  // closes a chooser still open (the app is quitting)
  FileChooser(const FileChooser&) = delete;
  FileChooser& operator=(const FileChooser&) = delete;
  // Starts `r` tagged with `purpose` (what the caller does with the answer); false while one is open.
  bool start(const ChooserRequest& r, std::string purpose);
  bool busy() const { return busy_; }
  // The answer and its purpose, once; nullopt while the user is still choosing (or none was asked).
  std::optional<std::pair<std::string, ChooserResult>> poll();

 private:
  std::thread thread_;
  std::atomic<bool> busy_{false};
  std::mutex mutex_;
  std::optional<ChooserResult> done_;
  std::string purpose_;
  std::atomic<int> pid_{0};
};

}  // namespace mha::platform
