// A Llama-family language model on the engine (Hugging Face's LlamaForCausalLM, and Mistral and Qwen2,
// which differ only in a sliding window and q/k/v biases): token embeddings, pre-RMSNorm blocks whose
// attention is the traced multi-head forward (mha::forward with num_kv_heads for grouped-query
// attention and Inputs::rotary for RoPE, so every per-head stage of every layer is there as for
// GPT-2, q and k before and after the rotation included), a SwiGLU MLP, the final RMSNorm and the LM
// head. Names follow Hugging Face's LlamaConfig and checkpoints; the forward reads as gpt2.hpp's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mha.hpp"
#include "model/language_model.hpp"
#include "model/weight_matrix.hpp"

namespace mha {

// config.json's rope_scaling, the kinds the runner computes (anything else is refused by name).
struct RopeScaling {
  std::string rope_type;  // "" (none), "linear" or "llama3"
  double factor = 1;      // linear: inv_freq / factor; llama3: the low band's divisor
  double low_freq_factor = 1, high_freq_factor = 4;   // llama3
  std::int64_t original_max_position_embeddings = 0;  // llama3
};

// Hugging Face's LlamaConfig (and MistralConfig, Qwen2Config), the fields the forward needs.
struct LlamaConfig {
  std::string model_type = "llama";  // "llama", "mistral" or "qwen2"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;        // C, the residual width
  std::int64_t intermediate_size = 0;  // I, the MLP width
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;  // H
  std::int64_t num_key_value_heads = 0;  // G; 0 means H (no grouping)
  std::int64_t head_dim = 0;             // d; 0 means hidden_size / H
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // llama: biases on q, k, v and o; qwen2 has q, k, v biases whatever it says
  bool tie_word_embeddings = false;
  std::int64_t sliding_window = 0;  // mistral: query i sees keys i - sliding_window < j ≤ i; 0: none

  std::int64_t kv_heads() const {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  std::int64_t head_size() const {
    return head_dim > 0 ? head_dim : num_attention_heads > 0 ? hidden_size / num_attention_heads : 0;
  }
  bool qkv_bias() const { return model_type == "qwen2" || attention_bias; }
  bool o_bias() const { return model_type != "qwen2" && attention_bias; }
};

// Throws ConfigError naming the field for sizes or settings the runner cannot compute.
void validate(const LlamaConfig& c);

// One decoder layer. The attention is held as torch's nn.MultiheadAttention parameters in float, so it
// is mha::forward itself: in_proj_weight = cat(q_proj, k_proj, v_proj) (torch's (out, in) as Hugging
// Face stores them). The MLP's matrices, most of a layer, stay as the checkpoint stores them (F16 and
// BF16 read in place from the mapped file), (out, in) as torch's nn.Linear holds them.
struct LlamaLayer {
  Tensor<float> input_layernorm;           // (C,)
  Weights<float> attn;                     // in_proj_weight (C + 2·G·d, C), out_proj (C, C); biases
                                           // (C + 2·G·d,) and (C,) when any (qwen2: out_proj.bias zeros)
  Tensor<float> post_attention_layernorm;  // (C,)
  WeightMatrix gate_proj;                  // (I, C) mlp.gate_proj.weight
  WeightMatrix up_proj;                    // (I, C) mlp.up_proj.weight
  WeightMatrix down_proj;                  // (C, I) mlp.down_proj.weight
};

struct LlamaWeights {
  WeightMatrix embed_tokens;  // (vocab_size, C), as stored
  std::vector<LlamaLayer> layers;
  Tensor<float> norm;    // (C,) the final RMSNorm
  WeightMatrix lm_head;  // (vocab_size, C), as stored; empty when tied to embed_tokens
};

struct LlamaModel final : LanguageModel {
  LlamaConfig config;
  LlamaWeights weights;
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

// Checks every weight's shape against the config; throws ShapeError naming the tensor by its Hugging
// Face name ("model.layers.3.mlp.gate_proj.weight").
void validate(const LlamaModel& m);

// Llama's options are every family's (the what-ifs: masks replacing the causal or sliding-window
// one, score divisors, knock-outs).
using LlamaOptions = ModelOptions;

// Every activation of one forward. T tokens, C = hidden_size, I = intermediate_size.
// input_ids, residual, attn, logits, top_k and rotary (cos, sin (T, d): positions 0 … T-1, shared by
// every layer) are ModelRun's. attn[l]'s trace holds q, k, v (the projections), q_rot and k_rot (after
// RoPE, what the heads read; q_heads (1, H, T, d) and k_heads (1, G, T, d) view them), scores …
// context, and output (o_proj's).
struct LlamaRun final : ModelRun {
  Tensor<float> input_norm;  // (layers, T, C): input_layernorm(residual[l]), the attention's input
  Tensor<float> resid_mid;   // (layers, T, C): residual + attention output
  Tensor<float> post_norm;   // (layers, T, C): post_attention_layernorm(resid_mid)
  Tensor<float> mlp_gate;    // (layers, T, I): gate_proj(post_norm)
  Tensor<float> mlp_up;      // (layers, T, I): up_proj(post_norm)
  Tensor<float> mlp_hidden;  // (layers, T, I): silu(gate) · up
  Tensor<float> mlp_out;     // (layers, T, C): down_proj(mlp_hidden)
  Tensor<float> norm;        // (T, C): the final RMSNorm
  std::unique_ptr<ModelRun> clone() const override { return std::make_unique<LlamaRun>(*this); }
};

// The whole forward. Throws ConfigError for an empty text, a text longer than max_position_embeddings
// (naming both) or an id outside the vocabulary.
LlamaRun llama_forward(const LlamaModel& m, const std::vector<std::int32_t>& input_ids,
                       const LlamaOptions& o = {});
// The same into `run`, reusing its buffers where the sizes match. Returns `run`.
LlamaRun& llama_forward(const LlamaModel& m, const std::vector<std::int32_t>& input_ids,
                        const LlamaOptions& o, LlamaRun& run);
// Recomputes `run` from layer `layer` on, the residual stream before it kept (a mask edit there).
// `run` must come from llama_forward of the same model and ids.
void llama_forward_from(const LlamaModel& m, LlamaRun& run, std::int64_t layer, const LlamaOptions& o = {});

// The attention module of one layer as mha::forward runs it.
Config attention_config(const LlamaConfig& c);
// RoPE's tables for positions 0 … T-1 as Hugging Face's rotary embedding computes them in float32:
// inv_freq = 1 / rope_theta^(2i/d) (then rope_scaling's), freqs = position · inv_freq, cos and sin of
// cat(freqs, freqs): (T, d) each.
Rotary<float> rotary_tables(const LlamaConfig& c, std::int64_t T);
// The attention mask the model uses at T tokens: causal, and with a sliding window also the keys
// more than sliding_window - 1 positions back blocked. Boolean, (T, T).
Mask<float> llama_mask(const LlamaConfig& c, std::int64_t T);

}  // namespace mha
