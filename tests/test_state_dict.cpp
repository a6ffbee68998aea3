// Tests of read_state_dict on safetensors files that are bigger models' state_dicts: the one
// nn.MultiheadAttention found under its prefix (equal, through forward, to the same weights at the
// top level), several refused with every prefix listed, --prefix picking one, the refusals, and a
// torch-made nn.TransformerEncoder state_dict (tests/fixtures/encoder_state_dict).
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "check_identical.hpp"
#include "errors.hpp"
#include "io/safetensors.hpp"
#include "io/state_dict.hpp"
#include "temp_dir.hpp"
#include "torch_rng.hpp"

using namespace mha;
using Catch::Contains;
using mha::test::check_identical;
using mha::test::load_tensor;
using mha::test::mismatch;
using mha::test::TempDir;

namespace {

using Tensors = std::map<std::string, Array>;

Config config_8_2() {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  return c;
}

// The module's state_dict with every name under `prefix`.
Tensors module_tensors(const SeededCase<float>& sc, const std::string& prefix) {
  Weights<float> w = sc.weights;
  Tensors out;
  for (auto& [name, tensor] : state_dict(w))
    if (!tensor->empty()) out[prefix + name] = to_array(*tensor);
  return out;
}

// What nn.TransformerEncoderLayer holds beside its self_attn (shapes only matter to the count).
void add_encoder_layer_rest(Tensors& st, const std::string& layer) {
  for (const char* name : {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                           "norm1.bias", "norm2.weight", "norm2.bias"})
    st[layer + name] = to_array(Tensor<float>({8}, 0.5f));
}

ForwardResult<float> run(const Weights<float>& w, const SeededCase<float>& sc) {
  return forward(config_8_2(), w, sc.inputs, Options{});
}

}  // namespace

TEST_CASE("attention_prefixes groups names by the prefix before a parameter name", "[state_dict]") {
  const auto groups = attention_prefixes({"in_proj_weight", "out_proj.weight", "enc.0.self_attn.in_proj_bias",
                                          "enc.0.self_attn.out_proj.bias", "enc.0.linear_out_proj.weight",
                                          "enc.0.linear1.weight", "bias_k"});
  REQUIRE(groups.size() == 2);
  CHECK(groups.at("") == std::vector<std::string>{"in_proj_weight", "out_proj.weight", "bias_k"});
  CHECK(groups.at("enc.0.self_attn.") ==
        std::vector<std::string>{"enc.0.self_attn.in_proj_bias", "enc.0.self_attn.out_proj.bias"});
}

TEST_CASE("one nn.MultiheadAttention under a prefix reads as the same weights at the top level",
          "[state_dict]") {
  TempDir dir;
  const SeededCase<float> sc = torch_seeded_case<float>(config_8_2(), 3, 2, 4, 4);
  write_safetensors(dir.file("mha.safetensors"), module_tensors(sc, ""));
  Tensors layer = module_tensors(sc, "encoder.layers.0.self_attn.");
  add_encoder_layer_rest(layer, "encoder.layers.0.");
  write_safetensors(dir.file("layer.safetensors"), layer);

  std::vector<std::string> top_warnings, warnings;
  const Weights<float> top =
      read_state_dict<float>("", dir.file("mha.safetensors"), std::nullopt, &top_warnings);
  const Weights<float> found =
      read_state_dict<float>("", dir.file("layer.safetensors"), std::nullopt, &warnings);
  CHECK(top_warnings.empty());
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0],
             Contains("prefix 'encoder.layers.0.self_attn.' (4 tensors); 8 other tensors ignored"));
  // The ignored tensors are named: the first five, then how many more.
  CHECK_THAT(warnings[0],
             Contains("ignored: 'encoder.layers.0.linear1.bias', 'encoder.layers.0.linear1.weight'") &&
                 Contains("'encoder.layers.0.norm1.bias' and 3 more"));
  CHECK_FALSE(found.in_proj_weight.empty());
  CHECK_FALSE(found.out_proj_bias.empty());
  check_identical(run(top, sc), run(found, sc));  // every stage, bit for bit

  // Named explicitly, with or without the trailing dot: the same weights.
  for (const char* p : {"encoder.layers.0.self_attn.", "encoder.layers.0.self_attn"}) {
    INFO("--prefix " << p);
    const Weights<float> picked = read_state_dict<float>("", dir.file("layer.safetensors"), std::string(p));
    check_identical(run(top, sc), run(picked, sc));
  }
}

TEST_CASE("several nn.MultiheadAttention modules are listed and --prefix picks one", "[state_dict]") {
  TempDir dir;
  const SeededCase<float> a = torch_seeded_case<float>(config_8_2(), 1, 1, 3, 3);
  const SeededCase<float> b = torch_seeded_case<float>(config_8_2(), 2, 1, 3, 3);
  Tensors st = module_tensors(a, "encoder.layers.0.self_attn.");
  for (auto& [name, array] : module_tensors(b, "decoder.layers.0.multihead_attn.")) st[name] = array;
  add_encoder_layer_rest(st, "encoder.layers.0.");
  write_safetensors(dir.file("two.safetensors"), st);
  write_safetensors(dir.file("mha_a.safetensors"), module_tensors(a, ""));
  write_safetensors(dir.file("mha_b.safetensors"), module_tensors(b, ""));

  CHECK_THROWS_AS(read_state_dict<float>("", dir.file("two.safetensors")), FileError);
  CHECK_THROWS_WITH(read_state_dict<float>("", dir.file("two.safetensors")),
                    Contains("2 nn.MultiheadAttention modules") &&
                        Contains("'decoder.layers.0.multihead_attn.' (4 tensors)") &&
                        Contains("'encoder.layers.0.self_attn.' (4 tensors)") &&
                        Contains("--prefix P picks one"));

  std::vector<std::string> warnings;
  const Weights<float> wb = read_state_dict<float>(
      "", dir.file("two.safetensors"), std::string("decoder.layers.0.multihead_attn."), &warnings);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0],
             Contains("'decoder.layers.0.multihead_attn.' (4 tensors); 12 other tensors ignored"));
  const Weights<float> wa =
      read_state_dict<float>("", dir.file("two.safetensors"), std::string("encoder.layers.0.self_attn."));
  check_identical(run(read_state_dict<float>("", dir.file("mha_b.safetensors")), b), run(wb, b));
  check_identical(run(read_state_dict<float>("", dir.file("mha_a.safetensors")), a), run(wa, a));
  CHECK(wa.in_proj_weight.data != wb.in_proj_weight.data);  // two different modules were read

  // A prefix that matches none lists those found; so does one that is only part of a prefix.
  for (const char* p : {"encoder.layers.1.self_attn.", "encoder.", ""}) {
    INFO("--prefix '" << p << "'");
    CHECK_THROWS_WITH(read_state_dict<float>("", dir.file("two.safetensors"), std::string(p)),
                      Contains("no nn.MultiheadAttention under --prefix") &&
                          Contains("prefixes found: 'decoder.layers.0.multihead_attn.' (4 tensors), "
                                   "'encoder.layers.0.self_attn.' (4 tensors)"));
  }
}

TEST_CASE("names in the chosen module that are not its parameters are refused, at any prefix",
          "[state_dict]") {
  TempDir dir;
  const SeededCase<float> sc = torch_seeded_case<float>(config_8_2(), 0, 1, 3, 3);

  // Top level, as before prefixes were read: any other name is a typo or another model's tensor.
  Tensors top = module_tensors(sc, "");
  top["linear1.weight"] = to_array(Tensor<float>({8}, 0.5f));
  write_safetensors(dir.file("top.safetensors"), top);
  CHECK_THROWS_WITH(read_state_dict<float>("", dir.file("top.safetensors")),
                    Contains("'linear1.weight' are not nn.MultiheadAttention state_dict names") &&
                        Contains("expected: in_proj_weight, q_proj_weight"));

  // Under a prefix: a typo inside the module is refused, tensors beside it are not.
  Tensors layer = module_tensors(sc, "layers.0.self_attn.");
  add_encoder_layer_rest(layer, "layers.0.");
  layer["layers.0.self_attn.in_proj.bias"] = to_array(Tensor<float>({24}, 0.0f));
  write_safetensors(dir.file("typo.safetensors"), layer);
  CHECK_THROWS_WITH(
      read_state_dict<float>("", dir.file("typo.safetensors")),
      Contains("'layers.0.self_attn.in_proj.bias' under the prefix 'layers.0.self_attn.' are not "
               "nn.MultiheadAttention state_dict names"));

  // No parameter name anywhere: nothing to choose, every name refused.
  Tensors none;
  add_encoder_layer_rest(none, "layers.0.");
  write_safetensors(dir.file("none.safetensors"), none);
  CHECK_THROWS_WITH(read_state_dict<float>("", dir.file("none.safetensors")),
                    Contains("'layers.0.linear1.bias', 'layers.0.linear1.weight'"));
  CHECK_THROWS_WITH(read_state_dict<float>("", dir.file("none.safetensors"), std::string("layers.0.")),
                    Contains("--prefix 'layers.0.'; the file holds none"));
}

TEST_CASE("a torch nn.TransformerEncoder's state_dict: layer 1's self_attn gives torch's numbers",
          "[state_dict]") {
  const std::string file = std::string(MHA_FIXTURES_DIR) + "/encoder_state_dict/model.safetensors";
  CHECK_THROWS_WITH(read_state_dict<float>("", file), Contains("2 nn.MultiheadAttention modules, under the "
                                                               "prefixes 'layers.0.self_attn.' (4 tensors), "
                                                               "'layers.1.self_attn.' (4 tensors)"));
  std::vector<std::string> warnings;
  const Weights<float> w = read_state_dict<float>("", file, std::string("layers.1.self_attn."), &warnings);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("'layers.1.self_attn.' (4 tensors); 20 other tensors ignored"));
  Inputs<float> in;
  in.query = load_tensor<float>("encoder_state_dict", "query");
  in.key = in.value = in.query;
  const ForwardResult<float> r = forward(config_8_2(), w, in, Options{});
  CHECK(mismatch(r.output(), load_tensor<float>("encoder_state_dict", "expected/module_output"), 1e-6,
                 1e-5) == "");
  CHECK(mismatch(r.attn_weights(false),
                 load_tensor<float>("encoder_state_dict", "expected/module_attn_weights"), 1e-6, 1e-5) == "");
  // Layer 0's module is another one: its output differs.
  const Weights<float> w0 = read_state_dict<float>("", file, std::string("layers.0.self_attn."));
  CHECK(mismatch(forward(config_8_2(), w0, in, Options{}).output(),
                 load_tensor<float>("encoder_state_dict", "expected/module_output"), 1e-6, 1e-5) != "");
}
