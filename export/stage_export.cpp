// Slicing a trace stage into export panels (see stage_export.hpp). Panels view the trace's storage
// through its strides, so strided views (q_heads, context_transposed) export without a copy.
#include "stage_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "colour_range.hpp"
#include "errors.hpp"
#include "labels.hpp"

namespace mha::exporter {

namespace {

// Which axes of a batch-first stage are the head, the rows and the columns.
struct Axes {
  int head = -1, rows = 1, cols = 2;
};

Axes axes_of(const Stage<float>& st) {
  if (st.shape.size() == 3) return {};
  if (st.shape.size() != 4)
    throw ConfigError("--stage", "stage " + st.name + " has shape " + shape_str(st.shape) +
                                     "; only 3-D and 4-D stages export as heatmaps");
  // The *_view stages and context_transposed are (N, L, H, d_k): heads are axis 2.
  const bool view = st.name.size() > 5 && st.name.compare(st.name.size() - 5, 5, "_view") == 0;
  if (view || st.name == "context_transposed") return {2, 1, 3};
  return {1, 2, 3};
}

const Stage<float>& stage_named(const ForwardResult<float>& r, const std::string& name) {
  if (const Stage<float>* st = mha::find_stage(r, name)) return *st;  // left out: computed here
  std::string valid;
  for (const Stage<float>* s : trace_order(r.trace)) valid += (valid.empty() ? "" : ", ") + s->name;
  throw ConfigError("--stage", "no stage named \"" + name + "\"; this trace has: " + valid);
}

bool is_weights(const std::string& name) {
  return name == "attn_weights" || name == "attn_weights_avg";
}
bool is_attention(const std::string& name) {  // (L, S') query × key maps
  return name == "scores" || name == "scores_scaled" || name == "attn_mask" || name == "scores_masked" ||
         is_weights(name);
}
bool is_key_side(const std::string& name) {  // rows are key/value tokens
  return name[0] == 'k' || name[0] == 'v';
}

}  // namespace

int stage_heads(const ForwardResult<float>& r, const std::string& stage) {
  const Stage<float>& st = stage_named(r, stage);
  const Axes ax = axes_of(st);
  return ax.head < 0 ? 0 : int(st.shape[std::size_t(ax.head)]);
}

StageFigure stage_figure(const ForwardResult<float>& r, const StageSlice& sl) {
  const Stage<float>& st = stage_named(r, sl.stage);
  const Axes ax = axes_of(st);
  const std::int64_t N = st.shape[0];
  if (sl.batch_index < 0 || sl.batch_index >= N)
    throw ConfigError("--batch-index", "--batch-index " + std::to_string(sl.batch_index) +
                                           " is out of range: " + st.name + " has " + std::to_string(N) +
                                           " batch items (0.." + std::to_string(N - 1) + ")");
  StageFigure fig;
  fig.heads = ax.head < 0 ? 0 : int(st.shape[std::size_t(ax.head)]);
  if (fig.heads && sl.head >= fig.heads)
    throw ConfigError("--head", "--head " + std::to_string(sl.head) + " is out of range: " + st.name +
                                    " has " + std::to_string(fig.heads) + " heads (0.." +
                                    std::to_string(fig.heads - 1) + ", all, avg)");
  const int rows = int(st.shape[std::size_t(ax.rows)]), cols = int(st.shape[std::size_t(ax.cols)]);
  const float* base = st.storage->data() + st.offset + sl.batch_index * st.strides[0];
  const std::int64_t rs = st.strides[std::size_t(ax.rows)], cs = st.strides[std::size_t(ax.cols)];
  const std::int64_t hs = ax.head < 0 ? 0 : st.strides[std::size_t(ax.head)];

  // The mask (additive, -inf = blocked) for the maps it applies to, per head.
  const Stage<float>* mask = is_attention(st.name) ? r.trace.find("attn_mask") : nullptr;
  auto blocked_at = [&](int h, int i, int j) {
    const std::vector<std::int64_t>& ms = mask->strides;
    return mask->storage->data()[mask->offset + sl.batch_index * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]] ==
           -std::numeric_limits<float>::infinity();
  };

  std::vector<int> heads;
  if (!fig.heads || sl.head >= 0)
    heads.push_back(std::max(0, sl.head));
  else if (sl.head == kAllHeads)
    for (int h = 0; h < fig.heads; ++h) heads.push_back(h);
  const bool average = fig.heads && sl.head < 0;  // avg alone, or after every head

  // Labels come from sentences, tokenizers and files: whatever is not UTF-8 becomes U+FFFD here, so
  // every format (image text, CSV) gets well-formed text.
  std::vector<std::string> query_labels, key_labels;
  for (const std::string& t : sl.query_labels) query_labels.push_back(render::valid_utf8(t));
  for (const std::string& t : sl.key_labels) key_labels.push_back(render::valid_utf8(t));
  auto labels = [&](Panel& p) {
    if (rows == r.dims.L && !is_key_side(st.name)) p.row_labels = query_labels;
    if (is_key_side(st.name)) p.row_labels = key_labels;
    if (is_attention(st.name)) p.col_labels = key_labels;
  };
  for (int h : heads) {
    Panel p;
    p.values = base + h * hs;
    p.rows = rows;
    p.cols = cols;
    p.row_stride = rs;
    p.col_stride = cs;
    if (fig.heads && sl.head == kAllHeads) p.title = "head " + std::to_string(h);
    labels(p);
    if (mask) {
      std::vector<char> m(std::size_t(rows) * std::size_t(cols));
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
          m[std::size_t(i) * std::size_t(cols) + std::size_t(j)] = blocked_at(h, i, j);
      fig.masks.push_back(std::move(m));
    }
    fig.spec.panels.push_back(std::move(p));
  }
  if (average) {
    // The mean over heads, as attn_weights_avg is; a NaN in any head stays NaN, as in torch.
    std::vector<float> avg(std::size_t(rows) * std::size_t(cols), 0.0f);
    std::vector<char> m(avg.size(), 1);
    for (int h = 0; h < fig.heads; ++h)
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          const std::size_t k = std::size_t(i) * std::size_t(cols) + std::size_t(j);
          avg[k] += base[h * hs + i * rs + j * cs] / float(fig.heads);
          if (mask) m[k] = m[k] && blocked_at(h, i, j);  // masked in the average only where every head is
        }
    Panel p;
    p.values = avg.data();
    p.rows = rows;
    p.cols = cols;
    p.row_stride = cols;
    p.title = sl.head == kAllHeads ? "average" : "";
    labels(p);
    fig.averages.push_back(std::move(avg));
    if (mask) fig.masks.push_back(std::move(m));
    fig.spec.panels.push_back(std::move(p));
  }
  if (mask)  // set after the moves: the vectors' buffers no longer move
    for (std::size_t k = 0; k < fig.spec.panels.size(); ++k) {
      const char* m = fig.masks[k].data();
      fig.spec.panels[k].blocked = [m, cols](int i, int j) {
        return m[std::size_t(i) * std::size_t(cols) + std::size_t(j)] != 0;
      };
    }

  // Colours as the Heads view draws this stage: its map, and one range over every head of the item.
  ExportSpec& s = fig.spec;
  const bool weights = is_weights(st.name);
  s.colormap = render::stage_colormap(
      st.name, sl.colormap.value_or(weights ? render::Colormap::viridis : render::Colormap::diverging));
  s.row_scale = weights && sl.row_scale;
  render::ValueRange values;
  for (int h = 0; h < std::max(fig.heads, 1); ++h)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) values.add(base[h * hs + i * rs + j * cs]);
  const render::ColourRange range = render::auto_colour_range(values, s.colormap, weights, s.row_scale);
  s.vmin = range.vmin;
  s.vmax = range.vmax;
  const std::string which = !fig.heads                ? ""
                            : sl.head == kAllHeads    ? ", all heads"
                            : sl.head == kHeadAverage ? ", head average"
                                                      : ", head " + std::to_string(sl.head);
  s.title = st.name + "  (batch " + std::to_string(sl.batch_index) + which + ")  shape " +
            shape_str(st.shape) + "  N=" + std::to_string(r.dims.N) + " H=" + std::to_string(r.dims.H) +
            " L=" + std::to_string(r.dims.L) + " S=" + std::to_string(r.dims.S_total);
  if (st.name == "attn_mask") s.title += "  hatched: -inf (blocked)";
  if (s.row_scale) s.title += "  colour: each row to its max";
  return fig;
}

AttentionMap attention_map(const Array& a, std::optional<std::int64_t> layer, const std::string& name) {
  if (a.dtype != DType::f32 && a.dtype != DType::f64 && a.dtype != DType::f16 && a.dtype != DType::bf16)
    throw DtypeError("--attention",
                     name + ": dtype " + dtype_name(a.dtype) +
                         "; attention weights are float (float32, float64, float16 or bfloat16)");
  const std::size_t rank = a.shape.size();
  if (rank < 2 || rank > 5)
    throw ShapeError("--attention", name + ": shape " + shape_str(a.shape) +
                                        "; expected (T, T), (H, T, T), (N, H, T, T) or (layers, N, H, T, T)");
  for (std::int64_t size : a.shape)
    if (size == 0) throw ShapeError("--attention", name + ": shape " + shape_str(a.shape) + " is empty");
  const std::int64_t L = a.shape[rank - 2], S = a.shape[rank - 1];
  if (L != S)
    throw ShapeError("--attention", name + ": shape " + shape_str(a.shape) + " ends in " + std::to_string(L) +
                                        " × " + std::to_string(S) +
                                        "; expected square (T, T) maps, one row and one column per token");
  AttentionMap m;
  Shape shape(a.shape.end() - std::ptrdiff_t(std::min<std::size_t>(rank, 4)), a.shape.end());
  while (shape.size() < 4) shape.insert(shape.begin(), 1);  // (T, T) -> (1, 1, T, T)
  if (rank == 5) {
    m.layers = a.shape[0];
    m.layer = layer.value_or(0);
    if (m.layer < 0 || m.layer >= m.layers)
      throw ConfigError("--layer", "--layer " + std::to_string(m.layer) + " is out of range: " + name +
                                       " has " + std::to_string(m.layers) + " layers (0.." +
                                       std::to_string(m.layers - 1) + ")");
  } else if (layer) {
    throw ConfigError("--layer", "--layer: " + name + " has no layer axis (shape " + shape_str(a.shape) +
                                     "); only a 5-D (layers, N, H, T, T) array has layers to pick from");
  }
  // Only the chosen layer is converted: a stacked file can be a model's every layer.
  const std::int64_t n = numel(shape);
  auto storage = std::make_shared<std::vector<float>>(std::size_t(n));
  convert_elements(a.dtype, a.data.data() + std::size_t(m.layer * n) * dtype_size(a.dtype), n,
                   storage->data());

  // A softmax's rows are probabilities summing to 1 (up to rounding in the file's dtype); NaN rows
  // (every key masked, in torch) fail both checks.
  const double tolerance = a.dtype == DType::f32 || a.dtype == DType::f64 ? 1e-3 : 1e-2;
  const std::int64_t H = shape[1], rows = n / S;
  std::int64_t outside = 0, bad_rows = 0, first_outside = -1, first_bad_row = -1;
  double first_sum = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (std::int64_t j = 0; j < S; ++j) {
      const float v = (*storage)[std::size_t(r * S + j)];
      sum += v;
      if (!(v >= 0.0f && v <= 1.0f) && outside++ == 0) first_outside = r * S + j;
    }
    if (!(std::fabs(sum - 1.0) <= tolerance) && bad_rows++ == 0) first_bad_row = r, first_sum = sum;
  }
  const std::string at_layer = m.layers ? "layer " + std::to_string(m.layer) + ", " : "";
  auto where = [&](std::int64_t row) {  // row of the (N·H·T, T) view
    return at_layer + "batch " + std::to_string(row / L / H) + ", head " + std::to_string(row / L % H) +
           ", row " + std::to_string(row % L);
  };
  char text[48];
  if (outside) {
    std::snprintf(text, sizeof text, "%g", double((*storage)[std::size_t(first_outside)]));
    m.warnings.push_back(name + ": " + std::to_string(outside) + " value" + (outside == 1 ? "" : "s") +
                         " outside [0, 1]; the first, " + text + ", at " + where(first_outside / S) +
                         ", column " + std::to_string(first_outside % S));
  }
  if (bad_rows) {
    std::snprintf(text, sizeof text, "%.6g", first_sum);
    m.warnings.push_back(name + ": " + std::to_string(bad_rows) + " row" + (bad_rows == 1 ? "" : "s") +
                         " not summing to 1; the first at " + where(first_bad_row) + " sums to " + text +
                         " (attention weights are a softmax over the keys)");
  }

  Stage<float> st;
  st.name = "attn_weights";
  st.formula = "read from " + name;
  st.note = "attention weights computed elsewhere";
  st.shape = shape;
  st.strides = contiguous_strides(shape);
  st.storage = std::move(storage);
  m.result.trace.stages.push_back(std::move(st));
  Dims& d = m.result.dims;
  d.N = shape[0];
  d.H = d.G = H;
  d.L = d.S = d.S_total = L;
  return m;
}

StageFigure difference_figure(const ForwardResult<float>& a, const StageSlice& sa, const std::string& a_name,
                              const ForwardResult<float>& b, const StageSlice& sb,
                              const std::string& b_name) {
  if (sa.head == kAllHeads || sb.head == kAllHeads)
    throw ConfigError("--head",
                      "a difference map subtracts one head (or the average) from another, not a grid");
  const StageFigure fa = stage_figure(a, sa), fb = stage_figure(b, sb);
  const Panel& pa = fa.spec.panels[0];
  const Panel& pb = fb.spec.panels[0];
  if (pa.rows != pb.rows || pa.cols != pb.cols)
    throw ConfigError("--minus", "cannot subtract: " + sa.stage + " is " + std::to_string(pa.rows) + "×" +
                                     std::to_string(pa.cols) + " for " + a_name + " but " +
                                     std::to_string(pb.rows) + "×" + std::to_string(pb.cols) + " for " +
                                     b_name);
  const int rows = pa.rows, cols = pa.cols;
  StageFigure fig;
  fig.heads = fa.heads;
  std::vector<float> diff(std::size_t(rows) * std::size_t(cols));
  std::vector<char> blocked(diff.size(), 0);
  bool any_blocked = false;
  float m = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const std::size_t k = std::size_t(i) * std::size_t(cols) + std::size_t(j);
      const float d =
          pa.values[i * pa.row_stride + j * pa.col_stride] - pb.values[i * pb.row_stride + j * pb.col_stride];
      const bool ba = pa.blocked && pa.blocked(i, j), bb = pb.blocked && pb.blocked(i, j);
      diff[k] = d;
      blocked[k] = (ba && bb) || ((ba || bb) && !std::isfinite(d) && !std::isnan(d));
      any_blocked = any_blocked || blocked[k];
      if (std::isfinite(d) && !blocked[k]) m = std::max(m, std::fabs(d));
    }
  fig.max_abs_diff = m;
  Panel p;
  p.rows = rows;
  p.cols = cols;
  p.row_stride = cols;
  p.row_labels = pa.row_labels;
  p.col_labels = pa.col_labels;
  fig.averages.push_back(std::move(diff));
  p.values = fig.averages[0].data();
  if (any_blocked) {
    fig.masks.push_back(std::move(blocked));
    const char* bl = fig.masks[0].data();
    p.blocked = [bl, cols](int i, int j) {
      return bl[std::size_t(i) * std::size_t(cols) + std::size_t(j)] != 0;
    };
  }
  fig.spec.panels.push_back(std::move(p));
  fig.spec.colormap = render::Colormap::diverging;
  fig.spec.vmax = m > 0 ? m : 1.0f;  // identical maps still get a readable colorbar
  fig.spec.vmin = -fig.spec.vmax;
  char max_text[32];
  std::snprintf(max_text, sizeof max_text, "%.3g", double(m));
  fig.spec.title = sa.stage + ": " + a_name + " \u2212 " + b_name + "  (batch " +
                   std::to_string(sa.batch_index) + ")  max |diff| = " + max_text;
  return fig;
}

}  // namespace mha::exporter
