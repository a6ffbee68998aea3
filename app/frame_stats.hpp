// `mha-studio --frame-stats FILE`: a scripted replay of edits (mask cell toggles, value drags, size
// changes) at the teaching, medium and large sizes, timing each from the edit to the end of the
// first frame that shows its result. Writes JSON; the app exits when the script ends.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "app_state.hpp"
#include "studio_names.hpp"

namespace mha::app {

class FrameStats {
 public:
  explicit FrameStats(std::string path);
  // Before drawing a frame: starts the next size or applies the next edit when the last one landed.
  void before_frame(AppState& state);
  // After the frame was swapped: records the latency once the frame shows the edit's result.
  void after_frame(const AppState& state);
  bool done() const { return size_ >= kSizes; }
  // The view the replay runs on, Heads (every head's heatmap is redrawn): main selects it at start,
  // since the tab bar, not the loaded scenario, decides what is shown.
  static constexpr int kTab = 2;
  // Writes the JSON and prints a summary; returns false (with a message) if the file cannot be written.
  bool write(std::string* error) const;

 private:
  static constexpr int kSizes = 3;
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
  };
  using Clock = std::chrono::steady_clock;

  void start_size(AppState& state);
  void apply_edit(AppState& state, int k);

  std::string path_;
  std::vector<SizeRun> runs_;
  int size_ = 0;          // index into runs_
  int edit_ = -1;         // edit within the size; -1 while warming up
  bool waiting_ = false;  // an edit is applied and its result not yet on screen
  std::uint64_t gen_before_ = 0;
  Clock::time_point t0_;
};

}  // namespace mha::app
