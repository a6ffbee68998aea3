// See progress.hpp. One line, redrawn in place with \r and cleared with ESC[K; at most ten redraws a
// second, so a fast loop spends its time working, not printing.
#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mha::platform {

bool stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

ProgressLine::ProgressLine(std::string label, bool quiet)
    : label_(std::move(label)), shown_(!quiet && stderr_is_terminal()) {}

ProgressLine::~ProgressLine() {
  clear();
}

std::string ProgressLine::bar_text(const std::string& label, double fraction, const std::string& count,
                                   const std::string& note, int bar_width) {
  const double f = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) : 0.0;
  const int filled = int(std::lround(f * bar_width));
  std::string s = label + " [" + std::string(std::size_t(filled), '#') +
                  std::string(std::size_t(bar_width - filled), '.') + "] ";
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3d%%", int(std::floor(f * 100.0)));
  s += pct;
  if (!count.empty()) s += " " + count;
  if (!note.empty()) s += " " + note;
  return s;
}

void ProgressLine::draw(const std::string& text, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::fprintf(stderr, "\r%s\x1b[K", text.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::stop_ticker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticking_ = false;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void ProgressLine::step(std::int64_t done, std::int64_t total, const std::string& note) {
  if (!shown_) return;
  stop_ticker();
  std::lock_guard<std::mutex> lock(mutex_);
  const double f = total > 0 ? double(done) / double(total) : 0.0;
  draw(bar_text(label_, f, std::to_string(done) + "/" + std::to_string(total), note), done >= total);
}

void ProgressLine::fraction(double f, const std::string& note) {
  if (!shown_) return;
  stop_ticker();
  std::lock_guard<std::mutex> lock(mutex_);
  draw(bar_text(label_, f, "", note), f >= 1.0);
}

void ProgressLine::waiting(const std::string& note) {
  if (!shown_) return;
  stop_ticker();
  std::lock_guard<std::mutex> lock(mutex_);
  ticking_ = true;
  ticker_ = std::thread([this, note, start = std::chrono::steady_clock::now()] {
    static const char kSpin[] = "|/-\\";
    std::unique_lock<std::mutex> lock(mutex_);
    for (int k = 0; ticking_; ++k) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char text[64];
      std::snprintf(text, sizeof text, " %c %.1f s", kSpin[k % 4], s);
      draw(label_ + " " + note + text, true);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return !ticking_; });
    }
  });
}

void ProgressLine::clear() {
  if (!shown_) return;
  stop_ticker();
  std::lock_guard<std::mutex> lock(mutex_);
  if (drawn_) {
    std::fprintf(stderr, "\r\x1b[K");
    std::fflush(stderr);
  }
  drawn_ = false;
}

}  // namespace mha::platform
