#include "saturation_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "errors.hpp"
#include "figure_colours.hpp"

namespace mha::exporter {

namespace {

using colours::kAxis, colours::kGrid, colours::kInk, colours::kMuted;
constexpr std::uint32_t kScaled = colours::kBlue;      // what torch computes
constexpr std::uint32_t kUnscaled = colours::kOrange;  // the what-if without the scale
constexpr std::uint32_t kMark = 0xFF3C8C3C;            // green: the d_k of the work shown

std::string fixed(double v, int digits) {
  char s[32];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

}  // namespace

Drawing saturation_figure(const SaturationCurves& c, const SaturationSpec& spec, const TextMetrics& m) {
  if (c.points.empty()) throw ConfigError("d_k", "the √d_k plot needs at least one d_k");
  Drawing d;
  d.width = spec.width;
  d.height = spec.height;
  d.font_path = spec.font_path;
  d.font_px = spec.font_px;
  const int line = m.line, pad = std::max(6, line / 2);
  auto text = [&](int x, int y, const std::string& s, std::uint32_t colour = kInk, bool title = false) {
    d.texts.push_back({x, y, s, colour, title});
  };

  // Title, then the legend, each a line; the panels share what is left.
  text(pad, pad, "softmax of random scores against d_k", kInk, true);
  int y = pad + m.title_line + pad / 2;
  const std::string scaled =
                        "softmax(q\xC2\xB7k\xE1\xB5\x80 / \xE2\x88\x9A"
                        "d_k)",
                    unscaled = "softmax(q\xC2\xB7k\xE1\xB5\x80), no scale";
  const int swatch = 2 * line;
  int x = pad;
  for (int k = 0; k < 2; ++k) {
    const float my = float(y) + float(line) / 2;
    d.lines.push_back({{{float(x), my}, {float(x + swatch), my}}, k == 0 ? kScaled : kUnscaled, 3, k == 1});
    text(x + swatch + pad / 2, y, k == 0 ? scaled : unscaled);
    x += swatch + pad / 2 + m.width(k == 0 ? scaled : unscaled, false) + 2 * pad;
  }
  y += line + pad;
  const std::string note = "q, k entries drawn from N(0, 1); S = " + std::to_string(c.keys) + " keys, " +
                           std::to_string(c.rows) + " rows averaged at each d_k";
  const int bottom = d.height - pad - line;  // the note's line
  text(pad, bottom, note, kMuted);

  // Two panels: the y labels' width on the left of each, the ticks and the x label below.
  const double hmax = std::max(c.uniform_entropy(), 1e-9);
  const int ylab_w = std::max(m.width("0.00", false), m.width(fixed(hmax, 2), false)) + pad / 2;
  const int panel_gap = 2 * pad;
  const int panel_w = (d.width - 2 * pad - panel_gap) / 2;
  const int plot_top = y + line + pad / 2;          // under the panel's title
  const int plot_bottom = bottom - 2 * line - pad;  // over the tick labels and "d_k"
  if (plot_bottom - plot_top < 2 * line || panel_w - ylab_w < 4 * line)
    throw ConfigError("--size", "the √d_k plot needs more room than " + std::to_string(d.width) + " x " +
                                    std::to_string(d.height) + " at this font size");
  const int n = int(c.points.size());
  const double lx0 = std::log2(double(c.points.front().d_k)), lx1 = std::log2(double(c.points.back().d_k));

  for (int p = 0; p < 2; ++p) {
    const int left = pad + p * (panel_w + panel_gap) + ylab_w,
              right =
                  pad + p * (panel_w + panel_gap) + panel_w -
                  m.width(std::to_string(c.points.back().d_k), false) / 2;  // room for the last tick's label
    const int w = right - left, h = plot_bottom - plot_top;
    const double ymax = p == 0 ? 1.0 : hmax;
    auto px = [&](int d_k) {
      return lx1 > lx0 ? float(left) + float(w) * float((std::log2(double(d_k)) - lx0) / (lx1 - lx0))
                       : float(left + w / 2);
    };
    auto py = [&](double v) { return float(plot_bottom) - float(h) * float(std::clamp(v / ymax, 0.0, 1.0)); };
    text(left, y, p == 0 ? "largest weight in a row" : "entropy of a row (nats)");
    // Grid and y ticks: 0, ½, 1 of the axis (1 = one weight takes all; ln S = all weights equal).
    for (int k = 0; k <= 4; ++k) {
      const double v = ymax * k / 4;
      const float gy = py(v);
      d.lines.push_back({{{float(left), gy}, {float(right), gy}}, k == 0 ? kAxis : kGrid, 1, false});
      if (k % 2 == 0) {
        const std::string label = p == 0 ? fixed(v, k == 4 || k == 0 ? 0 : 1) : fixed(v, 2);
        text(left - pad / 2 - m.width(label, false), int(gy) - line / 2, label, kMuted);
      }
    }
    if (p == 0) {  // one weight of 1/S is all weights equal: the floor of the left panel
      const float fy = py(1.0 / c.keys);
      d.lines.push_back({{{float(left), fy}, {float(right), fy}}, kAxis, 1, true});
      const std::string floor = "all equal: 1/" + std::to_string(c.keys);
      text(right - m.width(floor, false), int(fy) - line, floor, kMuted);
    }
    d.lines.push_back({{{float(left), float(plot_top)}, {float(left), float(plot_bottom)}}, kAxis, 1, false});
    // x ticks at each d_k, labelled where they do not collide.
    int last_right = -(1 << 20);
    for (int i = 0; i < n; ++i) {
      const int dk = c.points[std::size_t(i)].d_k;
      const float tx = px(dk);
      d.lines.push_back({{{tx, float(plot_bottom)}, {tx, float(plot_bottom + pad / 2)}}, kAxis, 1, false});
      const std::string label = std::to_string(dk);
      const int lw = m.width(label, false), lx = int(tx) - lw / 2;
      if (lx > last_right + pad / 2 || i == n - 1) {
        if (i == n - 1 && lx <= last_right + pad / 2) d.texts.pop_back();  // the last one wins
        text(lx, plot_bottom + pad / 2, label, kMuted);
        last_right = lx + lw;
      }
    }
    const std::string xl = "d_k (each tick doubles it)";
    text(left + (w - m.width(xl, false)) / 2, plot_bottom + pad / 2 + line, xl, kMuted);
    // The work shown: its d_k, on the curve it computes.
    if (spec.mark_d_k > 0 && spec.mark_d_k >= c.points.front().d_k && spec.mark_d_k <= c.points.back().d_k) {
      const float mx = px(spec.mark_d_k);
      d.lines.push_back({{{mx, float(plot_top)}, {mx, float(plot_bottom)}}, kMark, 2, true});
      const std::string label =
          "d_k = " + std::to_string(spec.mark_d_k) + " here" + (spec.mark_scaled ? "" : ", no scale");
      const int lw = m.width(label, false);
      int lx = mx + float(pad / 2 + lw) > float(right) ? int(mx) - pad / 2 - lw : int(mx) + pad / 2;
      lx = std::max(lx, left + 2);  // inside the panel, over the line if it must
      text(lx, plot_top, label, kMark);
    }
    // The curves: unscaled first, so the scaled one (torch's) is on top where they meet at d_k = 1.
    for (int k = 1; k >= 0; --k) {
      Drawing::Line curve;
      curve.color = k == 0 ? kScaled : kUnscaled;
      curve.width = 3;
      curve.dashed = k == 1;
      for (const SaturationPoint& pt : c.points) {
        const double v = p == 0 ? (k == 0 ? pt.max_weight_scaled : pt.max_weight_unscaled)
                                : (k == 0 ? pt.entropy_scaled : pt.entropy_unscaled);
        curve.points.push_back({px(pt.d_k), py(v)});
        const int r = std::max(3, line / 5);
        d.boxes.push_back({int(px(pt.d_k)) - r, int(py(v)) - r, 2 * r, 2 * r, curve.color});
      }
      d.lines.push_back(std::move(curve));
    }
  }
  return d;
}

Drawing saturation_figure(const SaturationCurves& c, const SaturationSpec& spec) {
  auto meter = std::make_shared<TextMeter>(spec.font_path, spec.font_px);
  TextMetrics m;
  m.width = [meter](const std::string& s, bool title) { return meter->width(s, title); };
  m.line = meter->line();
  m.title_line = meter->line(true);
  return saturation_figure(c, spec, m);
}

SaturationCurves lesson_saturation_curves(int keys) {
  // Rows enough for smooth curves at small S, fewer at large S (each row costs S·d_k draws).
  const int k = std::clamp(keys, 2, 64);
  return softmax_saturation(powers_of_two(256), k, std::clamp(12000 / k, 200, 2000), 7);
}

}  // namespace mha::exporter
