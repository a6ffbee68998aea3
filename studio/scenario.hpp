// What the user makes: sizes, sentence, seed, edited tensors, the mask and the view. A Scenario is
// plain data (no GL, no ImGui): saved as versioned JSON, snapshotted by undo, autosaved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "colormap.hpp"
#include "masks.hpp"
#include "mha.hpp"
#include "model/language_model.hpp"
#include "views.hpp"

namespace mha::studio {

using render::Colormap;
using render::to_string;

// The mask's presets, scopes and conventions are the engine's (masks.hpp).
using mha::MaskConvention;
using mha::MaskPreset;
using mha::MaskScope;
using mha::to_string;

struct MaskSpec {
  MaskPreset preset = MaskPreset::none;
  MaskScope scope = MaskScope::shared;
  MaskConvention convention = MaskConvention::torch_bool;
  int window = 2;         // sliding_window: key j visible from query i when i - w < j <= i
  int segments = 2;       // block_diagonal: equal segments attend within themselves
  int prefix = 2;         // prefix_lm: the first `prefix` keys are visible to all queries
  float random_p = 0.3f;  // random: each cell blocked with probability p
  std::uint64_t random_seed = 1;
  // The mask cells, additive: 0 attend, -inf blocked, any other value added to the scores.
  // Shape by scope: (L, S), (N, L, S) or (N·H, L, S). Empty with preset none.
  std::vector<float> cells;
  Shape cells_shape;
  // key_padding_mask: (N, S), 1 = padding (torch True). Empty = no key_padding_mask.
  std::vector<std::uint8_t> key_padding;
  Shape key_padding_shape;  // (N, S) it was made for, so fit_mask_to_sizes can keep the overlap

  MaskPresetParams params() const { return {window, segments, prefix, random_p, random_seed}; }
};

// The what-if of the scores' scale (not torch's computation): q is divided by
// (√d_k when scale_by_sqrt_dk, else 1) · temperature instead of by √d_k. temperature 1 with the scale
// on is torch's nn.MultiheadAttention; anything else is marked as a what-if wherever it shows.
struct WhatIf {
  float temperature = 1.0f;      // softmax temperature T > 0: weights = softmax(q·k / (√d_k · T) + mask)
  bool scale_by_sqrt_dk = true;  // off: scores are not divided by √d_k (the softmax saturates as d_k grows)
  bool active() const { return temperature != 1.0f || !scale_by_sqrt_dk; }
  // What q is divided by for head size d_k.
  double divisor(std::int64_t d_k) const;
};

// Head knock-outs with a model (a what-if, not torch; ModelOptions::knockouts): the heads whose
// context is replaced, at any layers (not only the one shown), the layers after following.
struct Knockouts {
  std::vector<HeadRef> heads;  // sorted, no repeats
  Ablation ablation = Ablation::zero;
  bool active() const { return !heads.empty(); }
  bool has(const HeadRef& h) const;
};

// How the work is looked at inside the views: saved with a scenario (a teacher's prepared batch item,
// stage or reshape step) and taken from a file when it is opened, but never changed by undo or redo
// (History keeps the one on screen). The window's own settings (the view shown, presenter mode, the
// font, the colormap, the side panels) are not here: window.hpp.
// What Compare sets against what (the numbers are saved in files).
enum class CompareMode { two_heads = 0, before_after = 1, trained_untrained = 2, pins = 3 };

struct ViewState {
  int batch_index = 0;                                // which batch item the views show
  std::string stage = "attn_weights";                 // Heads view: which stage
  CompareMode compare_mode = CompareMode::two_heads;  // Compare view
  int compare_a = 0, compare_b = 1;                   // heads compared
  // Compare, mode 3: B - A of two pins by name ("live" = the current state). Pins live for the
  // session only, so these are not saved.
  std::string compare_pin_a, compare_pin_b = "live";
  bool show_values = true;
  // Heads view, attn_weights: colour each row from 0 to its own largest weight instead of one
  // range for every row (a causal row 0 holds a 1 and longer rows ~1/T, which all look dark).
  bool weights_row_scale = false;
  int reshape_step = 0;  // Reshape view: 0 q, 1 view, 2 transpose, 3 per-head context,
                         // 4 transpose back, 5 concat
  int mistake = 0;       // Reshape view: 0 none, 1 no transpose, 2 view on non-contiguous, 3 no out-proj
  int head_order = 0;    // Heads view with a model: 0 by index, else by a role score (HeadOrder)
  // Inspector selection (set by clicking a heatmap cell): head, query, key.
  int sel_head = 0, sel_query = 0, sel_key = 0;
  // Linked hover: the token under the pointer in any view (-1: none), as a query row and/or a key
  // column; every view marks it. Not saved: it belongs to the pointer.
  int hover_query = -1, hover_key = -1;
  // Token lines view: heads whose lines are hidden.
  std::vector<int> hidden_heads;
  // Overview with a model of several layers: every layer × head (BertViz's model view), or only the
  // current layer's heads.
  bool overview_layers = true;
  // Pipeline: the stage drawn below the graph (the other views share `stage`).
  std::string pipeline_stage = "attn_weights";
};

struct Scenario {
  static constexpr int kVersion = 1;
  std::string name = "course notebook";
  std::int64_t batch = 3, tgt_len = 4, src_len = 4, embed_dim = 8, num_heads = 2, num_kv_heads = 0;
  bool bias = false;
  bool cross_attention = false;  // false: S = L; key = value = query unless separate_qkv
  bool separate_qkv = false;     // query, key, value drawn as three tensors (the course notebook)
  std::uint64_t seed = 42;       // torch.manual_seed for inputs and default-init weights
  // A language model whose attention the views show: "" = one nn.MultiheadAttention with default
  // init from the seed; a shipped model's name (assets/models/<name>); or a model folder path. With
  // a model, the sentence is its tokenizer's tokens, N = 1, E and H are the model's, and the mask
  // replaces the causal mask at `layer` only (a what-if: the layers after it see the change).
  std::string model;
  std::int64_t layer = 0;
  std::string sentence;         // whitespace tokens label queries (sets L when non-empty)
  std::string source_sentence;  // cross-attention: tokens of the keys (sets S when non-empty)
  FullyMasked fully_masked = FullyMasked::nan;
  WhatIf what_if;       // not torch: see WhatIf
  Knockouts knockouts;  // with a model: heads knocked out (not torch); dropped when the model changes
  MaskSpec mask;
  // Edited, pasted or loaded tensors replace the generated ones (batch-first, shapes must fit).
  std::optional<Tensor<float>> query, key, value;
  std::optional<Weights<float>> weights;
  ViewState view;
  // The view the file names ("view": {"tab": …}): the window opens on it only when the scenario is
  // opened from the command line or a lesson; Open, a preset, undo and redo leave the view shown.
  std::optional<ViewTab> suggested_tab;

  bool has_model() const { return !model.empty(); }
  std::int64_t L() const;  // tokens of `sentence` (the model's tokenizer with a model) if any, else tgt_len
  std::int64_t S() const;  // self-attention: L; cross: tokens of source_sentence if any, else src_len
  std::vector<std::string> query_tokens() const;  // sentence tokens, or "t0", "t1", ...
  std::vector<std::string> key_tokens() const;
};

// With a model: sets the sizes the model implies (N = 1, E, H, bias, self-attention, L = the
// sentence's tokens) and keeps `layer` in range. Throws the model's load error (argument "model").
void adopt_model_sizes(Scenario& s);
// Switches to a model ("" = back to one module with default init): its sizes, a sentence if there
// is none, the model's own mask; the edited tensors (which no longer fit) are dropped. Back to "",
// the sizes stay and the mask is fitted to them. Throws the model's load error and changes nothing.
void set_model(Scenario& s, const std::string& model);
// With a model: shows `layer` (clamped to the model's layers); a what-if mask painted on another
// layer does not follow, the model's own mask comes back. Returns whether the layer changed.
bool set_layer(Scenario& s, std::int64_t layer);

// Splits on whitespace.
std::vector<std::string> tokenize(const std::string& sentence);

// Fills mask.cells from the preset for the scenario's sizes (keeps key_padding). custom/none: as is
// (none clears the cells).
void apply_mask_preset(Scenario& s);
// Resizes the cells and key_padding to the current sizes, keeping what still fits.
void fit_mask_to_sizes(Scenario& s);
// Both throw mha::TooLargeError (argument "mask") and change nothing when the cells or the
// key_padding would exceed this many values.
constexpr std::int64_t kMaxMaskCells = std::int64_t(1) << 24;

// The equivalent torch expression for the mask, for "Copy as PyTorch".
std::string mask_as_pytorch(const Scenario& s);

// JSON, versioned. Throws mha::FileError with the reason; `from_json` never half-applies. `tab`: the
// view to save as the file's suggestion (the window's, when the app saves), else suggested_tab.
std::string to_json(const Scenario& s, std::optional<ViewTab> tab = std::nullopt);
// With `warnings`: one line for each field of the file this version does not know (it was ignored).
Scenario scenario_from_json(const std::string& text, const std::string& name_for_errors,
                            std::vector<std::string>* warnings = nullptr);
Scenario load_scenario(const std::string& path, std::vector<std::string>* warnings = nullptr);
void save_scenario(const std::string& path, const Scenario& s,
                   std::optional<ViewTab> tab = std::nullopt);  // atomic: temp file + rename

}  // namespace mha::studio
