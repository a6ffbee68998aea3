// A progress line on stderr for long command-line work (`mha compute`, `export`, `bench`): drawn only
// when stderr is a terminal and the user did not ask for --quiet, so logs and pipes get nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace mha::platform {

// Whether stderr is a terminal (isatty).
bool stderr_is_terminal();

class ProgressLine {
 public:
  // `label` leads the line ("exporting"); quiet: never draw.
  ProgressLine(std::string label, bool quiet);
  ~ProgressLine();  // clears the line
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool shown() const { return shown_; }
  // `done` of `total` steps: a bar, the count and `note`.
  void step(std::int64_t done, std::int64_t total, const std::string& note = "");
  // A fraction in [0, 1] (a model's weights converted so far).
  void fraction(double f, const std::string& note = "");
  // Work that reports no steps of its own (one long forward): `note` and the seconds so far, redrawn
  // by a thread until the next call.
  void waiting(const std::string& note);
  // Clears the line (before printing results on stdout or stderr).
  void clear();

  // The text of a bar line, without the carriage return (tests, and the app's status line).
  static std::string bar_text(const std::string& label, double fraction, const std::string& count,
                              const std::string& note, int bar_width = 24);

 private:
  void draw(const std::string& text, bool force);
  void stop_ticker();

  std::string label_;
  bool shown_ = false;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::thread ticker_;
  bool ticking_ = false;
  bool drawn_ = false;  // something is on the line
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace mha::platform
