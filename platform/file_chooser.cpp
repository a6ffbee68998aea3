// See file_chooser.hpp. zenity and kdialog both exit 0 with the path on stdout, 1 when cancelled.
#include "file_chooser.hpp"

#include <signal.h>

#include <cstdlib>

#include "subprocess.hpp"

namespace mha::platform {

namespace {

bool on_kde() {
  const char* d = std::getenv("XDG_CURRENT_DESKTOP");
  return d && std::string(d).find("KDE") != std::string::npos;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

std::string chooser_tool() {
  if (const char* forced = std::getenv("MHA_CHOOSER"); forced && *forced) {
    const std::string f = forced;
    return f == "none" || find_program(f).empty() ? "" : f;
  }
  const bool zenity = !find_program("zenity").empty(), kdialog = !find_program("kdialog").empty();
  if (kdialog && (on_kde() || !zenity)) return "kdialog";
  return zenity ? "zenity" : "";
}

std::vector<std::string> chooser_argv(const std::string& tool, const ChooserRequest& r) {
  using Kind = ChooserRequest::Kind;
  std::vector<std::string> argv = {tool};
  if (tool == "kdialog") {
    argv.push_back("--title");
    argv.push_back(r.title);
    std::string filter;  // "*.json *.npy|Scenarios"; one filter only
    for (const FileFilter& f : r.filters) {
      if (!filter.empty()) filter += "\n";
      filter += join(f.patterns, " ") + "|" + f.name;
    }
    const std::string start = r.start.empty() ? "." : r.start;
    if (r.kind == Kind::open_folder) {
      argv.insert(argv.end(), {"--getexistingdirectory", start});
    } else {
      argv.push_back(r.kind == Kind::save_file ? "--getsavefilename" : "--getopenfilename");
      argv.push_back(start);
      if (!filter.empty()) argv.push_back(filter);
    }
    return argv;
  }
  argv.push_back("--file-selection");
  argv.push_back("--title=" + r.title);
  if (r.kind == Kind::save_file) argv.insert(argv.end(), {"--save", "--confirm-overwrite"});
  if (r.kind == Kind::open_folder) argv.push_back("--directory");
  if (!r.start.empty()) argv.push_back("--filename=" + r.start);
  for (const FileFilter& f : r.filters)
    argv.push_back("--file-filter=" + f.name + " | " + join(f.patterns, " "));
  if (!r.filters.empty()) argv.push_back("--file-filter=All files | *");
  return argv;
}

ChooserResult run_chooser(const ChooserRequest& r, std::atomic<int>* running_pid) {
  ChooserResult res;
  res.tool = chooser_tool();
  if (res.tool.empty()) {
    res.message = "no file chooser installed (zenity or kdialog)";
    return res;
  }
  ProcessOptions o;
  o.env = {"GTK_USE_PORTAL=1"};
  o.running_pid = running_pid;  // GTK's chooser through the desktop portal where one runs
  const ProcessResult p = run_process(chooser_argv(res.tool, r), o);
  std::string path = p.out;
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  if (!p.started) {
    res.status = ChooserResult::Status::unavailable;
    res.message = p.error;
  } else if (p.exit_code == 0 && !path.empty()) {
    res.status = ChooserResult::Status::chosen;
    res.path = path;
  } else if (p.exit_code == 0 || p.exit_code == 1) {
    res.status = ChooserResult::Status::cancelled;
  } else {
    res.status = ChooserResult::Status::failed;
    res.message =
        res.tool + (p.signalled ? " was killed" : " exited with status " + std::to_string(p.exit_code));
    if (!p.error.empty()) res.message += ": " + p.error;
  }
  return res;
}

FileChooser::~FileChooser() {
  if (const int pid = pid_.load(); pid > 0) ::kill(pid_t(pid), SIGTERM);
  if (thread_.joinable()) thread_.join();
}

bool FileChooser::start(const ChooserRequest& r, std::string purpose) {
  if (busy_) return false;
  if (thread_.joinable()) thread_.join();
  busy_ = true;
  purpose_ = std::move(purpose);
  thread_ = std::thread([this, r] {
    ChooserResult res = run_chooser(r, &pid_);
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = std::move(res);
  });
  return true;
}

std::optional<std::pair<std::string, ChooserResult>> FileChooser::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) return std::nullopt;
  std::pair<std::string, ChooserResult> out{purpose_, std::move(*done_)};
  done_.reset();
  busy_ = false;
  return out;
}

}  // namespace mha::platform
