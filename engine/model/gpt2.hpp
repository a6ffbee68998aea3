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
#include "model/language_model.hpp"

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

struct GPT2Model final : LanguageModel {
  GPT2Config config;
  GPT2Weights weights;
  std::string storage_dtype = "float32";  // what the checkpoint stored ("float16", "bfloat16", …)
  std::int64_t parameter_count() const;   // tied head counted once, as Hugging Face counts it

  // LanguageModel
  ModelSizes sizes() const override;
  Config attention_config() const override;
  const Weights<float>& attention_weights(std::int64_t layer) const override;
  Mask<float> attention_mask(std::int64_t T) const override;
  std::unique_ptr<ModelRun> new_run() const override;
  void forward(const std::vector<std::int32_t>& input_ids, const ModelOptions& o,
               ModelRun& run) const override;
  void forward_from(ModelRun& run, std::int64_t layer, const ModelOptions& o) const override;
  void logits_at(const ModelRun& run, std::int64_t position, std::vector<double>& logits) const override;
  std::int64_t nonfinite_weights() const override;
  double forward_flops(std::int64_t T) const override;
};

// Checks every weight's shape against the config; throws ShapeError naming the tensor by its
// Hugging Face name ("h.3.mlp.c_fc.weight").
void validate(const GPT2Model& m);

// GPT-2's options are every family's (the what-ifs: masks, score divisors, knock-outs).
using GPT2Options = ModelOptions;

// Every activation of one forward, as llm.c keeps them. T tokens, C = n_embd.
// input_ids, residual, attn (query = ln_1's output), logits and top_k are ModelRun's.
struct GPT2Run final : ModelRun {
  Tensor<float> resid_mid;                 // (n_layer, T, C): residual + attention output
  Tensor<float> ln_2;                      // (n_layer, T, C)
  Tensor<float> mlp_hidden;                // (n_layer, T, inner): gelu_new(ln_2·c_fc + b)
  Tensor<float> mlp_out;                   // (n_layer, T, C)
  Tensor<float> ln_f;                      // (T, C)
  std::unique_ptr<ModelRun> clone() const override { return std::make_unique<GPT2Run>(*this); }
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

// The attention module of one block as mha::forward runs it.
Config attention_config(const GPT2Config& c);

}  // namespace mha
