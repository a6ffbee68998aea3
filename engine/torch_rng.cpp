// torch 1.13's CPU uniform sampling (at::uniform_real_distribution over at::mt19937) and
// nn.MultiheadAttention's constructor-time initialisation, draw for draw.
#include "torch_rng.hpp"

#include <cmath>

#include "errors.hpp"

namespace mha {

float TorchGenerator::uniform_float(double from, double to) {
  const float f = float(from), t = float(to);  // uniform_ casts its bounds to the tensor's dtype
  const std::uint32_t x = engine_();
  const double u = double(x & 0xFFFFFFu) / double(1u << 24);
  return float(u * double(t - f) + double(f));
}

double TorchGenerator::uniform_double(double from, double to) {
  const std::uint64_t hi = engine_(), lo = engine_();
  const std::uint64_t x = (hi << 32) | lo;
  const double u = double(x & ((std::uint64_t(1) << 53) - 1)) / double(std::uint64_t(1) << 53);
  return u * (to - from) + from;
}

template <class T>
void TorchGenerator::uniform_(Tensor<T>& t, double from, double to) {
  for (T& x : t.data) {
    if constexpr (sizeof(T) == 4)
      x = uniform_float(from, to);
    else
      x = uniform_double(from, to);
  }
}

template <class T>
Tensor<T> TorchGenerator::rand(const Shape& shape) {
  Tensor<T> t(shape);
  uniform_(t, 0.0, 1.0);
  return t;
}

namespace {

// init.xavier_uniform_(w): a = √3 · √(2 / (fan_in + fan_out)), fan_in = w.size(1), fan_out = w.size(0).
template <class T>
void xavier_uniform_(Tensor<T>& w, TorchGenerator& gen) {
  const double std_ = 1.0 * std::sqrt(2.0 / double(w.shape[1] + w.shape[0]));
  const double a = std::sqrt(3.0) * std_;
  gen.uniform_(w, -a, a);
}

}  // namespace

template <class T>
Weights<T> torch_default_init(const Config& c, TorchGenerator& gen) {
  validate(c);
  if (c.add_bias_kv)
    throw ConfigError("add_bias_kv",
                      "add_bias_kv: torch initialises bias_k/bias_v with xavier_normal_, which this "
                      "generator does not reproduce; load bias_k and bias_v from files instead");
  // Q = H·d_k is E for torch's module; with an explicit head_dim the shapes follow it, as
  // nn.Linear(E, H·d_k) and nn.Linear(H·d_k, E) would be drawn.
  const std::int64_t E = c.embed_dim, Q = c.q_dim(), kv = c.kv_embed_dim();
  Weights<T> w;
  // nn.Linear(Q, E).reset_parameters(): kaiming_uniform_(weight, a=√5) -> bound 1/√fan_in,
  // computed as torch does: gain = √(2 / (1 + a²)), bound = √3 · gain / √fan_in.
  w.out_proj_weight = Tensor<T>({E, Q});
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1 + a * a));
  const double bound = std::sqrt(3.0) * (gain / std::sqrt(double(Q)));
  gen.uniform_(w.out_proj_weight, -bound, bound);
  if (c.bias) {
    w.out_proj_bias = Tensor<T>({E});
    const double b = 1 / std::sqrt(double(Q));
    gen.uniform_(w.out_proj_bias, -b, b);  // drawn, then zeroed below: the draws still count
  }
  if (c.qkv_same_embed_dim()) {
    w.in_proj_weight = Tensor<T>({Q + 2 * kv, E});
    xavier_uniform_(w.in_proj_weight, gen);
  } else {
    w.q_proj_weight = Tensor<T>({Q, E});
    w.k_proj_weight = Tensor<T>({kv, c.key_dim()});
    w.v_proj_weight = Tensor<T>({kv, c.value_dim()});
    xavier_uniform_(w.q_proj_weight, gen);
    xavier_uniform_(w.k_proj_weight, gen);
    xavier_uniform_(w.v_proj_weight, gen);
  }
  if (c.bias) {
    w.in_proj_bias = Tensor<T>({Q + 2 * kv});  // constant_(0)
    std::fill(w.out_proj_bias.data.begin(), w.out_proj_bias.data.end(), T(0));
  }
  return w;
}

template <class T>
SeededCase<T> torch_seeded_case(const Config& c, std::uint64_t seed, std::int64_t N, std::int64_t L,
                                std::int64_t S) {
  validate(c);
  if (N <= 0 || L <= 0 || S <= 0)
    throw ConfigError("sizes", "batch, tgt_len and src_len must be positive, got N=" + std::to_string(N) +
                                   ", L=" + std::to_string(L) + ", S=" + std::to_string(S));
  check_trace_fits(dims_for(c, N, L, S), sizeof(T), false, 0);  // before any allocation
  TorchGenerator gen(seed);
  SeededCase<T> sc;
  sc.inputs.query = gen.rand<T>({N, L, c.embed_dim});
  sc.inputs.key = gen.rand<T>({N, S, c.key_dim()});
  sc.inputs.value = gen.rand<T>({N, S, c.value_dim()});
  sc.weights = torch_default_init<T>(c, gen);
  return sc;
}

template Tensor<float> TorchGenerator::rand<float>(const Shape&);
template Tensor<double> TorchGenerator::rand<double>(const Shape&);
template void TorchGenerator::uniform_<float>(Tensor<float>&, double, double);
template void TorchGenerator::uniform_<double>(Tensor<double>&, double, double);
template Weights<float> torch_default_init<float>(const Config&, TorchGenerator&);
template Weights<double> torch_default_init<double>(const Config&, TorchGenerator&);
template SeededCase<float> torch_seeded_case<float>(const Config&, std::uint64_t, std::int64_t, std::int64_t,
                                                    std::int64_t);
template SeededCase<double> torch_seeded_case<double>(const Config&, std::uint64_t, std::int64_t,
                                                      std::int64_t, std::int64_t);

}  // namespace mha
