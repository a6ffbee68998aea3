// Large L view: one head's (L, S) attention weights at sizes where the full trace is refused or too
// slow (L = S = 4096 and beyond), computed for what is on screen only. On the GPU: q, k, v and each
// row's max and log-sum-exp stay there, and the tile on screen is recomputed exactly (or as block
// max / mean when zoomed out) into a texture. On the CPU (no hardware GPU): the on-demand forward keeps
// q, k, v and no (N, H, L, S) array, and the tile on screen is computed by mha::stage_blocks.
#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <string>

#include "compute.hpp"
#include "errors.hpp"
#include "gpu/gpu_backend.hpp"
#include "heatmap.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "studio_names.hpp"

namespace mha::app {

namespace {

using Reduce = gpu::GpuBackend::BlockReduce;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string mib(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return b;
}

// What the preparing thread hands back: the row statistics of one problem (GPU) or its on-demand
// forward (CPU), or why not.
struct Prepared {
  std::vector<std::int64_t> key;
  gpu::GpuBackend::RowStats stats;                  // (N, H, L) each
  std::shared_ptr<const ForwardResult<float>> cpu;  // the CPU path: q, k, v, ..., no (N, H, L, S) stage
  Dims dims;
  std::uint64_t gpu_bytes = 0, trace_bytes = 0;
  std::string error;
  double ms = 0;
};

// One tile of the CPU path, computed on a thread of its own: stage_blocks of attn_weights[n, h].
struct CpuTile {
  std::vector<std::int64_t> key;  // n, h, i0, j0, block, rows, cols, mean
  std::int64_t i0 = 0, j0 = 0, block = 1, rows = 0, cols = 0;
  Tensor<float> values;  // (rows, cols)
  float head_max = 1;    // the head's largest weight: the colour scale's top
  double ms = 0;
  std::string error;
};

// What the view keeps between frames (one instance: there is one Large L tab).
struct LargeView {
  int drawn_frame = -1;                    // ImGui's frame count when the view last drew
  std::vector<std::int64_t> prepared_key;  // the problem the row statistics belong to
  std::future<Prepared> pending;           // the preparation running on its thread, if any
  Clock::time_point pending_since;
  gpu::GpuBackend::RowStats stats;  // (N, H, L) each
  Dims dims;
  std::string error;  // the GPU path's DeviceError / input error: the view falls back
  double prepare_ms = 0, render_ms = 0;
  std::uint64_t gpu_bytes = 0, trace_bytes = 0;
  int n = 0, h = 0, zoom = 0;               // zoom: log2 of screen pixels per cell (negative: LOD)
  bool fitted = false, log_colour = false;  // log: for masks whose weights span decades (causal)
  Reduce reduce = Reduce::max;
  double oi = 0, oj = 0;                  // query row and key column at the map's top-left corner
  std::vector<std::int64_t> texture_key;  // the tile kept in Textures as "large/tile" (empty: none yet)
  std::vector<std::int64_t> hover_key;
  float hover_value = 0;
  // The CPU path: the on-demand forward, the tile on screen and the one being computed.
  std::shared_ptr<const ForwardResult<float>> cpu;
  std::string cpu_reason;  // why the CPU computes: no GPU, a software renderer, the GPU failed
  std::future<CpuTile> tile_pending;
  CpuTile tile;
  std::uint64_t tile_version = 0;
  std::vector<std::int64_t> head_max_key;  // n, h of head_max
  float head_max = 1;
  std::vector<std::int64_t> gpu_failed_key;  // the problem the GPU failed on (the CPU computes it)
  std::string gpu_error;
  LargeViewInfo info;  // what the last frame drew
};

// Whether the scenario's mask scales to any L: a named preset (causal, sliding window, blocks,
// prefix, random, padding) is made again at the new size; cells drawn by hand are not.
bool mask_scales(const MaskSpec& m) {
  return m.preset != MaskPreset::none && m.preset != MaskPreset::custom;
}

// The scenario's E, H, G, N, bias, seed and weights at L = S = `len`, self-attention, with its mask
// preset made at that size (one (L, S) mask for every item and head), or a causal mask when `causal`
// is ticked; the sentence, edited inputs and a hand-drawn mask do not scale, so they drop.
Built large_problem(const Scenario& scenario, std::int64_t len, bool causal) {
  Scenario s = scenario;
  s.model.clear();  // one module with default init at the model's sizes (the view says so)
  s.tgt_len = s.src_len = len;
  s.sentence.clear();
  s.source_sentence.clear();
  s.cross_attention = s.separate_qkv = false;
  s.query.reset();
  s.key.reset();
  s.value.reset();
  s.mask = MaskSpec{};
  if (!causal && mask_scales(scenario.mask)) {
    const MaskSpec& m = scenario.mask;
    s.mask.preset = m.preset;
    s.mask.window = m.window;
    s.mask.segments = m.segments;
    s.mask.prefix = m.prefix;
    s.mask.random_p = m.random_p;
    s.mask.random_seed = m.random_seed;
    s.mask.convention = m.convention;
    apply_mask_preset(s);  // at L = S = len; TooLargeError past kMaxMaskCells
  }
  Built b = build_forward(s, /*check_trace=*/false);
  b.options.fully_masked = s.fully_masked;
  if (causal) {
    Mask<float> m;  // torch bool, True = blocked: (L, S)
    m.values = Tensor<float>({len, len});
    for (std::int64_t i = 0; i < len; ++i)
      std::fill(m.values.data.begin() + i * len + i + 1, m.values.data.begin() + (i + 1) * len, 1.0f);
    b.inputs.attn_mask = std::move(m);
  }
  return b;
}

}  // namespace

Built large_view_problem(const Scenario& scenario, std::int64_t len, bool causal) {
  return large_problem(scenario, len, causal);
}

namespace {

// The largest weight of head (n, h): exp(row_max − lse) per row; the colour scale's top.
float head_max_weight(const LargeView& v) {
  const std::int64_t L = v.dims.L, at = (std::int64_t(v.n) * v.dims.H + v.h) * L;
  float top = 0;
  for (std::int64_t i = 0; i < L; ++i) {
    const float m = v.stats.row_max.data[std::size_t(at + i)],
                lse = v.stats.row_lse.data[std::size_t(at + i)];
    if (std::isfinite(m) && std::isfinite(lse)) top = std::max(top, std::exp(m - lse));
  }
  return top > 0 ? top : 1.0f;
}

// The CPU path's map: the tile on screen from stage_blocks, computed on a thread of its own while the
// last one stays drawn (at its own place and scale), then coloured into a texture here.
void draw_cpu_map(LargeView& v, Textures& tex, Colormap cmap, ImVec2 p0, ImVec2 size, double px,
                  std::int64_t i0, std::int64_t j0, std::int64_t block, std::int64_t rows,
                  std::int64_t cols) {
  const bool mean = v.reduce == Reduce::mean;
  const std::vector<std::int64_t> tkey = {v.n, v.h, i0, j0, block, rows, cols, mean};
  if (v.tile_pending.valid() &&
      v.tile_pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    CpuTile t = v.tile_pending.get();
    if (!t.error.empty()) {
      v.error = t.error;
    } else {
      v.head_max = t.head_max;
      v.head_max_key = {t.key[0], t.key[1]};
      v.tile = std::move(t);
      ++v.tile_version;
      ++v.info.tiles_rendered;
    }
  }
  if (tkey != v.tile.key && !v.tile_pending.valid() && v.cpu) {
    const bool know_max = v.head_max_key == std::vector<std::int64_t>{v.n, v.h};
    v.tile_pending = std::async(std::launch::async, [r = v.cpu, tkey, know_max, max = v.head_max] {
      CpuTile t;
      t.key = tkey;
      t.i0 = tkey[2], t.j0 = tkey[3], t.block = tkey[4], t.rows = tkey[5], t.cols = tkey[6];
      const auto t0 = Clock::now();
      try {
        const BlockReduce how = tkey[7] ? BlockReduce::mean : BlockReduce::max;
        t.values =
            stage_blocks(*r, "attn_weights", tkey[0], tkey[1], t.i0, t.j0, t.block, t.rows, t.cols, how);
        const std::int64_t whole = std::max(r->dims.L, r->dims.S_total);  // one block: the head's max
        t.head_max =
            know_max ? max
                     : stage_blocks(*r, "attn_weights", tkey[0], tkey[1], 0, 0, whole, 1, 1, BlockReduce::max)
                           .data[0];
        if (!(t.head_max > 0)) t.head_max = 1;  // NaN or 0: every key blocked
      } catch (const std::exception& e) {
        t.error = e.what();
      }
      t.ms = ms_since(t0);
      return t;
    });
  }
  if (v.tile_pending.valid()) v.info.computing = true;
  const CpuTile& t = v.tile;
  if (t.key.empty()) {
    ImGui::Dummy(size);
    return;
  }
  const bool log = v.log_colour;
  const float top = v.head_max;
  const ImTextureID id =
      tex.get("large/cpu-tile", panel::mix({v.tile_version, std::uint64_t(cmap), std::uint64_t(log)}),
              int(t.cols), int(t.rows), [&](std::uint32_t* rgba) {
                for (std::size_t x = 0; x < t.values.data.size(); ++x) {
                  const float w = t.values.data[x];
                  float u = log ? 1.0f + std::log10(std::max(w, 1e-30f) / top) / 4.0f : w / top;
                  u = std::clamp(u, 0.0f, 1.0f);
                  rgba[x] = std::isnan(w) ? kNanColor : w == 0 ? kMaskedColor : colormap_rgba(cmap, u);
                }
              });
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect(p0, ImVec2(p0.x + size.x, p0.y + size.y), true);
  const ImVec2 q0(p0.x + float((double(t.j0) - v.oj) * px), p0.y + float((double(t.i0) - v.oi) * px));
  const double cell = px * double(t.block);
  dl->AddImage(id, q0, ImVec2(q0.x + float(double(t.cols) * cell), q0.y + float(double(t.rows) * cell)));
  dl->PopClipRect();
}

// This problem could not be computed (too large, no memory): the reason, and the CPU heatmap of the
// Heads view's trace when it exists.
void draw_fallback(LargeView& v, AppState& state, Textures& tex, const std::string& reason) {
  v.info.reason = reason;
  ImGui::TextColored(ImVec4(1, 0.4f, 0.35f, 1), "The Large L view could not compute this problem.");
  ImGui::TextWrapped("Reason: %s", reason.c_str());
  const Result& r = state.result;
  if (!r.valid() || !r.forward->trace.has("attn_weights")) {
    ImGui::TextWrapped(
        "No CPU trace either: lower L in Controls until the full trace fits, and the CPU heatmap "
        "shows here.");
    return;
  }
  const Stage<float>& w = r.forward->trace["attn_weights"];  // (N, H, L, S')
  const std::int64_t N = w.shape[0], H = w.shape[1];
  v.n = std::clamp(v.n, 0, int(N) - 1);
  v.h = std::clamp(v.h, 0, int(H) - 1);
  ImGui::TextWrapped(
      "Instead, the CPU heatmap of the current trace (L = %lld, S' = %lld): batch %d, head %d.",
      (long long)w.shape[2], (long long)w.shape[3], v.n, v.h);
  Heatmap hm;
  hm.id = "large/cpu";
  hm.values = w.storage->data() + w.offset + v.n * w.strides[0] + v.h * w.strides[1];
  hm.rows = int(w.shape[2]);
  hm.cols = int(w.shape[3]);
  hm.row_stride = w.strides[2];
  hm.col_stride = w.strides[3];
  hm.vmin = 0;
  hm.vmax = 1;
  hm.colormap = state.window().colormap;
  hm.row_labels = &r.query_tokens;
  hm.col_labels = &r.key_tokens;
  hm.show_values = false;
  hm.version = panel::mix({r.generation, std::uint64_t(v.n), std::uint64_t(v.h)});
  draw_heatmap(tex, hm);
  v.info.cpu_heatmap = true;
}

}  // namespace

struct LargePanel {
  LargeView view;
};

namespace {

void draw_large_body(LargeView& v, AppState& state, Textures& tex, gpu::GpuBackend* gpu, std::int64_t* len,
                     bool* causal, LargeDevice* device);

}  // namespace

const LargeViewInfo& large_view_info(const Panels& panels) {
  // The view not drawn in the frame just drawn (another tab shows, or it never drew) is computing
  // nothing anyone waits for: its work is looked at again, or restarted, when it shows next.
  static const LargeViewInfo none;
  const bool drawn = panels.large && panels.large->view.drawn_frame == ImGui::GetFrameCount();
  return drawn ? panels.large->view.info : none;
}

void large_view_wait(Panels& panels) {
  if (!panels.large) return;
  LargeView& v = panels.large->view;
  if (v.pending.valid()) v.pending.wait();
  if (v.tile_pending.valid()) v.tile_pending.wait();
}

void large_view_reset(Panels& panels) {
  large_view_wait(panels);
  panels.large.reset();
}

void draw_large(Panels& panels, AppState& state, Textures& tex, gpu::GpuBackend* gpu, std::int64_t* len,
                bool* causal, LargeDevice* device) {
  // A child without scrollbars: a scrollbar appearing would resize the map and cost another tile.
  ImGui::BeginChild("large-view", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollbar);
  panel::made(panels.large).view.drawn_frame = ImGui::GetFrameCount();
  draw_large_body(panel::made(panels.large).view, state, tex, gpu, len, causal, device);
  ImGui::EndChild();
}

namespace {

void draw_large_body(LargeView& v, AppState& state, Textures& tex, gpu::GpuBackend* gpu, std::int64_t* len,
                     bool* causal, LargeDevice* device) {
  v.info = LargeViewInfo{};
  const float font = ImGui::GetFontSize();
  if (state.scenario().has_model())
    ImGui::TextWrapped(
        "With a model, this view runs one nn.MultiheadAttention at the model's sizes with default init "
        "from the seed, not the model's trained weights: the model's own layers are in the other views.");

  // ---- Controls: size, mask, batch / head, reduction ----
  static const std::int64_t kLens[] = {256, 1024, 2048, 4096, 8192, 16384};
  ImGui::SetNextItemWidth(font * 5);
  if (ImGui::BeginCombo("L = S", std::to_string(*len).c_str())) {
    for (std::int64_t l : kLens)
      if (ImGui::Selectable(std::to_string(l).c_str(), l == *len)) *len = l;
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  const Scenario& s = state.scenario();
  ImGui::Checkbox(mask_scales(s.mask) ? "causal instead of the scenario's mask" : "causal", causal);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Off: the scenario's mask preset (%s) made again at L = S = %lld%s.", to_string(s.mask.preset),
        (long long)*len,
        s.mask.preset == MaskPreset::custom ? "; a hand-drawn mask does not scale, so none" : "");
  const std::int64_t N = s.batch, H = s.num_heads;
  v.n = std::clamp(v.n, 0, int(std::max<std::int64_t>(N, 1)) - 1);
  v.h = std::clamp(v.h, 0, int(std::max<std::int64_t>(H, 1)) - 1);
  panel::same_line_if_fits(font * 6);
  ImGui::SetNextItemWidth(font * 5);
  ImGui::SliderInt("batch", &v.n, 0, int(std::max<std::int64_t>(N, 1)) - 1);
  panel::same_line_if_fits(font * 6);
  ImGui::SetNextItemWidth(font * 5);
  ImGui::SliderInt("head", &v.h, 0, int(std::max<std::int64_t>(H, 1)) - 1);
  panel::same_line_if_fits(font * 13);
  int reduce = v.reduce == Reduce::max ? 0 : 1;
  ImGui::SetNextItemWidth(font * 7);
  if (ImGui::Combo("zoomed out", &reduce, "block max\0block mean\0"))
    v.reduce = reduce ? Reduce::mean : Reduce::max;
  panel::same_line_if_fits(font * 12);
  ImGui::Checkbox("log colour", &v.log_colour);
  panel::same_line_if_fits(font * 14);
  int dev = int(*device);
  ImGui::SetNextItemWidth(font * 7);
  if (ImGui::Combo("compute on", &dev, "auto\0CPU\0GPU\0")) *device = LargeDevice(dev);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("auto: the GPU where it is hardware, else the CPU (on llvmpipe the CPU is faster)");

  // ---- The GPU path, or the CPU's and why ----
  v.info.len = *len;
  std::vector<std::int64_t> key = {
      *len, N, s.embed_dim, H, s.num_kv_heads, s.bias, std::int64_t(s.seed), *causal,
      // The mask preset and its parameters: a new one recomputes.
      std::int64_t(s.mask.preset), s.mask.window, s.mask.segments, s.mask.prefix,
      std::int64_t(s.mask.random_p * 1e6f), std::int64_t(s.mask.random_seed), std::int64_t(s.mask.convention),
      std::int64_t(s.fully_masked), s.weights.has_value()};
  std::string cpu_reason;
  if (*device == LargeDevice::cpu)
    cpu_reason = "chosen in \"compute on\"";
  else if (!gpu)
    cpu_reason = "this program was built without the GPU path";
  else if (!gpu->available())
    cpu_reason = gpu->unavailable_reason();
  else if (v.gpu_failed_key == key)
    cpu_reason = "the GPU path failed: " + v.gpu_error;
  else if (*device == LargeDevice::automatic && gpu->software_renderer())
    cpu_reason = "the GPU is a software renderer (" + gpu->renderer() + "), slower than the CPU";
  const bool on_cpu = !cpu_reason.empty();
  const std::vector<std::int64_t> base_key = key;
  key.push_back(on_cpu);
  // A finished preparation becomes the view's problem (a stale one too: the next starts at once).
  if (v.pending.valid() && v.pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    Prepared p = v.pending.get();
    const bool was_cpu = p.key.back() != 0;
    if (!was_cpu && !p.error.empty()) {  // the GPU failed: the CPU computes this problem instead
      v.gpu_failed_key.assign(p.key.begin(), p.key.end() - 1);
      v.gpu_error = p.error;
      p.error.clear();
      p.key.clear();
    }
    v.prepared_key = std::move(p.key);
    v.stats = std::move(p.stats);
    v.cpu = std::move(p.cpu);
    v.dims = p.dims;
    v.gpu_bytes = p.gpu_bytes;
    v.trace_bytes = p.trace_bytes;
    v.error = std::move(p.error);
    v.prepare_ms = p.ms;
    v.texture_key.clear();
    v.hover_key.clear();
    v.head_max_key.clear();
    v.tile = CpuTile{};
    v.fitted = false;
  }
  // q, k, v and the row statistics take seconds at L = 4096 on llvmpipe: they run on a thread of
  // their own (the backend makes its context current there), and the UI stays usable meanwhile.
  if (key != v.prepared_key && !v.pending.valid()) {
    v.pending_since = Clock::now();
    if (v.tile_pending.valid()) v.tile_pending.wait();  // it reads the result about to be replaced
    v.pending = std::async(std::launch::async, [gpu, s, n_len = *len, with_causal = *causal, key, on_cpu] {
      Prepared p;
      p.key = key;
      const auto t0 = Clock::now();
      try {
        const Built b = large_problem(s, n_len, with_causal);
        if (on_cpu) {  // the output only: no (N, H, L, S) stage; tiles come from stage_blocks
          Options o = b.options;
          o.backend = Backend::eigen;
          o.device = nullptr;
          o.stages = {"output"};
          auto r = std::make_shared<ForwardResult<float>>(forward(b.config, b.weights, b.inputs, o));
          p.dims = r->dims;
          for (const Stage<float>& st : r->trace.stages)  // each buffer once (views share theirs)
            if (st.view_of.empty()) p.gpu_bytes += st.storage->size() * sizeof(float);
          p.cpu = std::move(r);
        } else {
          p.stats = gpu->prepare_rows(b.config, b.weights, b.inputs, b.options);
          p.dims = dims_for(b.config, s.batch, n_len, n_len);
          p.gpu_bytes = gpu->buffer_bytes();
        }
        p.trace_bytes = trace_bytes(p.dims, sizeof(float), b.inputs.attn_mask || b.inputs.key_padding_mask);
      } catch (const std::exception& e) {  // mha::Error, or std::bad_alloc for the inputs
        p.error = e.what();
      }
      p.ms = ms_since(t0);
      return p;
    });
  }
  if (v.pending.valid()) {  // the backend is busy on the other thread: nothing here may call it
    if (on_cpu)
      ImGui::TextColored(ImVec4(1, 0.8f, 0.3f, 1),
                         "Computing the output for L = S = %lld on the CPU, keeping no (N, H, L, S) array: "
                         "%.1f s so far. The rest of the app stays usable.",
                         (long long)*len, ms_since(v.pending_since) / 1000.0);
    else
      ImGui::TextColored(
          ImVec4(1, 0.8f, 0.3f, 1),
          "Computing q, k, v and the row statistics for L = S = %lld on the GPU: %.1f s so far "
          "(seconds at L = 4096 on a software renderer). The rest of the app stays usable.",
          (long long)*len, ms_since(v.pending_since) / 1000.0);
    v.info.computing = true;
    return;
  }
  if (!v.error.empty()) return draw_fallback(v, state, tex, v.error);
  const Dims& d = v.dims;
  const std::int64_t L = d.L, S = d.S_total;

  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  char tile_ms[48] = "";  // the tile this frame draws is timed after this line: show the last one
  if (on_cpu && !v.tile.key.empty())
    std::snprintf(tile_ms, sizeof tile_ms, ", last tile %.0f ms", v.tile.ms);
  else if (!on_cpu && !v.texture_key.empty())
    std::snprintf(tile_ms, sizeof tile_ms, ", last tile %.0f ms", v.render_ms);
  if (on_cpu) {  // short: at a projector's font size the map needs the room; the details on hover
    ImGui::TextWrapped("On the CPU (hover: why) | kept %s, a full trace %s (%.0fx) | output %.0f ms%s",
                       mib(v.gpu_bytes).c_str(), mib(v.trace_bytes).c_str(),
                       double(v.trace_bytes) / double(std::max<std::uint64_t>(v.gpu_bytes, 1)), v.prepare_ms,
                       tile_ms);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Computed on the CPU: %s.\nN=%lld H=%lld L=S=%lld d_k=%lld. Kept: the inputs, q, k, v, context and "
          "the output, no (N, H, L, S) array;\nthe tile on screen is computed from them (mha::stage_blocks).",
          cpu_reason.c_str(), (long long)d.N, (long long)d.H, (long long)L, (long long)d.d_k);
  } else {
    ImGui::TextWrapped(
        "N=%lld H=%lld L=S=%lld d_k=%lld | GPU buffers %s (inputs, weights, q, k, v, row max + "
        "log-sum-exp, tile); a full trace would hold %s (%.0fx more) | row stats %.0f ms%s",
        (long long)d.N, (long long)d.H, (long long)L, (long long)d.d_k, mib(v.gpu_bytes).c_str(),
        mib(v.trace_bytes).c_str(), double(v.trace_bytes) / double(std::max<std::uint64_t>(v.gpu_bytes, 1)),
        v.prepare_ms, tile_ms);
  }
  ImGui::PopStyleColor();

  // ---- The map: pan (drag), zoom (wheel), level of detail ----
  const float bar_w = font * 6;
  ImVec2 avail = ImGui::GetContentRegionAvail();
  avail.y -= ImGui::GetTextLineHeightWithSpacing() * 3;
  const ImVec2 size(std::max(avail.x - bar_w, 64.0f), std::max(avail.y, 64.0f));
  if (!v.fitted) {  // the whole map on screen: the smallest zoom whose L cells fit
    v.zoom = 0;
    while (v.zoom > -12 && std::max(L, S) * std::ldexp(1.0, v.zoom) > std::min(size.x, size.y)) --v.zoom;
    while (v.zoom < 4 && std::max(L, S) * std::ldexp(1.0, v.zoom + 1) <= std::min(size.x, size.y)) ++v.zoom;
    v.oi = v.oj = 0;
    v.fitted = true;
  }
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("large-map", size);
  const bool hovered = ImGui::IsItemHovered();
  ImGuiIO& io = ImGui::GetIO();
  double px = std::ldexp(1.0, v.zoom);  // screen pixels per cell
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 0)) {
    v.oj -= io.MouseDelta.x / px;
    v.oi -= io.MouseDelta.y / px;
  }
  if (hovered && io.MouseWheel != 0) {  // zoom about the cell under the pointer
    const double ci = v.oi + (io.MousePos.y - p0.y) / px, cj = v.oj + (io.MousePos.x - p0.x) / px;
    v.zoom = std::clamp(v.zoom + (io.MouseWheel > 0 ? 1 : -1), -12, 5);
    px = std::ldexp(1.0, v.zoom);
    v.oi = ci - (io.MousePos.y - p0.y) / px;
    v.oj = cj - (io.MousePos.x - p0.x) / px;
  }
  v.oi = std::clamp(v.oi, 0.0, std::max(0.0, double(L) - size.y / px));
  v.oj = std::clamp(v.oj, 0.0, std::max(0.0, double(S) - size.x / px));
  const std::int64_t block = v.zoom < 0 ? std::int64_t(1) << -v.zoom : 1;
  const double block_px = px * double(block);
  const std::int64_t i0 = std::int64_t(v.oi) / block * block, j0 = std::int64_t(v.oj) / block * block;
  const std::int64_t rows =
      std::min<std::int64_t>(std::int64_t(size.y / block_px) + 2, (L - i0 + block - 1) / block);
  const std::int64_t cols =
      std::min<std::int64_t>(std::int64_t(size.x / block_px) + 2, (S - j0 + block - 1) / block);
  const Colormap cmap = state.window().colormap;
  if (on_cpu) {
    draw_cpu_map(v, tex, cmap, p0, size, px, i0, j0, block, rows, cols);
  } else {
    const float vmax = head_max_weight(v);
    const std::vector<std::int64_t> tkey = {
        v.n, v.h, i0, j0, block, rows, cols, v.reduce == Reduce::mean, std::int64_t(cmap), v.log_colour};
    if (tkey != v.texture_key) {
      const auto t0 = Clock::now();
      try {
        std::uint32_t lut[256];
        for (int t = 0; t < 256; ++t) lut[t] = colormap_rgba(cmap, float(t) / 255.0f);
        // The backend renders into a texture of its own (shared with this context); Textures keeps its id.
        tex.keep("large/tile", ImTextureID(std::intptr_t(gpu->weights_blocks_texture(
                                   v.n, v.h, i0, j0, block, rows, cols, v.reduce, lut, 0.0f, vmax, kNanColor,
                                   kMaskedColor, v.log_colour ? 4 : 0))));
        v.texture_key = tkey;
      } catch (const Error& e) {
        v.error = e.what();
        return draw_fallback(v, state, tex, v.error);
      }
      v.render_ms = ms_since(t0);
      ++v.info.tiles_rendered;
    }
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->PushClipRect(p0, ImVec2(p0.x + size.x, p0.y + size.y), true);
    const ImVec2 q0(p0.x + float((double(j0) - v.oj) * px), p0.y + float((double(i0) - v.oi) * px));
    dl->AddImage(tex.kept("large/tile"), q0,
                 ImVec2(q0.x + float(double(cols) * block_px), q0.y + float(double(rows) * block_px)));
    dl->PopClipRect();
  }
  const float vmax = on_cpu ? v.head_max : head_max_weight(v);
  ImGui::SameLine();
  if (v.log_colour)  // 0 at the head's largest weight, -4 four decades below (and anything smaller)
    panel::colorbar_within(tex, cmap, -4.0f, 0.0f, size.y);
  else
    panel::colorbar_within(tex, cmap, 0.0f, vmax, size.y);

  // ---- Hover: the one value read back ----
  const std::int64_t vis_i1 = std::min<std::int64_t>(L, std::int64_t(v.oi + size.y / px) + 1);
  const std::int64_t vis_j1 = std::min<std::int64_t>(S, std::int64_t(v.oj + size.x / px) + 1);
  ImGui::PushTextWrapPos(ImGui::GetCursorPos().x + size.x + bar_w);  // not past the colorbar
  // What a pixel is, under the map (on the map it would hide cells, and overhang a small map).
  char what[96];
  if (block > 1)
    std::snprintf(what, sizeof what, "each pixel = %s of %lldx%lld weights",
                  v.reduce == Reduce::max ? "max" : "mean", (long long)block, (long long)block);
  else
    std::snprintf(what, sizeof what, "exact weights, %.0f px per cell", px);
  ImGui::TextWrapped(
      "%s | queries %lld-%lld, keys %lld-%lld of %lld x %lld | drag to pan, wheel to zoom | colour: %s, the "
      "head's largest weight is %.3g",
      what, (long long)std::int64_t(v.oi), (long long)vis_i1 - 1, (long long)std::int64_t(v.oj),
      (long long)vis_j1 - 1, (long long)L, (long long)S,
      v.log_colour ? "log10(weight / largest), -4 to 0" : "linear, 0 to the largest", vmax);
  ImGui::PopTextWrapPos();
  if (hovered) {
    const std::int64_t i = std::int64_t(v.oi + (io.MousePos.y - p0.y) / px) / block * block;
    const std::int64_t j = std::int64_t(v.oj + (io.MousePos.x - p0.x) / px) / block * block;
    if (i >= 0 && i < L && j >= 0 && j < S) {
      const std::vector<std::int64_t> hkey = {v.n, v.h, i, j, block, v.reduce == Reduce::mean, on_cpu};
      const CpuTile& t = v.tile;
      const bool in_tile = on_cpu && t.block == block && i >= t.i0 && j >= t.j0 &&
                           i < t.i0 + t.rows * block && j < t.j0 + t.cols * block && t.key.size() > 1 &&
                           t.key[0] == v.n && t.key[1] == v.h && t.key[7] == (v.reduce == Reduce::mean);
      try {
        if (on_cpu && !in_tile) {
          v.hover_key.clear();             // the tile under it is still being computed
        } else if (hkey != v.hover_key) {  // the CPU's tile holds it; the GPU reads one block back
          v.hover_value = on_cpu
                              ? t.values.data[std::size_t((i - t.i0) / block * t.cols + (j - t.j0) / block)]
                              : gpu->weights_blocks(v.n, v.h, i, j, block, 1, 1, v.reduce).data[0];
          v.hover_key = hkey;
        }
        if (!v.hover_key.empty()) {
          v.info.hover_i = i;
          v.info.hover_j = j;
          v.info.hover_value = v.hover_value;
          if (block == 1)
            ImGui::Text("attn_weights[%d, %d, q %lld, k %lld] = %.6g   (tokens t%lld, t%lld)", v.n, v.h,
                        (long long)i, (long long)j, v.hover_value, (long long)i, (long long)j);
          else
            ImGui::Text("queries %lld-%lld, keys %lld-%lld: %s = %.6g", (long long)i,
                        (long long)std::min(i + block, L) - 1, (long long)j,
                        (long long)std::min(j + block, S) - 1, v.reduce == Reduce::max ? "max" : "mean",
                        v.hover_value);
        }
      } catch (const Error& e) {
        ImGui::TextColored(ImVec4(1, 0.4f, 0.35f, 1), "%s", e.what());
      }
    }
  }
  v.info.gpu = !on_cpu;
  v.info.cpu = on_cpu;
  v.info.cpu_reason = cpu_reason;
  v.info.block = block;
  v.info.gpu_bytes = v.gpu_bytes;
  v.info.trace_bytes = v.trace_bytes;
}

}  // namespace

}  // namespace mha::app
