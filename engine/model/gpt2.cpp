// GPT-2's forward, top to bottom: embeddings, then per block ln_1 → traced attention → residual →
// ln_2 → MLP → residual, then ln_f and the last position's logits. Two paths share this plan: the
// explicit loops (Backend::reference, the obvious version anyone can check) and the Eigen kernels
// (conv1d_rows, split over threads by rows). tests/test_model.cpp compares both with torch, stage
// by stage, on every layer.
#include "model/gpt2.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <string>

#include "cpu_dispatch.hpp"
#include "forward_detail.hpp"
#include "errors.hpp"
#include "masks.hpp"
#include "parallel.hpp"

namespace mha {

namespace {

std::string layer_name(std::int64_t l, const char* what) {
  return "h." + std::to_string(l) + "." + what;
}

void expect(const Tensor<float>& t, const Shape& want, const std::string& name) {
  if (t.shape != want)
    throw ShapeError(name, name + ": expected shape " + shape_str(want) + " from config.json, got " +
                               (t.empty() ? std::string("no tensor") : shape_str(t.shape)));
}

// y (rows, C) = LayerNorm(x) with weight w and bias b; biased variance, as torch.nn.LayerNorm.
void layer_norm(const float* x, const Tensor<float>& w, const Tensor<float>& b, float* y, std::int64_t rows,
                std::int64_t C, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    double mean = 0;
    for (std::int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= double(C);
    double var = 0;
    for (std::int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= double(C);
    const double inv = 1.0 / std::sqrt(var + eps);
    float* yr = y + r * C;
    for (std::int64_t c = 0; c < C; ++c) yr[c] = float((xr[c] - mean) * inv) * w.data[c] + b.data[c];
  }
}

// y (rows, out) = x (rows, in) · W [in, out] + b, then gelu_new when asked. The reference loops
// accumulate in double; the Eigen path in float, as torch does.
void conv1d(const float* x, const Tensor<float>& W, const Tensor<float>& b, float* y, std::int64_t rows,
            bool gelu, const GPT2Options& o) {
  const std::int64_t in = W.size(0), out = W.size(1);
  if (o.backend == Backend::reference) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < out; ++j) {
        double acc = b.empty() ? 0.0 : b.data[std::size_t(j)];
        for (std::int64_t i = 0; i < in; ++i) acc += double(x[r * in + i]) * W.data[std::size_t(i * out + j)];
        float v = float(acc);
        if (gelu) v = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        y[r * out + j] = v;
      }
    return;
  }
  const int threads = detail::thread_count(o.threads, 2.0 * double(rows) * double(in) * double(out));
  // Column blocks of 16 (a whole AVX-512 register), one range per thread.
  detail::parallel_ranges(threads, (out + 15) / 16, [&](int, std::int64_t b0, std::int64_t b1) {
    conv1d_columns(x, W.ptr(), b.empty() ? nullptr : b.ptr(), y, rows, in, out, b0 * 16,
                   std::min(b1 * 16, out), gelu);
  });
}

// Block l, reading run.residual[l] and writing every activation of the block and residual[l + 1].
void block_forward(const GPT2Model& m, GPT2Run& run, std::int64_t l, const GPT2Options& o) {
  const GPT2Config& c = m.config;
  const GPT2Block& w = m.weights.h[std::size_t(l)];
  const std::int64_t T = std::int64_t(run.input_ids.size()), C = c.n_embd, I = c.inner();
  const float* x = run.residual.ptr() + l * T * C;  // (T, C)

  Inputs<float> in;
  in.query = Tensor<float>({1, T, C});  // ln_1(x): (1, T, C), the attention's query, key and value
  layer_norm(x, w.ln_1_weight, w.ln_1_bias, in.query.ptr(), T, C, c.layer_norm_epsilon);
  in.key = in.query;
  in.value = in.query;
  const Stage<float>& attn_out = detail::layer_attention(m, l, in, o, run);  // (1, T, C), contiguous
  float* mid = run.resid_mid.ptr() + l * T * C;
  for (std::int64_t k = 0; k < T * C; ++k)
    mid[k] = x[k] + (*attn_out.storage)[std::size_t(attn_out.offset + k)];

  float* ln2 = run.ln_2.ptr() + l * T * C;
  layer_norm(mid, w.ln_2_weight, w.ln_2_bias, ln2, T, C, c.layer_norm_epsilon);
  float* hidden = run.mlp_hidden.ptr() + l * T * I;
  conv1d(ln2, w.c_fc_weight, w.c_fc_bias, hidden, T, true, o);
  float* mlp = run.mlp_out.ptr() + l * T * C;
  conv1d(hidden, w.c_proj_weight, w.c_proj_bias, mlp, T, false, o);
  float* next = run.residual.ptr() + (l + 1) * T * C;
  for (std::int64_t k = 0; k < T * C; ++k) next[k] = mid[k] + mlp[k];
}

// ln_f, the last position's logits (LM head = wte when tied) and the top-k by softmax.
void head_forward(const GPT2Model& m, GPT2Run& run, const GPT2Options& o) {
  const GPT2Config& c = m.config;
  const std::int64_t T = std::int64_t(run.input_ids.size()), C = c.n_embd, V = c.vocab_size;
  run.ln_f = Tensor<float>({T, C});
  layer_norm(run.residual.ptr() + c.n_layer * T * C, m.weights.ln_f_weight, m.weights.ln_f_bias,
             run.ln_f.ptr(), T, C, c.layer_norm_epsilon);
  const Tensor<float>& head = m.weights.lm_head.empty() ? m.weights.wte : m.weights.lm_head;  // (V, C)
  const float* last = run.ln_f.ptr() + (T - 1) * C;
  run.logits = Tensor<float>({V});
  if (o.backend == Backend::reference) {
    for (std::int64_t v = 0; v < V; ++v) {
      const float* row = head.ptr() + v * C;
      double acc = 0;
      for (std::int64_t k = 0; k < C; ++k) acc += double(last[k]) * row[k];
      run.logits.data[std::size_t(v)] = float(acc);
    }
  } else {
    const int threads = detail::thread_count(o.threads, 2.0 * double(V * C));
    detail::parallel_ranges(threads, V, [&](int, std::int64_t v0, std::int64_t v1) {
      gemv_rows(head.ptr(), last, run.logits.ptr(), C, v0, v1);
    });
  }
  detail::top_k_from_logits(o, run);
}

void check_ids(const GPT2Config& c, const std::vector<std::int32_t>& ids) {
  if (ids.empty()) throw ConfigError("input_ids", "the text has no tokens: type at least one word");
  if (std::int64_t(ids.size()) > c.n_positions)
    throw ConfigError("input_ids",
                      "the text has " + std::to_string(ids.size()) +
                          " tokens, more than the model's n_positions = " + std::to_string(c.n_positions));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      throw ConfigError("input_ids", "token " + std::to_string(i) + " has id " + std::to_string(ids[i]) +
                                         ", outside the vocabulary [0, " + std::to_string(c.vocab_size) +
                                         ")");
}

}  // namespace

void validate(const GPT2Config& c) {
  auto positive = [](std::int64_t v, const char* name) {
    if (v <= 0) throw ConfigError(name, std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.n_positions, "n_positions");
  positive(c.n_embd, "n_embd");
  positive(c.n_layer, "n_layer");
  positive(c.n_head, "n_head");
  if (c.n_inner < 0) throw ConfigError("n_inner", "n_inner must be positive or null");
  if (c.n_embd % c.n_head != 0)
    throw ConfigError("n_head", "n_embd = " + std::to_string(c.n_embd) +
                                    " is not divisible by n_head = " + std::to_string(c.n_head));
  if (!(c.layer_norm_epsilon > 0) || !std::isfinite(c.layer_norm_epsilon))
    throw ConfigError("layer_norm_epsilon", "layer_norm_epsilon must be a positive number");
}

Config attention_config(const GPT2Config& c) {
  Config a;
  a.embed_dim = c.n_embd;
  a.num_heads = c.n_head;
  a.bias = true;
  a.batch_first = true;
  return a;
}

std::int64_t GPT2Model::parameter_count() const {
  std::int64_t n = weights.wte.numel() + weights.wpe.numel() + weights.ln_f_weight.numel() +
                   weights.ln_f_bias.numel() + weights.lm_head.numel();
  for (const GPT2Block& b : weights.h) {
    n += b.ln_1_weight.numel() + b.ln_1_bias.numel() + b.ln_2_weight.numel() + b.ln_2_bias.numel();
    n += b.attn.in_proj_weight.numel() + b.attn.in_proj_bias.numel() + b.attn.out_proj_weight.numel() +
         b.attn.out_proj_bias.numel();
    n += b.c_fc_weight.numel() + b.c_fc_bias.numel() + b.c_proj_weight.numel() + b.c_proj_bias.numel();
  }
  return n;
}

ModelSizes GPT2Model::sizes() const {
  ModelSizes s;
  s.family = "GPT-2";
  s.model_type = "gpt2";
  s.architecture =
      "GPT-2 (GPT2LMHeadModel): pre-LayerNorm blocks, causal self-attention, gelu_new MLP, learned "
      "absolute positions";
  s.vocab_size = config.vocab_size;
  s.max_positions = config.n_positions;
  s.max_positions_field = "n_positions";
  s.n_embd = config.n_embd;
  s.n_inner = config.inner();
  s.n_layer = config.n_layer;
  s.n_head = s.n_kv_head = config.n_head;
  s.head_dim = config.head_dim();
  s.tied_head = weights.lm_head.empty();
  s.storage_dtype = storage_dtype;
  s.parameter_count = parameter_count();
  return s;
}

Config GPT2Model::attention_config() const {
  return mha::attention_config(config);
}

const Weights<float>& GPT2Model::attention_weights(std::int64_t layer) const {
  if (layer < 0 || layer >= std::int64_t(weights.h.size()))
    throw ConfigError("layer", "layer " + std::to_string(layer) + " is outside the model's " +
                                   std::to_string(weights.h.size()) + " layers");
  return weights.h[std::size_t(layer)].attn;
}

Mask<float> GPT2Model::attention_mask(std::int64_t T) const {
  return causal_mask<float>(T, T);
}

std::unique_ptr<ModelRun> GPT2Model::new_run() const {
  return std::make_unique<GPT2Run>();
}

void GPT2Model::forward(const std::vector<std::int32_t>& input_ids, const ModelOptions& o,
                        ModelRun& run) const {
  gpt2_forward(*this, input_ids, o, detail::family_run<GPT2Run>(run, "GPT-2"));
}

void GPT2Model::forward_from(ModelRun& run, std::int64_t layer, const ModelOptions& o) const {
  gpt2_forward_from(*this, detail::family_run<GPT2Run>(run, "GPT-2"), layer, o);
}

void GPT2Model::logits_at(const ModelRun& run, std::int64_t position, std::vector<double>& logits) const {
  const GPT2Run& r = detail::family_run<const GPT2Run>(run, "GPT-2");
  if (position < 0 || position >= r.ln_f.size(0))
    throw ConfigError("position", "logits_at: position " + std::to_string(position) + " is outside the run");
  const Tensor<float>& head = weights.lm_head.empty() ? weights.wte : weights.lm_head;  // (V, C)
  detail::head_logits_double(head, r.ln_f.ptr() + position * config.n_embd, logits);
}

double GPT2Model::forward_flops(std::int64_t T) const {
  const double t = double(T), C = double(config.n_embd), I = double(config.inner());
  const double per_layer = 2 * t * C * 3 * C     // c_attn
                           + 2 * 2 * t * t * C   // q·kᵀ and weights·v, every head
                           + 2 * t * C * C       // c_proj
                           + 2 * 2 * t * C * I;  // c_fc and mlp.c_proj
  return double(config.n_layer) * per_layer + 2 * C * double(config.vocab_size);
}

std::int64_t GPT2Model::nonfinite_weights() const {
  std::int64_t n = 0;
  auto count = [&](const Tensor<float>& t) { n += detail::count_nonfinite(t); };
  for (const Tensor<float>* t :
       {&weights.wte, &weights.wpe, &weights.ln_f_weight, &weights.ln_f_bias, &weights.lm_head})
    count(*t);
  for (const GPT2Block& b : weights.h)
    for (const Tensor<float>* t :
         {&b.ln_1_weight, &b.ln_1_bias, &b.attn.in_proj_weight, &b.attn.in_proj_bias, &b.attn.out_proj_weight,
          &b.attn.out_proj_bias, &b.ln_2_weight, &b.ln_2_bias, &b.c_fc_weight, &b.c_fc_bias, &b.c_proj_weight,
          &b.c_proj_bias})
      count(*t);
  return n;
}

void validate(const GPT2Model& m) {
  const GPT2Config& c = m.config;
  validate(c);
  const std::int64_t C = c.n_embd, I = c.inner(), V = c.vocab_size;
  const GPT2Weights& w = m.weights;
  expect(w.wte, {V, C}, "wte.weight");
  expect(w.wpe, {c.n_positions, C}, "wpe.weight");
  if (std::int64_t(w.h.size()) != c.n_layer)
    throw ShapeError("n_layer", "config.json says n_layer = " + std::to_string(c.n_layer) +
                                    ", the weights hold " + std::to_string(w.h.size()) + " blocks");
  for (std::int64_t l = 0; l < c.n_layer; ++l) {
    const GPT2Block& b = w.h[std::size_t(l)];
    expect(b.ln_1_weight, {C}, layer_name(l, "ln_1.weight"));
    expect(b.ln_1_bias, {C}, layer_name(l, "ln_1.bias"));
    expect(b.attn.in_proj_weight, {3 * C, C}, layer_name(l, "attn.c_attn.weight (transposed)"));
    expect(b.attn.in_proj_bias, {3 * C}, layer_name(l, "attn.c_attn.bias"));
    expect(b.attn.out_proj_weight, {C, C}, layer_name(l, "attn.c_proj.weight (transposed)"));
    expect(b.attn.out_proj_bias, {C}, layer_name(l, "attn.c_proj.bias"));
    expect(b.ln_2_weight, {C}, layer_name(l, "ln_2.weight"));
    expect(b.ln_2_bias, {C}, layer_name(l, "ln_2.bias"));
    expect(b.c_fc_weight, {C, I}, layer_name(l, "mlp.c_fc.weight"));
    expect(b.c_fc_bias, {I}, layer_name(l, "mlp.c_fc.bias"));
    expect(b.c_proj_weight, {I, C}, layer_name(l, "mlp.c_proj.weight"));
    expect(b.c_proj_bias, {C}, layer_name(l, "mlp.c_proj.bias"));
  }
  expect(w.ln_f_weight, {C}, "ln_f.weight");
  expect(w.ln_f_bias, {C}, "ln_f.bias");
  if (!w.lm_head.empty()) expect(w.lm_head, {V, C}, "lm_head.weight");
}

GPT2Run gpt2_forward(const GPT2Model& m, const std::vector<std::int32_t>& input_ids, const GPT2Options& o) {
  GPT2Run run;
  gpt2_forward(m, input_ids, o, run);
  return run;
}

GPT2Run& gpt2_forward(const GPT2Model& m, const std::vector<std::int32_t>& input_ids, const GPT2Options& o,
                      GPT2Run& run) {
  const GPT2Config& c = m.config;
  check_ids(c, input_ids);
  const std::int64_t T = std::int64_t(input_ids.size()), C = c.n_embd, Ly = c.n_layer;
  // Every element of these is written below, so a buffer of the right size is reused as it is.
  auto fit = [](Tensor<float>& t, Shape shape) {
    if (t.shape != shape) t = Tensor<float>(std::move(shape));
  };
  run.input_ids = input_ids;
  fit(run.residual, {Ly + 1, T, C});
  run.attn.resize(std::size_t(Ly));
  run.workspaces.resize(std::size_t(Ly));
  fit(run.resid_mid, {Ly, T, C});
  fit(run.ln_2, {Ly, T, C});
  fit(run.mlp_hidden, {Ly, T, c.inner()});
  fit(run.mlp_out, {Ly, T, C});
  // residual[0] = wte[id] + wpe[position]
  for (std::int64_t t = 0; t < T; ++t) {
    const float* te = m.weights.wte.ptr() + std::int64_t(input_ids[std::size_t(t)]) * C;
    const float* pe = m.weights.wpe.ptr() + t * C;
    float* x = run.residual.ptr() + t * C;
    for (std::int64_t k = 0; k < C; ++k) x[k] = te[k] + pe[k];
  }
  gpt2_forward_from(m, run, 0, o);
  return run;
}

void gpt2_forward_from(const GPT2Model& m, GPT2Run& run, std::int64_t layer, const GPT2Options& o) {
  const GPT2Config& c = m.config;
  if (layer < 0 || layer > c.n_layer)
    throw ConfigError("layer", "layer " + std::to_string(layer) + " is outside the model's " +
                                   std::to_string(c.n_layer) + " layers");
  if (std::int64_t(run.attn.size()) != c.n_layer || run.input_ids.empty())
    throw ConfigError("run", "gpt2_forward_from needs a run of gpt2_forward on the same model");
  check_knockouts(m.sizes(), o.knockouts);
  run.workspaces.resize(std::size_t(c.n_layer));
  for (std::int64_t l = layer; l < c.n_layer; ++l) block_forward(m, run, l, o);
  head_forward(m, run, o);
}

}  // namespace mha
