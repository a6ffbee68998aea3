// The Attention file view: attention weights computed elsewhere (a .npy of shape (T, T), (H, T, T),
// (N, H, T, T) or (layers, N, H, T, T), e.g. a Hugging Face run's output_attentions stacked), drawn
// read-only as the Heads view draws a forward's, one map per head. It never touches the scenario.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <sstream>

#include "errors.hpp"
#include "heatmap.hpp"
#include "io/npy.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "stage_export.hpp"

namespace mha::app {

namespace {

struct AttentionFileView {
  std::string path, tokens_text;
  std::string shown_path;                       // the file on screen (path may hold a failed try)
  Array file;                                   // as read; a layer is converted on demand
  std::optional<exporter::AttentionMap> shown;  // the layer on screen
  std::vector<std::string> labels;              // the tokens typed, or indices
  std::string error;
  int layer = 0, batch = 0;
  std::uint64_t version = 0;  // texture version: bumped on every load or layer change
};

void pick_layer(AttentionFileView& v, int layer) {
  v.shown = exporter::attention_map(
      v.file, v.shown && v.shown->layers ? std::optional<std::int64_t>(layer) : std::nullopt, v.shown_path);
  v.layer = int(v.shown->layer);
  ++v.version;
}

void set_labels(AttentionFileView& v) {
  v.labels.clear();
  const std::int64_t T = v.shown ? v.shown->result.dims.L : 0;
  std::istringstream in(v.tokens_text);
  for (std::string t; in >> t;) v.labels.push_back(t);
  if (std::int64_t(v.labels.size()) != T) {
    v.labels.clear();
    for (std::int64_t i = 0; i < T; ++i) v.labels.push_back(std::to_string(i));
  }
}

void open(AttentionFileView& v) {
  try {
    Array file = read_npy(v.path);
    exporter::AttentionMap shown = exporter::attention_map(file, std::nullopt, v.path);
    v.file = std::move(file);
    v.shown = std::move(shown);
    v.shown_path = v.path;
    v.layer = v.batch = 0;
    ++v.version;
    v.error.clear();
  } catch (const Error& e) {
    v.error = e.what();  // the previous file stays on screen
  }
  set_labels(v);
}

}  // namespace

struct AttentionFilePanel {
  AttentionFileView view;
};

void open_attention_file(Panels& panels, const std::string& path) {
  AttentionFileView& v = panel::made(panels.attention_file).view;
  v.path = path;
  open(v);
}

AttentionFileInfo attention_file_info(const Panels& panels) {
  AttentionFileInfo i;
  if (!panels.attention_file) return i;
  const AttentionFileView& v = panels.attention_file->view;
  i.error = v.error;
  if (v.shown) {
    const Dims& d = v.shown->result.dims;
    i.N = d.N, i.H = d.H, i.T = d.L, i.layers = v.shown->layers;
    i.warnings = v.shown->warnings;
  }
  return i;
}

void draw_attention_file(Panels& panels, Textures& tex) {
  AttentionFileView& v = panel::made(panels.attention_file).view;
  const float font = ImGui::GetFontSize();
  ImGui::TextWrapped(
      "Attention weights computed elsewhere, read-only: a .npy of (T, T), (H, T, T), (N, H, T, T) or "
      "(layers, N, H, T, T), e.g. a Hugging Face model run with output_attentions=True, stacked.");
  ImGui::SetNextItemWidth(std::max(font * 10, ImGui::GetContentRegionAvail().x - font * 4));
  const bool enter = ImGui::InputTextWithHint("##attention-path", "path/to/attention.npy", &v.path,
                                              ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if ((ImGui::Button("Open") || enter) && !v.path.empty()) open(v);
  ImGui::SetNextItemWidth(std::max(font * 10, ImGui::GetContentRegionAvail().x - font * 4));
  if (ImGui::InputTextWithHint("##attention-tokens", "tokens, space-separated (optional)", &v.tokens_text))
    set_labels(v);
  if (!v.error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.38f, 0.38f, 1.0f));
    ImGui::TextWrapped("%s", v.error.c_str());
    ImGui::PopStyleColor();
  }
  if (!v.shown) return;
  const ForwardResult<float>& r = v.shown->result;
  const Dims& d = r.dims;
  if (v.shown->layers > 1) {
    int layer = v.layer;
    ImGui::SetNextItemWidth(font * 7);
    if (ImGui::SliderInt("layer", &layer, 0, int(v.shown->layers) - 1) && layer != v.layer) {
      try {
        pick_layer(v, layer);
      } catch (const Error& e) {
        v.error = e.what();
      }
    }
    ImGui::SameLine();
  }
  if (d.N > 1) {
    ImGui::SetNextItemWidth(font * 7);
    ImGui::SliderInt("batch item", &v.batch, 0, int(d.N) - 1);
  }
  v.batch = std::clamp(v.batch, 0, int(d.N) - 1);
  ImGui::TextDisabled("%s: N=%lld H=%lld T=%lld", v.shown_path.c_str(), (long long)d.N, (long long)d.H,
                      (long long)d.L);
  for (const std::string& w : v.shown->warnings) ImGui::TextWrapped("warning: %s", w.c_str());

  const Stage<float>& s = r.trace["attn_weights"];  // (N, H, T, T), contiguous
  const int T = int(d.L), H = int(d.H);
  const int cols = std::max(1, std::min(H, int(ImGui::GetContentRegionAvail().x / (font * 14))));
  if (ImGui::BeginTable("attention-file-heads", cols, ImGuiTableFlags_SizingStretchSame)) {
    for (int h = 0; h < H; ++h) {
      ImGui::TableNextColumn();
      ImGui::Text("head %d", h);
      Heatmap hm;
      hm.id = "attention-file/" + std::to_string(h);
      hm.values = s.storage->data() + s.offset + (std::int64_t(v.batch) * H + h) * T * T;
      hm.rows = T;
      hm.cols = T;
      hm.row_stride = T;
      hm.vmin = 0;
      hm.vmax = 1;
      hm.row_labels = &v.labels;
      hm.col_labels = &v.labels;
      hm.show_values = false;
      hm.max_cell = font * 3;
      const float w = ImGui::GetContentRegionAvail().x - font * 4.5f;  // the colorbar beside it
      hm.size = ImVec2(w, w);
      hm.version = v.version * 1000003 + std::uint64_t(v.batch);
      const float top = ImGui::GetCursorScreenPos().y;
      draw_heatmap(tex, hm);
      const float drawn = ImGui::GetItemRectMax().y - top;
      ImGui::SameLine();
      ImGui::SetCursorScreenPos(ImVec2(ImGui::GetCursorScreenPos().x, top));
      panel::colorbar_within(tex, hm.colormap, 0.0f, 1.0f, std::max(drawn, font * 3));
    }
    ImGui::EndTable();
  }
}

}  // namespace mha::app
