// `mha-studio --soak SECONDS --soak-report FILE`: random edits (sizes, masks, cells, seeds, views,
// undo/redo) one a frame for a bounded time, sampling the process's RSS and every frame's time.
// `--edits N` replays N of the same edits and then leaves the app running (the kill -9 test). The
// edits keep the scale of the scenario they find: beyond kTeachingMaxLen tokens the sequence length
// stays, and the soak edits when nothing computes or after two results landed (each edit is
// printed), so it can run beside the latency replay (--frame-stats) at all its sizes.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "app_state.hpp"
#include "studio_names.hpp"
#include "ui.hpp"

namespace mha::app {

// Resident set size of this process in bytes (Linux /proc/self/statm); 0 where unknown.
std::uint64_t resident_bytes();

class Soak {
 public:
  // Runs for `seconds` (soak) or for `max_edits` edits (whichever comes first; 0 = no limit).
  Soak(double seconds, int max_edits, std::uint64_t seed);
  // Before a frame is drawn: applies the next random edit as the actions a user would make.
  void before_frame(AppState& state, UiEnv& env);
  // After the frame was swapped: frame time, and an RSS sample every half second.
  void after_frame();
  bool done() const { return done_; }
  // The report: frames, edits, frame times against the stall budget, RSS first/last/max (JSON).
  bool write(const std::string& path, std::string* error) const;

  static constexpr double kStallBudgetMs = 250;  // a frame slower than this is a visible stall
  // RSS is compared from the end of the warm-up (undo history full, caches built) to the end.
  static constexpr double kWarmupFraction = 0.25;
  // The longest sequence the soak itself picks; a scenario beyond it keeps its length.
  static constexpr std::int64_t kTeachingMaxLen = 24;

 private:
  using Clock = std::chrono::steady_clock;
  void edit(AppState& state);

  double seconds_;
  int max_edits_;
  std::mt19937_64 rng_;
  Clock::time_point start_, last_frame_, last_sample_;
  bool started_ = false, done_ = false;
  int landed_ = 0;                     // results landed since the last edit (beyond teaching sizes)
  std::uint64_t seen_generation_ = 0;  // the last result generation seen
  int edits_ = 0, frames_ = 0, stalls_ = 0;
  std::vector<double> frame_ms_;
  struct Sample {
    double t;
    std::uint64_t rss;
  };
  std::vector<Sample> rss_;
  std::vector<std::string> kinds_;  // edit kinds applied, counted in the report
};

}  // namespace mha::app
