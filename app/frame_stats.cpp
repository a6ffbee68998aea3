// The scripted edit replay behind --frame-stats (see frame_stats.hpp).
#include "frame_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace mha::app {

namespace {

struct SizeSpec {
  const char* name;
  std::int64_t L, E, H;
  double goal_ms;  // p95 edit-to-frame latency goal at this size (written as goal_p95_ms, with met)
  int edits;
};
constexpr SizeSpec kSpecs[] = {{"teaching", 16, 64, 4, 16.7, 30},
                               {"medium", 512, 512, 8, 33, 12},
                               {"large", 2048, 512, 8, 100, 6},
                               {"xl", 4096, 512, 8, 300, 3}};
constexpr double kBusyFrameGoalMs = 20;  // UI frame time p95 while a forward runs

// A field of /proc/self/status in MiB ("VmRSS", "VmHWM"); 0 where there is none.
double status_mib(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::string key = std::string(field) + ":";
  for (std::string line; std::getline(status, line);)
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) / 1024.0;  // "VmRSS:  1234 kB"
  return 0;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p * double(v.size() - 1);
  const std::size_t lo = std::size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

}  // namespace

FrameStats::FrameStats(std::string path, bool xl) : path_(std::move(path)), sizes_(xl ? kSizes : kSizes - 1) {
  for (int i = 0; i < sizes_; ++i) {
    const SizeSpec& s = kSpecs[i];
    SizeRun run;
    run.name = s.name;
    run.L = s.L, run.E = s.E, run.H = s.H;
    run.goal_ms = s.goal_ms;
    runs_.push_back(std::move(run));
  }
}

void FrameStats::start_size(AppState& state) {
  const SizeSpec& spec = kSpecs[size_];
  Scenario s;
  s.name = std::string("frame stats: ") + spec.name;
  s.batch = 1;
  s.tgt_len = spec.L;
  s.embed_dim = spec.E;
  s.num_heads = spec.H;
  s.bias = true;
  s.mask.preset = MaskPreset::causal;
  apply_mask_preset(s);
  s.query = build_forward(s).inputs.query;  // value drags edit it
  state.load(std::move(s), spec.name);
  state.apply(show_view(kTab));
  edit_ = -1;
  probe_ = 0;
  probing_ = false;
}

void FrameStats::apply_edit(AppState& state, int k) {
  const Scenario& s = state.scenario();
  const std::int64_t L = s.L();
  std::string kind;
  Action action;
  const bool series = k >= kSpecs[size_].edits;
  switch (series ? 0 : k % 3) {
    case 0: {  // toggle one mask cell below the diagonal, as a click in the mask editor does
      kind = series ? "mask_series" : "mask_toggle";
      const int row = int((k * 7) % L), col = int((k * 3) % std::max<std::int64_t>(1, (k * 7) % L + 1));
      const std::size_t cell = std::size_t(row * L + col);  // in the first slice, whatever the scope
      const float c = cell < s.mask.cells.size() ? s.mask.cells[cell] : 0.0f;
      action = paint_mask_cells({{row, col}}, !std::isinf(c));
      break;
    }
    case 1: {  // drag one input value, as the cell editor does
      kind = "value_drag";
      const std::int64_t i = std::int64_t(k) % (s.batch * L * s.embed_dim);
      action = set_tensor_value(
          "query", i, s.query && i < s.query->numel() ? s.query->data[std::size_t(i)] + 0.05f : 0.5f);
      break;
    }
    default:  // change the number of heads, as the size field does
      kind = "size_change";
      action = set_control("num_heads", std::to_string(s.num_heads == kSpecs[size_].H ? kSpecs[size_].H / 2
                                                                                      : kSpecs[size_].H));
      break;
  }
  runs_[std::size_t(size_)].edits.push_back({kind, 0, 0});
  gen_before_ = state.result.generation;
  t0_ = Clock::now();
  waiting_ = true;
  state.now += 1;              // each scripted edit is its own undo step
  if (!state.apply(action)) {  // refused (another driver changed the scenario under it): not timed
    runs_[std::size_t(size_)].edits.pop_back();
    waiting_ = false;
  }
}

void FrameStats::before_frame(AppState& state) {
  const Clock::time_point now = Clock::now();
  if (!done() && last_busy_ && probing_)
    runs_[std::size_t(size_)].busy_frames_ms.push_back(
        std::chrono::duration<double, std::milli>(now - last_frame_).count());
  last_frame_ = now;
  last_busy_ = state.computer.busy();
  if (probing_) {
    if (last_busy_) {
      state.animating = true;  // draw on while it computes, as when the pointer moves
      return;
    }
    if (state.result.generation == gen_before_ && !state.compute_failed) return;
    probing_ = false;
  }
  if (done() || waiting_) return;
  if (edit_ < 0) {
    if (state.scenario().name.rfind("frame stats: ", 0) != 0 || state.scenario().tgt_len != kSpecs[size_].L) {
      start_size(state);
      return;
    }
    // Warm-up: wait for this size's first result, and for the worker to settle (pre-size its
    // workspaces), before timing edits.
    if (!state.computer.settled() || !state.result.valid() || state.result.forward->dims.L != kSpecs[size_].L)
      return;
    edit_ = 0;
  }
  if (edit_ >= kSpecs[size_].edits + kMaskSeries) {
    if (probe_ < kProbes) {  // a value drag whose frames are timed until its result lands
      const Scenario& s = state.scenario();
      const std::int64_t i = std::int64_t(probe_ * 7919) % (s.batch * s.L() * s.embed_dim);
      ++probe_;
      gen_before_ = state.result.generation;
      state.now += 1;
      probing_ = state.apply(set_tensor_value(
          "query", i, s.query && i < s.query->numel() ? s.query->data[std::size_t(i)] - 0.05f : 0.5f));
      last_busy_ = state.computer.busy();
      state.animating = true;  // the next frame follows at once, not when the forward lands
      return;
    }
    SizeRun& run = runs_[std::size_t(size_)];
    if (switch_ == 0) {  // measured before the Overview's weights, which the Heads view never holds
      run.rss_mib = status_mib("VmRSS");
      run.peak_rss_mib = status_mib("VmHWM");
      state.apply(show_view(ViewTab::overview));  // as a click on its tab: a view change, no edit
      switch_t0_ = switch_last_ = now;
      switch_ = 1;
      state.animating = true;
      return;
    }
    if (switch_ == 1 || switch_ == 2) {  // a frame of the Overview was drawn
      run.switch_frames_ms.push_back(std::chrono::duration<double, std::milli>(now - switch_last_).count());
      switch_last_ = now;
      if (switch_ == 2) {  // the one that drew every weight
        run.switch_ms = std::chrono::duration<double, std::milli>(now - switch_t0_).count();
        state.apply(show_view(kTab));
        switch_ = 3;
        return;
      }
      // Its weights there, or computed beside the frames: once there, the next frame draws them.
      const std::shared_ptr<const ForwardResult<float>>& f = state.result.forward;
      if (f && find_stage(*f, "attn_weights", false) && !state.stages.busy()) switch_ = 2;
      state.animating = true;
      return;
    }
    switch_ = 0;
    if (++size_ < sizes_) start_size(state);
    return;
  }
  apply_edit(state, edit_++);
}

void FrameStats::after_frame(const AppState& state) {
  if (!waiting_ || state.computer.busy()) return;
  if (state.result.generation == gen_before_) {
    if (!state.compute_failed) return;           // not landed yet
    runs_[std::size_t(size_)].edits.pop_back();  // the forward failed: nothing to time
    waiting_ = false;
    return;
  }
  Edit& e = runs_[std::size_t(size_)].edits.back();
  e.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
  e.forward_ms = state.result.compute_ms;
  waiting_ = false;
}

bool FrameStats::write(std::string* error) const {
  nlohmann::json out = {{"what",
                         "edit-to-frame latency: from the edit to the end of the first swapped frame "
                         "showing its result (mha-studio --frame-stats)"},
                        {"sizes", nlohmann::json::array()}};
  for (const SizeRun& r : runs_) {
    std::vector<double> ms, fwd;  // the mixed edits
    std::map<std::string, std::vector<double>> kind_ms;
    nlohmann::json edits = nlohmann::json::array();
    for (const Edit& e : r.edits) {
      if (e.kind != "mask_series") ms.push_back(e.ms), fwd.push_back(e.forward_ms);
      kind_ms[e.kind].push_back(e.ms);
      edits.push_back({{"kind", e.kind}, {"ms", e.ms}, {"forward_ms", e.forward_ms}});
    }
    nlohmann::json by_kind = nlohmann::json::object();
    for (const auto& [kind, v] : kind_ms)
      by_kind[kind] = {{"n", v.size()}, {"p50_ms", percentile(v, 0.5)}, {"p95_ms", percentile(v, 0.95)}};
    const double p95 = percentile(ms, 0.95);
    const double busy_p95 = percentile(r.busy_frames_ms, 0.95);
    out["sizes"].push_back({{"size", r.name},
                            {"N", 1},
                            {"L", r.L},
                            {"E", r.E},
                            {"H", r.H},
                            {"p50_ms", percentile(ms, 0.5)},
                            {"p95_ms", p95},
                            {"max_ms", ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end())},
                            {"forward_p50_ms", percentile(fwd, 0.5)},
                            {"goal_p95_ms", r.goal_ms},
                            {"met", p95 <= r.goal_ms},
                            {"frames_while_computing", r.busy_frames_ms.size()},
                            {"frame_while_computing_p50_ms", percentile(r.busy_frames_ms, 0.5)},
                            {"frame_while_computing_p95_ms", busy_p95},
                            {"frame_while_computing_goal_p95_ms", kBusyFrameGoalMs},
                            {"rss_mib", r.rss_mib},
                            {"peak_rss_mib", r.peak_rss_mib},
                            {"overview_opened_ms", r.switch_ms},
                            {"overview_frames", r.switch_frames_ms.size()},
                            {"overview_frame_max_ms",
                             r.switch_frames_ms.empty()
                                 ? 0
                                 : *std::max_element(r.switch_frames_ms.begin(), r.switch_frames_ms.end())},
                            {"by_kind", by_kind},
                            {"edits", edits}});
    std::printf(
        "%-9s L=%-5lld E=%-4lld H=%lld  p50 %8.2f ms  p95 %8.2f ms  (goal <= %.1f: %s; forward p50 %.2f "
        "ms)\n",
        r.name.c_str(), (long long)r.L, (long long)r.E, (long long)r.H, percentile(ms, 0.5), p95, r.goal_ms,
        p95 <= r.goal_ms ? "met" : "missed", percentile(fwd, 0.5));
    if (!r.busy_frames_ms.empty())
      std::printf("          frames while computing: %zu, p95 %.2f ms (goal <= %.0f: %s)",
                  r.busy_frames_ms.size(), busy_p95, kBusyFrameGoalMs,
                  busy_p95 <= kBusyFrameGoalMs ? "met" : "missed");
    else
      std::printf("          frames while computing: none (computed on the UI thread)");
    std::printf("; RSS %.0f MiB, peak %.0f MiB\n", r.rss_mib, r.peak_rss_mib);
    std::printf(
        "          Overview opened: every weight on screen after %.1f ms, %zu frames, the longest %.1f ms\n",
        r.switch_ms, r.switch_frames_ms.size(),
        r.switch_frames_ms.empty() ? 0.0
                                   : *std::max_element(r.switch_frames_ms.begin(), r.switch_frames_ms.end()));
    std::printf("          by kind (p50 / p95 ms):");
    for (const auto& [kind, v] : kind_ms)
      std::printf(" %s %.1f / %.1f;", kind.c_str(), percentile(v, 0.5), percentile(v, 0.95));
    std::printf("\n");
  }
  std::ofstream f(path_);
  f << out.dump(2) << "\n";
  if (!f) {
    *error = "cannot write " + path_;
    return false;
  }
  return true;
}

}  // namespace mha::app
