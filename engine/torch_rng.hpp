// torch's CPU generator, reproduced: after torch.manual_seed(s), torch.rand / Tensor.uniform_ draw
// one mt19937(s) output per element. Also nn.MultiheadAttention's default initialisation, drawn in
// the order its constructor draws, so a seed and sizes give the notebook's exact tensors.
#pragma once

#include <cstdint>
#include <random>

#include "mha.hpp"

namespace mha {

class TorchGenerator {
 public:
  explicit TorchGenerator(std::uint64_t seed) : engine_(std::uint32_t(seed & 0xFFFFFFFFu)) {}

  // One element of uniform_(from, to) on a float32 tensor: u = (x & 0xFFFFFF) / 2^24 from one
  // 32-bit draw, then u·(to − from) + from in double with from/to rounded to float, rounded to float.
  float uniform_float(double from, double to);
  // float64 tensors draw 64 bits (two 32-bit outputs, first one high) and keep 53 of them.
  double uniform_double(double from, double to);

  // torch.rand(shape) / torch.rand(shape, dtype=torch.float64).
  template <class T>
  Tensor<T> rand(const Shape& shape);
  // In-place Tensor.uniform_(from, to), element order = row-major.
  template <class T>
  void uniform_(Tensor<T>& t, double from, double to);

 private:
  std::mt19937 engine_;
};

// nn.MultiheadAttention(embed_dim, num_heads, bias, kdim=, vdim=) as its constructor initialises it:
// out_proj's nn.Linear init (kaiming_uniform_(a=√5) on the weight, then uniform bias if bias), then
// xavier_uniform_ on in_proj_weight (or q/k/v_proj_weight in that order); biases zeroed.
// GQA (num_kv_heads < num_heads, not in torch) applies xavier_uniform_ to the packed
// (E + 2·G·d_k, E) in_proj_weight the same way. add_bias_kv draws normals, which are not reproduced:
// it throws ConfigError.
template <class T>
Weights<T> torch_default_init(const Config& c, TorchGenerator& gen);

// Everything `torch.manual_seed(seed); q = torch.rand(N, L, E); k = torch.rand(N, S, kdim);
// v = torch.rand(N, S, vdim); m = nn.MultiheadAttention(...)` produces, batch-first.
template <class T>
struct SeededCase {
  Inputs<T> inputs;
  Weights<T> weights;
};
template <class T>
SeededCase<T> torch_seeded_case(const Config& c, std::uint64_t seed, std::int64_t N, std::int64_t L,
                                std::int64_t S);

}  // namespace mha
