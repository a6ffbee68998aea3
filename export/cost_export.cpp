#include "cost_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cost.hpp"
#include "figure_colours.hpp"

namespace mha::exporter {

namespace {

using colours::kInk, colours::kMuted;
constexpr int kPad = 10;
constexpr int kBarMax = 300;                       // the longest bar, pixels
constexpr std::uint32_t kProjection = 0xFFE0A05A;  // blue, as the Complexity view
constexpr std::uint32_t kAttention = 0xFF3C96F0;   // orange
constexpr std::uint32_t kOther = 0xFFB4B4B4;

std::uint32_t part_colour(cost::Part p) {
  return p == cost::Part::projection ? kProjection : p == cost::Part::attention ? kAttention : kOther;
}

// 1234567 as "1.23 M", bytes as "4.0 KiB".
std::string count(double v) {
  const char* unit[] = {"", " k", " M", " G", " T"};
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  char s[32];
  std::snprintf(s, sizeof s, u ? "%.3g%s" : "%.0f%s", v, unit[u]);
  return s;
}
std::string bytes(double v) {
  const char* unit[] = {" B", " KiB", " MiB", " GiB", " TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, u ? "%.3g%s" : "%.0f%s", v, unit[u]);
  return s;
}

}  // namespace

Drawing cost_figure(const Dims& d, const CostSpec& spec) {
  const cost::Shape shape = cost::shape(d, spec.bias, spec.mask);
  const cost::Table t = cost::stages(shape);
  Drawing dr;
  dr.font_path = spec.font_path;
  dr.font_px = spec.font_px;
  TextMeter meter(spec.font_path, spec.font_px);
  const int line = meter.line() + 4;
  auto text = [&](int x, int y, const std::string& s, std::uint32_t c = kInk, bool title = false) {
    dr.texts.push_back({x, y, s, c, title});
    return meter.width(s, title);
  };

  char sizes[160];
  std::snprintf(sizes, sizeof sizes, "N = %lld, L = %lld, S = %lld, E = %lld, H = %lld, d_k = %lld%s",
                (long long)d.N, (long long)d.L, (long long)d.S_total, (long long)d.E, (long long)d.H,
                (long long)d.d_k, d.G < d.H ? (", G = " + std::to_string(d.G) + " K/V heads").c_str() : "");
  int right = text(kPad, kPad, "What one forward costs, stage by stage", kInk, true) + kPad;
  int y = kPad + meter.line(true) + 2;
  right = std::max(right, text(kPad, y, sizes, kMuted) + kPad);
  y += line;
  // The legend.
  int x = kPad;
  for (auto [part, name] : {std::pair{cost::Part::projection, "projections (grow with L)"},
                            std::pair{cost::Part::attention, "attention (grows with L\xC2\xB7S)"},
                            std::pair{cost::Part::other, "the rest"}}) {
    dr.boxes.push_back({x, y + 3, line - 8, line - 8, part_colour(part)});
    x += line - 4;
    x += text(x, y, name) + 2 * kPad;
  }
  right = std::max(right, x);
  y += line + kPad / 2;

  int name_w = 0;
  for (const cost::StageCost& s : t) name_w = std::max(name_w, meter.width(s.name));
  const int bar_x = kPad + name_w + kPad;
  double total_flops = 0, total_bytes = 0, max_flops = 0, max_bytes = 0;
  for (const cost::StageCost& s : t) {
    total_flops += s.flops();
    total_bytes += 4 * s.written;
    max_flops = std::max(max_flops, s.flops());
    max_bytes = std::max(max_bytes, 4 * s.written);
  }
  // Two panels: FLOPs, then the bytes of each stage's new tensor (float32).
  for (int panel = 0; panel < 2; ++panel) {
    const double total = panel == 0 ? total_flops : total_bytes, top = panel == 0 ? max_flops : max_bytes;
    text(kPad, y,
         panel == 0 ? "FLOPs (a multiply-add is 2): " + count(total_flops) + " in all"
                    : "memory: the new tensors each stage makes, float32: " + bytes(total_bytes) + " in all",
         kInk, true);
    y += meter.line(true) + 4;
    for (const cost::StageCost& s : t) {
      const double v = panel == 0 ? s.flops() : 4 * s.written;
      if (s.stage == cost::Stage::inputs) continue;  // given, not computed
      text(kPad, y, s.name);
      const int w = top > 0 ? int(std::lround(kBarMax * v / top)) : 0;
      if (w > 0) dr.boxes.push_back({bar_x, y + 2, w, line - 6, part_colour(s.part)});
      char share[16];
      std::snprintf(share, sizeof share, "%.0f%%", total > 0 ? 100 * v / total : 0.0);
      const std::string label = v > 0 ? (panel == 0 ? count(v) : bytes(v)) + "  " + share
                                      : (panel == 0 ? "0" : "a view, or fused into the next");
      right = std::max(right, bar_x + w + kPad / 2 + text(bar_x + w + kPad / 2, y, label, kMuted) + kPad);
      y += line;
    }
    y += kPad;
  }
  // What a K/V cache keeps for generation: k and v of every position, per layer; GQA shares them.
  const double kv_bytes = 4 * 2 * shape.N * shape.S_total * shape.kv;
  const double mha_bytes = 4 * 2 * shape.N * shape.S_total * shape.E;
  std::string kv = "K/V cache (k and v of every key, float32): " + bytes(kv_bytes);
  if (d.G < d.H)
    kv += ", against " + bytes(mha_bytes) + " with one K/V head a query head (" + std::to_string(d.H / d.G) +
          "\xC3\x97 less)";
  right = std::max(right, text(kPad, y, kv) + kPad);
  y += line;
  dr.width = right;
  dr.height = y + kPad;
  return dr;
}

}  // namespace mha::exporter
