// The actions a script can name, and the control table behind `set` and the Controls panel.
#include "actions.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "compute.hpp"
#include "errors.hpp"
#include "model_cache.hpp"

namespace mha::studio {

namespace {

constexpr std::int64_t kMaxSize = std::int64_t(1) << 20;  // the size fields' upper end

std::int64_t parse_int(const std::string& id, const std::string& text, std::int64_t lo, std::int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw ActionError(id + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                      ", got \"" + text + "\"");
  return v;
}

float parse_float(const std::string& id, const std::string& text, float lo, float hi) {
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
    throw ActionError(id + ": expected a number from " + std::to_string(lo) + " to " + std::to_string(hi) +
                      ", got \"" + text + "\"");
  return v;
}

bool parse_bool(const std::string& id, const std::string& text) {
  if (text == "true" || text == "on" || text == "1") return true;
  if (text == "false" || text == "off" || text == "0") return false;
  throw ActionError(id + ": expected true or false, got \"" + text + "\"");
}

const std::vector<ControlInfo> kControls = {
    {"model", "Model",
     "\"\" (random init), a shipped model's name or a model folder (GPT-2, Llama, Mistral, Qwen2)"},
    {"layer", "layer", "a layer of the model, from 0"},
    {"sentence", "Sentence", "text; its tokens label the queries and set L"},
    {"cross_attention", "cross-attention (L != S)", "true or false"},
    {"source_sentence", "source sentence", "text; the keys' tokens (cross-attention)"},
    {"separate_qkv", "separate q, k, v (as the notebook)", "true or false"},
    {"batch", "N batch", "an integer from 1"},
    {"tgt_len", "L query len", "an integer from 1"},
    {"src_len", "S key len", "an integer from 1"},
    {"embed_dim", "E embed_dim", "an integer from 1"},
    {"num_heads", "H num_heads", "an integer from 1"},
    {"num_kv_heads", "G kv heads", "an integer from 0 (0 = H)"},
    {"bias", "bias", "true or false"},
    {"seed", "seed", "an integer from 0"},
    {"fully_masked", "A query that may see no key", "nan (torch) or zero (notebook)"},
    {"mask_scope", "scope", "shared (L, S), per_batch (N, L, S) or per_head (N·num_heads, L, S)"},
    {"batch_index", "batch item", "a batch item, from 0"},
    {"colormap", "colormap", "viridis, magma, cividis or diverging"},
    {"show_values", "cell values", "true or false"},
    {"presenter", "presenter mode", "true or false"},
    {"font_scale", "font scale", "a number from 1 to 3"},
    {"temperature", "temperature T", "what-if, not torch: a number from 0.1 to 10 (1 = torch)"},
    {"scale_by_sqrt_dk", "divide by sqrt(d_k)", "what-if, not torch: true (torch) or false"},
    {"stage", "stage shown", "a stage of the trace: q, k, v, scores ... attn_weights, context, output"},
    {"pipeline_stage", "Pipeline stage", "a stage of the trace, drawn below the Pipeline's graph"},
    {"reshape_step", "Reshape step",
     "0 q, 1 view, 2 transpose, 3 per-head context, 4 transpose back, 5 concat"},
    {"mistake", "Reshape mistake", "0 none, 1 no transpose, 2 view on non-contiguous, 3 no out-proj"},
    {"sel_head", "head selected", "a head, from 0"},
};

const ControlInfo& find_control(const std::string& id_or_label) {
  for (const ControlInfo& c : kControls)
    if (id_or_label == c.id || id_or_label == c.label) return c;
  std::string known;
  for (const ControlInfo& c : kControls) known += std::string(known.empty() ? "" : ", ") + c.id;
  throw ActionError("no control \"" + id_or_label + "\"; the controls are " + known);
}

// A size field: the value applies at once and the mask is fitted to the new sizes.
Action size_action(const std::string& id, std::int64_t Scenario::*field, std::int64_t v) {
  Action a;
  a.what = id + " = " + std::to_string(v);
  a.key = id;
  a.change = [field, v](Scenario& s) { s.*field = v; };
  a.refit_mask = true;
  return a;
}

Action bool_action(const std::string& id, bool Scenario::*field, bool v, bool refit) {
  Action a;
  a.what = id + (v ? " on" : " off");
  a.change = [field, v](Scenario& s) { s.*field = v; };
  a.refit_mask = refit;
  return a;
}

Action view_action(std::string what, std::function<void(Display&)> f) {
  Action a;
  a.what = std::move(what);
  a.view = std::move(f);
  return a;
}

}  // namespace

std::uint64_t new_gesture() {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}

const std::vector<ControlInfo>& controls() {
  return kControls;
}

std::string control_value(const Scenario& s, const WindowState& w, const std::string& id_or_label) {
  const std::string id = find_control(id_or_label).id;
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  if (id == "model") return s.model;
  if (id == "layer") return std::to_string(s.layer);
  if (id == "sentence") return s.sentence;
  if (id == "cross_attention") return b(s.cross_attention);
  if (id == "source_sentence") return s.source_sentence;
  if (id == "separate_qkv") return b(s.separate_qkv);
  if (id == "batch") return std::to_string(s.batch);
  if (id == "tgt_len") return std::to_string(s.tgt_len);
  if (id == "src_len") return std::to_string(s.src_len);
  if (id == "embed_dim") return std::to_string(s.embed_dim);
  if (id == "num_heads") return std::to_string(s.num_heads);
  if (id == "num_kv_heads") return std::to_string(s.num_kv_heads);
  if (id == "bias") return b(s.bias);
  if (id == "seed") return std::to_string(s.seed);
  if (id == "fully_masked") return s.fully_masked == FullyMasked::zero ? "zero" : "nan";
  if (id == "mask_scope") return to_string(s.mask.scope);
  if (id == "batch_index") return std::to_string(s.view.batch_index);
  if (id == "colormap") return to_string(w.colormap);
  if (id == "show_values") return b(s.view.show_values);
  if (id == "presenter") return b(w.presenter);
  if (id == "scale_by_sqrt_dk") return b(s.what_if.scale_by_sqrt_dk);
  if (id == "stage") return s.view.stage;
  if (id == "pipeline_stage") return s.view.pipeline_stage;
  if (id == "reshape_step") return std::to_string(s.view.reshape_step);
  if (id == "mistake") return std::to_string(s.view.mistake);
  if (id == "sel_head") return std::to_string(s.view.sel_head);
  char text[32];
  std::snprintf(text, sizeof text, "%g", double(id == "temperature" ? s.what_if.temperature : w.font_scale));
  return text;  // temperature, font_scale
}

Action set_control(const std::string& id_or_label, const std::string& value) {
  const std::string id = find_control(id_or_label).id;
  if (id == "model") return choose_model(value);
  if (id == "layer") return choose_layer(parse_int(id, value, 0, kMaxSize));
  if (id == "sentence" || id == "source_sentence") {
    Action a;
    a.what = id;
    a.key = id;
    const bool source = id == "source_sentence";
    a.change = [value, source](Scenario& s) {
      (source ? s.source_sentence : s.sentence) = value;
      if (!source && s.has_model()) adopt_model_sizes(s);
    };
    a.refit_mask = true;
    return a;
  }
  if (id == "cross_attention")
    return bool_action(id, &Scenario::cross_attention, parse_bool(id, value), true);
  if (id == "separate_qkv") return bool_action(id, &Scenario::separate_qkv, parse_bool(id, value), false);
  if (id == "bias") return bool_action(id, &Scenario::bias, parse_bool(id, value), false);
  if (id == "batch") return size_action(id, &Scenario::batch, parse_int(id, value, 1, kMaxSize));
  if (id == "tgt_len") return size_action(id, &Scenario::tgt_len, parse_int(id, value, 1, kMaxSize));
  if (id == "src_len") return size_action(id, &Scenario::src_len, parse_int(id, value, 1, kMaxSize));
  if (id == "embed_dim") return size_action(id, &Scenario::embed_dim, parse_int(id, value, 1, kMaxSize));
  if (id == "num_heads") return size_action(id, &Scenario::num_heads, parse_int(id, value, 1, kMaxSize));
  if (id == "num_kv_heads")
    return size_action(id, &Scenario::num_kv_heads, parse_int(id, value, 0, kMaxSize));
  if (id == "seed") {
    const std::int64_t v = parse_int(id, value, 0, std::numeric_limits<std::int32_t>::max());
    Action a;
    a.what = "seed = " + value;
    a.key = id;
    a.change = [v](Scenario& s) { s.seed = std::uint64_t(v); };
    return a;
  }
  if (id == "fully_masked") {
    if (value != "nan" && value != "zero")
      throw ActionError("fully_masked: expected nan or zero, got \"" + value + "\"");
    Action a;
    a.what = "fully masked policy: " + value;
    a.change = [zero = value == "zero"](Scenario& s) {
      s.fully_masked = zero ? FullyMasked::zero : FullyMasked::nan;
    };
    return a;
  }
  if (id == "mask_scope") {
    for (MaskScope m : {MaskScope::shared, MaskScope::per_batch, MaskScope::per_head})
      if (value == to_string(m)) return set_mask_scope(m);
    throw ActionError("mask_scope: expected shared, per_batch or per_head, got \"" + value + "\"");
  }
  if (id == "batch_index") {
    const int v = int(parse_int(id, value, 0, kMaxSize));
    return view_action(id + " = " + value, [v](Display& d) { d.view.batch_index = v; });
  }
  if (id == "colormap") {
    for (Colormap c : {Colormap::viridis, Colormap::magma, Colormap::cividis, Colormap::diverging})
      if (value == to_string(c))
        return view_action(id + " = " + value, [c](Display& d) { d.window.colormap = c; });
    throw ActionError("colormap: expected viridis, magma, cividis or diverging, got \"" + value + "\"");
  }
  if (id == "show_values") {
    const bool v = parse_bool(id, value);
    return view_action(id + " = " + value, [v](Display& d) { d.view.show_values = v; });
  }
  if (id == "presenter") {
    const bool v = parse_bool(id, value);
    return view_action(id + " = " + value, [v](Display& d) { d.window.presenter = v; });
  }
  if (id == "temperature") {
    const float t = parse_float(id, value, 0.1f, 10.0f);
    Action a;
    a.what = "what-if: temperature = " + value;
    a.slot = "what_if";
    a.key = "what_if.temperature";  // typed values and a slider's drag coalesce
    a.change = [t](Scenario& s) { s.what_if.temperature = t; };
    return a;
  }
  if (id == "scale_by_sqrt_dk") {
    const bool on = parse_bool(id, value);
    Action a;
    a.what = std::string("what-if: scale ") + (on ? "on" : "off");
    a.slot = "what_if";
    a.change = [on](Scenario& s) { s.what_if.scale_by_sqrt_dk = on; };
    return a;
  }
  if (id == "stage" || id == "pipeline_stage") {
    if (value.empty()) throw ActionError(id + ": expected a stage's name, got \"\"");
    const bool pipeline = id == "pipeline_stage";
    return view_action(id + " = " + value, [value, pipeline](Display& d) {
      (pipeline ? d.view.pipeline_stage : d.view.stage) = value;
    });
  }
  if (id == "reshape_step") {
    const int v = int(parse_int(id, value, 0, 5));
    return view_action(id + " = " + value, [v](Display& d) { d.view.reshape_step = v; });
  }
  if (id == "mistake") {
    const int v = int(parse_int(id, value, 0, 3));
    return view_action(id + " = " + value, [v](Display& d) { d.view.mistake = v; });
  }
  if (id == "sel_head") {
    const int v = int(parse_int(id, value, 0, kMaxSize));
    return view_action(id + " = " + value, [v](Display& d) { d.view.sel_head = v; });
  }
  const float v = parse_float(id, value, 1.0f, 3.0f);  // font_scale
  return view_action(id + " = " + value, [v](Display& d) { d.window.font_scale = v; });
}

void run(const Action& a, Scenario& s, WindowState& w) {
  if (a.view) {
    Display d{w, s.view};
    a.view(d);
  } else if (a.change) {
    a.change(s);
  }
}

Action show_view(ViewTab tab) {
  return view_action(std::string("view: ") + view_info(tab).name, [tab](Display& d) { d.window.tab = tab; });
}

Action show_panels(bool controls, bool inspector) {
  return view_action("side panels", [controls, inspector](Display& d) {
    d.window.layout_chosen = true;
    d.window.show_controls = controls;
    d.window.show_inspector = inspector;
  });
}

Action set_focus(bool on) {
  return view_action(on ? "focus on" : "focus off", [on](Display& d) { d.window.focus = on; });
}

Action toggle_focus() {
  return view_action("focus", [](Display& d) { d.window.focus = !d.window.focus; });
}

Action toggle_presenter() {
  return view_action("presenter mode", [](Display& d) { d.window.presenter = !d.window.presenter; });
}

Action set_keys_overlay(bool on) {
  return view_action("keys", [on](Display& d) { d.window.show_keys = on; });
}

Action close_overlays() {
  return view_action("close", [](Display& d) { d.window.show_keys = d.window.focus = false; });
}

Action step_stage(int step, std::vector<std::string> order) {
  return view_action("stage", [step, order = std::move(order)](Display& d) {
    if (order.empty()) throw NoChange{};
    std::string& stage = d.window.tab == ViewTab::pipeline ? d.view.pipeline_stage : d.view.stage;
    const auto it = std::find(order.begin(), order.end(), stage);
    // A stage not in the list (another view's) steps from attn_weights, or from the list's start.
    const auto from = it != order.end() ? it : std::find(order.begin(), order.end(), "attn_weights");
    const std::ptrdiff_t at = from != order.end() ? from - order.begin() : 0;
    const std::ptrdiff_t to = std::clamp<std::ptrdiff_t>(at + step, 0, std::ptrdiff_t(order.size()) - 1);
    if (it != order.end() && to == at) throw NoChange{};
    stage = order[std::size_t(to)];
  });
}

Action show_pipeline_stage(std::string stage) {
  return view_action("stage " + stage, [stage](Display& d) { d.view.pipeline_stage = stage; });
}

Action set_reshape_mistake(int mistake) {
  return view_action("reshape mistake",
                     [mistake](Display& d) { d.view.mistake = std::clamp(mistake, 0, 3); });
}

Action step_reshape(int step) {
  return view_action("reshape step", [step](Display& d) {
    const int to = std::clamp(d.view.reshape_step + step, 0, 5);
    if (to == d.view.reshape_step) throw NoChange{};
    d.view.reshape_step = to;
  });
}

Action set_compare_mode(CompareMode mode) {
  return view_action("compare mode", [mode](Display& d) { d.view.compare_mode = mode; });
}

Action set_compare_pins(std::string a, std::string b) {
  return view_action("compare " + a + " and " + b, [a, b](Display& d) {
    d.view.compare_mode = CompareMode::pins;
    d.view.compare_pin_a = a;
    d.view.compare_pin_b = b;
  });
}

Action step_head(int step, std::int64_t heads) {
  return view_action("head", [step, heads](Display& d) {
    d.view.sel_head =
        int(std::clamp<std::int64_t>(d.view.sel_head + step, 0, std::max<std::int64_t>(0, heads - 1)));
  });
}

Action set_tensor_value(const std::string& tensor, std::int64_t index, float value) {
  Action a;
  a.what = "edit " + tensor;
  a.key = "edit " + tensor;
  a.slot = "tensors";
  a.change = [tensor, index, value](Scenario& s) {
    Tensor<float>* t = nullptr;
    if (tensor == "query" || tensor == "key" || tensor == "value") {
      std::optional<Tensor<float>>& slot = tensor == "query" ? s.query : tensor == "key" ? s.key : s.value;
      if (!slot) {  // start from the values on screen
        const Built b = build_forward(s);
        slot = tensor == "query" ? b.inputs.query : tensor == "key" ? b.inputs.key : b.inputs.value;
      }
      t = &*slot;
    } else {
      if (!s.weights) s.weights = build_forward(s).weights;  // start from the default init on screen
      for (auto [name, w] : state_dict(*s.weights))
        if (tensor == name) t = w;
      if (!t || t->empty()) throw ConfigError("weights", "no weight \"" + tensor + "\" in this module");
    }
    if (index < 0 || index >= t->numel())
      throw ConfigError(tensor, tensor + " has " + std::to_string(t->numel()) + " values; index " +
                                    std::to_string(index) + " is outside");
    t->data[std::size_t(index)] = value;
  };
  return a;
}

Action set_mask_scope(MaskScope scope) {
  Action a;
  a.what = std::string("mask scope: ") + to_string(scope);
  a.slot = "mask";
  a.change = [scope](Scenario& s) {
    s.mask.scope = scope;
    fit_mask_to_sizes(s);
  };
  return a;
}

Action set_mask_preset(const std::string& name) {
  for (MaskPreset p : {MaskPreset::none, MaskPreset::causal, MaskPreset::padding, MaskPreset::sliding_window,
                       MaskPreset::block_diagonal, MaskPreset::prefix_lm, MaskPreset::random})
    if (name == to_string(p)) {
      Action a;
      a.what = "mask preset: " + name;
      a.slot = "mask";
      a.change = [p](Scenario& s) {
        s.mask.preset = p;
        apply_mask_preset(s);
      };
      return a;
    }
  throw ActionError(
      "no mask preset \"" + name +
      "\"; the presets are none, causal, padding, sliding_window, block_diagonal, prefix_lm, random");
}

std::string cells_text(const Cells& cells) {
  if (cells.empty()) return "no cell";
  const std::string first =
      "(" + std::to_string(cells[0].first) + ", " + std::to_string(cells[0].second) + ")";
  return cells.size() == 1 ? first : std::to_string(cells.size()) + " cells from " + first;
}

Action paint_mask_cells(Cells cells, bool block, std::uint64_t gesture) {
  Action a;
  a.what = std::string("mask: ") + (block ? "block " : "unblock ") + cells_text(cells);
  a.slot = "mask";
  a.gesture = gesture;
  a.change = [cells = std::move(cells), block](Scenario& s) {
    MaskSpec& m = s.mask;
    if (m.cells.empty()) {  // painting on no mask starts an all-attend one, as the editor's button does
      m.preset = MaskPreset::custom;
      fit_mask_to_sizes(s);
    }
    const std::int64_t L = s.L(), S = s.S(), N = s.batch, H = s.num_heads;
    const std::int64_t n = std::clamp<std::int64_t>(s.view.batch_index, 0, std::max<std::int64_t>(0, N - 1));
    const std::int64_t h = std::clamp<std::int64_t>(s.view.sel_head, 0, std::max<std::int64_t>(0, H - 1));
    const std::int64_t slice = mask_slice(m.scope, n, h, H);
    if (std::size_t((slice + 1) * L * S) > m.cells.size())
      throw ConfigError("attn_mask", "the mask does not fit the sizes: fit it to the sizes first");
    for (auto [row, col] : cells) {
      if (row < 0 || row >= L || col < 0 || col >= S)
        throw ConfigError("attn_mask", "mask cell (" + std::to_string(row) + ", " + std::to_string(col) +
                                           ") is outside the (L, S) = (" + std::to_string(L) + ", " +
                                           std::to_string(S) + ") mask");
      m.cells[std::size_t((slice * L + row) * S + col)] = block ? kMaskBlocked : 0.0f;
    }
    m.preset = MaskPreset::custom;
  };
  return a;
}

Action paint_key_padding(Cells cells, bool pad, std::uint64_t gesture) {
  Action a;
  a.what = std::string("key_padding_mask: ") + (pad ? "pad " : "unpad ") + cells_text(cells);
  a.slot = "mask";
  a.gesture = gesture;
  a.change = [cells = std::move(cells), pad](Scenario& s) {
    MaskSpec& m = s.mask;
    const std::int64_t N = s.batch, S = s.S();
    if (m.key_padding.size() != std::size_t(N * S)) {
      m.key_padding.assign(std::size_t(N * S), 0);
      m.key_padding_shape = {N, S};
    }
    for (auto [item, key] : cells) {
      if (item < 0 || item >= N || key < 0 || key >= S)
        throw ConfigError("key_padding_mask", "key_padding_mask cell (" + std::to_string(item) + ", " +
                                                  std::to_string(key) + ") is outside (N, S) = (" +
                                                  std::to_string(N) + ", " + std::to_string(S) + ")");
      m.key_padding[std::size_t(item * S + key)] = pad ? 1 : 0;
    }
  };
  return a;
}

Action choose_model(const std::string& model) {
  Action a;
  a.what = model.empty() ? "model: random init" : "model: " + model;
  a.slot = "model";
  a.change = [model](Scenario& s) { set_model(s, model); };
  return a;
}

Action choose_layer(std::int64_t layer) {
  Action a;
  a.what = "layer " + std::to_string(layer);
  a.slot = "model";
  a.change = [layer](Scenario& s) {
    if (!s.has_model()) throw ConfigError("model", "layer: only a model has layers; choose a model first");
    if (!set_layer(s, layer)) throw NoChange{};
  };
  return a;
}

namespace {

// The model's sizes, or ConfigError("knockouts") without one.
ModelSizes knockout_model(const Scenario& s) {
  if (!s.has_model())
    throw ConfigError("knockouts", "knock-outs: only a model has heads to knock out; choose a model first");
  return model_entry(s.model)->loaded.model->sizes();
}

void set_heads(Scenario& s, std::vector<HeadRef> heads) {
  const ModelSizes c = knockout_model(s);
  for (const HeadRef& h : heads)
    if (h.layer < 0 || h.layer >= c.n_layer || h.head < 0 || h.head >= c.n_head)
      throw ConfigError("knockouts", "knock-out: head " + format_heads({h}) + " is outside the model (" +
                                         std::to_string(c.n_layer) + " layers of " +
                                         std::to_string(c.n_head) + " heads)");
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  if (heads == s.knockouts.heads) throw NoChange{};
  s.knockouts.heads = std::move(heads);
}

}  // namespace

Action set_knockouts(std::vector<HeadRef> heads, Ablation ablation) {
  Action a;
  a.what = heads.empty() ? std::string("knock-outs: none")
                         : "knock out " + format_heads(heads) + " (" + to_string(ablation) + ")";
  a.slot = "what_if";
  a.change = [heads = std::move(heads), ablation](Scenario& s) {
    const bool same_mode = s.knockouts.ablation == ablation;
    s.knockouts.ablation = ablation;
    try {
      set_heads(s, heads);
    } catch (const NoChange&) {
      if (same_mode) throw;
    }
  };
  return a;
}

Action toggle_knockout(HeadRef head) {
  Action a;
  a.what = "knock-out " + format_heads({head});
  a.slot = "what_if";
  a.change = [head](Scenario& s) {
    std::vector<HeadRef> heads = s.knockouts.heads;
    const auto it = std::find(heads.begin(), heads.end(), head);
    if (it != heads.end())
      heads.erase(it);
    else
      heads.push_back(head);
    set_heads(s, std::move(heads));
  };
  return a;
}

Action keep_only_heads(std::int64_t layer, std::vector<std::int64_t> keep, std::optional<Ablation> ablation) {
  Action a;
  std::vector<HeadRef> kept;
  for (std::int64_t h : keep) kept.push_back({layer, h});
  a.what = "knock out all of layer " + std::to_string(layer) + " but " + format_heads(kept);
  a.slot = "what_if";
  a.change = [layer, keep = std::move(keep), ablation](Scenario& s) {
    std::vector<HeadRef> heads = heads_except(knockout_model(s), layer, keep);
    for (const HeadRef& h : s.knockouts.heads)
      if (h.layer != layer) heads.push_back(h);
    // The mode and the heads in one undo step; either changing is a change.
    const bool mode_changed = ablation && s.knockouts.ablation != *ablation;
    if (ablation) s.knockouts.ablation = *ablation;
    try {
      set_heads(s, std::move(heads));
    } catch (const NoChange&) {
      if (!mode_changed) throw;
    }
  };
  return a;
}

Action set_ablation(Ablation ablation) {
  Action a;
  a.what = std::string("knock-outs: ") + (ablation == Ablation::zero ? "zero" : "mean over positions");
  a.slot = "what_if";
  a.change = [ablation](Scenario& s) {
    knockout_model(s);
    if (s.knockouts.ablation == ablation) throw NoChange{};
    s.knockouts.ablation = ablation;
  };
  return a;
}

Action open_lesson(std::shared_ptr<const Lesson> lesson, int step) {
  const std::string name = lesson ? lesson->name : "";
  return view_action("lesson: " + name, [lesson = std::move(lesson), step](Display& d) {
    LessonPlace& p = d.window.lesson;
    if (p.lesson) p.resume[p.lesson->name] = p.step;  // the lesson left is resumed where it was
    p.lesson = lesson;
    p.hints_shown = 0;
    if (!lesson) return;
    const auto it = p.resume.find(lesson->name);
    const int want = step >= 0 ? step : it != p.resume.end() ? it->second : 0;
    p.step = std::clamp(want, 0, int(lesson->steps.size()) - 1);
  });
}

Action close_lesson() {
  return view_action("lesson closed", [](Display& d) {
    LessonPlace& p = d.window.lesson;
    if (p.lesson) p.resume[p.lesson->name] = p.step;
    p.lesson = nullptr;
  });
}

Action lesson_step(int step) {
  return view_action("lesson step " + std::to_string(step + 1), [step](Display& d) {
    LessonPlace& p = d.window.lesson;
    if (!p.lesson) throw NoChange{};
    const int to = std::clamp(step, 0, int(p.lesson->steps.size()) - 1);
    if (to == p.step) throw NoChange{};
    p.step = to;
    p.hints_shown = 0;
  });
}

Action show_lesson_hint() {
  return view_action("lesson hint", [](Display& d) { ++d.window.lesson.hints_shown; });
}

}  // namespace mha::studio
