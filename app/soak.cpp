// The soak run behind --soak / --edits (see soak.hpp): a seeded random walk over the edits a
// teacher makes, each through AppState::edited so undo, recompute and autosave all run.
#include "soak.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "errors.hpp"

namespace mha::app {

std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * std::uint64_t(sysconf(_SC_PAGESIZE));
}

Soak::Soak(double seconds, int max_edits, std::uint64_t seed)
    : seconds_(seconds), max_edits_(max_edits), rng_(seed) {}

void Soak::edit(AppState& state, UiEnv& env) {
  Scenario& s = state.scenario;
  auto pick = [&](int n) { return int(rng_() % std::uint64_t(n)); };
  std::string kind;
  switch (pick(12)) {
    case 0: {  // a size field; sizes stay at teaching scale so every forward is on the UI thread
      static const std::int64_t kL[] = {2, 3, 4, 6, 8, 12, 16, 24};
      static const std::int64_t kE[] = {4, 8, 12, 16, 32};
      static const std::int64_t kH[] = {1, 2, 3, 4, 8};
      switch (pick(4)) {
        case 0: s.tgt_len = kL[pick(8)], kind = "L"; break;
        case 1: s.embed_dim = kE[pick(5)], kind = "E"; break;  // may not divide: an inline error
        case 2: s.num_heads = kH[pick(5)], kind = "H"; break;
        default: s.batch = 1 + pick(4), kind = "N"; break;
      }
      s.sentence.clear();
      break;
    }
    case 1: {
      static const MaskPreset kPresets[] = {
          MaskPreset::none,           MaskPreset::causal,    MaskPreset::padding, MaskPreset::sliding_window,
          MaskPreset::block_diagonal, MaskPreset::prefix_lm, MaskPreset::random};
      s.mask.preset = kPresets[pick(7)];
      s.mask.scope = MaskScope(pick(3));
      s.mask.random_seed = rng_() % 1000;
      kind = "mask preset";
      break;
    }
    case 2:  // click one mask cell, as the mask editor does
      if (s.mask.cells.empty()) return;
      {
        float& c = s.mask.cells[rng_() % s.mask.cells.size()];
        c = std::isinf(c) ? 0.0f : -INFINITY;
      }
      s.mask.preset = MaskPreset::custom;
      kind = "mask cell";
      break;
    case 3: s.seed = rng_() % 100000, kind = "seed"; break;
    case 4: {
      static const char* kSentences[] = {"the cat sat on the mat", "attention is all you need",
                                         "a b c d e f g h", "one two"};
      s.sentence = kSentences[pick(4)];
      kind = "sentence";
      break;
    }
    case 5: s.bias = !s.bias, kind = "bias"; break;
    case 6: s.cross_attention = !s.cross_attention, s.src_len = 2 + pick(10), kind = "cross"; break;
    case 7: s.num_kv_heads = pick(3) == 0 ? 0 : 1 + pick(2), kind = "kv heads"; break;
    case 8:
      state.undo();
      kinds_.push_back("undo");
      return;
    case 9:
      state.redo();
      kinds_.push_back("redo");
      return;
    case 10:  // a view: tab, stage, colormap (through the UI's own tab selection)
      env.select_tab = pick(6);
      s.view.stage = pick(2) ? "attn_weights" : "scores_masked";
      s.view.colormap = Colormap(pick(4));
      kind = "view";
      break;
    default:  // drag one input value (the query tensor is made editable first, as the UI does)
      if (!s.query) s.query = build_forward(s).inputs.query;
      if (s.query->data.empty()) return;
      s.query->data[rng_() % s.query->data.size()] += 0.05f;
      kind = "value drag";
      break;
  }
  if (kind == "L" || kind == "N" || kind == "E" || kind == "sentence" || kind == "cross") {
    s.query.reset();  // an edited tensor of the old size would no longer fit
    s.key.reset();
    s.value.reset();
  }
  try {
    fit_mask_to_sizes(s);
  } catch (const Error& e) {
    state.errors["mask"] = e.what();
  }
  state.now += 1;  // each random edit is its own undo step
  state.edited(kind.c_str());
  kinds_.push_back(kind);
}

void Soak::before_frame(AppState& state, UiEnv& env) {
  if (done_) return;
  const Clock::time_point now = Clock::now();
  if (!started_) {
    started_ = true;
    start_ = last_frame_ = last_sample_ = now;
    rss_.push_back({0, resident_bytes()});
  }
  if ((max_edits_ > 0 && edits_ >= max_edits_) ||
      (seconds_ > 0 && std::chrono::duration<double>(now - start_).count() >= seconds_)) {
    done_ = true;
    return;
  }
  state.animating = true;  // keep frames coming while the soak runs
  try {
    edit(state, env);
  } catch (const Error& e) {  // build_forward refused the sizes: the UI shows it; carry on
    state.errors["sizes"] = e.what();
  }
  ++edits_;
}

void Soak::after_frame() {
  if (!started_) return;
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - last_frame_).count();
  last_frame_ = now;
  ++frames_;
  frame_ms_.push_back(ms);
  if (ms > kStallBudgetMs) ++stalls_;
  if (now - last_sample_ >= std::chrono::milliseconds(500) || done_) {
    last_sample_ = now;
    rss_.push_back({std::chrono::duration<double>(now - start_).count(), resident_bytes()});
  }
}

bool Soak::write(const std::string& path, std::string* error) const {
  const double total = rss_.empty() ? 0 : rss_.back().t;
  // First sample at or after the warm-up, so the history and caches are full before comparing.
  std::uint64_t first = rss_.empty() ? 0 : rss_.front().rss, max_rss = 0;
  for (const Sample& x : rss_) max_rss = std::max(max_rss, x.rss);
  for (const Sample& x : rss_)
    if (x.t >= kWarmupFraction * total) {
      first = x.rss;
      break;
    }
  const std::uint64_t last = rss_.empty() ? 0 : rss_.back().rss;
  std::vector<double> sorted = frame_ms_;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) {
    return sorted.empty() ? 0.0 : sorted[std::size_t(p * double(sorted.size() - 1))];
  };
  std::map<std::string, int> counts;
  for (const std::string& k : kinds_) ++counts[k];
  constexpr double MB = 1024.0 * 1024.0;
  nlohmann::json j = {{"seconds", total},
                      {"frames", frames_},
                      {"edits", edits_},
                      {"edit_kinds", counts},
                      {"frame_ms_p50", pct(0.5)},
                      {"frame_ms_p99", pct(0.99)},
                      {"frame_ms_max", sorted.empty() ? 0.0 : sorted.back()},
                      {"stall_budget_ms", kStallBudgetMs},
                      {"frames_over_budget", stalls_},
                      {"rss_start_mb", rss_.empty() ? 0.0 : double(rss_.front().rss) / MB},
                      {"rss_first_mb", double(first) / MB},
                      {"rss_last_mb", double(last) / MB},
                      {"rss_max_mb", double(max_rss) / MB},
                      {"rss_growth_mb", (double(last) - double(first)) / MB}};
  nlohmann::json samples = nlohmann::json::array();
  for (const Sample& x : rss_) samples.push_back({x.t, double(x.rss) / MB});
  j["rss_samples_mb"] = samples;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) {
    *error = "cannot write the soak report " + path;
    return false;
  }
  std::printf(
      "soak: %.1f s, %d frames, %d edits, frame p50 %.1f ms p99 %.1f ms max %.1f ms, %d over %.0f ms; "
      "RSS first %.1f MB last %.1f MB max %.1f MB\n",
      total, frames_, edits_, pct(0.5), pct(0.99), sorted.empty() ? 0.0 : sorted.back(), stalls_,
      kStallBudgetMs, double(first) / MB, double(last) / MB, double(max_rss) / MB);
  return true;
}

}  // namespace mha::app
