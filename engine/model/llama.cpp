// The Llama-family forward, top to bottom: embed_tokens, then per layer input_layernorm → traced
// attention (projections, RoPE, grouped-query heads, o_proj) → residual → post_attention_layernorm →
// SwiGLU MLP → residual, then the final norm and the last position's logits. Two paths share this
// plan, as for GPT-2: the explicit loops (Backend::reference) and the Eigen kernels. tests/test_llama.cpp
// compares both with torch, stage by stage, on every layer.
#include "model/llama.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "errors.hpp"
#include "forward_detail.hpp"

namespace mha {

namespace {

std::string layer_name(std::int64_t l, const char* what) {
  return "model.layers." + std::to_string(l) + "." + what;
}

template <class W>  // Tensor<float> or WeightMatrix
void expect(const W& t, const Shape& want, const std::string& name) {
  if (t.shape != want)
    throw ShapeError(name, name + ": expected shape " + shape_str(want) + " from config.json, got " +
                               (t.empty() ? std::string("no tensor") : shape_str(t.shape)));
}

// y (rows, C) = weight · (x · rsqrt(mean(x²) + eps)): Hugging Face's LlamaRMSNorm in float32, the
// mean of squares summed in double.
void rms_norm(const float* x, const Tensor<float>& w, float* y, std::int64_t rows, std::int64_t C,
              double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    double sum = 0;
    for (std::int64_t c = 0; c < C; ++c) sum += double(xr[c]) * xr[c];
    const float inv = float(1.0 / std::sqrt(float(sum / double(C)) + eps));
    float* yr = y + r * C;
    for (std::int64_t c = 0; c < C; ++c) yr[c] = w.data[std::size_t(c)] * (xr[c] * inv);
  }
}

// Layer l, reading run.residual[l] and writing every activation of the layer and residual[l + 1].
void layer_forward(const LlamaModel& m, LlamaRun& run, std::int64_t l, const LlamaOptions& o) {
  const LlamaConfig& c = m.config;
  const LlamaLayer& w = m.weights.layers[std::size_t(l)];
  const std::int64_t T = std::int64_t(run.input_ids.size()), C = c.hidden_size, I = c.intermediate_size;
  const float* x = run.residual.ptr() + l * T * C;  // (T, C)

  float* normed = run.input_norm.ptr() + l * T * C;
  rms_norm(x, w.input_layernorm, normed, T, C, c.rms_norm_eps);
  Inputs<float> in;
  in.query = Tensor<float>({1, T, C}, std::vector<float>(normed, normed + T * C));  // (1, T, C)
  in.key = in.query;
  in.value = in.query;
  in.rotary = run.rotary;
  const Stage<float>& attn_out = detail::layer_attention(m, l, in, o, run);  // (1, T, C), contiguous
  float* mid = run.resid_mid.ptr() + l * T * C;
  for (std::int64_t k = 0; k < T * C; ++k)
    mid[k] = x[k] + (*attn_out.storage)[std::size_t(attn_out.offset + k)];

  float* post = run.post_norm.ptr() + l * T * C;
  rms_norm(mid, w.post_attention_layernorm, post, T, C, c.rms_norm_eps);
  float* gate = run.mlp_gate.ptr() + l * T * I;
  float* up = run.mlp_up.ptr() + l * T * I;
  float* hidden = run.mlp_hidden.ptr() + l * T * I;
  // Bias-free nn.Linear layers on the weights as stored (weight_matrix.hpp): the reference loops
  // accumulate in double, the Eigen path in float, as torch does.
  const Backend b = o.backend == Backend::reference ? Backend::reference : Backend::eigen;
  linear(post, w.gate_proj, gate, T, b, o.threads);
  linear(post, w.up_proj, up, T, b, o.threads);
  for (std::int64_t k = 0; k < T * I; ++k) hidden[k] = gate[k] / (1.0f + std::exp(-gate[k])) * up[k];  // silu
  float* mlp = run.mlp_out.ptr() + l * T * C;
  linear(hidden, w.down_proj, mlp, T, b, o.threads);
  float* next = run.residual.ptr() + (l + 1) * T * C;
  for (std::int64_t k = 0; k < T * C; ++k) next[k] = mid[k] + mlp[k];
}

// The final norm, the last position's logits (LM head = embed_tokens when tied) and the top-k.
void head_forward(const LlamaModel& m, LlamaRun& run, const LlamaOptions& o) {
  const LlamaConfig& c = m.config;
  const std::int64_t T = std::int64_t(run.input_ids.size()), C = c.hidden_size, V = c.vocab_size;
  run.norm = Tensor<float>({T, C});
  rms_norm(run.residual.ptr() + c.num_hidden_layers * T * C, m.weights.norm, run.norm.ptr(), T, C,
           c.rms_norm_eps);
  const WeightMatrix& head =
      m.weights.lm_head.empty() ? m.weights.embed_tokens : m.weights.lm_head;  // (V, C), as stored
  const float* last = run.norm.ptr() + (T - 1) * C;
  run.logits = Tensor<float>({V});
  matvec(head, last, run.logits.ptr(), o.backend == Backend::reference ? Backend::reference : Backend::eigen,
         o.threads);
  detail::top_k_from_logits(o, run);
}

void check_ids(const LlamaConfig& c, const std::vector<std::int32_t>& ids) {
  if (ids.empty()) throw ConfigError("input_ids", "the text has no tokens: type at least one word");
  if (std::int64_t(ids.size()) > c.max_position_embeddings)
    throw ConfigError("input_ids", "the text has " + std::to_string(ids.size()) +
                                       " tokens, more than the model's max_position_embeddings = " +
                                       std::to_string(c.max_position_embeddings));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      throw ConfigError("input_ids", "token " + std::to_string(i) + " has id " + std::to_string(ids[i]) +
                                         ", outside the vocabulary [0, " + std::to_string(c.vocab_size) +
                                         ")");
}

}  // namespace

void validate(const LlamaConfig& c) {
  auto positive = [](std::int64_t v, const char* name) {
    if (v <= 0) throw ConfigError(name, std::string(name) + " must be positive, got " + std::to_string(v));
  };
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2")
    throw ConfigError("model_type", "model_type \"" + c.model_type + "\" is not llama, mistral or qwen2");
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.max_position_embeddings, "max_position_embeddings");
  if (c.num_key_value_heads < 0) positive(c.num_key_value_heads, "num_key_value_heads");
  if (c.head_dim < 0) positive(c.head_dim, "head_dim");
  if (c.sliding_window < 0) positive(c.sliding_window, "sliding_window");
  if (c.num_attention_heads % c.kv_heads() != 0)
    throw ConfigError("num_key_value_heads",
                      "num_key_value_heads = " + std::to_string(c.kv_heads()) +
                          " does not divide num_attention_heads = " + std::to_string(c.num_attention_heads));
  if (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0)
    throw ConfigError("num_attention_heads", "hidden_size = " + std::to_string(c.hidden_size) +
                                                 " is not divisible by num_attention_heads = " +
                                                 std::to_string(c.num_attention_heads) +
                                                 " (and no head_dim is given)");
  if (c.head_size() % 2 != 0)
    throw ConfigError("head_dim", "RoPE rotates the halves of each head: head_dim = " +
                                      std::to_string(c.head_size()) + " is odd");
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    throw ConfigError("rms_norm_eps", "rms_norm_eps must be a positive number");
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    throw ConfigError("rope_theta", "rope_theta must be a positive number");
  const RopeScaling& s = c.rope_scaling;
  if (!s.rope_type.empty()) {
    if (s.rope_type != "linear" && s.rope_type != "llama3")
      throw ConfigError("rope_scaling",
                        "rope_scaling type \"" + s.rope_type + "\" is not supported (linear and llama3 are)");
    if (!(s.factor > 0) || !std::isfinite(s.factor))
      throw ConfigError("rope_scaling.factor", "rope_scaling.factor must be a positive number");
  }
  if (s.rope_type == "llama3") {
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
        !std::isfinite(s.high_freq_factor))
      throw ConfigError("rope_scaling.high_freq_factor",
                        "rope_scaling.high_freq_factor = " + std::to_string(s.high_freq_factor) +
                            ": llama3 scaling needs 0 < low_freq_factor < high_freq_factor");
    positive(s.original_max_position_embeddings, "rope_scaling.original_max_position_embeddings");
  }
}

Config attention_config(const LlamaConfig& c) {
  Config a;
  a.embed_dim = c.hidden_size;
  a.num_heads = c.num_attention_heads;
  a.num_kv_heads = c.kv_heads();
  a.explicit_head_dim = c.head_dim;  // q_proj (H·head_dim, hidden), o_proj (hidden, H·head_dim)
  a.bias = c.qkv_bias() || c.o_bias();
  a.batch_first = true;
  return a;
}

Rotary<float> rotary_tables(const LlamaConfig& c, std::int64_t T) {
  const std::int64_t d = c.head_size(), half = d / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  const RopeScaling& s = c.rope_scaling;
  for (std::int64_t i = 0; i < half; ++i) {
    // float32 as torch: 1.0 / (rope_theta ** (arange(0, d, 2).float() / d))
    const float exponent = float(2 * i) / float(d);
    float f = 1.0f / float(std::pow(double(float(c.rope_theta)), double(exponent)));
    if (s.rope_type == "linear") f = f / float(s.factor);
    if (s.rope_type == "llama3") {
      // _compute_llama3_parameters: long wavelengths divided by factor, short ones kept, a smooth
      // blend between.
      const double old = double(s.original_max_position_embeddings);
      const double low_wavelen = old / s.low_freq_factor, high_wavelen = old / s.high_freq_factor;
      const double wavelen = 2 * M_PI / double(f);
      if (wavelen > low_wavelen) {
        f = float(double(f) / s.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = float((1 - smooth) * double(f) / s.factor + smooth * double(f));
      }
    }
    inv_freq[std::size_t(i)] = f;
  }
  Rotary<float> r;
  r.cos = Tensor<float>({T, d});
  r.sin = Tensor<float>({T, d});
  for (std::int64_t p = 0; p < T; ++p)
    for (std::int64_t i = 0; i < d; ++i) {
      const float angle = float(p) * inv_freq[std::size_t(i % half)];  // cat(freqs, freqs)
      r.cos.data[std::size_t(p * d + i)] = std::cos(angle);
      r.sin.data[std::size_t(p * d + i)] = std::sin(angle);
    }
  return r;
}

Mask<float> llama_mask(const LlamaConfig& c, std::int64_t T) {
  Mask<float> m;
  m.values = Tensor<float>({T, T});
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < T; ++j)
      m.values.data[std::size_t(i * T + j)] = j > i || (c.sliding_window > 0 && j <= i - c.sliding_window);
  return m;
}

std::int64_t LlamaModel::parameter_count() const {
  std::int64_t n = weights.embed_tokens.numel() + weights.norm.numel() + weights.lm_head.numel();
  const std::int64_t C = config.hidden_size;
  for (const LlamaLayer& b : weights.layers) {
    n += b.input_layernorm.numel() + b.post_attention_layernorm.numel();
    n += b.attn.in_proj_weight.numel() + b.attn.out_proj_weight.numel();
    // qwen2's o_proj has no bias: the zeros held for the engine are not parameters.
    n += (config.qkv_bias() ? b.attn.in_proj_bias.numel() : 0) + (config.o_bias() ? C : 0);
    n += b.gate_proj.numel() + b.up_proj.numel() + b.down_proj.numel();
  }
  return n;
}

ModelSizes LlamaModel::sizes() const {
  const LlamaConfig& c = config;
  ModelSizes s;
  s.family = "Llama";
  s.model_type = c.model_type;
  s.architecture = (c.model_type == "mistral" ? std::string("Mistral (MistralForCausalLM)")
                    : c.model_type == "qwen2" ? std::string("Qwen2 (Qwen2ForCausalLM)")
                                              : std::string("Llama (LlamaForCausalLM)")) +
                   ": pre-RMSNorm blocks, causal self-attention with rotary positions (RoPE)" +
                   (c.kv_heads() < c.num_attention_heads ? " and grouped-query attention" : "") +
                   ", SwiGLU MLP";
  s.vocab_size = c.vocab_size;
  s.max_positions = c.max_position_embeddings;
  s.max_positions_field = "max_position_embeddings";
  s.n_embd = c.hidden_size;
  s.n_inner = c.intermediate_size;
  s.n_layer = c.num_hidden_layers;
  s.n_head = c.num_attention_heads;
  s.n_kv_head = c.kv_heads();
  s.head_dim = c.head_size();
  s.rotary = true;
  s.rope_theta = c.rope_theta;
  if (!c.rope_scaling.rope_type.empty()) {
    char factor[32];
    std::snprintf(factor, sizeof factor, " ×%g", c.rope_scaling.factor);
    s.rope_scaling = c.rope_scaling.rope_type + factor;
  }
  s.sliding_window = c.sliding_window;
  s.tied_head = weights.lm_head.empty();
  s.storage_dtype = storage_dtype;
  s.parameter_count = parameter_count();
  return s;
}

Config LlamaModel::attention_config() const {
  return mha::attention_config(config);
}

const Weights<float>& LlamaModel::attention_weights(std::int64_t layer) const {
  if (layer < 0 || layer >= std::int64_t(weights.layers.size()))
    throw ConfigError("layer", "layer " + std::to_string(layer) + " is outside the model's " +
                                   std::to_string(weights.layers.size()) + " layers");
  return weights.layers[std::size_t(layer)].attn;
}

Mask<float> LlamaModel::attention_mask(std::int64_t T) const {
  return llama_mask(config, T);
}

std::unique_ptr<ModelRun> LlamaModel::new_run() const {
  return std::make_unique<LlamaRun>();
}

void LlamaModel::forward(const std::vector<std::int32_t>& input_ids, const ModelOptions& o,
                         ModelRun& run) const {
  llama_forward(*this, input_ids, o, detail::family_run<LlamaRun>(run, "Llama"));
}

void LlamaModel::forward_from(ModelRun& run, std::int64_t layer, const ModelOptions& o) const {
  llama_forward_from(*this, detail::family_run<LlamaRun>(run, "Llama"), layer, o);
}

void LlamaModel::logits_at(const ModelRun& run, std::int64_t position, std::vector<double>& logits) const {
  const LlamaRun& r = detail::family_run<const LlamaRun>(run, "Llama");
  if (position < 0 || position >= r.norm.size(0))
    throw ConfigError("position", "logits_at: position " + std::to_string(position) + " is outside the run");
  const WeightMatrix& head = weights.lm_head.empty() ? weights.embed_tokens : weights.lm_head;  // (V, C)
  const float* x = r.norm.ptr() + position * config.hidden_size;
  const std::int64_t V = head.rows(), C = head.cols();
  std::vector<float> row(static_cast<std::size_t>(C));
  logits.assign(std::size_t(V), 0.0);
  for (std::int64_t v = 0; v < V; ++v) {  // one row widened at a time, summed in double
    head.row(v, row.data());
    double acc = 0;
    for (std::int64_t k = 0; k < C; ++k) acc += double(row[std::size_t(k)]) * double(x[k]);
    logits[std::size_t(v)] = acc;
  }
}

double LlamaModel::forward_flops(std::int64_t T) const {
  const LlamaConfig& c = config;
  const double t = double(T), C = double(c.hidden_size), I = double(c.intermediate_size);
  const double kv = double(c.kv_heads() * c.head_size()), Q = double(c.num_attention_heads * c.head_size());
  const double per_layer = 2 * t * C * (Q + 2 * kv)  // q_proj, k_proj, v_proj (K and V once per group)
                           + 2 * 2 * t * t * Q       // q·kᵀ and weights·v, every query head
                           + 2 * t * Q * C           // o_proj
                           + 3 * 2 * t * C * I;      // gate_proj, up_proj, down_proj
  return double(c.num_hidden_layers) * per_layer + 2 * C * double(c.vocab_size);
}

std::int64_t LlamaModel::nonfinite_weights() const {
  std::int64_t n = 0;
  auto count = [&](const Tensor<float>& t) { n += detail::count_nonfinite(t); };
  count(weights.norm);
  n += weights.embed_tokens.nonfinite() + weights.lm_head.nonfinite();
  for (const LlamaLayer& b : weights.layers) {
    for (const Tensor<float>* t :
         {&b.input_layernorm, &b.attn.in_proj_weight, &b.attn.in_proj_bias, &b.attn.out_proj_weight,
          &b.attn.out_proj_bias, &b.post_attention_layernorm})
      count(*t);
    n += b.gate_proj.nonfinite() + b.up_proj.nonfinite() + b.down_proj.nonfinite();
  }
  return n;
}

void validate(const LlamaModel& m) {
  const LlamaConfig& c = m.config;
  validate(c);
  const std::int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t kv = c.kv_heads() * c.head_size(), Q = c.num_attention_heads * c.head_size();
  const LlamaWeights& w = m.weights;
  expect(w.embed_tokens, {V, C}, "model.embed_tokens.weight");
  if (std::int64_t(w.layers.size()) != c.num_hidden_layers)
    throw ShapeError("num_hidden_layers",
                     "config.json says num_hidden_layers = " + std::to_string(c.num_hidden_layers) +
                         ", the weights hold " + std::to_string(w.layers.size()) + " layers");
  const bool bias = attention_config(c).bias;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LlamaLayer& b = w.layers[std::size_t(l)];
    expect(b.input_layernorm, {C}, layer_name(l, "input_layernorm.weight"));
    expect(b.attn.in_proj_weight, {Q + 2 * kv, C}, layer_name(l, "self_attn.{q,k,v}_proj.weight (stacked)"));
    expect(b.attn.out_proj_weight, {C, Q}, layer_name(l, "self_attn.o_proj.weight"));
    expect(b.attn.in_proj_bias, bias ? Shape{Q + 2 * kv} : Shape{},
           layer_name(l, "self_attn.{q,k,v}_proj.bias"));
    expect(b.attn.out_proj_bias, bias ? Shape{C} : Shape{}, layer_name(l, "self_attn.o_proj.bias"));
    expect(b.post_attention_layernorm, {C}, layer_name(l, "post_attention_layernorm.weight"));
    expect(b.gate_proj, {I, C}, layer_name(l, "mlp.gate_proj.weight"));
    expect(b.up_proj, {I, C}, layer_name(l, "mlp.up_proj.weight"));
    expect(b.down_proj, {C, I}, layer_name(l, "mlp.down_proj.weight"));
  }
  expect(w.norm, {C}, "model.norm.weight");
  if (!w.lm_head.empty()) expect(w.lm_head, {V, C}, "lm_head.weight");
}

LlamaRun llama_forward(const LlamaModel& m, const std::vector<std::int32_t>& input_ids,
                       const LlamaOptions& o) {
  LlamaRun run;
  llama_forward(m, input_ids, o, run);
  return run;
}

LlamaRun& llama_forward(const LlamaModel& m, const std::vector<std::int32_t>& input_ids,
                        const LlamaOptions& o, LlamaRun& run) {
  const LlamaConfig& c = m.config;
  check_ids(c, input_ids);
  const std::int64_t T = std::int64_t(input_ids.size()), C = c.hidden_size, Ly = c.num_hidden_layers,
                     I = c.intermediate_size;
  auto fit = [](Tensor<float>& t, Shape shape) {
    if (t.shape != shape) t = Tensor<float>(std::move(shape));
  };
  run.input_ids = input_ids;
  fit(run.residual, {Ly + 1, T, C});
  fit(run.input_norm, {Ly, T, C});
  run.attn.resize(std::size_t(Ly));
  run.workspaces.resize(std::size_t(Ly));
  fit(run.resid_mid, {Ly, T, C});
  fit(run.post_norm, {Ly, T, C});
  fit(run.mlp_gate, {Ly, T, I});
  fit(run.mlp_up, {Ly, T, I});
  fit(run.mlp_hidden, {Ly, T, I});
  fit(run.mlp_out, {Ly, T, C});
  run.rotary = rotary_tables(c, T);
  for (std::int64_t t = 0; t < T; ++t)  // only the rows read are widened
    m.weights.embed_tokens.row(input_ids[std::size_t(t)], run.residual.ptr() + t * C);
  llama_forward_from(m, run, 0, o);
  return run;
}

void llama_forward_from(const LlamaModel& m, LlamaRun& run, std::int64_t layer, const LlamaOptions& o) {
  const LlamaConfig& c = m.config;
  if (layer < 0 || layer > c.num_hidden_layers)
    throw ConfigError("layer", "layer " + std::to_string(layer) + " is outside the model's " +
                                   std::to_string(c.num_hidden_layers) + " layers");
  if (std::int64_t(run.attn.size()) != c.num_hidden_layers || run.input_ids.empty() ||
      run.rotary.cos.dim() != 2 || run.rotary.cos.size(0) != std::int64_t(run.input_ids.size()))
    throw ConfigError("run", "llama_forward_from needs a run of llama_forward on the same model");
  check_knockouts(m.sizes(), o.knockouts);
  run.workspaces.resize(std::size_t(c.num_hidden_layers));
  for (std::int64_t l = layer; l < c.num_hidden_layers; ++l) layer_forward(m, run, l, o);
  head_forward(m, run, o);
}

}  // namespace mha
