// What every model family shares: the knock-out what-if on a layer's traced attention, the top-k of
// the last position's logits, and the heads' names and pattern changes the app and CLI report.
#include "model/language_model.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <string>

#include "errors.hpp"

namespace mha {

const char* to_string(Ablation a) {
  return a == Ablation::zero ? "zero" : "mean";
}

void check_knockouts(const ModelSizes& s, const std::vector<HeadRef>& heads) {
  for (const HeadRef& h : heads)
    if (h.layer < 0 || h.layer >= s.n_layer || h.head < 0 || h.head >= s.n_head)
      throw ConfigError("knockouts", "head " + std::to_string(h.layer) + "." + std::to_string(h.head) +
                                         " is outside the model (" + std::to_string(s.n_layer) +
                                         " layers of " + std::to_string(s.n_head) + " heads: 0.0 to " +
                                         std::to_string(s.n_layer - 1) + "." + std::to_string(s.n_head - 1) +
                                         ")");
}

std::vector<HeadRef> heads_except(const ModelSizes& s, std::int64_t layer,
                                  const std::vector<std::int64_t>& keep) {
  if (layer < 0 || layer >= s.n_layer)
    throw ConfigError("knockouts", "layer " + std::to_string(layer) + " is outside the model's " +
                                       std::to_string(s.n_layer) + " layers");
  std::vector<HeadRef> kept;
  for (std::int64_t h : keep) kept.push_back({layer, h});
  check_knockouts(s, kept);
  std::vector<HeadRef> out;
  for (std::int64_t h = 0; h < s.n_head; ++h)
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

std::int64_t first_knockout_layer(const ModelSizes& s, const std::vector<HeadRef>& heads) {
  std::int64_t first = s.n_layer;
  for (const HeadRef& h : heads) first = std::min(first, h.layer);
  return first;
}

std::vector<PatternChange> pattern_changes(const ModelRun& before, const ModelRun& after) {
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

namespace detail {

const Stage<float>& layer_attention(const LanguageModel& m, std::int64_t l, Inputs<float>& in,
                                    const ModelOptions& o, ModelRun& run) {
  const std::size_t li = std::size_t(l);
  const std::int64_t T = in.query.size(1);
  in.attn_mask = li < o.attn_masks.size() && o.attn_masks[li] ? *o.attn_masks[li] : m.attention_mask(T);
  Options mo;
  mo.backend = o.backend == Backend::reference ? Backend::reference : Backend::eigen;
  mo.threads = o.threads;
  mo.count_nonfinite_weights = false;
  if (li < o.score_divisors.size()) mo.score_divisor = o.score_divisors[li];
  const Config attn = m.attention_config();
  const Weights<float>& w = m.attention_weights(l);
  forward(attn, w, in, mo, run.workspaces[li], run.attn[li]);
  knock_out_heads(attn, w, l, o, run.attn[li]);
  return run.attn[li].trace["output"];
}

void knock_out_heads(const Config& attn, const Weights<float>& w, std::int64_t l, const ModelOptions& o,
                     ForwardResult<float>& r) {
  // Q = H·d_k, the heads side by side: C unless the model gives head_dim.
  const std::int64_t H = attn.num_heads, C = attn.embed_dim, dk = attn.head_dim(), Q = H * dk, T = r.dims.L;
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
  // concat (1, T, Q): context_transposed.contiguous().view(1, T, Q)
  auto concat = std::make_shared<std::vector<float>>(std::size_t(T * Q));
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t t = 0; t < T; ++t)
      std::copy_n(context->data() + (h * T + t) * dk, dk, concat->data() + t * Q + h * dk);
  // output (1, T, C) = concat · out_proj.weightᵀ + out_proj.bias, weight (C, Q) as torch holds it;
  // a model without an out_proj bias (Llama) has none to add.
  auto output = std::make_shared<std::vector<float>>(std::size_t(T * C));
  const bool bias = !w.out_proj_bias.empty();
  if (o.backend == Backend::reference) {
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t i = 0; i < C; ++i) {
        double acc = bias ? w.out_proj_bias.data[std::size_t(i)] : 0.0;
        for (std::int64_t k = 0; k < Q; ++k)
          acc += double((*concat)[std::size_t(t * Q + k)]) * w.out_proj_weight.data[std::size_t(i * Q + k)];
        (*output)[std::size_t(t * C + i)] = float(acc);
      }
  } else {
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const RowMajor> x(concat->data(), T, Q), W(w.out_proj_weight.ptr(), C, Q);
    Eigen::Map<RowMajor> y(output->data(), T, C);
    y.noalias() = x * W.transpose();
    if (bias) y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(w.out_proj_bias.ptr(), C);
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

void head_logits_double(const Tensor<float>& head, const float* x, std::vector<double>& logits) {
  const std::int64_t V = head.size(0), C = head.size(1);
  logits.assign(std::size_t(V), 0.0);
  for (std::int64_t v = 0; v < V; ++v) {
    double acc = 0;
    for (std::int64_t k = 0; k < C; ++k) acc += double(head.data[std::size_t(v * C + k)]) * double(x[k]);
    logits[std::size_t(v)] = acc;
  }
}

void throw_wrong_run(const char* family) {
  throw ConfigError("run", std::string("a ") + family +
                               " model's forward, re-run or logits need a run from its own new_run()");
}

void top_k_from_logits(const ModelOptions& o, ModelRun& run) {
  const std::int64_t V = run.logits.numel();
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

}  // namespace detail

}  // namespace mha
