// The torch-compatible generator: torch.manual_seed + torch.rand + nn.MultiheadAttention's default
// init must give the fixtures' tensors bit for bit.
#include <catch2/catch.hpp>
#include <cstring>

#include "errors.hpp"
#include "fixtures.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {
bool bit_equal(const Tensor<float>& a, const Tensor<float>& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}
}  // namespace

TEST_CASE("seeded fixtures are reproduced bit for bit", "[rng]") {
  int seeded = 0;
  for (const std::string& name : fixture_names()) {
    const auto meta = fixture_meta(name);
    if (!meta.contains("torch_seed")) continue;
    ++seeded;
    const auto& s = meta["torch_seed"];
    INFO("case " << name);
    Config c;
    c.embed_dim = s["embed_dim"];
    c.num_heads = s["num_heads"];
    c.bias = s["bias"];
    c.kdim = s["kdim"];
    c.vdim = s["vdim"];
    const SeededCase<float> sc =
        torch_seeded_case<float>(c, s["seed"], s["batch"], s["tgt_len"], s["src_len"]);
    CHECK(bit_equal(sc.inputs.query, load_tensor<float>(name, "query")));
    CHECK(bit_equal(sc.inputs.key, load_tensor<float>(name, "key")));
    CHECK(bit_equal(sc.inputs.value, load_tensor<float>(name, "value")));
    CHECK(bit_equal(sc.weights.out_proj_weight, load_tensor<float>(name, "out_proj.weight")));
    if (c.qkv_same_embed_dim()) {
      CHECK(bit_equal(sc.weights.in_proj_weight, load_tensor<float>(name, "in_proj_weight")));
    } else {
      CHECK(bit_equal(sc.weights.q_proj_weight, load_tensor<float>(name, "q_proj_weight")));
      CHECK(bit_equal(sc.weights.k_proj_weight, load_tensor<float>(name, "k_proj_weight")));
      CHECK(bit_equal(sc.weights.v_proj_weight, load_tensor<float>(name, "v_proj_weight")));
    }
    if (c.bias) {
      CHECK(bit_equal(sc.weights.in_proj_bias, load_tensor<float>(name, "in_proj_bias")));
      CHECK(bit_equal(sc.weights.out_proj_bias, load_tensor<float>(name, "out_proj.bias")));
    }
  }
  CHECK(seeded >= 3);
}

TEST_CASE("first draws of torch.rand after manual_seed", "[rng]") {
  // Printed by torch 1.13: torch.manual_seed(0); torch.rand(2) and torch.rand(2, dtype=torch.float64).
  TorchGenerator g(0);
  const Tensor<float> f = g.rand<float>({2});
  CHECK(f.data[0] == 0.49625658988952637f);
  CHECK(f.data[1] == 0.76822179555892944f);
  TorchGenerator g64(0);
  const Tensor<double> d = g64.rand<double>({2});
  CHECK(d.data[0] == 0.97005300180655307);
  CHECK(d.data[1] == 0.70781986439978795);
}

TEST_CASE("uniform_(from, to) scales in double from float bounds", "[rng]") {
  TorchGenerator a(5), b(5);
  const float u = a.uniform_float(0.0, 1.0);
  const float x = b.uniform_float(-0.3, 0.7);
  CHECK(x == float(double(u) * double(0.7f - -0.3f) + double(-0.3f)));
}

TEST_CASE("add_bias_kv has no seeded initialisation and says so", "[rng]") {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.add_bias_kv = true;
  TorchGenerator g(0);
  REQUIRE_THROWS_AS(torch_default_init<float>(c, g), ConfigError);
}
