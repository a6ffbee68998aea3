// The soak run behind --soak / --edits (see soak.hpp): a seeded random walk over the edits a
// teacher makes, each through AppState::apply so undo, recompute and autosave all run. The edits
// stay at the scale of the scenario they find: teaching sizes stay small, and a scenario that
// another driver (or --scenario) opened at 512 or 2048 tokens keeps its sequence length.
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

void Soak::edit(AppState& state) {
  const Scenario& s = state.scenario();
  auto pick = [&](int n) { return int(rng_() % std::uint64_t(n)); };
  auto num = [](std::int64_t v) { return std::to_string(v); };
  // Beyond teaching scale the sequence length is the one the soak found (the latency replay's 512
  // and 2048 tokens): sizes change the heads, the embedding and the batch only, no sentence is typed
  // (its words would set L) and the cross-attention source keeps L or half of it.
  const std::int64_t L = s.L();
  const bool large = L > kTeachingMaxLen;
  std::string kind;
  std::vector<Action> actions;  // what a user would do for this edit, in order
  switch (pick(12)) {
    case 0: {  // a size field; at teaching scale every forward is on the UI thread
      static const std::int64_t kL[] = {2, 3, 4, 6, 8, 12, 16, kTeachingMaxLen};
      static const std::int64_t kE[] = {4, 8, 12, 16, 32};
      static const std::int64_t kH[] = {1, 2, 3, 4, 8};
      if (s.has_model()) actions.push_back(choose_model(""));
      if (!large) actions.push_back(set_control("sentence", ""));
      switch (pick(4)) {
        case 0:
          if (!large) {
            actions.push_back(set_control("tgt_len", num(kL[pick(8)]))), kind = "L";
            break;
          }
          [[fallthrough]];  // the length stays: the heads instead
        case 2: actions.push_back(set_control("num_heads", num(kH[pick(5)]))), kind = "H"; break;
        case 1:
          actions.push_back(set_control("embed_dim", num(kE[pick(5)]))), kind = "E";
          break;  // may not divide
        default: actions.push_back(set_control("batch", num(1 + pick(large ? 2 : 4)))), kind = "N"; break;
      }
      break;
    }
    case 1: {
      static const char* kPresets[] = {"none",           "causal",    "padding", "sliding_window",
                                       "block_diagonal", "prefix_lm", "random"};
      actions.push_back(set_mask_preset(kPresets[pick(7)]));
      kind = "mask preset";
      break;
    }
    case 2: {  // click one mask cell, as the mask editor does
      const int r = pick(int(std::max<std::int64_t>(1, s.L()))),
                c = pick(int(std::max<std::int64_t>(1, s.S())));
      actions.push_back(paint_mask_cells({{r, c}}, pick(2) == 0));
      kind = "mask cell";
      break;
    }
    case 4:
      if (!large) {
        static const char* kSentences[] = {"the cat sat on the mat", "attention is all you need",
                                           "a b c d e f g h", "one two"};
        actions.push_back(set_control("sentence", kSentences[pick(4)]));
        kind = "sentence";
        break;
      }
      [[fallthrough]];  // the length stays: a new seed instead
    case 3: actions.push_back(set_control("seed", num(rng_() % 100000))), kind = "seed"; break;
    case 5: actions.push_back(set_control("bias", s.bias ? "false" : "true")), kind = "bias"; break;
    case 6:
      if (s.has_model()) return;
      actions.push_back(set_control("cross_attention", s.cross_attention ? "false" : "true"));
      actions.push_back(set_control("src_len", num(large ? L / (1 + pick(2)) : 2 + pick(10))));
      kind = "cross";
      break;
    case 7:
      actions.push_back(set_control("num_kv_heads", num(pick(3) == 0 ? 0 : 1 + pick(2)))), kind = "kv heads";
      break;
    case 8:
      state.undo();
      // An undo past the load of this size (the replay's next size is one undoable edit) is redone:
      // the soak stays at the size it found.
      if (large && state.scenario().L() != L) state.redo();
      kind = "undo";
      break;
    case 9:
      state.redo();
      if (large && state.scenario().L() != L) state.undo();
      kind = "redo";
      break;
    case 10: {  // a view: tab (through the UI's own tab selection), stage, colormap
      static const char* kMaps[] = {"viridis", "magma", "cividis", "diverging"};
      state.apply(show_view(views()[std::size_t(pick(6))].id));
      state.view().stage = pick(2) ? "attn_weights" : "scores_masked";
      actions.push_back(set_control("colormap", kMaps[pick(4)]));
      kind = "view";
      break;
    }
    default: {  // drag one input value, as the cell editor does (the query becomes editable first)
      const std::int64_t n = s.batch * s.L() * s.embed_dim;
      if (n <= 0) return;
      const std::int64_t i = std::int64_t(rng_() % std::uint64_t(n));
      const float v = s.query && i < s.query->numel() ? s.query->data[std::size_t(i)] + 0.05f : 0.5f;
      actions.push_back(set_tensor_value("query", i, v));
      kind = "value drag";
      break;
    }
  }
  for (const Action& a : actions) {
    state.now += 1;  // each random edit is its own undo step
    state.apply(a);
  }
  kinds_.push_back(kind);
  if (large)
    std::printf("soak: edit %d at L=%lld (E=%lld, H=%lld): %s\n", edits_ + 1, (long long)L,
                (long long)s.embed_dim, (long long)s.num_heads, kind.c_str());
}

void Soak::before_frame(AppState& state, UiEnv&) {
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
  // Beyond teaching sizes the forward runs on the worker: the soak edits when nothing is computing,
  // or once two results have landed since its last edit. So an edit may cancel a forward in flight,
  // as a user's does, while another driver's edits (the latency replay waits for each of its own)
  // still land, and the run stays at about one forward per edit of either.
  if (state.scenario().L() > kTeachingMaxLen) {
    if (state.result.generation != seen_generation_) {
      seen_generation_ = state.result.generation;
      ++landed_;
    }
    if (state.computer.busy() && landed_ < 2) return;
  }
  try {
    edit(state);
  } catch (const Error& e) {  // build_forward refused the sizes: the UI shows it; carry on
    state.errors["sizes"] = e.what();
  }
  ++edits_;
  landed_ = 0;
  seen_generation_ = state.result.generation;
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
