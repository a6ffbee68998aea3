// A GPT-2 language model on the engine: token and position embeddings, pre-LayerNorm blocks whose
// attention is the traced multi-head forward (mha::forward, so every per-head stage of every layer
// is there as for a single module), an MLP with gelu_new, the final LayerNorm and the LM head.
// Names follow Hugging Face's GPT2Config and checkpoints; the forward reads as llm.c's gpt2_forward.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mha.hpp"

namespace mha {

// Hugging Face's GPT2Config, the fields the forward needs.
struct GPT2Config {
  std::int64_t vocab_size = 0;
  std::int64_t n_positions = 0;  // longest sequence: rows of wpe
  std::int64_t n_embd = 0;       // C, the residual width
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_inner = 0;  // MLP width; 0 means 4·n_embd, as in GPT-2
  double layer_norm_epsilon = 1e-5;
  bool tie_word_embeddings = true;  // the LM head is wte

  std::int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  std::int64_t head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
};

// Throws ConfigError naming the field for sizes that cannot work.
void validate(const GPT2Config& c);

// One block's parameters. The attention is held as torch's nn.MultiheadAttention parameters
// (in_proj_weight (3C, C) = c_attn.weightᵀ), so the block's attention is mha::forward itself; the
// MLP keeps Hugging Face's Conv1D layout [in, out].
struct GPT2Block {
  Tensor<float> ln_1_weight, ln_1_bias;  // (C,)
  Weights<float> attn;                   // in_proj_weight (3C, C), in_proj_bias (3C,), out_proj (C, C), (C,)
  Tensor<float> ln_2_weight, ln_2_bias;  // (C,)
  Tensor<float> c_fc_weight;             // (C, inner)   mlp.c_fc.weight, [in, out]
  Tensor<float> c_fc_bias;               // (inner,)
  Tensor<float> c_proj_weight;           // (inner, C)   mlp.c_proj.weight, [in, out]
  Tensor<float> c_proj_bias;             // (C,)
};

struct GPT2Weights {
  Tensor<float> wte;  // (vocab_size, C)  token embeddings
  Tensor<float> wpe;  // (n_positions, C) learned absolute position embeddings
  std::vector<GPT2Block> h;
  Tensor<float> ln_f_weight, ln_f_bias;  // (C,)
  Tensor<float> lm_head;                 // (vocab_size, C); empty when tied to wte
};

struct GPT2Model {
  GPT2Config config;
  GPT2Weights weights;
  std::string storage_dtype = "float32";   // what the checkpoint stored ("float16", "bfloat16", …)
  std::int64_t parameter_count() const;    // tied head counted once, as Hugging Face counts it
  std::int64_t nonfinite_weights() const;  // NaN/Inf among the weights (the loader warns about them)
};

// Checks every weight's shape against the config; throws ShapeError naming the tensor by its
// Hugging Face name ("h.3.mlp.c_fc.weight").
void validate(const GPT2Model& m);

// One next-token candidate.
struct TokenProb {
  std::int32_t id = 0;
  double probability = 0;  // softmax of the last position's logits
  float logit = 0;
};

// One head of one layer, TransformerLens's (layer, head_index).
struct HeadRef {
  std::int64_t layer = 0, head = 0;
  bool operator==(const HeadRef& o) const { return layer == o.layer && head == o.head; }
  bool operator<(const HeadRef& o) const { return layer < o.layer || (layer == o.layer && head < o.head); }
};

// What a knocked-out head's context becomes (a what-if, not torch: head ablation as TransformerLens
// does it on hook_z). The context is the head's slice of `concat`, (T, d_k): what the head hands to
// the out-projection.
enum class Ablation {
  zero,  // every position's context is 0: the head adds nothing but out_proj.bias's share
  // every position's context is the head's mean context over this sentence's T positions, one (d_k,)
  // vector: the head still adds its average, but nothing that depends on where it looked
  mean,
};
const char* to_string(Ablation a);

struct GPT2Options {
  // Backend::reference: explicit loops everywhere (the attention's reference path too);
  // anything else: the Eigen kernels.
  Backend backend = Backend::eigen;
  int threads = 0;  // as Options::threads
  // A mask per layer replacing the causal one (a what-if: block a key at layer i). Empty or nullopt:
  // causal. Shapes as mha::forward takes them: (T, T) or (H, T, T), torch's conventions.
  std::vector<std::optional<Mask<float>>> attn_masks;
  // A what-if per layer, not torch's computation: layer l's q is divided by score_divisors[l]
  // instead of √d_k (Options::score_divisor: the temperature and "scale off" controls). Missing or
  // 0: √d_k, GPT-2's own.
  std::vector<double> score_divisors;
  // Head knock-outs, a what-if at any layers: each listed head's context is replaced as `ablation`
  // says before the out-projection, and the layers after read the residual stream that changed.
  // The head's scores and weights are computed and traced as usual (they are what it would have
  // done); its layer's `context`, `context_transposed`, `concat` and `output` stages hold what the
  // block used, and their notes name the heads replaced. Throws ConfigError("knockouts") for a head
  // outside the model.
  std::vector<HeadRef> knockouts;
  Ablation ablation = Ablation::zero;
  std::int64_t top_k = 5;
};

// Every activation of one forward, as llm.c keeps them. T tokens, C = n_embd.
struct GPT2Run {
  std::vector<std::int32_t> input_ids;  // (T,)
  Tensor<float> residual;               // (n_layer + 1, T, C): input to block l; last: after the last block
  std::vector<ForwardResult<float>> attn;  // per layer: the traced attention (query = ln_1 output)
  Tensor<float> resid_mid;                 // (n_layer, T, C): residual + attention output
  Tensor<float> ln_2;                      // (n_layer, T, C)
  Tensor<float> mlp_hidden;                // (n_layer, T, inner): gelu_new(ln_2·c_fc + b)
  Tensor<float> mlp_out;                   // (n_layer, T, C)
  Tensor<float> ln_f;                      // (T, C)
  Tensor<float> logits;                    // (vocab_size,): the last position's
  std::vector<TokenProb> top_k;            // most probable next tokens, best first
  // Each layer's attention buffers, reused by the next forward into this run (see mha::Workspace).
  std::vector<Workspace<float>> workspaces;
};

// The whole forward. Throws ConfigError for an empty text, a text longer than n_positions (naming
// both) or an id outside the vocabulary.
GPT2Run gpt2_forward(const GPT2Model& m, const std::vector<std::int32_t>& input_ids,
                     const GPT2Options& o = {});
// The same into `run`, reusing its buffers where the sizes match (no allocation, no page faults
// on a repeated forward at the same length). Returns `run`.
GPT2Run& gpt2_forward(const GPT2Model& m, const std::vector<std::int32_t>& input_ids, const GPT2Options& o,
                      GPT2Run& run);

// Recomputes `run` from block `layer` on, with the residual stream before it kept: what a mask edit
// at that layer changes. `run` must come from gpt2_forward of the same model and ids.
void gpt2_forward_from(const GPT2Model& m, GPT2Run& run, std::int64_t layer, const GPT2Options& o = {});

// Every head of `layer` except `keep`: the "all but these heads" knock-out. Throws ConfigError
// ("knockouts") for a layer or head outside the model.
std::vector<HeadRef> heads_except(const GPT2Config& c, std::int64_t layer,
                                  const std::vector<std::int64_t>& keep);
// "1.0,1.3" (layer.head, comma-separated) to heads; throws ConfigError naming `argument` for an item
// that is not one. Does not check them against a model (the forward does).
std::vector<HeadRef> parse_heads(const std::string& text, const std::string& argument);
// The same form back: "1.0,1.3" (sorted as given).
std::string format_heads(const std::vector<HeadRef>& heads);
// The first layer a knock-out touches: where gpt2_forward_from starts (n_layer when none).
std::int64_t first_knockout_layer(const GPT2Config& c, const std::vector<HeadRef>& heads);

// How much a head's attention pattern moved between two runs on the same ids: the largest
// |Δ attn_weights| over its (T, T) weights (NaN rows compare equal to NaN rows).
struct PatternChange {
  HeadRef head;
  double max_abs_diff = 0;
};
// Every head of every layer, layer by layer. Throws ConfigError("run") when the runs differ in
// layers, heads or tokens.
std::vector<PatternChange> pattern_changes(const GPT2Run& before, const GPT2Run& after);
// A head whose largest weight change is at least this is reported as changed: 0.001 of a weight is
// below what the heatmaps can show, and above float rounding through a few layers (~1e-6).
constexpr double kPatternChanged = 1e-3;

// The attention module of one block as mha::forward runs it.
Config attention_config(const GPT2Config& c);

}  // namespace mha
