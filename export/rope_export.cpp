#include "rope_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "colour_range.hpp"
#include "errors.hpp"
#include "figure_colours.hpp"
#include "model/rope.hpp"

namespace mha::exporter {

namespace {

using colours::kAxis, colours::kGrid, colours::kInk, colours::kMuted;
constexpr std::uint32_t kWithout = colours::kBlue;  // as the Heads view's "without RoPE" line
constexpr std::uint32_t kWith = colours::kOrange;   // the model's scores

std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g", v);
  return s;
}

// One (L, S) plane of a (N, H, L, S) stage at [0, h].
struct Plane {
  const float* p = nullptr;
  std::int64_t rs = 0, cs = 0;
  float at(int i, int j) const { return p[i * rs + j * cs]; }
};
Plane head_plane(const Stage<float>& s, int h) {
  return {s.storage->data() + s.offset + h * s.strides[1], s.strides[2], s.strides[3]};
}

// The smallest of 1, 2, 5, 10, 20, 50, … whose run of `pitch`-pixel steps is at least `room` wide:
// index labels every that many cells stay apart and fall on round numbers.
int nice_step(int room, int pitch) {
  for (int k = 1;; k *= 10)
    for (int m : {1, 2, 5})
      if (k * m * std::max(pitch, 1) >= room) return k * m;
}

}  // namespace

RopeFigure rope_figure(const ForwardResult<float>& r, const RopeSpec& spec, const Tensor<float>* without) {
  Tensor<float> computed;
  if (!without) {
    computed = scores_without_rope(r);  // throws ConfigError("rotary") without RoPE
    without = &computed;
  }
  const Dims& d = r.dims;
  const int H = int(d.H), L = int(d.L), S = int(without->size(2));
  if (spec.head < 0 || spec.head >= H)
    throw ConfigError("--head", "--head " + std::to_string(spec.head) + ": the layer has heads 0 to " +
                                    std::to_string(H - 1));
  const Stage<float>* scaled = find_stage(r, "scores_scaled");
  if (!scaled) throw ConfigError("rotary", "the RoPE figure needs the trace's scores_scaled");
  const Stage<float>* masked = find_stage(r, "scores_masked");
  const int h = spec.head;
  const Plane with = head_plane(*scaled, h);
  const float* plain = without->ptr() + std::int64_t(h) * L * S;  // (L, S)
  auto blocked = [&](int i, int j) {
    if (!masked) return false;
    const float v = head_plane(*masked, h).at(i, j);
    return std::isinf(v) && v < 0;
  };

  // Both maps on the Heads view's range: the finite, unmasked scores of both, symmetric about 0.
  render::ValueRange vr;
  std::vector<float> with_copy(std::size_t(L) * std::size_t(S));  // (L, S)
  for (int i = 0; i < L; ++i)
    for (int j = 0; j < S; ++j) {
      with_copy[std::size_t(i) * std::size_t(S) + std::size_t(j)] = with.at(i, j);
      if (!blocked(i, j)) vr.add(with.at(i, j)), vr.add(plain[i * S + j]);
    }
  const render::Colormap cmap = render::stage_colormap("scores", render::Colormap::diverging);
  const render::ColourRange range = render::auto_colour_range(vr, cmap, false);

  RopeFigure fig;
  fig.vmin = range.vmin;
  fig.vmax = range.vmax;
  fig.mean_without = mean_score_by_offset(plain, L, S);
  fig.mean_with = mean_score_by_offset(with_copy.data(), L, S);
  Drawing& dr = fig.drawing;
  dr.font_path = spec.font_path;
  dr.font_px = spec.font_px;
  dr.transparent = spec.transparent;
  TextMeter meter(spec.font_path, spec.font_px);
  const int line = meter.line(), pad = std::max(6, line / 2);
  auto text = [&](int x, int y, const std::string& s, std::uint32_t c = kInk, bool title = false) {
    dr.texts.push_back({x, y, s, c, title});
    return meter.width(s, title);
  };

  // Title and what the maps are.
  int right = 0;  // the figure's width: the rightmost thing drawn, and a margin
  std::string title = spec.title_prefix + "head " + std::to_string(h) + ": scores without and with RoPE";
  if (d.G > 0 && d.G < d.H)
    title += " (reads K/V head " + std::to_string(h / std::max(1, H / int(d.G))) + " of " +
             std::to_string(d.G) + ")";
  right = std::max(right, pad + text(pad, pad, title, kInk, true));
  int y = pad + meter.line(true) + 2;
  right = std::max(
      right, pad + text(pad, y,
                        "q\xC2\xB7k / \xE2\x88\x9A"
                        "d_k before the rotation (no position at all) and after it (the model's): one colour "
                        "range; grey: masked",
                        kMuted));
  y += line + pad;

  // The two maps: query rows labelled "token i" on the left, key columns by index under each map.
  const int side = std::max(L, S);
  fig.cell = spec.cell_px > 0 ? spec.cell_px : std::clamp(420 / std::max(side, 1), 1, 32);
  const int cell = fig.cell;
  auto row_label = [&](int i) {
    const std::string tok =
        i < int(spec.query_labels.size()) ? spec.query_labels[std::size_t(i)] + "  " : std::string();
    return tok + std::to_string(i);
  };
  const int step = std::max(1, (line + cell - 1) / cell);  // every k-th label where cells are smaller
  int label_w = 0;
  for (int i = 0; i < L; i += step) label_w = std::max(label_w, meter.width(row_label(i)));
  const int map_w = S * cell, map_h = L * cell;
  const int gap = 3 * pad;
  const int left0 = pad + label_w + pad / 2, left1 = left0 + map_w + gap;
  const int key_step = nice_step(meter.width(std::to_string(std::max(S - 1, 0))) + pad / 2, cell);
  const char* map_titles[2] = {"without RoPE", "with RoPE (the model's)"};
  const int map_top = y + meter.line(true) + 2;
  for (int m = 0; m < 2; ++m) {
    const int x0 = m == 0 ? left0 : left1;
    text(x0, y, map_titles[m], kInk, true);
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < S; ++j) {
        const float v = m == 0 ? plain[i * S + j] : with.at(i, j);
        const std::uint32_t c =
            blocked(i, j) ? render::kMaskedColor : render::value_rgba(cmap, v, range.vmin, range.vmax);
        dr.boxes.push_back({x0 + j * cell, map_top + i * cell, cell, cell, c});
      }
    (m == 0 ? fig.without_map : fig.with_map) = {x0, map_top, map_w, map_h};
    // Key indices under the map, every key_step-th: the widest one fits its room.
    for (int j = 0; j < S; j += key_step) {
      const std::string lab = std::to_string(j);
      text(x0 + j * cell + (cell - meter.width(lab)) / 2, map_top + map_h + 2, lab, kMuted);
    }
    const std::string keys = "key j";
    text(x0 + (map_w - meter.width(keys)) / 2, map_top + map_h + 2 + line, keys, kMuted);
  }
  for (int i = 0; i < L; i += step) {
    const std::string lab = row_label(i);
    text(left0 - pad / 2 - meter.width(lab), map_top + i * cell + (cell - line) / 2, lab, kMuted);
  }

  // The colorbar beside the second map: top vmax, middle 0, bottom vmin.
  const int bar_x = left1 + map_w + pad, bar_w = std::max(10, line * 3 / 4);
  const int strips = std::max(map_h, 2);
  for (int k = 0; k < strips; ++k) {
    const float t = 1.0f - float(k) / float(strips - 1);
    dr.boxes.push_back({bar_x, map_top + k, bar_w, 1, render::colormap_rgba(cmap, t)});
  }
  dr.boxes.push_back({bar_x, map_top, bar_w, map_h, 0x00000000, kAxis});  // its border
  const double ticks[3] = {range.vmax, 0.5 * (range.vmin + range.vmax), range.vmin};
  for (int k = 0; k < 3; ++k) {
    const int ty = map_top + (k * (map_h - 1)) / 2;
    right = std::max(right, bar_x + bar_w + pad / 2 +
                                text(bar_x + bar_w + pad / 2, ty - line / 2, number(ticks[k]), kMuted) + pad);
  }
  y = map_top + map_h + 2 + 2 * line + pad;
  right = std::max(right, bar_x + bar_w + pad);

  // The mean score by distance: both curves on one axis, 0 … L-1 along it.
  text(left0, y, "mean score by distance i - j (unmasked cells)", kInk, true);
  y += meter.line(true) + pad / 2;
  const int plot_left = left0, plot_right = left1 + map_w, plot_top = y,
            plot_bottom = y + std::max(8 * line, map_h / 2);
  const std::size_t n = std::min(fig.mean_without.size(), fig.mean_with.size());
  double lo = 0, hi = 0;
  for (std::size_t i = 0; i < n; ++i)
    lo = std::min({lo, fig.mean_without[i], fig.mean_with[i]}),
    hi = std::max({hi, fig.mean_without[i], fig.mean_with[i]});
  if (hi - lo < 1e-9) hi = lo + 1;
  auto px = [&](std::size_t i) {
    return float(plot_left) + (n > 1 ? float(i) / float(n - 1) : 0.5f) * float(plot_right - plot_left);
  };
  auto py = [&](double v) {
    return float(plot_bottom) - float((v - lo) / (hi - lo)) * float(plot_bottom - plot_top);
  };
  for (double v : {lo, 0.0, hi}) {  // grid lines with their values on the left
    const float gy = py(v);
    dr.lines.push_back(
        {{{float(plot_left), gy}, {float(plot_right), gy}}, v == 0.0 ? kAxis : kGrid, 1, false});
    const std::string lab = number(v);
    text(plot_left - pad / 2 - meter.width(lab), int(gy) - line / 2, lab, kMuted);
  }
  dr.lines.push_back(
      {{{float(plot_left), float(plot_top)}, {float(plot_left), float(plot_bottom)}}, kAxis, 1, false});
  const int dist_step =
      n > 1 ? nice_step(meter.width(std::to_string(n - 1)) + pad, (plot_right - plot_left) / int(n - 1)) : 1;
  for (std::size_t i = 0; i < n; ++i) {  // a tick at each distance, a label at round ones
    const float tx = px(i);
    dr.lines.push_back({{{tx, float(plot_bottom)}, {tx, float(plot_bottom + pad / 2)}}, kAxis, 1, false});
    if (i % std::size_t(dist_step)) continue;
    const std::string lab = std::to_string(i);
    text(int(tx) - meter.width(lab) / 2, plot_bottom + pad / 2, lab, kMuted);
  }
  const std::string xl = "distance i - j (query i, key j)";
  text(plot_left + (plot_right - plot_left - meter.width(xl)) / 2, plot_bottom + pad / 2 + line, xl, kMuted);
  for (int k = 0; k < 2; ++k) {
    const std::vector<double>& v = k == 0 ? fig.mean_without : fig.mean_with;
    Drawing::Line curve;
    curve.color = k == 0 ? kWithout : kWith;
    curve.width = 2.5f;
    for (std::size_t i = 0; i < n; ++i) curve.points.push_back({px(i), py(v[i])});
    if (n == 1) curve.points.push_back({px(0) + 1, py(v[0])});
    dr.lines.push_back(std::move(curve));
  }
  // The legend under the axis.
  y = plot_bottom + pad / 2 + 2 * line + pad / 2;
  int x = plot_left;
  for (int k = 0; k < 2; ++k) {
    const float my = float(y) + float(line) / 2;
    dr.lines.push_back({{{float(x), my}, {float(x + 2 * line), my}}, k == 0 ? kWithout : kWith, 3, false});
    x += 2 * line + pad / 2;
    x +=
        text(x, y, k == 0 ? "without RoPE: depends on the tokens alone" : "with RoPE: depends on i - j too") +
        2 * pad;
  }
  right = std::max({right, x, plot_right + pad});
  dr.width = right;
  dr.height = y + line + pad;
  return fig;
}

}  // namespace mha::exporter
