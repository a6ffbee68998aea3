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

void check_knockouts(const GPT2Config& c, const std::vector<HeadRef>& heads) {
  for (const HeadRef& h : heads)
    if (h.layer < 0 || h.layer >= c.n_layer || h.head < 0 || h.head >= c.n_head)
      throw ConfigError("knockouts", "head " + std::to_string(h.layer) + "." + std::to_string(h.head) +
                                         " is outside the model (" + std::to_string(c.n_layer) +
                                         " layers of " + std::to_string(c.n_head) + " heads: 0.0 to " +
                                         std::to_string(c.n_layer - 1) + "." + std::to_string(c.n_head - 1) +
                                         ")");
}

// Layer l's knock-outs on its traced attention `r` (N = 1): the chosen heads' context replaced, then
// concat and the out-projection recomputed from it. The new values go into new buffers that the
// stages then point at (the workspace's stay as the forward left them), so the trace shows what the
// block used.
void knock_out_heads(const GPT2Model& m, std::int64_t l, const GPT2Options& o, ForwardResult<float>& r) {
  const GPT2Config& c = m.config;
  const std::int64_t H = c.n_head, dk = c.head_dim(), C = c.n_embd, T = r.dims.L;
  std::vector<char> knocked(std::size_t(H), 0);
  for (const HeadRef& h : o.knockouts)
    if (h.layer == l) knocked[std::size_t(h.head)] = 1;
  if (std::find(knocked.begin(), knocked.end(), 1) == knocked.end()) return;

  auto context =
      std::make_shared<std::vector<float>>(r.trace["context"].contiguous().data);  // (1, H, T, d_k)
  std::vector<HeadRef> heads;
  for (std::int64_t h = 0; h < H; ++h) {
    if (!knocked[std::size_t(h)]) continue;
    heads.push_back({l, h});
    float* z = context->data() + h * T * dk;  // (T, d_k)
    for (std::int64_t j = 0; j < dk; ++j) {
      double mean = 0;
      if (o.ablation == Ablation::mean) {
        for (std::int64_t t = 0; t < T; ++t) mean += z[t * dk + j];
        mean /= double(T);
      }
      for (std::int64_t t = 0; t < T; ++t) z[t * dk + j] = float(mean);
    }
  }
  // concat (1, T, C): context_transposed.contiguous().view(1, T, C)
  auto concat = std::make_shared<std::vector<float>>(std::size_t(T * C));
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t t = 0; t < T; ++t)
      std::copy_n(context->data() + (h * T + t) * dk, dk, concat->data() + t * C + h * dk);
  // output (1, T, C) = concat · out_proj.weightᵀ + out_proj.bias, weight (C, C) as torch holds it
  auto output = std::make_shared<std::vector<float>>(std::size_t(T * C));
  const Weights<float>& w = m.weights.h[std::size_t(l)].attn;
  if (o.backend == Backend::reference) {
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t i = 0; i < C; ++i) {
        double acc = w.out_proj_bias.data[std::size_t(i)];
        for (std::int64_t k = 0; k < C; ++k)
          acc += double((*concat)[std::size_t(t * C + k)]) * w.out_proj_weight.data[std::size_t(i * C + k)];
        (*output)[std::size_t(t * C + i)] = float(acc);
      }
  } else {
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const RowMajor> x(concat->data(), T, C), W(w.out_proj_weight.ptr(), C, C);
    Eigen::Map<const Eigen::RowVectorXf> b(w.out_proj_bias.ptr(), C);
    Eigen::Map<RowMajor> y(output->data(), T, C);
    y.noalias() = x * W.transpose();
    y.rowwise() += b;
  }
  const std::string what =
      std::string(" [what-if, not torch: head") + (heads.size() > 1 ? "s " : " ") + format_heads(heads) +
      (o.ablation == Ablation::zero ? " zeroed]" : " replaced by their mean over positions]");
  for (Stage<float>& s : r.trace.stages) {
    if (s.name == "context" || s.name == "context_transposed")
      s.storage = context;
    else if (s.name == "concat")
      s.storage = concat;
    else if (s.name == "output")
      s.storage = output;
    else
      continue;
    s.offset = 0;
    s.note += what;
  }
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
  const std::size_t li = std::size_t(l);
  if (li < o.attn_masks.size() && o.attn_masks[li])
    in.attn_mask = *o.attn_masks[li];
  else
    in.attn_mask = causal_mask<float>(T, T);
  Options mo;
  mo.backend = o.backend == Backend::reference ? Backend::reference : Backend::eigen;
  mo.threads = o.threads;
  mo.count_nonfinite_weights = false;  // counted once for the whole model: GPT2Model::nonfinite_weights
  if (li < o.score_divisors.size()) mo.score_divisor = o.score_divisors[li];
  forward(attention_config(c), w.attn, in, mo, run.workspaces[li], run.attn[li]);
  knock_out_heads(m, l, o, run.attn[li]);

  const Stage<float>& attn_out = run.attn[li].trace["output"];  // (1, T, C), contiguous
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
  const float max_logit = *std::max_element(run.logits.data.begin(), run.logits.data.end());
  double denom = 0;
  for (float z : run.logits.data) denom += std::exp(double(z) - max_logit);
  const std::int64_t k = std::clamp<std::int64_t>(o.top_k, 0, V);
  std::vector<std::int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
    const float za = run.logits.data[std::size_t(a)], zb = run.logits.data[std::size_t(b)];
    return za > zb || (za == zb && a < b);
  });
  run.top_k.clear();
  for (std::int64_t i = 0; i < k; ++i) {
    const std::int32_t id = order[std::size_t(i)];
    const float z = run.logits.data[std::size_t(id)];
    run.top_k.push_back({id, std::exp(double(z) - max_logit) / denom, z});
  }
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

const char* to_string(Ablation a) {
  return a == Ablation::zero ? "zero" : "mean";
}

std::vector<HeadRef> heads_except(const GPT2Config& c, std::int64_t layer,
                                  const std::vector<std::int64_t>& keep) {
  if (layer < 0 || layer >= c.n_layer)
    throw ConfigError("knockouts", "layer " + std::to_string(layer) + " is outside the model's " +
                                       std::to_string(c.n_layer) + " layers");
  std::vector<HeadRef> kept;
  for (std::int64_t h : keep) kept.push_back({layer, h});
  check_knockouts(c, kept);
  std::vector<HeadRef> out;
  for (std::int64_t h = 0; h < c.n_head; ++h)
    if (std::find(keep.begin(), keep.end(), h) == keep.end()) out.push_back({layer, h});
  return out;
}

std::vector<HeadRef> parse_heads(const std::string& text, const std::string& argument) {
  std::vector<HeadRef> heads;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const std::size_t dot = item.find('.');
    auto number = [&](const std::string& part) {
      std::size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(part, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (part.empty() || used != part.size() || v < 0 || !std::isdigit((unsigned char)part[0]))
        throw ConfigError(argument,
                          argument + ": \"" + item + "\" is not layer.head (expected e.g. 1.0,1.3)");
      return std::int64_t(v);
    };
    if (dot == std::string::npos) number("");
    heads.push_back({number(item.substr(0, dot)), number(item.substr(dot + 1))});
  }
  return heads;
}

std::string format_heads(const std::vector<HeadRef>& heads) {
  std::string s;
  for (const HeadRef& h : heads)
    s += (s.empty() ? "" : ",") + std::to_string(h.layer) + "." + std::to_string(h.head);
  return s;
}

std::int64_t first_knockout_layer(const GPT2Config& c, const std::vector<HeadRef>& heads) {
  std::int64_t first = c.n_layer;
  for (const HeadRef& h : heads) first = std::min(first, h.layer);
  return first;
}

std::vector<PatternChange> pattern_changes(const GPT2Run& before, const GPT2Run& after) {
  if (before.attn.size() != after.attn.size() || before.input_ids != after.input_ids)
    throw ConfigError("run", "pattern_changes compares two runs of one model on the same tokens");
  std::vector<PatternChange> out;
  for (std::size_t l = 0; l < before.attn.size(); ++l) {
    const Tensor<float> a = before.attn[l].trace["attn_weights"].contiguous();  // (1, H, T, T)
    const Tensor<float> b = after.attn[l].trace["attn_weights"].contiguous();
    if (a.shape != b.shape) throw ConfigError("run", "pattern_changes: the runs' heads differ");
    const std::int64_t H = a.size(1), per_head = a.numel() / std::max<std::int64_t>(H, 1);
    for (std::int64_t h = 0; h < H; ++h) {
      double largest = 0;
      for (std::int64_t k = h * per_head; k < (h + 1) * per_head; ++k) {
        const float x = a.data[std::size_t(k)], y = b.data[std::size_t(k)];
        if (std::isnan(x) && std::isnan(y)) continue;
        const double d = std::isnan(x) || std::isnan(y) ? INFINITY : std::abs(double(x) - double(y));
        largest = std::max(largest, d);
      }
      out.push_back({{std::int64_t(l), h}, largest});
    }
  }
  return out;
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

std::int64_t GPT2Model::nonfinite_weights() const {
  std::int64_t n = 0;
  auto count = [&](const Tensor<float>& t) {
    for (float x : t.data) n += !std::isfinite(x);
  };
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
  check_knockouts(c, o.knockouts);
  run.workspaces.resize(std::size_t(c.n_layer));
  for (std::int64_t l = layer; l < c.n_layer; ++l) block_forward(m, run, l, o);
  head_forward(m, run, o);
}

}  // namespace mha
