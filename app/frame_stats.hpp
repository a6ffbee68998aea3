// `mha-studio --frame-stats FILE`: a scripted replay of edits (mask cell toggles, value drags, size
// changes in turn, then a series of mask toggles in a row) at the teaching, medium, large and xl
// sizes, timing each from the edit to the end of the first frame that shows its result, overall and
// per kind of edit; then, per size, the UI's frame times while a forward runs (a few more value
// drags, the window drawing on as if the pointer moved), the process's resident memory, and the
// Overview opened: the frames until it shows every weight (which a result of the largest sizes
// left out). Writes JSON; the app exits when the script ends.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "app_state.hpp"
#include "studio_names.hpp"

namespace mha::app {

class FrameStats {
 public:
  // xl: the replay goes on to L = 4096 (--frame-stats-xl).
  FrameStats(std::string path, bool xl);
  // Before drawing a frame: starts the next size or applies the next edit when the last one landed.
  void before_frame(AppState& state);
  // After the frame was swapped: records the latency once the frame shows the edit's result.
  void after_frame(const AppState& state);
  bool done() const { return size_ >= sizes_; }
  // The view the replay runs on, Heads (every head's heatmap is redrawn): main shows it at start.
  static constexpr studio::ViewTab kTab = studio::ViewTab::heads;
  // Writes the JSON and prints a summary; returns false (with a message) if the file cannot be written.
  bool write(std::string* error) const;

 private:
  static constexpr int kSizes = 4;   // the last, xl, only with --frame-stats-xl
  static constexpr int kProbes = 3;  // value drags per size whose frames are timed while computing
  // After the mixed edits, this many mask cell toggles in a row, as a student clicks cells: timed
  // and reported as their own kind ("mask_series"), outside the mixed p50/p95.
  static constexpr int kMaskSeries = 6;
  struct Edit {
    std::string kind;
    double ms;          // edit to frame
    double forward_ms;  // of which the engine forward (Result::compute_ms)
  };
  struct SizeRun {
    std::string name;
    std::int64_t L = 0, E = 0, H = 0;
    double goal_ms = 0;
    std::vector<Edit> edits;
    std::vector<double> busy_frames_ms;    // frame periods while the worker computed
    double rss_mib = 0, peak_rss_mib = 0;  // VmRSS when the size ended, VmHWM so far
    std::vector<double> switch_frames_ms;  // frame periods from opening the Overview to its weights
    double switch_ms = 0;                  // opening the Overview to the end of the first frame with them
  };
  using Clock = std::chrono::steady_clock;

  void start_size(AppState& state);
  void apply_edit(AppState& state, int k);

  std::string path_;
  std::vector<SizeRun> runs_;
  int sizes_ = kSizes - 1;  // sizes replayed
  int size_ = 0;            // index into runs_
  int edit_ = -1;           // edit within the size; -1 while warming up
  bool waiting_ = false;    // an edit is applied and its result not yet on screen
  std::uint64_t gen_before_ = 0;
  Clock::time_point t0_;
  int probe_ = 0;           // probes done at this size
  bool probing_ = false;    // a probe's forward has not landed yet
  bool last_busy_ = false;  // the worker was busy when the last frame started
  Clock::time_point last_frame_;
  // The Overview: 0 not yet opened at this size, 1 waiting for its weights, 2 drawing them, 3 done.
  int switch_ = 0;
  Clock::time_point switch_t0_, switch_last_;
};

}  // namespace mha::app
