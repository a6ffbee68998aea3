// The left column: scenario sizes, sentence, seed, inputs and weights, options, view settings.
// Invalid values are kept as typed and explained inline; the last valid result stays on screen.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "errors.hpp"
#include "io/npy.hpp"
#include "io/state_dict.hpp"
#include "model_cache.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "studio_names.hpp"
#include "text_parse.hpp"

namespace mha::app {

// What the left column keeps between frames: the text typed into its fields.
struct ControlsPanel {
  std::string paste;                // a numpy/torch printout of the query
  std::string npy_path;             // the query's .npy
  std::string weights_path;         // a folder of .npy, or a .safetensors
  bool wants_model_folder = false;  // "Open model folder..." was chosen this frame
  void draw(AppState& state);
};

namespace {

const ImVec4 kErrorColor(1.0f, 0.38f, 0.38f, 1.0f);

void inline_error(const AppState& state, const char* slot) {
  auto it = state.errors.find(slot);
  if (it == state.errors.end()) return;
  ImGui::PushStyleColor(ImGuiCol_Text, kErrorColor);
  ImGui::TextWrapped("%s", it->second.c_str());
  ImGui::PopStyleColor();
}

// A size field: applies at once (the action fits the mask), one undo step per field and drag.
void size_field(AppState& state, const char* id, const char* label, std::int64_t value, const char* tip,
                std::int64_t lo = 1, std::int64_t hi = 1 << 20) {
  std::int64_t v = value;
  const std::int64_t step = 1;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
  if (ImGui::InputScalar(label, ImGuiDataType_S64, &v, &step, nullptr, "%lld")) {
    v = std::clamp(v, lo, hi);
    if (v != value) state.apply(set_control(id, std::to_string(v)));
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tip);
}

// A checkbox bound to a control of the table.
void check_control(AppState& state, const char* id, const char* label, bool value) {
  if (ImGui::Checkbox(label, &value)) state.apply(set_control(id, value ? "true" : "false"));
}

// A DragFloat per cell of a (rows, cols) row-major block of `tensor`, where that is few enough cells
// to edit by hand; a drag is one undo step (edits of one tensor coalesce).
void edit_cells(AppState& state, const std::string& tensor, const float* data, std::int64_t rows,
                std::int64_t cols) {
  constexpr std::int64_t kMaxCells = 256;
  if (rows * cols > kMaxCells) {
    ImGui::TextWrapped("%lld x %lld = %lld cells: too many to edit by hand here; load a file instead.",
                       (long long)rows, (long long)cols, (long long)(rows * cols));
    ImGui::TreePop();
    return;
  }
  ImGui::BeginChild(tensor.c_str(),
                    ImVec2(0, ImGui::GetFrameHeightWithSpacing() * float(std::min<std::int64_t>(rows, 8)) +
                                  ImGui::GetStyle().ScrollbarSize),
                    false, ImGuiWindowFlags_HorizontalScrollbar);
  for (std::int64_t i = 0; i < rows; ++i) {
    ImGui::PushID(int(i));
    for (std::int64_t e = 0; e < cols; ++e) {
      if (e) ImGui::SameLine(0, 2);
      ImGui::PushID(int(e));
      ImGui::SetNextItemWidth(ImGui::GetFontSize() * 2.8f);
      float v = data[i * cols + e];
      if (ImGui::DragFloat("##c", &v, 0.01f, 0, 0, "%.2f"))
        state.apply(set_tensor_value(tensor, i * cols + e, v));
      ImGui::PopID();
    }
    ImGui::PopID();
  }
  ImGui::EndChild();
  ImGui::TreePop();
}

void inputs_section(AppState& state, std::string& paste, std::string& npy_path) {
  const Scenario& s = state.scenario();
  const std::int64_t N = s.batch, L = s.L(), E = s.embed_dim;
  const bool edited_any = s.query || s.key || s.value;
  ImGui::TextDisabled("query = %s", edited_any && s.query ? "edited tensor" : "torch.rand from the seed");
  ImGui::SetNextItemWidth(-1);
  ImGui::InputTextMultiline("##paste", &paste, ImVec2(-1, ImGui::GetTextLineHeight() * 3));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Paste a numpy/torch printout of the query (N, L, E) = (%lld, %lld, %lld)",
                      (long long)N, (long long)L, (long long)E);
  if (ImGui::Button("Use pasted query")) {
    const std::vector<float> v = parse_numbers(paste);
    if (std::int64_t(v.size()) != N * L * E) {
      state.errors["tensors"] = "the pasted text holds " + std::to_string(v.size()) +
                                " numbers; the query (N, L, E) = " + shape_str({N, L, E}) + " needs " +
                                std::to_string(N * L * E);
    } else {
      state.apply(
          {"paste query", [t = Tensor<float>({N, L, E}, v)](Scenario& sc) { sc.query = t; }, "tensors"});
    }
  }
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  ImGui::InputTextWithHint("##npy", "query.npy path", &npy_path);
  ImGui::SameLine();
  if (ImGui::Button("Load .npy")) {
    try {
      Tensor<float> t = to_tensor<float>(read_npy(npy_path));
      if (t.dim() == 2) t.shape.insert(t.shape.begin(), 1);  // (L, E) -> (1, L, E)
      state.apply({"load query", [t = std::move(t)](Scenario& sc) { sc.query = t; }, "tensors"});
    } catch (const Error& e) {
      state.errors["tensors"] = e.what();
    }
  }
  // Cell-by-cell editing of batch item 0 (key and value exist apart from the query only when they
  // are drawn separately or for cross-attention).
  const bool separate = s.cross_attention || s.separate_qkv;
  struct Slot {
    const char* name;
    const std::optional<Tensor<float>>* tensor;
  };
  for (const Slot& slot : {Slot{"query", &s.query}, Slot{"key", &s.key}, Slot{"value", &s.value}}) {
    if (!separate && slot.tensor != &s.query) continue;
    if (!*slot.tensor) {
      if (ImGui::Button((std::string("Edit ") + slot.name).c_str())) {
        const std::string name = slot.name;
        state.apply({"edit " + name,
                     [name](Scenario& sc) {
                       const Built b = build_forward(sc);  // start from the values on screen
                       (name == "query" ? sc.query
                        : name == "key" ? sc.key
                                        : sc.value) = name == "query" ? b.inputs.query
                                                      : name == "key" ? b.inputs.key
                                                                      : b.inputs.value;
                     },
                     "tensors"});
      }
      ImGui::SameLine();
      continue;
    }
    const Tensor<float>& t = **slot.tensor;
    if (t.dim() == 3 && ImGui::TreeNode(slot.name, "%s cells (batch item 0)", slot.name))
      edit_cells(state, slot.name, t.ptr(), t.shape[1], t.shape[2]);
  }
  ImGui::NewLine();
  if (edited_any) {
    ImGui::SameLine();
    if (ImGui::Button("Reset inputs"))
      state.apply({"reset inputs", [](Scenario& sc) {
                     sc.query.reset();
                     sc.key.reset();
                     sc.value.reset();
                   }});
  }
}

void weights_section(AppState& state, std::string& path) {
  const Scenario& s = state.scenario();
  ImGui::TextDisabled("weights = %s",
                      s.weights ? "edited or loaded" : "nn.MultiheadAttention default init (seed)");
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  ImGui::InputTextWithHint("##wpath", "folder of .npy or .safetensors", &path);
  ImGui::SameLine();
  if (ImGui::Button("Load")) {
    try {
      const bool dir = std::filesystem::is_directory(path);
      Weights<float> w = read_state_dict<float>(dir ? path : "", dir ? "" : path);
      if (w.out_proj_weight.empty())
        throw FileError(path, path + ": no out_proj.weight found (torch state_dict names expected)");
      state.apply({"load weights",
                   [w = std::move(w)](Scenario& sc) {
                     sc.bias = !w.in_proj_bias.empty();
                     sc.weights = w;
                   },
                   "tensors"});
    } catch (const Error& e) {
      state.errors["tensors"] = e.what();
    }
  }
  if (!s.weights) {
    if (ImGui::Button("Edit weights"))  // start from the default init on screen
      state.apply({"edit weights", [](Scenario& sc) { sc.weights = build_forward(sc).weights; }, "tensors"});
    return;
  }
  ImGui::SameLine();
  if (ImGui::Button("Default")) {
    state.apply({"default weights", [](Scenario& sc) { sc.weights.reset(); }});
    return;
  }
  Weights<float> w = *s.weights;  // a copy: the names and shapes, read while the scenario may change
  for (auto [name, tensor] : state_dict(w)) {
    if (tensor->empty()) continue;
    const std::int64_t rows = tensor->dim() == 2 ? tensor->shape[0] : 1,
                       cols = tensor->numel() / std::max<std::int64_t>(rows, 1);
    if (ImGui::TreeNode(name, "%s %s", name, shape_str(tensor->shape).c_str()))
      edit_cells(state, name, tensor->ptr(), rows, cols);
  }
}

// Backend: auto / cpu / gpu, the time each took last, and why the GPU path fell back if it did.
void backend_section(AppState& state) {
  ImGui::Separator();
  Computer& c = state.computer;
  int choice = int(c.backend());
  ImGui::TextUnformatted("Backend:");
  ImGui::SameLine();
  bool changed = ImGui::RadioButton("auto", &choice, int(BackendChoice::automatic));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "tiny sizes: the reference loops (torch's rounding); then Eigen; the GPU above its size threshold "
        "on a hardware GPU (never on a software renderer such as llvmpipe, where the CPU measured faster)");
  ImGui::SameLine();
  changed |= ImGui::RadioButton("cpu", &choice, int(BackendChoice::cpu));
  ImGui::SameLine();
  changed |= ImGui::RadioButton("gpu", &choice, int(BackendChoice::gpu));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("GLSL compute shaders at every size; falls back to cpu with the reason");
  if (changed) choose_backend(state, BackendChoice(choice));
  const Computer::BackendTimes t = c.times();
  auto ms = [](double v) {  // "-": that backend has not computed yet
    char text[32] = "-";
    if (v > 0) std::snprintf(text, sizeof text, "%.2f ms", v);
    return std::string(text);
  };
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("GPU: %s", c.device_description().c_str());
  ImGui::TextWrapped("last forward: reference %s, cpu %s, gpu %s", ms(t.reference_ms).c_str(),
                     ms(t.cpu_ms).c_str(), ms(t.gpu_ms).c_str());
  ImGui::PopStyleColor();
  if (state.result.valid()) {
    const ForwardResult<float>& r = *state.result.forward;
    ImGui::Text("this result: %s path, %.2f ms", backend_name(r.backend), state.result.compute_ms);
    if (!r.fallback_reason.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, kErrorColor);
      ImGui::TextWrapped("GPU path fell back to cpu: %s", r.fallback_reason.c_str());
      ImGui::PopStyleColor();
    }
  }
}

// The model choice as one edit; a folder that does not load is refused next to the control.
void pick_model(AppState& state, const std::string& model) {
  state.apply(choose_model(model));
}

void model_section(AppState& state, bool& wants_model_folder) {
  const Scenario& s = state.scenario();
  static const std::vector<std::string> shipped = shipped_models();
  const char* kRandom = "random init (torch seed)";
  ImGui::TextUnformatted("Model");
  ImGui::SetNextItemWidth(-1);
  bool open_folder = false;
  if (ImGui::BeginCombo("##model", s.has_model() ? s.model.c_str() : kRandom)) {
    if (ImGui::Selectable(kRandom, !s.has_model())) pick_model(state, "");
    for (const std::string& name : shipped)
      if (ImGui::Selectable((name + "  (trained, shipped)").c_str(), s.model == name))
        pick_model(state, name);
    if (ImGui::Selectable("Open model folder...")) open_folder = true;
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "random init: one nn.MultiheadAttention with torch's default init (the course's case).\n"
        "A trained model: its heads on your sentence, every layer, and what it predicts next.\n"
        "A folder: a Hugging Face GPT-2, Llama, Mistral or Qwen2 (config.json, model.safetensors,\n"
        "tokenizer.json or vocab.json + merges.txt).");
  // The File menu's Open model folder: the desktop's chooser, then a load in the background with its
  // progress and Cancel (ui.cpp asks it, holding what the chooser needs).
  if (open_folder) wants_model_folder = true;
  inline_error(state, "model");
  if (!s.has_model()) return;
  const ModelResult* m = state.result.model ? &*state.result.model : nullptr;
  if (m && m->n_layer > 1) {
    int layer = int(s.layer);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
    if (ImGui::SliderInt("layer", &layer, 0, int(m->n_layer) - 1) && layer != s.layer)
      state.apply(choose_layer(layer));
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("PgUp / PgDn: the layer whose attention every view shows");
  }
  if (m && !m->top_k.empty()) {
    ImGui::TextUnformatted("Next token:");
    const float w = ImGui::GetContentRegionAvail().x;
    for (std::size_t i = 0; i < m->top_k.size(); ++i) {
      char text[96];
      std::snprintf(text, sizeof text, "%s  %.1f%%", m->top_k_labels[i].c_str(),
                    100 * m->top_k[i].probability);
      ImGui::ProgressBar(float(m->top_k[i].probability), ImVec2(w, 0), text);
    }
    if (s.mask.preset != MaskPreset::causal)
      ImGui::TextWrapped(
          "What-if: layer %lld's mask is edited (not the model's computation); the layers after it "
          "and this prediction follow.",
          (long long)s.layer);
  }
}

}  // namespace

void choose_backend(AppState& state, BackendChoice choice) {
  state.computer.set_backend(choice);
  state.recompute();
}

bool draw_controls(Panels& panels, AppState& state) {
  ControlsPanel& p = panel::made(panels.controls);
  p.draw(state);
  return p.wants_model_folder;
}

void ControlsPanel::draw(AppState& state) {
  const Scenario& s = state.scenario();
  ImGui::TextDisabled("%s", s.name.c_str());
  wants_model_folder = false;
  model_section(state, wants_model_folder);
  const bool model = s.has_model();

  ImGui::Separator();
  ImGui::TextUnformatted("Sentence (tokens label the axes)");
  ImGui::SetNextItemWidth(-1);
  std::string sentence = s.sentence;
  if (ImGui::InputTextWithHint("##sentence", "e.g. the cat sat on the mat", &sentence))
    state.apply(set_control("sentence", sentence));
  if (model) {
    ImGui::TextDisabled("N = 1, E = %lld, H = %lld, bias: set by the model", (long long)s.embed_dim,
                        (long long)s.num_heads);
    ImGui::Text("L = %lld tokens (the model's tokenizer)", (long long)s.L());
  }
  ImGui::BeginDisabled(model);  // with a model, the sizes, inputs and weights are the model's
  check_control(state, "cross_attention", "cross-attention (L != S)", s.cross_attention);
  if (s.cross_attention) {
    ImGui::SetNextItemWidth(-1);
    std::string source = s.source_sentence;
    if (ImGui::InputTextWithHint("##source", "key/value sentence", &source))
      state.apply(set_control("source_sentence", source));
  } else {
    check_control(state, "separate_qkv", "separate q, k, v (as the notebook)", s.separate_qkv);
  }

  ImGui::Separator();
  size_field(state, "batch", "N batch", s.batch, "batch size N");
  if (s.sentence.empty())
    size_field(state, "tgt_len", "L query len", s.tgt_len, "query length L (or type a sentence)");
  else
    ImGui::Text("L = %lld tokens", (long long)s.L());
  if (s.cross_attention) {
    if (s.source_sentence.empty())
      size_field(state, "src_len", "S key len", s.src_len, "key/value length S");
    else
      ImGui::Text("S = %lld tokens", (long long)s.S());
  }
  size_field(state, "embed_dim", "E embed_dim", s.embed_dim, "d_model = embed_dim");
  inline_error(state, "embed_dim");
  size_field(state, "num_heads", "H num_heads", s.num_heads, "heads; each gets d_k = E / H columns");
  inline_error(state, "num_heads");
  size_field(state, "num_kv_heads", "G kv heads", s.num_kv_heads,
             "grouped-query attention: G key/value heads (0 = H, 1 = MQA)", 0);
  inline_error(state, "num_kv_heads");
  const Dims* shown = model && state.result.forward ? &state.result.forward->dims : nullptr;
  if (shown && shown->qdim() != shown->E)  // the model's heads have their own width (head_dim)
    ImGui::TextDisabled("d_k = %lld (the model's head_dim; H·d_k = %lld)", (long long)shown->d_k,
                        (long long)shown->qdim());
  else if (s.num_heads > 0 && s.embed_dim % s.num_heads == 0)
    ImGui::TextDisabled("d_k = %lld / %lld = %lld", (long long)s.embed_dim, (long long)s.num_heads,
                        (long long)(s.embed_dim / s.num_heads));
  inline_error(state, "sizes");
  check_control(state, "bias", "bias", s.bias);
  int seed = int(s.seed);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
  if (ImGui::InputInt("seed", &seed) && seed >= 0) state.apply(set_control("seed", std::to_string(seed)));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("torch.manual_seed(seed): inputs by torch.rand, weights by default init");

  if (ImGui::CollapsingHeader("Inputs")) inputs_section(state, paste, npy_path);
  if (ImGui::CollapsingHeader("Weights")) weights_section(state, weights_path);
  ImGui::EndDisabled();
  inline_error(state, "tensors");
  inline_error(state, "mask");

  ImGui::Separator();
  int policy = s.fully_masked == FullyMasked::nan ? 0 : 1;
  ImGui::TextUnformatted("A query that may see no key:");
  bool policy_changed = ImGui::RadioButton("NaN (torch)", &policy, 0);
  ImGui::SameLine();
  policy_changed |= ImGui::RadioButton("0 (notebook)", &policy, 1);
  if (policy_changed) state.apply(set_control("fully_masked", policy ? "zero" : "nan"));

  backend_section(state);

  ImGui::Separator();
  ViewState& v = state.view();
  if (state.result.valid()) {
    int b = v.batch_index;
    const int n = int(state.result.forward->dims.N);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
    if (n > 1 && ImGui::SliderInt("batch item", &b, 0, n - 1)) v.batch_index = b;
  }
  // The window's settings: actions, as the keys and a script change them.
  const WindowState& w = state.window();
  int cmap = int(w.colormap);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
  if (ImGui::Combo("colormap", &cmap, "viridis\0magma\0cividis\0diverging\0"))
    state.apply(set_control("colormap", to_string(Colormap(cmap))));
  ImGui::Checkbox("cell values", &v.show_values);
  if (bool presenter = w.presenter; ImGui::Checkbox("presenter mode", &presenter))
    state.apply(toggle_presenter());
  if (w.presenter) {
    float scale = w.font_scale;
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
    if (ImGui::SliderFloat("font scale", &scale, 1.0f, 3.0f, "%.1fx"))
      state.apply(set_control("font_scale", std::to_string(scale)));
  }
  inline_error(state, "file");
}

}  // namespace mha::app
