// The reshape figure (see reshape_export.hpp): three arrangements of the same cells, laid out with
// the exporter's font metrics and drawn as a Drawing, so PNG and SVG share every position.
#include "reshape_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "errors.hpp"
#include "head_colour.hpp"
#include "labels.hpp"
#include "stage_table.hpp"

namespace mha::exporter {

namespace {

constexpr int kPad = 10;
constexpr int kMaxColumns = 2048;  // every column of q is drawn, at least 2 px wide
constexpr std::uint32_t kMuted = 0xFF707070;
constexpr std::uint32_t kWrong = 0xFF2828C8;  // red: a mistake's line and its error

const Stage<float>& need(const ForwardResult<float>& r, const char* name) {
  if (const Stage<float>* s = r.trace.find(name)) return *s;
  throw ConfigError("--figure", std::string("the reshape figure needs the trace stage ") + name);
}

std::string step_caption(const Stage<float>& s) {
  return "shape " + shape_str(s.shape) + "  strides " + shape_str(s.strides) +
         (s.is_contiguous() ? "  contiguous" : "  not contiguous");
}

}  // namespace

const char* const kViewRuntimeError =
    "RuntimeError: view size is not compatible with input tensor's size and stride (at least one "
    "dimension spans across two contiguous subspaces). Use .reshape(...) instead.";

ReshapeFigure reshape_figure(const ForwardResult<float>& r, const ReshapeSpec& spec) {
  const Stage<float>& q = need(r, stage_name::q);
  const Stage<float>& q_view = need(r, stage_name::q_view);
  const Stage<float>& q_heads = need(r, stage_name::q_heads);
  const Dims& d = r.dims;
  const int n = spec.batch_index;
  if (n < 0 || n >= d.N)
    throw ConfigError("--batch-index", "--batch-index " + std::to_string(n) + " is out of range: q has " +
                                           std::to_string(d.N) + " batch items (0.." +
                                           std::to_string(d.N - 1) + ")");
  const int H = int(d.H), dk = int(d.d_k), E = int(d.qdim());  // E: q's width, H·d_k
  if (E > kMaxColumns)
    throw ConfigError("--figure", "the reshape figure draws every column of q; E = " + std::to_string(E) +
                                      " is more than " + std::to_string(kMaxColumns) + ", too wide to draw");

  ReshapeFigure fig;
  Drawing& dr = fig.drawing;
  dr.font_path = spec.font_path;
  dr.font_px = spec.font_px;
  dr.transparent = spec.transparent;
  TextMeter meter(spec.font_path, spec.font_px);
  const int line = meter.line(), title_line = meter.line(true);
  fig.rows = int(std::min<std::int64_t>(d.L, kReshapeMaxRows));
  // Cells: wide enough to see at small E, at least 2 px at large E; tall enough for a token label.
  fig.cell_w = spec.cell_px > 0 ? spec.cell_px : std::clamp(480 / std::max(1, E), 2, 24);
  fig.cell_h = std::max(fig.cell_w, line + 2);
  fig.gap = std::max(8, fig.cell_w);
  const int cw = fig.cell_w, ch = fig.cell_h, rows = fig.rows;

  auto token = [&](int i) {
    return i < int(spec.tokens.size()) ? render::valid_utf8(spec.tokens[std::size_t(i)]) : std::to_string(i);
  };
  int label_w = 0;
  for (int i = 0; i < rows; ++i) label_w = std::max(label_w, meter.width(token(i)));
  label_w += 6;

  // The largest |q| of this batch item sets the brightness, as the app's grid does.
  float maxabs = 0;
  for (int i = 0; i < int(d.L); ++i)
    for (int e = 0; e < E; ++e) {
      const float v = q.at({n, i, e});
      if (std::isfinite(v)) maxabs = std::max(maxabs, std::fabs(v));
    }
  fig.maxabs = maxabs > 0 ? maxabs : 1.0f;

  // Three columns: captions (expression, shape/strides) above each, cells below.
  // Mistake 1: the split straight to (N, H, L, d_k), no transpose: contiguous, and wrong.
  const bool no_transpose = spec.mistake == 1;
  const std::string code[3] = {"q = F.linear(query, W_q, b_q)", "q_view = q.view(N, L, H, d_k)",
                               no_transpose ? "q_heads = q.view(N, H, L, d_k)   # mistake 1: no transpose"
                                            : "q_heads = q_view.transpose(1, 2)"};
  const std::string caption[3] = {step_caption(q), step_caption(q_view),
                                  no_transpose
                                      ? "shape " + shape_str(q_heads.shape) + "  strides (" +
                                            std::to_string(H * d.L * dk) + ", " + std::to_string(d.L * dk) +
                                            ", " + std::to_string(dk) + ", 1)  contiguous: the wrong numbers"
                                      : step_caption(q_heads)};
  const int head_caption_h = line + 2;
  const int block_w = dk * cw, block_h = rows * ch;
  // After the transpose the heads are blocks, up to four in a column; more heads add columns, so
  // that 16 heads do not make the figure sixteen blocks tall.
  const int bcols = spec.vertical ? H : (H + 3) / 4, brows = (H + bcols - 1) / bcols;
  const int pitch_x = block_w + fig.gap + label_w, pitch_y = block_h + fig.gap + head_caption_h;
  const int cells_w[3] = {E * cw, H * block_w + (H - 1) * fig.gap,
                          bcols * block_w + (bcols - 1) * (fig.gap + label_w)};
  const int left[3] = {label_w, label_w, label_w};
  fig.stacked_cols = bcols;
  fig.pitch_x = pitch_x;
  fig.pitch_y = pitch_y;
  int col_w[3];
  for (int k = 0; k < 3; ++k)
    col_w[k] = std::max({left[k] + cells_w[k], meter.width(code[k]), meter.width(caption[k])});
  const int arrow_w = meter.width("\xE2\x86\x92") + 2 * kPad;

  const std::string title = "reshape of q, batch item " + std::to_string(n) +
                            ": (N, L, E) = " + shape_str(q.shape) +
                            "  \xE2\x86\x92  view (N, L, H, d_k)  \xE2\x86\x92  transpose (N, H, L, d_k)";
  const int top = kPad + title_line + kPad;
  const int cells_top = top + 2 * line + kPad + head_caption_h;
  int x = kPad, y = top;
  Rect* areas[3] = {&fig.flat, &fig.split, &fig.stacked};
  for (int k = 0; k < 3; ++k) {
    const int step_top = spec.vertical ? y : top,
              step_cells = spec.vertical ? y + (cells_top - top) : cells_top;
    dr.texts.push_back({x, step_top, code[k], k == 2 && no_transpose ? kWrong : 0xFF202020});
    dr.texts.push_back({x, step_top + line, caption[k], k == 2 && no_transpose ? kWrong : kMuted});
    Rect& a = *areas[k];
    a.x = x + left[k];
    a.y = step_cells;
    a.w = cells_w[k];
    a.h = k == 2 ? brows * block_h + (brows - 1) * (fig.gap + head_caption_h) : block_h;
    if (spec.vertical) {  // the next step below, an arrow down between
      if (k < 2) dr.texts.push_back({a.x + a.w / 2, a.y + a.h + 2, "\xE2\x86\x93"});
      y = a.y + a.h + line + kPad;
      x = kPad;
    } else {
      if (k < 2)
        dr.texts.push_back({x + col_w[k] + kPad - 2, cells_top + block_h / 2 - line / 2, "\xE2\x86\x92"});
      x += col_w[k] + (k < 2 ? arrow_w : 0);
    }
  }
  int widest = 0;
  for (int k = 0; k < 3; ++k) widest = std::max(widest, col_w[k]);
  dr.width =
      std::max(spec.vertical ? kPad + widest + kPad : x + kPad, kPad + meter.width(title, true) + kPad);
  const int bottom = std::max(fig.flat.y + fig.flat.h, fig.stacked.y + fig.stacked.h);
  dr.texts.insert(dr.texts.begin(), Drawing::Text{kPad, kPad, title, 0xFF202020, true});

  // The cells. Values read through each stage's own strides: q_view and q_heads are views of q.
  for (int i = 0; i < rows; ++i) {
    dr.texts.push_back({kPad, fig.flat.y + i * ch + (ch - line) / 2, token(i)});
    dr.texts.push_back({fig.split.x - label_w, fig.split.y + i * ch + (ch - line) / 2, token(i)});
  }
  // Head captions: "head h", or "h3" where that does not fit, or every k-th one when neither does.
  auto head_caption = [&](int h, int room) -> std::string {
    const std::string full = "head " + std::to_string(h), brief = "h" + std::to_string(h);
    if (meter.width("head " + std::to_string(H - 1)) <= room - 4) return full;
    const int step = render::label_step(float(room), float(meter.width("h" + std::to_string(H - 1)) + 4));
    return h % step == 0 ? brief : "";
  };
  for (int h = 0; h < H; ++h) {
    const int sx = fig.split.x + h * (block_w + fig.gap);
    const std::uint32_t hue = render::head_colour(h, H, 1, 1);
    dr.texts.push_back({sx, fig.split.y - head_caption_h, head_caption(h, block_w + fig.gap), hue});
    const int tx = fig.stacked.x + (h % bcols) * pitch_x, ty = fig.stacked.y + (h / bcols) * pitch_y;
    dr.texts.push_back({tx, ty - head_caption_h, head_caption(h, bcols > 1 ? pitch_x : 1 << 20), hue});
    // Mistake 1: "head" h's row i is the d_k values at h·L·d_k + i·d_k of the item's memory: a
    // piece of token (h·L + i)·d_k / E, from the head its column belongs to.
    auto wrong_at = [&](int i, int c) {
      const std::int64_t f = (std::int64_t(h) * d.L + i) * dk + c;
      return std::pair<int, int>(int(f / E), int(f % E));  // token, column of q
    };
    for (int i = 0; i < rows; ++i)
      dr.texts.push_back({tx - label_w, ty + i * ch + (ch - line) / 2,
                          no_transpose ? token(wrong_at(i, 0).first) : token(i),
                          no_transpose ? kWrong : kMuted});
    for (int i = 0; i < rows; ++i)
      for (int c = 0; c < dk; ++c) {
        const int e = h * dk + c;
        dr.boxes.push_back({fig.flat.x + e * cw, fig.flat.y + i * ch, cw, ch,
                            render::head_colour(h, H, q.at({n, i, e}), fig.maxabs)});
        dr.boxes.push_back({sx + c * cw, fig.split.y + i * ch, cw, ch,
                            render::head_colour(h, H, q_view.at({n, i, h, c}), fig.maxabs)});
        if (no_transpose) {
          const auto [t, qe] = wrong_at(i, c);
          dr.boxes.push_back({tx + c * cw, ty + i * ch, cw, ch,
                              render::head_colour(qe / dk, H, q.at({n, t, qe}), fig.maxabs)});
        } else {
          dr.boxes.push_back({tx + c * cw, ty + i * ch, cw, ch,
                              render::head_colour(h, H, q_heads.at({n, h, i, c}), fig.maxabs)});
        }
      }
  }
  int note_y = bottom + kPad;
  if (rows < d.L) {
    dr.texts.push_back({kPad, note_y,
                        "first " + std::to_string(rows) + " of L = " + std::to_string(d.L) + " tokens drawn",
                        kMuted});
    note_y += line;
  }
  std::vector<std::pair<std::string, std::uint32_t>> notes;
  if (no_transpose) {
    notes = {
        {"No transpose: each \"head\" is L\xC2\xB7"
         "d_k values in a row of memory, whole tokens' pieces "
         "(labels: the token each row holds),",
         kWrong},
        {"and its colours are several heads' columns: the heads' numbers are mixed, with no error raised.",
         kWrong}};
  } else if (spec.vertical) {
    notes = {{"view: the same memory read as (N, L, H, d_k); transpose: only the strides change", kMuted},
             {"(q_heads is not contiguous), each head now an (L, d_k) matrix", kMuted}};
  } else {
    notes = {
        {"view: the same memory read as (N, L, H, d_k); transpose: only the strides change "
         "(q_heads is not contiguous), each head now an (L, d_k) matrix",
         kMuted}};
  }
  if (spec.mistake == 2) {  // the merge: .view on the transposed context
    const Stage<float>& ct = need(r, "context_transposed");
    const bool fails = !ct.is_contiguous();
    notes.push_back(
        {"Mistake 2, the merge: context.transpose(1, 2).view(N, L, E)   # forgot .contiguous()", kWrong});
    notes.push_back({fails
                         ? "RuntimeError: view size is not compatible with input tensor's size and stride"
                         : "Here the view succeeds (L = 1 or H = 1); with L, H \xE2\x89\xA5 2 torch raises:",
                     kWrong});
    notes.push_back(
        {fails ? "(at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead."
               : kViewRuntimeError,
         kWrong});
    notes.push_back({"context_transposed: " + step_caption(ct) +
                         ". Merging (H, d_k) needs stride(H) = d_k = " + std::to_string(dk) + ", but it is " +
                         std::to_string(ct.strides.size() > 2 ? ct.strides[2] : 0) + ".",
                     kMuted});
    notes.push_back(
        {"The fix: context.transpose(1, 2).contiguous().view(N, L, E), or .reshape(N, L, E): one copy.",
         0xFF202020});
  } else if (spec.mistake == 3) {  // the heads' concat returned as the output
    const Stage<float>& concat = need(r, "concat");
    const Stage<float>& out = need(r, "output");
    float diff = 0;
    for (std::int64_t i = 0; i < d.L; ++i)
      for (std::int64_t e = 0; e < d.qdim(); ++e) {
        const float a = concat.at({n, i, e}), b = out.at({n, i, e});
        if (std::isfinite(a - b)) diff = std::max(diff, std::fabs(a - b));
      }
    char line3[160];
    std::snprintf(line3, sizeof line3, "largest |concat - output| here: %.3g, with no error raised.",
                  double(diff));
    notes.push_back(
        {"Mistake 3: return concat   # no out_proj: F.linear(concat, W_o, b_o) left out", kWrong});
    notes.push_back({"The heads sit side by side, never mixed: the output differs from torch's,", kWrong});
    notes.push_back({line3, kWrong});
  }
  for (const auto& [text, colour] : notes) {
    dr.texts.push_back({kPad, note_y, text, colour});
    dr.width = std::max(dr.width, kPad + meter.width(text) + kPad);
    note_y += line;
  }
  dr.height = note_y + kPad;
  dr.texts.erase(
      std::remove_if(dr.texts.begin(), dr.texts.end(), [](const Drawing::Text& t) { return t.text.empty(); }),
      dr.texts.end());  // captions skipped where heads are too narrow
  return fig;
}

}  // namespace mha::exporter
